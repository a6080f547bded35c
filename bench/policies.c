/* The policies compared on every target, and the replay loops that time them.
 *   driver      one driver block per request, through the backend's own block_alloc and
 *               block_free (core/base/backend.h): what a program does without a pool;
 *   growth      one gpupart partition with the default growth policy;
 *   prealloc    one partition with growth off, preallocated to the workload's peak (each
 *               request rounded up to the device alignment) plus a quarter for
 *               fragmentation, capped by the budget;
 *   partitions  three ratio partitions (50/30/20% of the budget, guarantees of half
 *               that), allocations spread over them round-robin (a trace's n-th partition
 *               name on partition n mod 3);
 *   cudapool    CUDA targets only: the driver's stream-ordered pool (cuMemAllocFromPoolAsync
 *               / cuMemFreeAsync, release threshold UINT64_MAX; cuda_baseline.c), the
 *               strongest NVIDIA baseline; the replay's last call is cuStreamSynchronize;
 *   expandable  one expandable partition (GPUPART_PARTITION_EXPANDABLE): one reserved
 *               range (limit: four times the workload's peak) that maps granules as it
 *               grows; where the backend or device has no virtual memory the row is an
 *               error that says why;
 *   configured  run only when named: the caller's own GPUPART_* configuration (variables
 *               and GPUPART_CONFIG), each allocation on the partition its trace line names,
 *               one device per process of --together traces (replay.c); on sim, the
 *               device `gpupart tune` replays on, so its figures are tune's.
 * Every gpupart policy goes through the public, thread-safe API only. Each run starts
 * from a fresh device, so growth costs are part of every run, and ends by freeing what
 * the workload left live, outside the timed region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench.h"
#include "timing.h"

typedef struct rig {
  gpupart__backend_env env; /* lent to the backend (driver policy) */
  bench_policy policy;
  const bench_target *t;
  uint32_t slots;
  char err[200];
  /* gpupart policies */
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *own[BENCH_PARTS]; /* single-partition policies repeat the one */
  gpupart_partition **parts;           /* per stream: own[its lane] */
  gpupart_allocation **handles;
  /* configured policy */
  bench_replayer rep;
  /* driver policy */
  const gpupart_backend_ops *ops;
  void *state, *bdev;
  gpupart_block *blocks;
  uint64_t *req, align;
  /* cudapool policy */
  bench_cuda_pool *pool;
  uint64_t *ptrs;
  uint64_t in_use, peak_in_use, reserved, peak_reserved, allocs, frees;
} rig;

const char *bench_policy_name(bench_policy p) {
  static const char *const names[] = {"driver",   "growth",     "prealloc",  "partitions",
                                      "cudapool", "expandable", "configured"};
  return (unsigned)p < BENCH_POLICY_COUNT ? names[p] : "unknown";
}

/* ---- driver policy ---- */

static int driver_setup(rig *r) {
  const bench_target *t = r->t;
  r->ops = gpupart__backend_ops(t->backend);
  if (!r->ops) return snprintf(r->err, sizeof r->err, "backend not built"), -1;
  gpupart_device_info info;
  r->env.mem = gpupart__hostmem_default(); /* the driver policy runs the backend with no context */
  const char *library = t->backend == GPUPART_BACKEND_CUDA ? bench_cuda_library() : NULL;
  if (r->ops->load(&r->env, library, &r->state) ||
      r->ops->open(r->state, t->index, bench_target_desc(t), 0, &r->bdev) || r->ops->info(r->bdev, &info)) {
    snprintf(r->err, sizeof r->err, "driver: %s", gpupart_last_error());
    return -1;
  }
  r->align = info.min_alignment;
  r->blocks = bench_xcalloc(r->slots, sizeof *r->blocks);
  r->req = bench_xcalloc(r->slots, sizeof *r->req);
  return 0;
}

static int driver_alloc(rig *r, const bench_op *o) {
  gpupart_block *b = &r->blocks[o->slot];
  if (r->ops->block_alloc(r->bdev, bench_round_up(o->size, r->align), b)) return b->size = 0, 1;
  r->req[o->slot] = o->size;
  r->allocs++;
  if ((r->in_use += o->size) > r->peak_in_use) r->peak_in_use = r->in_use;
  if ((r->reserved += b->size) > r->peak_reserved) r->peak_reserved = r->reserved;
  return 0;
}

static void driver_free(rig *r, uint32_t slot) {
  gpupart_block *b = &r->blocks[slot];
  if (!b->size) return;
  r->in_use -= r->req[slot];
  r->reserved -= b->size;
  r->frees++;
  r->ops->block_free(r->bdev, b);
  b->size = 0;
}

