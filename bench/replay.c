/* The configured replay: a workload run as the application that recorded it would run
 * under a given configuration. Each process of the workload gets its own context and
 * device, as a process would; each stream finds its partition by the name the trace
 * recorded, with a descriptor that names it and nothing else (what configuration declares
 * under that name is what the application gets); several processes share one ledger, so
 * a partition name is one shared partition with one limit. gpupart-bench's "configured"
 * policy reads the GPUPART_* environment with it, and `gpupart tune` the INI text of each
 * configuration it tries, so the figures tune prints are the ones the benchmark replays. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay.h"

#define REPLAY_SIM_MIN (64 * BENCH_GIB)
#define REPLAY_SIM_MAX (1ull << 62)

void bench_replay_sim(const bench_workload *w, gpupart_sim_desc *out) {
  uint64_t peak = bench_workload_peak(w, w->n, 256), total = REPLAY_SIM_MIN;
  while (total / 2 < peak && total < REPLAY_SIM_MAX) total *= 2;
  *out = (gpupart_sim_desc){.total_bytes = total};
}

static int fail(char *err, size_t n, const char *what, const char *name) {
  snprintf(err, n, "%s%s%s: %s", what, name ? " " : "", name ? name : "", gpupart_last_error());
  return -1;
}

/* The configuration text a process of the replay opens with: with several processes
 * replayed in one, no responder thread, so that give-back across them happens at the
 * replay's own next growth, in the same order on every run (a thread would make the
 * figures vary); the caller frees it. NULL where the setup gives no text. */
static char *process_text(const bench_replayer *r, const bench_replay_setup *s) {
  static const char no_responder[] = "[gpupart]\nresponder = 0\n\n";
  if (!s->config_text || r->processes < 2) return NULL;
  size_t len = strlen(s->config_text);
  char *t = bench_xcalloc(sizeof no_responder + len, 1);
  memcpy(t, no_responder, sizeof no_responder - 1);
  memcpy(t + sizeof no_responder - 1, s->config_text, len + 1);
  return t;
}

static int open_process(bench_replayer *r, const bench_replay_setup *s, uint32_t k, char *err, size_t n) {
  unsigned flags = GPUPART_CONTEXT_NO_TRACE | (s->read_env ? 0u : GPUPART_CONTEXT_IGNORE_ENV);
  char *text = process_text(r, s);
  gpupart_context_desc cd = {.flags = flags,
                             .config_text = text ? text : s->config_text,
                             .ledger_dir = r->ledger_dir[0] ? r->ledger_dir : NULL};
  int rc = gpupart_context_create(&cd, &r->ctx[k]);
  free(text);
  if (rc) return fail(err, n, "context_create", NULL);
  gpupart_device_desc dd = {.backend = s->backend,
                            .index = s->index,
                            .backend_desc = s->backend == GPUPART_BACKEND_SIM ? &r->sim : NULL,
                            .flags = r->processes > 1 ? GPUPART_DEVICE_SHARED : 0};
  if (gpupart_device_open(r->ctx[k], &dd, &r->dev[k])) return fail(err, n, "device_open", NULL);
  return 0;
}

static int find_part(bench_replayer *r, uint32_t i, char *err, size_t n) {
  const bench_stream *st = &r->w->streams[i];
  const char *name = st->name == BENCH_NO_NAME ? "p0" : r->w->names[st->name];
  gpupart_device *dev = r->dev[st->process];
  r->parts[i] = gpupart_partition_find(dev, name);
  if (r->parts[i]) return 0;
  gpupart_partition_desc d = {.name = name};
  if (gpupart_partition_create(dev, &d, &r->parts[i])) return fail(err, n, "partition", name);
  return 0;
}

/* A fresh folder under $TMPDIR (when it is an absolute path), else /tmp. */
static int make_ledger_dir(bench_replayer *r, char *err, size_t n) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || tmp[0] != '/' || strlen(tmp) > sizeof r->ledger_dir - 32) tmp = "/tmp";
  snprintf(r->ledger_dir, sizeof r->ledger_dir, "%s/gpupart-replay-XXXXXX", tmp);
  if (mkdtemp(r->ledger_dir)) return 0;
  snprintf(err, n, "cannot make a ledger folder in %s", tmp);
  r->ledger_dir[0] = '\0';
  return -1;
}

