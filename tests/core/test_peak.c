/* The device's peak in use with many partitions and several threads: it never falls
 * below the true peak, stays within a granule of it when two partitions pass a token
 * among 5,000 idle ones, and a new high costs a visit to one partition, not to all of
 * them (counted through the partitions' internal counters, never timed); a device with one
 * partition reads its exact peak. This suite links
 * the static library, so it reads those counters. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "internal.h"
#include "common.h"

#define IDLE 5000
#define ROUNDS 300

static gpupart_device *device_with_idle(gpupart_context *ctx, uint32_t idle) {
  gpupart_sim_desc sim = {.total_bytes = 64 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  for (uint32_t i = 0; i < idle; i++) {
    gpupart_partition *p = NULL;
    cr_assert_eq(gpupart_partition_create(dev, NULL, &p), GPUPART_OK, "%s", gpupart_last_error());
  }
  return dev;
}

typedef struct player {
  gpupart_partition *p;
  atomic_int *token;
  int me, failures;
} player;

/* Holds the 256 MiB token only while it is this player's turn: it frees before it
 * passes the turn, so the two partitions never hold it at once. */
static void *play(void *arg) {
  player *pl = arg;
  for (int r = 0; r < ROUNDS; r++) {
    while (atomic_load_explicit(pl->token, memory_order_acquire) != pl->me) sched_yield();
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(pl->p, 256 * MiB, 0, &a) != GPUPART_OK) pl->failures++;
    gpupart_free(a);
    atomic_store_explicit(pl->token, 1 - pl->me, memory_order_release);
  }
  return NULL;
}

typedef struct churner {
  gpupart_partition *p;
  atomic_int stop;
} churner;

/* A third partition that holds at most 1 MiB, making new highs of the device's peak
 * while the token passes. */
static void *churn(void *arg) {
  churner *c = arg;
  while (!atomic_load(&c->stop)) {
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(c->p, 1 * MiB, 0, &a) == GPUPART_OK) gpupart_free(a);
  }
  return NULL;
}

Test(peak, two_partitions_passing_a_token_among_5000_idle_ones_keep_the_device_peak_within_a_granule) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = device_with_idle(ctx, IDLE);
  gpupart_partition *a = test_partition(dev, "a", 0, 0), *b = test_partition(dev, "b", 0, 0);
  churner ch = {.p = test_partition(dev, "c", 0, 0)};
  atomic_int token = 0;
  player pa = {a, &token, 0, 0}, pb = {b, &token, 1, 0};
  pthread_t ta, tb, tc;
  pthread_create(&tc, NULL, churn, &ch);
  pthread_create(&ta, NULL, play, &pa);
  pthread_create(&tb, NULL, play, &pb);
  pthread_join(ta, NULL), pthread_join(tb, NULL);
  atomic_store(&ch.stop, 1);
  pthread_join(tc, NULL);
  cr_expect_eq(pa.failures + pb.failures, 0);
  gpupart_stats s;
  cr_assert_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  uint64_t true_peak = 257 * MiB, granule = 2 * MiB;
  cr_expect_geq(s.peak_in_use, 256 * MiB, "the device's peak is never below the true peak");
  cr_expect_leq(s.peak_in_use, true_peak + granule, "device peak %llu MiB, true peak at most 257 MiB",
                (unsigned long long)(s.peak_in_use / MiB));
  test_check(dev);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* Partitions read per new high of the device's peak, over a run that makes many. */
static double visits_per_crossing(uint32_t idle) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = device_with_idle(ctx, idle);
  gpupart_partition *p = test_partition(dev, "grow", 0, 0);
  gpupart_allocation *held[64];
  uint64_t crossings0 = p->peak_crossings, visits0 = p->peak_visits;
  for (int i = 0; i < 64; i++) cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &held[i]), GPUPART_OK);
  uint64_t crossings = p->peak_crossings - crossings0, visits = p->peak_visits - visits0;
  for (int i = 0; i < 64; i++) gpupart_free(held[i]);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  cr_assert_geq(crossings, 64, "each allocation made a new high");
  return (double)visits / (double)crossings;
}

Test(peak, a_new_high_visits_as_many_partitions_with_5000_idle_ones_as_with_none) {
  double few = visits_per_crossing(1), many = visits_per_crossing(IDLE);
  cr_expect_leq(many, few, "%.1f partitions visited per new high with %d idle partitions, %.1f with none", many, IDLE,
                few);
  cr_expect_leq(few, 1.0);
}

Test(peak, device_reset_peak_starts_the_device_peak_from_what_is_in_use_now) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = device_with_idle(ctx, 0);
  gpupart_partition *p = test_partition(dev, "p", 0, 0);
  gpupart_allocation *a = NULL, *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 8 * MiB, 0, &a), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &b), GPUPART_OK);
  gpupart_free(b);
  gpupart_stats s;
  gpupart_device_get_stats(dev, &s);
  cr_expect_geq(s.peak_in_use, 72 * MiB);
  cr_expect_eq(gpupart_device_reset_peak(dev), GPUPART_OK);
  gpupart_device_get_stats(dev, &s);
  cr_expect_eq(s.peak_in_use, 8 * MiB, "granule multiples in use: the reset peak is exact");
  cr_expect_eq(test_stats(p).peak_in_use, 72 * MiB, "a partition's own peak is reset on its own");
  cr_expect_eq(gpupart_device_reset_peak(NULL), GPUPART_EINVAL);
  gpupart_free(a);
  test_check(dev);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A device handle with one partition reads that partition's exact peak (no charge, so no
 * device-wide write on the allocation path); a second partition's coming and going, and
 * either reset, keep the device's figure at or above the true peak. */
Test(peak, a_lone_partition_s_exact_peak_is_the_device_s_while_others_come_and_go) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = device_with_idle(ctx, 0);
  gpupart_partition *p = test_partition(dev, "p", 0, 0);
  gpupart_allocation *a = NULL, *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 3 * MiB + 5, 0, &a), GPUPART_OK);
  gpupart_free(a);
  gpupart_stats s;
  gpupart_device_get_stats(dev, &s);
  cr_expect_eq(s.peak_in_use, 3 * MiB + 5, "one partition: the exact peak, not a granule's");
  test_check(dev);
  gpupart_partition *q = test_partition(dev, "q", 0, 0);
  cr_assert_eq(gpupart_alloc(q, 1 * MiB, 0, &b), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 1 * MiB, 0, &a), GPUPART_OK);
  gpupart_device_get_stats(dev, &s);
  cr_expect_geq(s.peak_in_use, 3 * MiB + 5, "the lone partition's peak was kept");
  test_check(dev);
  gpupart_free(b);
  cr_expect_eq(gpupart_partition_destroy(q), GPUPART_OK);
  test_check(dev);
  gpupart_partition_reset_peak(p);
  gpupart_device_get_stats(dev, &s);
  cr_expect_geq(s.peak_in_use, 3 * MiB + 5, "a partition's reset leaves the device's peak alone");
  cr_expect_eq(gpupart_device_reset_peak(dev), GPUPART_OK);
  gpupart_device_get_stats(dev, &s);
  cr_expect_eq(s.peak_in_use, 2 * MiB, "reset: 1 MiB in use, charged to its granule");
  gpupart_partition_reset_peak(p); /* fresh again: solo, exact */
  gpupart_free(a);
  cr_assert_eq(gpupart_alloc(p, 5, 0, &a), GPUPART_OK);
  gpupart_device_get_stats(dev, &s);
  cr_expect_eq(s.peak_in_use, 2 * MiB, "the device's peak since its reset is kept");
  test_check(dev);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