static uint64_t driver_replay(rig *r, const bench_op *ops, size_t n) {
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].size) failed += (uint64_t)driver_alloc(r, &ops[i]);
    else driver_free(r, ops[i].slot);
  }
  return failed;
}

static uint64_t driver_replay_each(rig *r, const bench_op *ops, size_t n, uint32_t *ticks) {
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = bench_tick_begin();
    if (ops[i].size) failed += (uint64_t)driver_alloc(r, &ops[i]);
    else driver_free(r, ops[i].slot);
    uint64_t dt = bench_tick_end() - t0;
    ticks[i] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
  }
  return failed;
}

static void driver_teardown(rig *r) {
  for (uint32_t s = 0; r->blocks && s < r->slots; s++) driver_free(r, s);
  if (r->bdev) r->ops->close(r->bdev);
  if (r->state) r->ops->unload(r->state);
  free(r->blocks);
  free(r->req);
}

/* ---- cudapool policy ---- */

static int pool_setup(rig *r) {
  if (bench_cuda_pool_open(r->t->index, &r->pool, r->err, sizeof r->err)) return -1;
  r->ptrs = bench_xcalloc(r->slots, sizeof *r->ptrs);
  r->req = bench_xcalloc(r->slots, sizeof *r->req);
  return 0;
}

static int pool_alloc(rig *r, const bench_op *o) {
  if (bench_cuda_pool_alloc(r->pool, o->size, &r->ptrs[o->slot])) return r->ptrs[o->slot] = 0, 1;
  r->req[o->slot] = o->size;
  r->allocs++;
  if ((r->in_use += o->size) > r->peak_in_use) r->peak_in_use = r->in_use;
  return 0;
}

static void pool_free(rig *r, uint32_t slot) {
  if (!r->ptrs[slot]) return;
  r->in_use -= r->req[slot];
  r->frees++;
  bench_cuda_pool_free(r->pool, r->ptrs[slot]);
  r->ptrs[slot] = 0;
}

static uint64_t pool_replay(rig *r, const bench_op *ops, size_t n, uint32_t *ticks) {
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = ticks ? bench_tick_begin() : 0;
    if (ops[i].size) failed += (uint64_t)pool_alloc(r, &ops[i]);
    else pool_free(r, ops[i].slot);
    if (ticks) {
      uint64_t dt = bench_tick_end() - t0;
      ticks[i] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
    }
  }
  bench_cuda_pool_sync(r->pool);
  r->peak_reserved = bench_cuda_pool_reserved_high(r->pool);
  return failed;
}

static void pool_teardown(rig *r) {
  for (uint32_t s = 0; r->ptrs && s < r->slots; s++) pool_free(r, s);
  bench_cuda_pool_close(r->pool);
  free(r->ptrs);
  free(r->req);
}

/* ---- gpupart policies ---- */

static int make_partition(rig *r, const gpupart_partition_desc *d, gpupart_partition **out) {
  gpupart_result rc = gpupart_partition_create(r->dev, d, out);
  if (rc) snprintf(r->err, sizeof r->err, "partition_create: %s: %s", gpupart_result_name(rc), gpupart_last_error());
  return rc ? -1 : 0;
}

static int prealloc_setup(rig *r, const bench_workload *w, size_t n) {
  gpupart_device_info info;
  gpupart_device_get_info(r->dev, &info);
  uint64_t peak = bench_workload_peak(w, n, info.min_alignment);
  uint64_t size = bench_round_up(peak + peak / 4 + 1, 2 * BENCH_MIB), budget = gpupart_device_budget(r->dev);
  if (size > budget) size = budget;
  gpupart_partition_desc d = {.name = "prealloc", .limit = size, .growth = GPUPART_GROWTH_OFF, .max_block = size};
  if (make_partition(r, &d, &r->own[0])) return -1;
  r->own[1] = r->own[2] = r->own[0];
  return 0;
}

static int partitions_setup(rig *r) {
  static const char *const names[BENCH_PARTS] = {"p50", "p30", "p20"};
  static const double fractions[BENCH_PARTS] = {0.5, 0.3, 0.2};
  for (int i = 0; i < BENCH_PARTS; i++) {
    gpupart_partition_desc d = {.name = names[i], .fraction = fractions[i], .guarantee_fraction = fractions[i] / 2};
    if (make_partition(r, &d, &r->own[i])) return -1;
  }
  return 0;
}

/* The expandable partition's limit, which sizes its reserved range: four times the workload's
 * peak (the budget at most), so that the range fits where address space is scarce (a
 * Vulkan device's sparseAddressSpaceSize is 2 GiB on lavapipe) without binding the run. */
