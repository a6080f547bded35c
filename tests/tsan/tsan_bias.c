/* Two threads on one partition: the first allocates and so owns the partition lock's bias
 * (core/base/lock.h); while it loops, the second starts allocating and revokes the bias.
 * Each round uses a new partition, so the revocation happens ROUNDS times, each at a
 * different point of the owner's loop. The partition's figures are then compared with the
 * two threads' own counts: a revocation that let both threads in at once would show as a
 * TSan report on the partition's data, or as counts that do not add up. */
#include <sched.h>

#include "tsan_common.h"

#define ROUNDS 150
#define OPS 3000
#define KEEP 8

typedef struct round_ctx {
  gpupart_partition *p;
  atomic_int owner_started; /* the owner's allocations so far (the other starts after a few) */
} round_ctx;

typedef struct worker {
  round_ctx *r;
  int owner;
  uint64_t rng;
  tsan_tally t;
} worker;

static void one_op(worker *w, gpupart_allocation **held, uint64_t *sizes, int *n) {
  if (*n == KEEP || (*n && tsan_rand(&w->rng) % 2)) {
    (*n)--;
    if (gpupart_free(held[*n]) == GPUPART_OK) w->t.frees++;
    else w->t.odd++;
    w->t.in_use -= sizes[*n];
    return;
  }
  uint64_t size = 1 + tsan_rand(&w->rng) % (64 * 1024);
  gpupart_result rc = gpupart_alloc(w->r->p, size, 0, &held[*n]);
  if (rc != GPUPART_OK) {
    w->t.odd++;
    return;
  }
  w->t.allocs++;
  sizes[(*n)++] = size;
  w->t.in_use += size;
}

static void *run(void *arg) {
  worker *w = arg;
  gpupart_allocation *held[KEEP];
  uint64_t sizes[KEEP];
  int n = 0;
  if (!w->owner)
    while (atomic_load(&w->r->owner_started) < 50) sched_yield();
  for (int i = 0; i < OPS; i++) {
    one_op(w, held, sizes, &n);
    if (w->owner) atomic_store(&w->r->owner_started, i + 1);
  }
  while (n) {
    n--;
    if (gpupart_free(held[n]) == GPUPART_OK) w->t.frees++;
    else w->t.odd++;
  }
  return NULL;
}

static void round_once(gpupart_device *dev, int round) {
  char name[32];
  snprintf(name, sizeof name, "shared%d", round);
  round_ctx r = {.p = tsan_partition(dev, name, 0, 0)};
  worker w[2] = {{.r = &r, .owner = 1, .rng = 88172645463325252ull + (uint64_t)round},
                 {.r = &r, .owner = 0, .rng = 2463534242ull + (uint64_t)round}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) tsan_start(&t[i], run, &w[i]);
  for (int i = 0; i < 2; i++) tsan_join(t[i]);
  gpupart_stats s = tsan_stats(r.p);
  tsan_expect_eq(w[0].t.odd + w[1].t.odd, 0, "calls that failed");
  tsan_expect_eq(s.total_allocations, w[0].t.allocs + w[1].t.allocs, "total_allocations");
  tsan_expect_eq(s.total_frees, w[0].t.frees + w[1].t.frees, "total_frees");
  tsan_expect_eq(s.live_allocations, 0, "live_allocations");
  tsan_expect_eq(s.in_use, 0, "in_use");
  tsan_expect_eq(s.double_frees, 0, "double_frees");
  tsan_ok(gpupart_device_check(dev), "device_check");
  tsan_ok(gpupart_partition_destroy(r.p), "partition_destroy");
}

int main(void) {
  gpupart_context *ctx = tsan_context(NULL);
  gpupart_device *dev = tsan_device(ctx, 4 * GiB, 0);
  for (int round = 0; round < ROUNDS; round++) round_once(dev, round);
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  return tsan_finish("tsan_bias");
}
