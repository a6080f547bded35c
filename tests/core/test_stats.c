/* Statistics and the consistency check: every field of gpupart_stats for a partition and
 * for its device, exact after each call, also read from another thread (which leaves the
 * allocating thread its lock's bias); peaks and reset_peak; device sums that keep the
 * counts of destroyed partitions; and gpupart_device_check finding each invariant broken
 * on purpose (this suite links the static library, so it may reach into the structs). */
#include "internal.h"
#include "policy.h"

static sim_env env;

static void setup(void) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  env = open_env(&sim, NULL);
}

static void teardown(void) { close_env(&env); }

TestSuite(stats, .init = setup, .fini = teardown);

/* Every field of s against the expected values, naming the one that differs. */
static void expect_stats(gpupart_stats s, gpupart_stats want, int line) {
#define FIELD(f)                                                                                     \
  cr_expect_eq(s.f, want.f, "line %d: " #f " is %llu, expected %llu", line, (unsigned long long)s.f, \
               (unsigned long long)want.f)
  FIELD(limit);
  FIELD(guarantee);
  FIELD(in_use);
  FIELD(peak_in_use);
  FIELD(reserved);
  FIELD(peak_reserved);
  FIELD(live_allocations);
  FIELD(total_allocations);
  FIELD(total_frees);
  FIELD(driver_allocs);
  FIELD(driver_frees);
  FIELD(failed_allocations);
  FIELD(largest_free);
#undef FIELD
}

Test(stats, a_new_partition_reports_its_limit_and_nothing_else) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 8 * MiB);
  expect_stats(test_stats(p), (gpupart_stats){.limit = 64 * MiB, .guarantee = 8 * MiB}, __LINE__);
}

Test(stats, every_field_is_exact_after_each_call) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 8 * MiB);
  gpupart_stats w = {.limit = 64 * MiB, .guarantee = 8 * MiB};
  gpupart_allocation *a = alloc_ok(p, 1000);
  w.in_use = w.peak_in_use = 1000;
  w.reserved = w.peak_reserved = 2 * MiB;
  w.live_allocations = w.total_allocations = w.driver_allocs = 1;
  w.largest_free = 2 * MiB - 1024; /* 1000 bytes take four 256-byte granules */
  expect_stats(test_stats(p), w, __LINE__);

  gpupart_allocation *b = alloc_ok(p, 3 * MiB); /* a block of its own: 4 MiB */
  w.in_use = w.peak_in_use = 1000 + 3 * MiB;
  w.reserved = w.peak_reserved = 6 * MiB;
  w.live_allocations = w.total_allocations = w.driver_allocs = 2;
  expect_stats(test_stats(p), w, __LINE__);

  gpupart_free(a);
  w.in_use = 3 * MiB;
  w.live_allocations = 1;
  w.total_frees = 1;
  w.largest_free = 2 * MiB;
  expect_stats(test_stats(p), w, __LINE__);

  cr_expect_eq(gpupart_partition_trim(p), GPUPART_OK);
  w.reserved = 4 * MiB;
  w.driver_frees = 1;
  w.largest_free = 1 * MiB;
  expect_stats(test_stats(p), w, __LINE__);

  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &x), GPUPART_ELIMIT);
  w.failed_allocations = 1;
  expect_stats(test_stats(p), w, __LINE__);

  gpupart_partition_reset_peak(p);
  w.peak_in_use = 3 * MiB;
  w.peak_reserved = 4 * MiB;
  expect_stats(test_stats(p), w, __LINE__);

  gpupart_free(b);
  w.in_use = 0;
  w.live_allocations = 0;
  w.total_frees = 2;
  w.largest_free = 4 * MiB;
  expect_stats(test_stats(p), w, __LINE__);
  test_check(env.dev);
}

Test(stats, in_use_counts_requested_bytes_and_reserved_the_blocks) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a[10];
  for (int i = 0; i < 10; i++) a[i] = alloc_ok(p, 1);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, 10);
  cr_expect_eq(s.reserved, 2 * MiB);
  cr_expect_eq(s.largest_free, 2 * MiB - 10 * 256);
  for (int i = 0; i < 10; i++) gpupart_free(a[i]);
}

