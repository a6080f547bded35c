/* Four threads, two on each of two partitions, mixing account-only charges
 * (gpupart_partition_charge, gpupart_charge_release: the device's slow lock, the ledger)
 * with allocations and frees (the partition lock's fast path). At the end every
 * partition's counts are exactly the threads' own: a charge counts as an allocation and
 * its release as a free, a refusal (ELIMIT) as a failed allocation; nothing is left in
 * use or reserved by a charge. */
#include "tsan_common.h"

#define THREADS 4
#define OPS 50000
#define KEEP 12

typedef struct item {
  gpupart_allocation *a;
  gpupart_charge *c;
  uint64_t size;
} item;

typedef struct worker {
  gpupart_partition *p;
  uint64_t rng;
  tsan_tally t;
  uint64_t charges, releases;
} worker;

static void drop(worker *w, item *it) {
  if (it->c) {
    if (gpupart_charge_release(it->c) == GPUPART_OK) w->releases++;
    else w->t.odd++;
  } else if (gpupart_free(it->a) == GPUPART_OK) {
    w->t.frees++;
  } else {
    w->t.odd++;
  }
}

static void take(worker *w, item *it) {
  *it = (item){.size = 1 + tsan_rand(&w->rng) % (4 * MiB)};
  int charge = tsan_rand(&w->rng) % 3 == 0;
  gpupart_result rc =
      charge ? gpupart_partition_charge(w->p, it->size, &it->c) : gpupart_alloc(w->p, it->size, 0, &it->a);
  if (rc == GPUPART_ELIMIT) w->t.refused++;
  else if (rc != GPUPART_OK) w->t.odd++;
  if (rc != GPUPART_OK) {
    it->size = 0;
    return;
  }
  if (charge) w->charges++;
  else w->t.allocs++;
  if (charge && gpupart_charge_size(it->c) != it->size) w->t.odd++;
}

static void *run(void *arg) {
  worker *w = arg;
  item held[KEEP];
  int n = 0;
  for (int i = 0; i < OPS; i++) {
    if (n == KEEP || (n && tsan_rand(&w->rng) % 2)) {
      drop(w, &held[--n]);
      continue;
    }
    take(w, &held[n]);
    if (held[n].size) n++;
  }
  while (n) drop(w, &held[--n]);
  return NULL;
}

int main(void) {
  gpupart_context *ctx = tsan_context(NULL);
  gpupart_device *dev = tsan_device(ctx, 8 * GiB, 0);
  gpupart_partition *p[2] = {tsan_partition(dev, "even", 2 * GiB, 0), tsan_partition(dev, "odd", 2 * GiB, 0)};
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) w[i] = (worker){.p = p[i % 2], .rng = 88172645463325252ull * (uint64_t)(i + 1)};
  for (int i = 0; i < THREADS; i++) tsan_start(&t[i], run, &w[i]);
  for (int i = 0; i < THREADS; i++) tsan_join(t[i]);
  for (int k = 0; k < 2; k++) {
    uint64_t allocs = 0, frees = 0, refused = 0, charges = 0;
    for (int i = k; i < THREADS; i += 2) {
      tsan_expect_eq(w[i].t.odd, 0, "calls that failed otherwise than ELIMIT, or a charge's size");
      tsan_expect_eq(w[i].charges, w[i].releases, "charges released");
      allocs += w[i].t.allocs + w[i].charges;
      frees += w[i].t.frees + w[i].releases;
      refused += w[i].t.refused;
      charges += w[i].charges;
    }
    gpupart_stats s = tsan_stats(p[k]);
    tsan_expect(charges > 0, "no charge was made");
    printf("partition %d: %" PRIu64 " allocations and charges (%" PRIu64 " charges), %" PRIu64 " refused\n", k, allocs,
           charges, refused);
    tsan_expect_eq(s.total_allocations, allocs, "total_allocations (allocations and charges)");
    tsan_expect_eq(s.total_frees, frees, "total_frees (frees and releases)");
    tsan_expect_eq(s.failed_allocations, refused, "failed_allocations");
    tsan_expect_eq(s.live_allocations, 0, "live_allocations");
    tsan_expect_eq(s.in_use, 0, "in_use");
    uint64_t chargeable = 0;
    tsan_ok(gpupart_partition_chargeable(p[k], &chargeable), "partition_chargeable");
    tsan_expect_eq(chargeable + s.reserved, s.limit, "chargeable + reserved (blocks alone) against the limit");
  }
  tsan_ok(gpupart_device_check(dev), "device_check");
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  return tsan_finish("tsan_charges");
}
