/* GPUPART_PARTITION_UNSYNCHRONIZED used as documented: four threads, each the only user
 * of its own unsynchronized partition (allocations, frees, get_info, its stats and
 * reset_peak), on one device whose budget none of them can reach, so that no call of one
 * partition visits another's (an out-of-memory sequence would). The partitions take no
 * lock at all, so TSan sees every access: a library path that touched another
 * partition's data, or shared device data without its own synchronisation, would be
 * reported. At the end each partition's figures are exactly its thread's, peaks
 * included. (The library is built without NDEBUG here, so its check of the contract,
 * two threads inside one partition at once, is on too.) */
#include "tsan_common.h"

#define THREADS 4
#define OPS 80000
#define KEEP 16

typedef struct worker {
  gpupart_partition *p;
  uint64_t rng;
  tsan_tally t;
  uint64_t peak_since_reset;
} worker;

static void one_free(worker *w, gpupart_allocation **held, uint64_t *sizes, int *n) {
  (*n)--;
  gpupart_allocation_info info;
  if (gpupart_allocation_get_info(held[*n], &info) != GPUPART_OK || info.size != sizes[*n] || info.partition != w->p)
    w->t.odd++;
  if (gpupart_free(held[*n]) == GPUPART_OK) w->t.frees++;
  else w->t.odd++;
  w->t.in_use -= sizes[*n];
}

static void *run(void *arg) {
  worker *w = arg;
  gpupart_allocation *held[KEEP];
  uint64_t sizes[KEEP];
  int n = 0;
  for (int i = 0; i < OPS; i++) {
    if (i == OPS / 2) { /* the peak starts again from what is in use now */
      gpupart_partition_reset_peak(w->p);
      w->peak_since_reset = w->t.in_use;
    }
    if (n == KEEP || (n && tsan_rand(&w->rng) % 2)) {
      one_free(w, held, sizes, &n);
      continue;
    }
    uint64_t size = 1 + tsan_rand(&w->rng) % (512 * 1024);
    if (gpupart_alloc(w->p, size, 0, &held[n]) != GPUPART_OK) {
      w->t.odd++;
      continue;
    }
    w->t.allocs++;
    sizes[n++] = size;
    w->t.in_use += size;
    if (w->t.in_use > w->peak_since_reset) w->peak_since_reset = w->t.in_use;
    gpupart_stats s;
    if (i % 64 == 0 && (gpupart_partition_get_stats(w->p, &s) != GPUPART_OK || s.in_use != w->t.in_use)) w->t.odd++;
  }
  while (n) one_free(w, held, sizes, &n);
  return NULL;
}

int main(void) {
  gpupart_context *ctx = tsan_context(NULL);
  gpupart_device *dev = tsan_device(ctx, 16 * GiB, 0);
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    char name[16];
    snprintf(name, sizeof name, "own%d", i);
    w[i] = (worker){.p = tsan_partition(dev, name, 1 * GiB, GPUPART_PARTITION_UNSYNCHRONIZED),
                    .rng = 88172645463325252ull * (uint64_t)(i + 1)};
  }
  for (int i = 0; i < THREADS; i++) tsan_start(&t[i], run, &w[i]);
  for (int i = 0; i < THREADS; i++) tsan_join(t[i]);
  for (int i = 0; i < THREADS; i++) {
    gpupart_stats s = tsan_stats(w[i].p);
    tsan_expect_eq(w[i].t.odd, 0, "calls that failed, or a get_info or stats that disagreed");
    tsan_expect_eq(s.total_allocations, w[i].t.allocs, "total_allocations");
    tsan_expect_eq(s.total_frees, w[i].t.frees, "total_frees");
    tsan_expect_eq(s.live_allocations, 0, "live_allocations");
    tsan_expect_eq(s.in_use, 0, "in_use");
    tsan_expect_eq(s.failed_allocations, 0, "failed_allocations");
    tsan_expect_eq(s.peak_in_use, w[i].peak_since_reset, "peak_in_use since the reset, against the thread's own");
  }
  tsan_ok(gpupart_device_check(dev), "device_check");
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  return tsan_finish("tsan_unsync");
}
