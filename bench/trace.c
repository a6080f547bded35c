/* Trace replay: loads an .ops trace (`a <id> <size> [<partition>]` / `f <id>`, one per
 * line, `#` comments, optionally gzip-compressed; bench/traces/README.md) into a workload before anything is timed,
 * mapping each id to a dense slot so the replay indexes an array instead of hashing. Compressed traces are read through
 * `gzip -dc` (spawned directly, no shell): gzip is in every Debian installation (priority required), so the benchmark
 * needs no zlib at build time. */
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
#ifndef GPUPART_BENCH_INSTALLED_TRACE_DIR
#define GPUPART_BENCH_INSTALLED_TRACE_DIR "/usr/local/share/gpupart/traces"
#endif

extern char **environ;

/* The source tree's traces, where the build put them; else those meson install put in
 * datadir (an installed or packaged gpupart-bench); else bench/traces under the current
 * directory (a build copied to another machine, run from a checkout). */
const char *bench_trace_dir(void) {
  if (access(GPUPART_BENCH_TRACE_DIR, R_OK) == 0) return GPUPART_BENCH_TRACE_DIR;
  return access(GPUPART_BENCH_INSTALLED_TRACE_DIR, R_OK) == 0 ? GPUPART_BENCH_INSTALLED_TRACE_DIR : "bench/traces";
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
  m->cap = cap;
  m->used = 0;
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

/* The partitions a trace names (the optional third field of `a` lines, as gpupart's
 * recorder writes them, with %XX escapes undone), in order of first use: the n-th name is
 * the workload's name n, and replays on partition n % BENCH_PARTS of the "partitions"
 * policy. Allocations without a name keep the round-robin streams. */
static int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A name as recorded: %XX is byte XX (a malformed or NUL escape is kept as written). */
static void decode_name(const char *in, char *out) {
  while (*in) {
    int hi = in[0] == '%' ? hex(in[1]) : -1, lo = hi >= 0 ? hex(in[2]) : -1;
    if (lo >= 0 && (hi | lo)) {
      *out++ = (char)(hi * 16 + lo);
      in += 3;
    } else {
      *out++ = *in++;
    }
  }
  *out = '\0';
}

typedef struct parser {
  bench_builder b;
  id_map m;
} parser;

static int parse_alloc(parser *ps, unsigned long long id, unsigned long long size, const char *part) {
  id_map *m = &ps->m;
  if (size > BENCH_MAX_REQUEST) return -1;
  if (2 * (m->used + 1) > m->cap) map_grow(m);
  size_t i = map_find(m, id);
  if (m->slots[i] != EMPTY) return -1; /* ids are unique within a trace */
  uint32_t slot;
  if (*part) {
    char name[1024];
    decode_name(part, name);
    uint32_t n = bench_name_of(ps->b.w, name);
    slot = bench_emit_alloc_to(&ps->b, size, bench_stream_of(ps->b.w, n, 0, n % BENCH_PARTS));
  } else {
    slot = bench_emit_alloc(&ps->b, size);
  }
  m->ids[i] = id;
  m->slots[i] = slot;
  m->used++;
  return 0;
}

/* `a <id> <size> [<partition>]` or `f <id>`, nothing after. */
static int parse_line(const char *line, parser *ps) {
  char kind, part[1024] = "";
  unsigned long long id, size = 0;
  int used = 0, fields = sscanf(line, " %c %llu %n", &kind, &id, &used);
  if (fields < 2 || (kind != 'a' && kind != 'f')) return -1;
  line += used;
  if (kind == 'a') {
    int more = 0;
    if (sscanf(line, "%llu %n", &size, &more) < 1) return -1;
    line += more;
    if (sscanf(line, "%1023s %n", part, &more) == 1) line += more;
  }
  if (line[strspn(line, " \t\r\n")]) return -1; /* something more on the line */
  if (kind == 'a') return parse_alloc(ps, id, size, part);
  size_t i = map_find(&ps->m, id);
  if (ps->m.slots[i] == EMPTY || ps->m.slots[i] == FREED) return -1; /* frees name a live id */
  bench_emit_free(&ps->b, ps->m.slots[i]);
  ps->m.slots[i] = FREED;
  return 0;
}

/* The offending line on stderr, at most 80 bytes, control characters and bytes past
 * ASCII as '?': a trace is outside input, and may hold a terminal's escape sequences. */
static void print_line(const char *path, size_t lineno, const char *line) {
  char shown[81];
  size_t k = 0;
  for (; line[k] && line[k] != '\n' && k < sizeof shown - 1; k++)
    shown[k] = line[k] >= 0x20 && line[k] < 0x7f ? line[k] : '?';
  shown[k] = '\0';
  fprintf(stderr, "%s: %s:%zu: not a valid operation: %s%s\n", bench_program, path, lineno, shown,
          line[k] && line[k] != '\n' ? "..." : "");
}

static int parse_stream(FILE *f, const char *path, bench_workload *out) {
  char name[64], *line = NULL;
  size_t len = 0, lineno = 0;
  parser ps = {0};
  trace_name(path, name, sizeof name);
  bench_builder_init(&ps.b, out, name);
  map_init(&ps.m, 1 << 16);
  int rc = 0;
  errno = 0;
  while (!rc && getline(&line, &len, f) > 0) {
    lineno++;
    char first = line[strspn(line, " \t\r\n")];
    if (first == '#' || !first) continue; /* comments and blank lines */
    if (parse_line(line, &ps)) {
      print_line(path, lineno, line);
      rc = -1;
    }
  }
  if (!rc && ferror(f)) {
    fprintf(stderr, "%s: cannot read %s: %s\n", bench_program, path, strerror(errno ? errno : EIO));
    rc = -1;
  }
  free(line);
  map_free(&ps.m);
  bench_builder_finish(&ps.b);
  if (rc) bench_workload_free(out);
  return rc;
}

int bench_trace_load(const char *path, bench_workload *out) {
  pid_t pid = -1;
  FILE *f = is_gz(path) ? (access(path, R_OK) ? NULL : open_gzip(path, &pid)) : fopen(path, "r");
  if (!f) {
    fprintf(stderr, "%s: cannot read %s: %s\n", bench_program, path, strerror(errno));
    return -1;
  }
  int rc = parse_stream(f, path, out);
  fclose(f);
  int status = 0;
  if (pid > 0 && (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))) {
    fprintf(stderr, "%s: gzip -dc %s failed\n", bench_program, path);
    if (!rc) bench_workload_free(out);
    rc = -1;
  }
  if (!rc && !out->n) {
    fprintf(stderr, "%s: %s holds no operations\n", bench_program, path);
    bench_workload_free(out);
    rc = -1;
  }
  return rc;
}