Test(stats, largest_free_is_allocatable_without_a_driver_call) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 5 * MiB + 77);
  uint64_t largest = test_stats(p).largest_free;
  cr_assert_gt(largest, 0);
  gpupart_allocation *b = alloc_ok(p, largest);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 1);
  cr_expect_eq(s.largest_free, 0);
  gpupart_free(a);
  gpupart_free(b);
}

Test(stats, reset_peak_starts_the_peaks_from_now) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 10 * MiB), *b = alloc_ok(p, 20 * MiB);
  gpupart_free(b);
  gpupart_partition_trim(p);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.peak_in_use, 30 * MiB);
  cr_expect_eq(s.peak_reserved, 30 * MiB);
  gpupart_partition_reset_peak(p);
  s = test_stats(p);
  cr_expect_eq(s.peak_in_use, 10 * MiB);
  cr_expect_eq(s.peak_reserved, 10 * MiB);
  b = alloc_ok(p, 4 * MiB);
  s = test_stats(p);
  cr_expect_eq(s.peak_in_use, 14 * MiB);
  cr_expect_eq(s.peak_reserved, 14 * MiB);
  gpupart_free(b);
  gpupart_free(a);
  s = test_stats(p);
  cr_expect_eq(s.peak_in_use, 14 * MiB, "freeing lowers no peak");
  gpupart_stats d = dev_stats(env.dev);
  cr_expect_eq(d.peak_in_use, 30 * MiB, "the device's peaks are its own");
  cr_expect_eq(d.peak_reserved, 30 * MiB);
  test_check(env.dev);
}

Test(stats, the_device_sums_its_partitions) {
  gpupart_partition *p = test_partition(env.dev, "a", 256 * MiB, 64 * MiB);
  gpupart_partition *q = test_partition(env.dev, "b", 0, 100 * MiB);
  gpupart_allocation *a = alloc_ok(p, 1000), *b = alloc_ok(q, 7 * MiB), *c = alloc_ok(q, 3 * MiB), *x;
  gpupart_free(c);
  cr_expect_eq(gpupart_alloc(p, 300 * MiB, 0, &x), GPUPART_ELIMIT);
  gpupart_stats sp = test_stats(p), sq = test_stats(q), d = dev_stats(env.dev);
  cr_expect_eq(d.limit, 1 * GiB, "the budget");
  cr_expect_eq(d.guarantee, 164 * MiB, "the sum of guarantees");
  cr_expect_eq(d.in_use, sp.in_use + sq.in_use);
  cr_expect_eq(d.in_use, 1000 + 7 * MiB);
  cr_expect_eq(d.reserved, sp.reserved + sq.reserved);
  cr_expect_eq(d.live_allocations, 2);
  cr_expect_eq(d.total_allocations, 3);
  cr_expect_eq(d.total_frees, 1);
  cr_expect_eq(d.driver_allocs, sp.driver_allocs + sq.driver_allocs);
  cr_expect_eq(d.driver_frees, 0);
  cr_expect_eq(d.failed_allocations, 1);
  cr_expect_eq(d.largest_free, sp.largest_free > sq.largest_free ? sp.largest_free : sq.largest_free);
  cr_expect_geq(d.peak_in_use, 1000 + 10 * MiB, "an upper bound of the highest sum ...");
  cr_expect_lt(d.peak_in_use, 1000 + 10 * MiB + 2 * 2 * 2 * MiB, "... within two granules per partition");
  cr_expect_eq(d.peak_reserved, d.reserved);
  gpupart_free(a);
  gpupart_free(b);
}

Test(stats, the_device_peak_is_the_highest_sum_not_the_sum_of_peaks) {
  gpupart_partition_desc d = {.name = "a", .release_threshold = 1};
  gpupart_partition *p = make_partition(env.dev, &d);
  d.name = "b";
  gpupart_partition *q = make_partition(env.dev, &d);
  gpupart_free(alloc_ok(p, 10 * MiB));
  gpupart_free(alloc_ok(q, 10 * MiB));
  gpupart_stats s = dev_stats(env.dev);
  cr_expect_eq(s.peak_in_use, 10 * MiB);
  cr_expect_eq(s.peak_reserved, 10 * MiB);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(test_stats(p).peak_in_use + test_stats(q).peak_in_use, 20 * MiB);
}