/* The partitions of the streams some allocation uses: a stream no allocation names (the
 * round-robin ones of a trace whose every line names its partition) makes none, which
 * under preallocation would take its whole limit. */
static int find_parts(bench_replayer *r, char *err, size_t n) {
  const bench_workload *w = r->w;
  char *used = bench_xcalloc(w->nstreams ? w->nstreams : 1, 1);
  for (size_t i = 0; i < w->n; i++)
    if (w->ops[i].size) used[w->ops[i].part] = 1;
  int rc = 0;
  for (uint32_t i = 0; i < w->nstreams && !rc; i++)
    if (used[i]) rc = find_part(r, i, err, n);
  free(used);
  return rc;
}

int bench_replayer_open(bench_replayer *r, const bench_workload *w, const bench_replay_setup *s, char *err, size_t n) {
  *r = (bench_replayer){.w = w, .processes = w->processes ? w->processes : 1};
  r->ctx = bench_xcalloc(r->processes, sizeof *r->ctx);
  r->dev = bench_xcalloc(r->processes, sizeof *r->dev);
  r->parts = bench_xcalloc(w->nstreams ? w->nstreams : 1, sizeof *r->parts);
  r->handles = bench_xcalloc(w->slots ? w->slots : 1, sizeof *r->handles);
  if (s->backend == GPUPART_BACKEND_SIM) bench_replay_sim(w, &r->sim);
  /* Shared ledgers (several processes, or GPUPART_SHARED in the caller's environment) go
   * to a private folder: a replay never meets the user's own in /dev/shm. */
  if ((r->processes > 1 || s->read_env) && make_ledger_dir(r, err, n)) return -1;
  for (uint32_t k = 0; k < r->processes; k++)
    if (open_process(r, s, k, err, n)) return -1;
  return find_parts(r, err, n);
}

uint64_t bench_replayer_run(bench_replayer *r, const bench_op *ops, size_t n) {
  gpupart_allocation **h = r->handles;
  gpupart_partition *const *parts = r->parts;
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    const bench_op *o = &ops[i];
    if (o->size) {
      failed += gpupart_alloc(parts[o->part], o->size, 0, &h[o->slot]) != GPUPART_OK;
    } else {
      gpupart_free(h[o->slot]);
      h[o->slot] = NULL;
    }
  }
  return failed;
}

void bench_replayer_collect(const bench_replayer *r, size_t n, bench_result *out) {
  gpupart_stats s;
  out->driver_allocs = out->driver_frees = out->peak_reserved = 0;
  for (uint32_t k = 0; k < r->processes; k++) {
    if (!r->dev[k] || gpupart_device_get_stats(r->dev[k], &s)) continue;
    out->driver_allocs += s.driver_allocs;
    out->driver_frees += s.driver_frees;
    if (s.peak_reserved > out->peak_reserved) out->peak_reserved = s.peak_reserved; /* the one shared ledger's */
  }
  out->peak_in_use = bench_workload_peak(r->w, n, 1);
}

/* The ledger files this replay made in its own folder, then the folder. */
static void remove_ledgers(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
  if (d) closedir(d);
  rmdir(dir);
}

void bench_replayer_close(bench_replayer *r) {
  for (uint32_t s = 0; r->handles && s < r->w->slots; s++) gpupart_free(r->handles[s]);
  for (uint32_t k = r->processes; k-- > 0;) {
    if (r->dev && r->dev[k] && gpupart_device_close(r->dev[k])) bench_die("device_close: %s", gpupart_last_error());
    if (r->ctx && r->ctx[k]) gpupart_context_destroy(r->ctx[k]);
  }
  if (r->ledger_dir[0]) remove_ledgers(r->ledger_dir);
  free(r->ctx);
  free(r->dev);
  free(r->parts);
  free(r->handles);
  *r = (bench_replayer){0};
}
