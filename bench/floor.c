/* The fragmentation floor of a workload: the smallest single arena, sized in hindsight,
 * that serves every request of the workload with no refusal, at the target's alignment.
 * It is found by binary search over preallocated one-block partitions of a sim device
 * (granularity steps), replaying the workload through the same sub-allocator. It is a
 * reference, not a proof: 1 - peak_in_use / floor (the arena's own peak in use, requests
 * counted as gpupart places them) is what placement in one ideal arena costs, so the
 * growth policy's figure can be read against it in the same run (several blocks can
 * occasionally place better than one, so growth may even beat it). It belongs to the
 * workload, not to a policy's row, and is in [0, 1). */
#include <stdlib.h>

#include "bench.h"

#define GRANULE (2ull << 20)

/* Replays w's first n operations into one preallocated block of size bytes: 1 if every
 * request fit, 0 if one was refused, -1 if the arena could not be made. *peak: the most
 * bytes the partition had in use, as it counts them (requests rounded as it places them). */
static int fits(const bench_workload *w, size_t n, uint64_t size, uint64_t align, uint64_t *peak) {
  gpupart_context *ctx = bench_context();
  gpupart_sim_desc sim = {.total_bytes = size, .min_alignment = align};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
  gpupart_device *dev;
  if (gpupart_device_open(ctx, &dd, &dev)) return gpupart_context_destroy(ctx), -1;
  gpupart_partition_desc pd = {.growth = GPUPART_GROWTH_OFF, .max_block = size};
  gpupart_partition *p;
  int ok = gpupart_partition_create(dev, &pd, &p) == GPUPART_OK ? 1 : -1;
  gpupart_allocation **live = bench_xcalloc(w->slots ? w->slots : 1, sizeof *live);
  for (size_t i = 0; ok == 1 && i < n && i < w->n; i++) {
    const bench_op *o = &w->ops[i];
    gpupart_alloc_desc d = {.size = o->size, .flags = GPUPART_ALLOC_NO_RECLAIM};
    if (!o->size) gpupart_free(live[o->slot]), live[o->slot] = NULL;
    else if (gpupart_alloc_ex(p, &d, &live[o->slot])) ok = 0;
  }
  gpupart_stats st;
  if (ok == 1 && gpupart_partition_get_stats(p, &st) == GPUPART_OK) *peak = st.peak_in_use;
  for (uint32_t s = 0; s < w->slots; s++) gpupart_free(live[s]);
  free(live);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  return ok;
}

uint64_t bench_floor_bytes(const bench_workload *w, size_t n, uint64_t align, double *fragmentation) {
  uint64_t peak = bench_workload_peak(w, n, align), in_use = 0;
  uint64_t lo = peak ? (peak + GRANULE - 1) / GRANULE : 1, hi = lo;
  while (fits(w, n, hi * GRANULE, align, &in_use) == 0) hi *= 2;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (fits(w, n, mid * GRANULE, align, &in_use) == 1) hi = mid;
    else lo = mid + 1;
  }
  /* The figure of the arena found: its peak in use (at most its size: one block holds it) over its size. */
  if (fits(w, n, lo * GRANULE, align, &in_use) != 1 || in_use > lo * GRANULE) in_use = lo * GRANULE;
  *fragmentation = 1.0 - (double)in_use / (double)(lo * GRANULE);
  return lo * GRANULE;
}