static uint64_t expandable_limit(rig *r, const bench_workload *w, size_t n) {
  gpupart_device_info info;
  gpupart_device_get_info(r->dev, &info);
  uint64_t size = bench_round_up(4 * bench_workload_peak(w, n, info.min_alignment) + 1, 2 * BENCH_MIB);
  uint64_t budget = gpupart_device_budget(r->dev);
  return size < budget ? size : budget;
}

static int own_setup(rig *r, const bench_workload *w, size_t n) {
  if (r->policy == BENCH_PREALLOC) return prealloc_setup(r, w, n);
  if (r->policy == BENCH_PARTITIONS) return partitions_setup(r);
  gpupart_partition_desc d = {.name = "growth"};
  if (r->policy == BENCH_EXPANDABLE)
    d = (gpupart_partition_desc){.name = "expandable",
                                 .limit = expandable_limit(r, w, n),
                                 .flags = GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED};
  if (make_partition(r, &d, &r->own[0])) return -1;
  r->own[1] = r->own[2] = r->own[0];
  return 0;
}

static int gpupart_setup(rig *r, const bench_workload *w, size_t n) {
  r->ctx = bench_context();
  r->dev = bench_device_open(r->ctx, r->t, r->err, sizeof r->err);
  if (!r->dev) return -1;
  r->handles = bench_xcalloc(r->slots, sizeof *r->handles);
  r->parts = bench_xcalloc(w->nstreams ? w->nstreams : 1, sizeof *r->parts);
  if (own_setup(r, w, n)) return -1;
  for (uint32_t i = 0; i < w->nstreams; i++) r->parts[i] = r->own[w->streams[i].lane];
  return 0;
}

/* ---- configured policy: the caller's GPUPART_* configuration, the trace's partition
 * names (replay.c); on sim, the replay's own simulated device, the one gpupart tune uses ---- */

static int configured_setup(rig *r, const bench_workload *w) {
  bench_replay_setup s = {.read_env = 1, .backend = r->t->backend, .index = r->t->index};
  if (bench_replayer_open(&r->rep, w, &s, r->err, sizeof r->err)) return -1;
  r->parts = r->rep.parts;
  r->handles = r->rep.handles;
  return 0;
}

static uint64_t gpupart_replay(rig *r, const bench_op *ops, size_t n) {
  gpupart_allocation **h = r->handles;
  gpupart_partition *const *parts = r->parts;
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    const bench_op *o = &ops[i];
    if (o->size) failed += gpupart_alloc(parts[o->part], o->size, 0, &h[o->slot]) != GPUPART_OK;
    else gpupart_free(h[o->slot]), h[o->slot] = NULL;
  }
  return failed;
}

static uint64_t gpupart_replay_each(rig *r, const bench_op *ops, size_t n, uint32_t *ticks) {
  gpupart_allocation **h = r->handles;
  uint64_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    const bench_op *o = &ops[i];
    uint64_t t0 = bench_tick_begin();
    if (o->size) failed += gpupart_alloc(r->parts[o->part], o->size, 0, &h[o->slot]) != GPUPART_OK;
    else gpupart_free(h[o->slot]), h[o->slot] = NULL;
    uint64_t dt = bench_tick_end() - t0;
    ticks[i] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
  }
  return failed;
}

static void gpupart_teardown(rig *r) {
  if (r->policy == BENCH_CONFIGURED) {
    bench_replayer_close(&r->rep);
    return;
  }
  for (uint32_t s = 0; r->handles && s < r->slots; s++) gpupart_free(r->handles[s]);
  free(r->handles);
  free(r->parts);
  if (r->dev && gpupart_device_close(r->dev)) bench_die("device_close: %s", gpupart_last_error());
  if (r->ctx) gpupart_context_destroy(r->ctx);
}

/* ---- one rig, either kind ---- */

static int rig_setup(rig *r, const bench_target *t, bench_policy p, const bench_workload *w, size_t n) {
  *r = (rig){.policy = p, .t = t, .slots = w->slots ? w->slots : 1};
  if (p == BENCH_CUDAPOOL) return pool_setup(r);
  if (p == BENCH_CONFIGURED) return configured_setup(r, w);
  return p == BENCH_DRIVER ? driver_setup(r) : gpupart_setup(r, w, n);
}

static uint64_t rig_replay(rig *r, const bench_op *ops, size_t n) {
  if (r->policy == BENCH_CUDAPOOL) return pool_replay(r, ops, n, NULL);
  return r->policy == BENCH_DRIVER ? driver_replay(r, ops, n) : gpupart_replay(r, ops, n);
}

