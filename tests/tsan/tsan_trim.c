/* Trim and resize from another thread while two threads allocate and free in the same
 * partition: the third thread gives the empty blocks back (gpupart_partition_trim) and
 * moves the limit between 64 MiB and 512 MiB (gpupart_partition_resize; a shrink below
 * the blocks held is EBUSY, as documented), so that allocations grow blocks, are refused
 * at the limit (ELIMIT) and find their blocks gone between two calls. At the end the
 * counts are exactly the threads' own (refusals as failed_allocations), and after a last
 * trim no block is left. */
#include "tsan_common.h"

#define WORKERS 2
#define OPS 80000
#define KEEP 12

typedef tsan_worker worker;

static atomic_int stop;

static void *allocate(void *arg) {
  worker *w = arg;
  gpupart_allocation *held[KEEP];
  int n = 0;
  for (int i = 0; i < OPS; i++) {
    if (n == KEEP || (n && tsan_rand(&w->rng) % 3 == 0)) { /* mostly full: the limit bites */
      tsan_free(&w->t, held[--n]);
      continue;
    }
    uint64_t size = 1 + tsan_rand(&w->rng) % (6 * MiB);
    gpupart_result rc = gpupart_alloc(w->p, size, 0, &held[n]);
    if (rc == GPUPART_OK) {
      w->t.allocs++;
      n++;
    } else if (rc == GPUPART_ELIMIT) {
      w->t.refused++;
    } else {
      w->t.odd++;
    }
  }
  while (n) tsan_free(&w->t, held[--n]);
  return NULL;
}

typedef struct changer {
  gpupart_partition *p;
  uint64_t trims, resized, busy, odd;
} changer;

static void *change(void *arg) {
  changer *c = arg;
  for (uint64_t i = 0; !atomic_load(&stop); i++) {
    if (gpupart_partition_trim(c->p) == GPUPART_OK) c->trims++;
    else c->odd++;
    gpupart_result rc = gpupart_partition_resize(c->p, i % 2 ? 512 * MiB : 64 * MiB);
    if (rc == GPUPART_OK) c->resized++;
    else if (rc == GPUPART_EBUSY) c->busy++; /* a shrink below the blocks the workers hold */
    else c->odd++;
  }
  return NULL;
}

int main(void) {
  gpupart_context *ctx = tsan_context(NULL);
  gpupart_device *dev = tsan_device(ctx, 4 * GiB, 0);
  gpupart_partition *p = tsan_partition(dev, "moving", 512 * MiB, 0);
  worker w[WORKERS];
  pthread_t t[WORKERS + 1];
  changer c = {.p = p};
  for (int i = 0; i < WORKERS; i++) w[i] = (worker){.p = p, .rng = 88172645463325252ull * (uint64_t)(i + 1)};
  for (int i = 0; i < WORKERS; i++) tsan_start(&t[i], allocate, &w[i]);
  tsan_start(&t[WORKERS], change, &c);
  for (int i = 0; i < WORKERS; i++) tsan_join(t[i]);
  atomic_store(&stop, 1);
  tsan_join(t[WORKERS]);
  tsan_expect_eq(c.odd, 0, "trims and resizes that failed otherwise than EBUSY");
  tsan_expect(c.trims > 0 && c.resized > 0, "the changer neither trimmed nor resized");
  uint64_t allocs = 0, frees = 0, refused = 0;
  for (int i = 0; i < WORKERS; i++) {
    tsan_expect_eq(w[i].t.odd, 0, "calls that failed otherwise than ELIMIT");
    allocs += w[i].t.allocs;
    frees += w[i].t.frees;
    refused += w[i].t.refused;
  }
  tsan_ok(gpupart_partition_resize(p, 512 * MiB), "the last resize");
  tsan_ok(gpupart_partition_trim(p), "the last trim");
  gpupart_stats s = tsan_stats(p);
  tsan_expect_eq(s.total_allocations, allocs, "total_allocations");
  tsan_expect_eq(s.total_frees, frees, "total_frees");
  tsan_expect_eq(s.failed_allocations, refused, "failed_allocations");
  tsan_expect_eq(s.live_allocations, 0, "live_allocations");
  tsan_expect_eq(s.in_use, 0, "in_use");
  tsan_expect_eq(s.reserved, 0, "reserved after the last trim");
  tsan_expect_eq(s.driver_allocs, s.driver_frees, "driver_allocs against driver_frees");
  tsan_expect_eq(s.limit, 512 * MiB, "limit");
  tsan_expect(s.peak_reserved <= 512 * MiB, "peak_reserved above the largest limit");
  tsan_ok(gpupart_device_check(dev), "device_check");
  printf("%" PRIu64 " allocations, %" PRIu64 " refused; %" PRIu64 " trims, %" PRIu64 " resizes, %" PRIu64
         " shrinks refused\n",
         allocs, refused, c.trims, c.resized, c.busy);
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  return tsan_finish("tsan_trim");
}