Test(stats, the_device_keeps_the_counts_of_destroyed_partitions) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  gpupart_partition *q = test_partition(env.dev, "b", 0, 0);
  gpupart_allocation *keep = alloc_ok(q, 1 * MiB), *x;
  for (int i = 0; i < 3; i++) gpupart_free(alloc_ok(p, 5 * MiB));
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &x), GPUPART_ELIMIT);
  gpupart_stats before = dev_stats(env.dev), sp = test_stats(p);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  gpupart_stats s = dev_stats(env.dev);
  cr_expect_eq(s.total_allocations, before.total_allocations);
  cr_expect_eq(s.total_frees, before.total_frees);
  cr_expect_eq(s.failed_allocations, before.failed_allocations);
  cr_expect_eq(s.driver_allocs, before.driver_allocs);
  cr_expect_eq(s.driver_frees, before.driver_frees + sp.driver_allocs - sp.driver_frees,
               "destroy's own driver frees count too");
  cr_expect_eq(s.in_use, 1 * MiB);
  cr_expect_eq(s.live_allocations, 1);
  cr_expect_eq(s.reserved, test_stats(q).reserved);
  cr_expect_eq(s.peak_in_use, before.peak_in_use);
  gpupart_free(keep);
}

Test(stats, failed_allocations_count_elimit_and_edevmem_only) {
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB, .fail_block_alloc_at = 1};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 2 * MiB, 0, &x), GPUPART_EDEVMEM);
  cr_expect_eq(gpupart_alloc(p, 65 * MiB, 0, &x), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, 16, 5, &x), GPUPART_EINVAL);
  test_partition(e.dev, "floor", 0, 62 * MiB);
  cr_expect_eq(gpupart_alloc(p, 4 * MiB, 0, &x), GPUPART_ELIMIT);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.failed_allocations, 2);
  cr_expect_eq(s.total_allocations, 0);
  cr_expect_eq(s.driver_allocs, 0);
  cr_expect_eq(dev_stats(e.dev).failed_allocations, 2);
  close_env(&e);
}

/* Breaks one figure, expects the check to name it, and puts it back. */
#define EXPECT_CAUGHT(lvalue, broken, words)                                               \
  do {                                                                                     \
    __typeof__(lvalue) saved_ = (lvalue);                                                  \
    (lvalue) = (broken);                                                                   \
    cr_expect_eq(gpupart_device_check(env.dev), GPUPART_ECORRUPT, "not caught: " #lvalue); \
    cr_expect(message_has(words), "%s: %s", #lvalue, gpupart_last_error());                \
    (lvalue) = saved_;                                                                     \
    cr_expect_eq(gpupart_device_check(env.dev), GPUPART_OK, "%s", gpupart_last_error());   \
  } while (0)

Test(stats, device_check_finds_each_broken_invariant) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 1000);
  gpupart_free(alloc_ok(p, 5 * MiB)); /* an empty block too */
  test_check(env.dev);
  EXPECT_CAUGHT(p->charge, 0, "charge");
  EXPECT_CAUGHT(p->c.in_use, 1 * GiB, "in_use exceeds");
  EXPECT_CAUGHT(p->c.live_allocations, 2, "live allocations");
  EXPECT_CAUGHT(p->c.peak_in_use, 0, "peak");
  EXPECT_CAUGHT(p->arena.peak_reserved, 0, "peak");
  EXPECT_CAUGHT(p->c.total_allocations, 0, "more live allocations than allocations");
  EXPECT_CAUGHT(p->arena.reserved, p->arena.reserved + 2 * MiB, "reserved");
  gpupart__ledger *l = env.dev->ledger;
  cr_assert_eq(l->ops->reserve(l, p->account, 2 * MiB), GPUPART__GRANTED);
  cr_expect_eq(gpupart_device_check(env.dev), GPUPART_ECORRUPT);
  cr_expect(message_has("ledger reserved"), "%s", gpupart_last_error());
  l->ops->release(l, p->account, 2 * MiB);
  test_check(env.dev);
  gpupart_free(a);
}