static uint64_t rig_replay_each(rig *r, const bench_op *ops, size_t n, uint32_t *ticks) {
  if (r->policy == BENCH_CUDAPOOL) return pool_replay(r, ops, n, ticks);
  return r->policy == BENCH_DRIVER ? driver_replay_each(r, ops, n, ticks) : gpupart_replay_each(r, ops, n, ticks);
}

static void rig_teardown(rig *r) {
  if (r->policy == BENCH_CUDAPOOL) pool_teardown(r);
  else if (r->policy == BENCH_DRIVER) driver_teardown(r);
  else gpupart_teardown(r);
}

/* The figures of the run just replayed, before teardown frees what is left. The pool's
 * driver calls are its own business: they count as none. */
static void rig_collect(rig *r, bench_result *out) {
  if (r->policy == BENCH_CUDAPOOL) {
    out->peak_in_use = r->peak_in_use;
    out->peak_reserved = r->peak_reserved;
    return;
  }
  if (r->policy == BENCH_DRIVER) {
    out->driver_allocs = r->allocs;
    out->driver_frees = r->frees;
    out->peak_in_use = r->peak_in_use;
    out->peak_reserved = r->peak_reserved;
    return;
  }
  if (r->policy == BENCH_CONFIGURED) {
    bench_replayer_collect(&r->rep, out->ops, out);
    return;
  }
  gpupart_stats s, one;
  gpupart_device_get_stats(r->dev, &s);
  out->driver_allocs = s.driver_allocs;
  out->driver_frees = s.driver_frees;
  out->peak_in_use = s.peak_in_use;
  out->peak_reserved = s.peak_reserved;
  /* The device's peak in use counts each partition's bytes rounded up to the device's
   * granularity (core/peak.c); a policy of one partition has the exact figure in it. */
  if (r->own[1] == r->own[0] && gpupart_partition_get_stats(r->own[0], &one) == GPUPART_OK)
    out->peak_in_use = one.peak_in_use;
}

static void init_result(const bench_target *t, bench_policy p, const bench_workload *w, size_t n, bench_result *out) {
  *out = (bench_result){.ops = n, .scale = w->scale};
  if (t->backend == GPUPART_BACKEND_SIM) snprintf(out->backend, sizeof out->backend, "sim");
  else snprintf(out->backend, sizeof out->backend, "%s:%u", gpupart_backend_name(t->backend), t->index);
  snprintf(out->workload, sizeof out->workload, "%s", w->name);
  snprintf(out->policy, sizeof out->policy, "%s", bench_policy_name(p));
}

static int fail_row(rig *r, bench_result *out) {
  out->error = 1;
  snprintf(out->message, sizeof out->message, "%s", r->err);
  rig_teardown(r);
  return -1;
}

/* Best wall time of repeat fresh runs; the figures come from the last one (all equal). */
static int timed_runs(const bench_target *t, bench_policy p, const bench_workload *w, size_t n, int repeat,
                      bench_result *out) {
  rig r;
  double best = 0, best_cpu = 0;
  for (int k = -1; k < repeat; k++) { /* k = -1: warm-up, not counted */
    if (rig_setup(&r, t, p, w, n)) return fail_row(&r, out);
    uint64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
    uint64_t failed = rig_replay(&r, w->ops, n);
    uint64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
    rig_collect(&r, out);
    out->failed = failed;
    rig_teardown(&r);
    double ns = (double)(t1 - t0), cpu = (double)(c1 - c0);
    if (k >= 0 && (k == 0 || ns < best)) best = ns;
    if (k >= 0 && (k == 0 || cpu < best_cpu)) best_cpu = cpu;
  }
  out->ns_per_op = n ? best / (double)n : 0;
  out->cpu_ns_per_op = n ? best_cpu / (double)n : 0;
  return 0;
}

static int latency_run(const bench_target *t, bench_policy p, const bench_workload *w, size_t n, bench_result *out) {
  rig r;
  if (rig_setup(&r, t, p, w, n)) return fail_row(&r, out);
  uint32_t *ticks = bench_xmalloc((n ? n : 1) * sizeof *ticks);
  rig_replay_each(&r, w->ops, n, ticks);
  rig_teardown(&r);
  out->p50_ns = bench_percentile_ns(ticks, n, 50);
  out->p99_ns = bench_percentile_ns(ticks, n, 99);
  free(ticks);
  return 0;
}

void bench_run(const bench_target *t, bench_policy p, const bench_workload *w, size_t n, int repeat,
               bench_result *out) {
  if (n > w->n) n = w->n;
  init_result(t, p, w, n, out);
  if (timed_runs(t, p, w, n, repeat < 1 ? 1 : repeat, out) == 0 && latency_run(t, p, w, n, out) == 0) bench_derive(out);
}
