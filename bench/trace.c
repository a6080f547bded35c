/* Trace replay: loads an .ops trace (`a <id> <size>` / `f <id>`, one per line, optionally
 * gzip-compressed) into a workload before anything is timed, mapping each id to a dense
 * slot so the replay indexes an array instead of hashing. Compressed traces are read
 * through `gzip -dc` (spawned directly, no shell): gzip is in every Debian installation
 * (priority required), so the benchmark needs no zlib at build time. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#ifndef GPUPART_BENCH_TRACE_DIR
#define GPUPART_BENCH_TRACE_DIR "bench/traces"
#endif

extern char **environ;

/* The source tree's traces, where the build put them; else bench/traces under the
 * current directory (a build copied to another machine, run from a checkout). */
const char *bench_trace_dir(void) {
  return access(GPUPART_BENCH_TRACE_DIR, R_OK) == 0 ? GPUPART_BENCH_TRACE_DIR : "bench/traces";
}

/* ---- id -> slot map (open addressing; ids are never reused, so no deletion tombstones
 * are needed beyond marking a freed id) ---- */

typedef struct id_map {
  uint64_t *ids;
  uint32_t *slots; /* UINT32_MAX = empty entry, UINT32_MAX - 1 = freed id */
  size_t cap, used;
} id_map;

#define EMPTY UINT32_MAX
#define FREED (UINT32_MAX - 1)

static size_t hash_id(uint64_t id, size_t cap) { return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1); }

static size_t map_find(const id_map *m, uint64_t id) {
  size_t i = hash_id(id, m->cap);
  while (m->slots[i] != EMPTY && m->ids[i] != id) i = (i + 1) & (m->cap - 1);
  return i;
}

static void map_init(id_map *m, size_t cap) {
  m->cap = cap, m->used = 0;
  m->ids = bench_xmalloc(cap * sizeof *m->ids);
  m->slots = bench_xmalloc(cap * sizeof *m->slots);
  memset(m->slots, 0xff, cap * sizeof *m->slots);
}

static void map_grow(id_map *m) {
  id_map old = *m;
  map_init(m, old.cap * 2);
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i] != EMPTY) {
      size_t j = map_find(m, old.ids[i]);
      m->ids[j] = old.ids[i], m->slots[j] = old.slots[i], m->used++;
    }
  free(old.ids);
  free(old.slots);
}

static void map_free(id_map *m) {
  free(m->ids);
  free(m->slots);
}

/* ---- input ---- */

static FILE *open_gzip(const char *path, pid_t *pid) {
  int fds[2];
  if (pipe(fds)) return NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  char *argv[] = {"gzip", "-dc", "--", (char *)path, NULL};
  int rc = posix_spawnp(pid, "gzip", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    errno = rc;
    return NULL;
  }
  return fdopen(fds[0], "r");
}

static int is_gz(const char *path) {
  size_t n = strlen(path);
  return n > 3 && strcmp(path + n - 3, ".gz") == 0;
}

/* The workload's name: the file name without directory and .ops[.gz]. */
static void trace_name(const char *path, char *out, size_t n) {
  const char *base = strrchr(path, '/');
  snprintf(out, n, "%s", base ? base + 1 : path);
  char *dot = strstr(out, ".ops");
  if (dot) *dot = '\0';
}

/* ---- parsing ---- */

static int parse_line(const char *line, bench_builder *b, id_map *m) {
  char kind;
  unsigned long long id, size = 0;
  int fields = sscanf(line, " %c %llu %llu", &kind, &id, &size);
  if (fields < 2 || (kind != 'a' && kind != 'f') || (kind == 'a' && fields < 3)) return -1;
  if (kind == 'a') {
    if (2 * (m->used + 1) > m->cap) map_grow(m);
    size_t i = map_find(m, id);
    if (m->slots[i] != EMPTY) return -1; /* ids are unique within a trace */
    m->ids[i] = id, m->slots[i] = bench_emit_alloc(b, size), m->used++;
    return 0;
  }
  size_t i = map_find(m, id);
  if (m->slots[i] == EMPTY || m->slots[i] == FREED) return -1; /* frees name a live id */
  bench_emit_free(b, m->slots[i]);
  m->slots[i] = FREED;
  return 0;
}

static int parse_stream(FILE *f, const char *path, bench_workload *out) {
  char name[64], *line = NULL;
  size_t len = 0, lineno = 0;
  bench_builder b;
  id_map m;
  trace_name(path, name, sizeof name);
  bench_builder_init(&b, out, name);
  map_init(&m, 1 << 16);
  int rc = 0;
  while (!rc && getline(&line, &len, f) > 0) {
    lineno++;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (parse_line(line, &b, &m)) {
      fprintf(stderr, "gpupart-bench: %s:%zu: not a valid operation: %s", path, lineno, line);
      rc = -1;
    }
  }
  free(line);
  map_free(&m);
  bench_builder_finish(&b);
  if (rc) bench_workload_free(out);
  return rc;
}

int bench_trace_load(const char *path, bench_workload *out) {
  pid_t pid = -1;
  FILE *f = is_gz(path) ? (access(path, R_OK) ? NULL : open_gzip(path, &pid)) : fopen(path, "r");
  if (!f) {
    fprintf(stderr, "gpupart-bench: cannot read %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = parse_stream(f, path, out);
  fclose(f);
  int status = 0;
  if (pid > 0 && (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))) {
    fprintf(stderr, "gpupart-bench: gzip -dc %s failed\n", path);
    if (!rc) bench_workload_free(out);
    rc = -1;
  }
  if (!rc && !out->n) {
    fprintf(stderr, "gpupart-bench: %s holds no operations\n", path);
    bench_workload_free(out);
    rc = -1;
  }
  return rc;
}
