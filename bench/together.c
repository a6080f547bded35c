/* Several processes' traces as one workload: the files an application's processes
 * recorded (GPUPART_TRACE with %p) hold no timestamps, so they are interleaved in proportion
 * to their lengths, as if every process ran at an even pace over the same span: operation k
 * of a file of m operations comes at (k + 1/2)/m of the run, ties in file order. Each file
 * is one process (bench_stream.process); a partition name is one name across them all, so
 * the configured replay puts the processes' allocations of one name in one shared
 * partition. Slots are renumbered so the files never share one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Whether file a's next operation (index ia of na) comes before file b's (ib of nb):
 * (2 ia + 1) / (2 na) < (2 ib + 1) / (2 nb), compared exactly in integers. */
__extension__ typedef unsigned __int128 wide;

static int comes_first(size_t ia, size_t na, size_t ib, size_t nb) {
  wide x = (wide)(2 * ia + 1) * nb, y = (wide)(2 * ib + 1) * na;
  return x < y;
}

/* The file whose next operation comes first; -1 when every file is done. */
static int next_file(const bench_workload *in, const size_t *at, int n) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (at[i] == in[i].n) continue;
    if (best < 0 || comes_first(at[i], in[i].n, at[best], in[best].n)) best = i;
  }
  return best;
}

/* The merged stream of file f's stream s: same name (renumbered) and lane, process f. */
static uint32_t merged_stream(bench_workload *out, const bench_workload *file, int f, uint32_t s) {
  const bench_stream *st = &file->streams[s];
  uint32_t name = st->name == BENCH_NO_NAME ? BENCH_NO_NAME : bench_name_of(out, file->names[st->name]);
  return bench_stream_of(out, name, (uint32_t)f, name == BENCH_NO_NAME ? st->lane : name % BENCH_PARTS);
}

static void merge(const bench_workload *in, int n, bench_workload *out) {
  size_t total = 0, *at = bench_xcalloc((size_t)n, sizeof *at);
  uint32_t *base = bench_xcalloc((size_t)n, sizeof *base);
  for (int i = 0; i < n; i++) {
    total += in[i].n;
    base[i] = out->slots;
    out->slots += in[i].slots;
    if (in[i].max_size > out->max_size) out->max_size = in[i].max_size;
  }
  out->ops = bench_xmalloc(total * sizeof *out->ops);
  out->cap = total;
  for (int f; (f = next_file(in, at, n)) >= 0;) {
    bench_op o = in[f].ops[at[f]++];
    o.slot += base[f];
    if (o.size) o.part = merged_stream(out, &in[f], f, o.part);
    out->ops[out->n++] = o;
  }
  free(at);
  free(base);
}

/* "a+b+c", cut to the workload name's size. */
static void merged_name(const bench_workload *in, int n, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < n && used + 1 < size; i++) {
    int k = snprintf(out + used, size - used, "%s%s", i ? "+" : "", in[i].name);
    used += k > 0 ? (size_t)k : 0;
  }
}

int bench_trace_load_together(const char *const *paths, int n, bench_workload *out) {
  if (n == 1) return bench_trace_load(paths[0], out);
  bench_workload *in = bench_xcalloc((size_t)n, sizeof *in);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) rc = bench_trace_load(paths[i], &in[i]);
  if (!rc) {
    *out = (bench_workload){.scale = 1.0};
    merged_name(in, n, out->name, sizeof out->name);
    for (uint32_t lane = 0; lane < BENCH_PARTS; lane++) bench_stream_of(out, BENCH_NO_NAME, 0, lane);
    merge(in, n, out);
    out->processes = (uint32_t)n;
  }
  for (int i = 0; i < n; i++) bench_workload_free(&in[i]);
  free(in);
  return rc;
}