/* ---- gpupart_partition_available ------------------------------------------------ */

static uint64_t available(const gpupart_partition *p) {
  uint64_t bytes = 0;
  cr_assert_eq(gpupart_partition_available(p, &bytes), GPUPART_OK, "%s", gpupart_last_error());
  return bytes;
}

Test(stats, available_is_a_new_partitions_limit_and_all_of_it_can_be_allocated) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  cr_assert_eq(available(p), 64 * MiB);
  gpupart_allocation *a = alloc_ok(p, 64 * MiB);
  cr_assert_eq(available(p), 0);
  gpupart_allocation *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 1, 0, &b), GPUPART_ELIMIT);
  gpupart_free(a);
  cr_assert_eq(available(p), 64 * MiB, "the emptied block is free bytes of the partition's own");
}

Test(stats, available_counts_the_free_bytes_of_its_blocks_and_what_the_ledger_grants) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  alloc_ok(p, 1000); /* a 2 MiB block */
  cr_assert_eq(available(p), 64 * MiB - 1000);
  alloc_ok(p, 3 * MiB); /* a block of its own: 4 MiB */
  cr_assert_eq(available(p), 64 * MiB - 1000 - 3 * MiB);
}

Test(stats, available_leaves_out_the_unused_guarantees_of_other_partitions) {
  gpupart_partition *a = test_partition(env.dev, "a", 1 * GiB, 0);
  gpupart_partition *b = test_partition(env.dev, "b", 512 * MiB, 256 * MiB);
  cr_assert_eq(available(a), 768 * MiB, "b's 256 MiB floor is not a's to take");
  cr_assert_eq(available(b), 512 * MiB);
  alloc_ok(b, 100 * MiB);
  cr_assert_eq(available(a), 768 * MiB, "what b holds is inside its floor");
  alloc_ok(b, 200 * MiB);
  cr_assert_eq(available(a), 1 * GiB - test_stats(b).reserved, "past its floor, b's blocks are what a loses");
}

Test(stats, available_refuses_null_arguments) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  uint64_t bytes = 7;
  cr_assert_eq(gpupart_partition_available(NULL, &bytes), GPUPART_EINVAL);
  cr_assert_eq(bytes, 7);
  cr_assert(strstr(gpupart_last_error(), "partition_available"));
  cr_assert_eq(gpupart_partition_available(p, NULL), GPUPART_EINVAL);
}

static void *read_stats(void *arg) {
  gpupart_partition *p = arg;
  gpupart_stats s, d;
  uint64_t spare;
  int ok = gpupart_partition_get_stats(p, &s) == GPUPART_OK && gpupart_device_get_stats(p->dev, &d) == GPUPART_OK &&
           gpupart_partition_available(p, &spare) == GPUPART_OK;
  return (void *)(uintptr_t)(ok && s.in_use == 3000 && s.live_allocations == 3 && d.in_use == 3000 &&
                             d.peak_in_use == 3000);
}

/* A monitoring thread reads the figures exactly, and the thread that allocates keeps its
 * partition lock's bias (core/base/lock.h, visits): its next allocation still enters
 * without the spinlock. */
Test(stats, reading_stats_on_another_thread_leaves_the_allocating_thread_its_bias) {
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  gpupart_allocation *a[3];
  for (int i = 0; i < 3; i++) a[i] = alloc_ok(p, 1000);
  if (atomic_load(&p->lock.biased_to) != gpupart__lock_self) cr_skip_test("no lock is biased here (membarrier)");
  pthread_t t;
  void *exact = NULL;
  pthread_create(&t, NULL, read_stats, p);
  pthread_join(t, &exact);
  cr_expect_eq((uintptr_t)exact, 1, "the other thread's figures are exact");
  cr_expect_eq(atomic_load(&p->lock.revoked), 0, "the bias was not revoked for good");
  cr_expect_eq(atomic_load(&p->lock.biased_to), gpupart__lock_self, "and it is still this thread's");
  for (int i = 0; i < 3; i++) cr_expect_eq(gpupart_free(a[i]), GPUPART_OK);
}
