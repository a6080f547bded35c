/* The device: budget arithmetic (min(total * fraction, limit) - headroom, rounded down to
 * the granularity), descriptor validation, close and context destroy while children live,
 * and NULL handling of every public call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

static uint64_t budget_of(uint64_t total, const gpupart_device_desc *d) {
  gpupart_sim_desc sim = {.total_bytes = total};
  sim_env e = open_env(&sim, d);
  uint64_t b = gpupart_device_budget(e.dev);
  gpupart_stats s = dev_stats(e.dev);
  cr_expect_eq(s.limit, b, "device stats report the budget as their limit");
  close_env(&e);
  return b;
}

static gpupart_result open_result(uint64_t total, const gpupart_device_desc *base) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = total};
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_SIM;
  d.backend_desc = &sim;
  gpupart_device *dev = (gpupart_device *)&d;
  gpupart_result rc = gpupart_device_open(ctx, &d, &dev);
  if (rc) {
    cr_expect_null(dev, "out is NULL on failure");
    cr_expect_gt(strlen(gpupart_last_error()), 0, "a failure explains itself");
  } else {
    gpupart_device_close(dev);
  }
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "a failed open leaves no device behind");
  return rc;
}

Test(device, budget_defaults_to_the_whole_device) {
  gpupart_device_desc d = {0};
  cr_expect_eq(budget_of(16 * GiB, &d), 16 * GiB);
  cr_expect_eq(budget_of(1 * GiB, &d), 1 * GiB);
}

Test(device, budget_is_the_fraction_of_total) {
  gpupart_device_desc d = {.memory_fraction = 0.5};
  cr_expect_eq(budget_of(1 * GiB, &d), 512 * MiB);
  d.memory_fraction = 1.0;
  cr_expect_eq(budget_of(1 * GiB, &d), 1 * GiB);
}

Test(device, budget_is_the_smaller_of_fraction_and_limit) {
  gpupart_device_desc d = {.memory_fraction = 0.5, .memory_limit = 300 * MiB};
  cr_expect_eq(budget_of(1 * GiB, &d), 300 * MiB);
  d.memory_limit = 900 * MiB;
  cr_expect_eq(budget_of(1 * GiB, &d), 512 * MiB, "a limit above the fraction's share changes nothing");
  d = (gpupart_device_desc){.memory_limit = 2 * GiB};
  cr_expect_eq(budget_of(1 * GiB, &d), 1 * GiB, "a limit above the device is the device");
}

Test(device, headroom_comes_off_after_the_minimum) {
  gpupart_device_desc d = {.memory_limit = 512 * MiB, .headroom = 100 * MiB};
  cr_expect_eq(budget_of(1 * GiB, &d), 412 * MiB);
  d = (gpupart_device_desc){.headroom = 10 * MiB};
  cr_expect_eq(budget_of(1 * GiB, &d), 1014 * MiB);
}

Test(device, budget_rounds_down_to_the_granularity) {
  gpupart_device_desc d = {.memory_fraction = 0.333};
  /* 1000 MiB * 0.333 = 333.0 MiB less a little: 166 granules of 2 MiB */
  cr_expect_eq(budget_of(1000 * MiB, &d), 332 * MiB);
  d = (gpupart_device_desc){.headroom = 5 * MiB, .granularity = 8 * MiB};
  cr_expect_eq(budget_of(1 * GiB, &d), 1016 * MiB);
  d = (gpupart_device_desc){.memory_limit = 300 * MiB + 12345};
  cr_expect_eq(budget_of(1 * GiB, &d), 300 * MiB);
}

Test(device, granularity_below_the_device_alignment_is_raised_to_it) {
  /* A 4 KiB granularity on a device whose blocks align to 64 KiB: blocks and limits must
   * still be whole multiples of what the driver can hand out. */
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .min_alignment = 64 * 1024};
  gpupart_device_desc d = {.granularity = 4096, .headroom = 100 * 1024};
  sim_env e = open_env(&sim, &d);
  cr_expect_eq(gpupart_device_budget(e.dev), 1 * GiB - 128 * 1024);
  gpupart_partition_desc pd = {.name = "small", .limit = 100 * 1024, .initial_block = 200 * 1024};
  gpupart_partition *p = make_partition(e.dev, &pd);
  cr_expect_eq(test_stats(p).limit, 64 * 1024ull, "the limit rounds down to the effective granularity");
  gpupart_allocation *a = alloc_ok(p, 1000);
  test_check(e.dev);
  cr_expect_eq(info_of(a).block_size % (64 * 1024), 0);
  gpupart_free(a);
  gpupart_partition_desc qd = {.name = "grow", .initial_block = 200 * 1024};
  gpupart_partition *q = make_partition(e.dev, &qd);
  a = alloc_ok(q, 1000);
  cr_expect_eq(info_of(a).block_size % (64 * 1024), 0, "blocks are whole driver granules");
  test_check(e.dev);
  gpupart_free(a);
  close_env(&e);
}

Test(device, a_device_alignment_above_the_granularity_works) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .min_alignment = 4 * MiB};
  gpupart_device_desc d = {.headroom = 3 * MiB};
  sim_env e = open_env(&sim, &d);
  cr_expect_eq(gpupart_device_budget(e.dev), 1 * GiB - 4 * MiB, "rounded down to the device's 4 MiB");
  gpupart_partition *p = test_partition(e.dev, "a", 22 * MiB, 0);
  cr_expect_eq(test_stats(p).limit, 20 * MiB);
  gpupart_allocation *a = alloc_ok(p, 1000), *b = alloc_ok(p, 5 * MiB), *c = alloc_ok(p, 1000), *x;
  cr_expect_eq(info_of(a).block_size, 4 * MiB);
  cr_expect_eq(info_of(b).block_size, 8 * MiB);
  cr_expect_eq(info_of(b).device_address % (4 * MiB), 0);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 16 * MiB, "every allocation takes whole 4 MiB granules");
  cr_expect_eq(s.largest_free, 0);
  cr_expect_eq(gpupart_alloc(p, 5 * MiB, 0, &x), GPUPART_ELIMIT);
  gpupart_free(c);
  test_check(e.dev);
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}

Test(device, memory_fraction_outside_zero_one_is_refused) {
  const double bad[] = {-0.1, 1.01, 2.0, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupart_device_desc d = {.memory_fraction = bad[i]};
    cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "fraction %g", bad[i]);
  }
}

Test(device, granularity_must_be_a_power_of_two) {
  const uint64_t bad[] = {3 * MiB, 1000, 3, UINT64_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupart_device_desc d = {.granularity = bad[i]};
    cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "granularity %llu", (unsigned long long)bad[i]);
  }
  gpupart_device_desc ok = {.granularity = 64 * MiB};
  cr_expect_eq(open_result(1 * GiB, &ok), GPUPART_OK);
}

Test(device, headroom_that_leaves_no_budget_is_refused) {
  gpupart_device_desc d = {.headroom = 1 * GiB};
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "headroom equal to the device");
  d.headroom = 2 * GiB;
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "headroom above the device");
  d = (gpupart_device_desc){.memory_limit = 100 * MiB, .headroom = 100 * MiB};
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "headroom equal to the limit");
  d = (gpupart_device_desc){.headroom = 1 * GiB - 1 * MiB};
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL, "a budget that rounds down to 0");
  cr_expect(message_has("budget"), "%s", gpupart_last_error());
}

Test(device, unknown_flags_and_growth_policies_are_refused) {
  gpupart_device_desc d = {.flags = 0x80};
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL);
  d = (gpupart_device_desc){.growth = 3};
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL);
  d.growth = -1;
  cr_expect_eq(open_result(1 * GiB, &d), GPUPART_EINVAL);
}

Test(device, a_bad_backend_descriptor_is_refused) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.min_alignment = 3000};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  d = (gpupart_device_desc){.backend = (gpupart_backend)42};
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, opens_with_no_partitions_and_reports_its_info) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .max_block_bytes = 64 * MiB, .min_alignment = 4096};
  sim_env e = open_env(&sim, NULL);
  cr_expect_eq(gpupart_partition_count(e.dev), 0);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(e.dev, &info), GPUPART_OK);
  cr_expect_eq(info.backend, GPUPART_BACKEND_SIM);
  cr_expect_eq(info.total_bytes, 256 * MiB);
  cr_expect_eq(info.free_bytes, 256 * MiB);
  cr_expect_eq(info.max_block_bytes, 64 * MiB);
  cr_expect_eq(info.min_alignment, 4096);
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 10 * MiB);
  cr_assert_eq(gpupart_device_get_info(e.dev, &info), GPUPART_OK);
  cr_expect_eq(info.free_bytes, 256 * MiB - test_stats(p).reserved, "free_bytes is queried anew");
  gpupart_free(a);
  close_env(&e);
}

Test(device, close_is_refused_while_allocations_live) {
  sim_env e = open_env(NULL, NULL);
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4096);
  cr_expect_eq(gpupart_device_close(e.dev), GPUPART_EBUSY);
  cr_expect(message_has("live"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(e.ctx), GPUPART_EBUSY, "the device is still open");
  /* nothing was freed: the device and its partition still work */
  cr_expect_eq(gpupart_partition_count(e.dev), 1);
  gpupart_allocation *b = alloc_ok(p, 4096);
  test_check(e.dev);
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}

Test(device, close_frees_partitions_and_their_blocks) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_partition_desc pd = {.name = "pre", .limit = 64 * MiB, .growth = GPUPART_GROWTH_OFF};
  make_partition(dev, &pd);
  gpupart_free(alloc_ok(p, 8 * MiB));
  /* A second handle on the same simulated device sees what the first gave back. */
  gpupart_device *watcher = test_sim_device(ctx, &sim, NULL);
  gpupart_device_info info;
  gpupart_device_get_info(watcher, &info);
  cr_expect_lt(info.free_bytes, 256 * MiB);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_get_info(watcher, &info);
  cr_expect_eq(info.free_bytes, 256 * MiB, "every block went back to the driver");
  cr_expect_eq(gpupart_device_close(watcher), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, context_destroy_is_refused_while_devices_are_open) {
  gpupart_context *ctx = test_context();
  gpupart_device *a = test_sim_device(ctx, NULL, NULL);
  gpupart_device *b = test_sim_device(ctx, NULL, NULL);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_EBUSY);
  cr_expect(message_has("open"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_EBUSY, "one device is still open");
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static void *fake_alloc(size_t n, void *user) { return (void)user, malloc(n); }

Test(device, null_arguments_are_refused_everywhere) {
  gpupart_context *ctx = (gpupart_context *)&ctx;
  cr_expect_eq(gpupart_context_create(NULL, NULL), GPUPART_EINVAL);
  gpupart_context_desc half = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .host_alloc = fake_alloc};
  cr_expect_eq(gpupart_context_create(&half, &ctx), GPUPART_EINVAL, "host_alloc without host_free");
  cr_expect_null(ctx);
  cr_expect_eq(gpupart_context_destroy(NULL), GPUPART_OK);
  ctx = test_context();
  gpupart_device *dev = (gpupart_device *)&dev;
  cr_expect_eq(gpupart_device_open(NULL, NULL, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect_eq(gpupart_device_open(ctx, NULL, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_device_close(NULL), GPUPART_OK);
  gpupart_device_info info;
  uint32_t n = 1;
  cr_expect_eq(gpupart_enumerate(NULL, GPUPART_BACKEND_SIM, &info, &n), GPUPART_EINVAL);
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, &info, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_device_get_info(NULL, &info), GPUPART_EINVAL);
  cr_expect_eq(gpupart_device_budget(NULL), 0);
  gpupart_stats s;
  cr_expect_eq(gpupart_device_get_stats(NULL, &s), GPUPART_EINVAL);
  cr_expect_eq(gpupart_device_check(NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_count(NULL), 0);
  cr_expect_null(gpupart_partition_at(NULL, 0));
  cr_expect_null(gpupart_partition_find(NULL, "p0"));
  gpupart_partition *p = (gpupart_partition *)&p;
  cr_expect_eq(gpupart_partition_create(NULL, NULL, &p), GPUPART_EINVAL);
  cr_expect_null(p);
  cr_expect_eq(gpupart_partition_destroy(NULL), GPUPART_OK);
  cr_expect_eq(gpupart_partition_resize(NULL, 1 * GiB), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_trim(NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_get_stats(NULL, &s), GPUPART_EINVAL);
  cr_expect_null(gpupart_partition_name(NULL));
  gpupart_partition_reset_peak(NULL);
  gpupart_allocation *a = (gpupart_allocation *)&a;
  cr_expect_eq(gpupart_alloc(NULL, 16, 0, &a), GPUPART_EINVAL);
  cr_expect_null(a);
  gpupart_free(NULL);
  gpupart_allocation_info ai;
  cr_expect_eq(gpupart_allocation_get_info(NULL, &ai), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, null_out_parameters_of_a_live_device_are_refused) {
  sim_env e = open_env(NULL, NULL);
  cr_expect_eq(gpupart_device_get_info(e.dev, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_device_get_stats(e.dev, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_create(e.dev, NULL, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_count(e.dev), 0, "a refused create leaves nothing behind");
  cr_expect_null(gpupart_partition_find(e.dev, NULL));
  cr_expect_null(gpupart_partition_at(e.dev, 0));
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  cr_expect_eq(gpupart_partition_get_stats(p, NULL), GPUPART_EINVAL);
  gpupart_allocation *a = alloc_ok(p, 64);
  cr_expect_eq(gpupart_allocation_get_info(a, NULL), GPUPART_EINVAL);
  gpupart_free(a);
  close_env(&e);
}

/* A host allocator that fails every allocation after the first `left`, and counts what
 * is outstanding, so a test can prove every failure path frees what it took. */
typedef struct host_budget {
  long left, live;
} host_budget;

static void *budget_alloc(size_t n, void *user) {
  host_budget *m = user;
  if (m->left == 0) return NULL;
  m->left--;
  void *p = malloc(n);
  m->live += p != NULL;
  return p;
}

static void budget_free(void *p, void *user) {
  host_budget *m = user;
  m->live -= p != NULL;
  free(p);
}

/* Context, device, partitions and allocations with at most n host allocations. Every
 * step may fail only with ENOMEM; returns whether all of it succeeded. */
static int run_with_host_allocations(long n) {
  host_budget m = {.left = n};
  gpupart_context_desc cd = {
      .flags = GPUPART_CONTEXT_IGNORE_ENV, .host_alloc = budget_alloc, .host_free = budget_free, .host_user = &m};
  gpupart_context *ctx;
  gpupart_result rc = gpupart_context_create(&cd, &ctx);
  int done = 0;
  if (rc == GPUPART_OK) {
    gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
    gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
    gpupart_device *dev;
    rc = gpupart_device_open(ctx, &dd, &dev);
    if (rc == GPUPART_OK) {
      gpupart_partition *p = NULL, *q = NULL;
      gpupart_allocation *a[40] = {0};
      rc = gpupart_partition_create(dev, NULL, &p);
      for (int i = 0; i < 40 && rc == GPUPART_OK; i++) rc = gpupart_alloc(p, 4096 + (uint64_t)i * 100000, 0, &a[i]);
      gpupart_partition_desc pd = {
          .name = "pre", .limit = 64 * MiB, .max_block = 8 * MiB, .growth = GPUPART_GROWTH_OFF};
      if (rc == GPUPART_OK) rc = gpupart_partition_create(dev, &pd, &q);
      done = rc == GPUPART_OK;
      test_check(dev);
      if (p) cr_expect_eq(test_stats(p).failed_allocations, 0, "ENOMEM is not a refusal");
      for (int i = 0; i < 40; i++) gpupart_free(a[i]);
      cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
    }
    cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  }
  cr_expect(rc == GPUPART_OK || rc == GPUPART_ENOMEM, "%ld host allocations: %s (%s)", n, gpupart_result_name(rc),
            gpupart_last_error());
  cr_expect_eq(m.live, 0, "%ld host allocations: %ld left behind", n, m.live);
  return done;
}

Test(device, running_out_of_host_memory_is_enomem_and_leaks_nothing) {
  long n = 0;
  while (!run_with_host_allocations(n)) cr_assert_lt(++n, 10000);
  cr_log_info("the whole sequence needs %ld host allocations", n);
  cr_expect_gt(n, 5, "the sequence needs host memory at several steps");
}

Test(device, unknown_context_flags_are_invalid) {
  gpupart_context_desc d = {.flags = 0x80};
  gpupart_context *ctx = (gpupart_context *)&d;
  cr_expect_eq(gpupart_context_create(&d, &ctx), GPUPART_EINVAL);
  cr_expect_null(ctx);
  cr_expect(message_has("flags"), "%s", gpupart_last_error());
}

Test(device, a_sim_device_reopened_with_other_settings_is_refused) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  gpupart_device *a = test_sim_device(ctx, &sim, NULL), *b = NULL;
  gpupart_sim_desc other = {.total_bytes = 256 * MiB, .host_backed = 1};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &other};
  cr_expect_eq(gpupart_device_open(ctx, &d, &b), GPUPART_EINVAL);
  cr_expect(message_has("other settings"), "%s", gpupart_last_error());
  gpupart_device *same = test_sim_device(ctx, &sim, NULL);
  cr_expect_eq(gpupart_device_close(same), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, a_failed_preallocation_keeps_its_driver_calls_in_the_device_counts) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .fail_block_alloc_at = 3};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc pd = {.name = "pre", .limit = 512 * MiB, .growth = GPUPART_GROWTH_OFF, .max_block = 128 * MiB};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &pd, &p), GPUPART_EDEVMEM);
  gpupart_stats s = dev_stats(dev);
  cr_expect_eq(s.driver_allocs, 2, "two blocks were taken before the third was refused");
  cr_expect_eq(s.driver_frees, 2, "and both were given back");
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- one physical device, one budget and one ledger in a context ---- */

static gpupart_device *open_half(gpupart_context *ctx, const gpupart_sim_desc *sim, double fraction) {
  gpupart_device_desc d = {.memory_fraction = fraction};
  return test_sim_device(ctx, sim, &d);
}

Test(device, two_opens_of_one_device_at_half_share_one_budget) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 8 * GiB};
  gpupart_device *a = open_half(ctx, &sim, 0.5), *b = open_half(ctx, &sim, 0.5);
  cr_expect_eq(gpupart_device_budget(a), 4 * GiB);
  cr_expect_eq(gpupart_device_budget(b), 4 * GiB, "the same budget, not a second one");
  gpupart_partition *pa = test_partition(a, "pa", 0, 0), *pb = test_partition(b, "pb", 0, 0);
  gpupart_allocation *x = alloc_ok(pa, 3 * GiB), *y = NULL, *z = (gpupart_allocation *)&sim;
  cr_expect_eq(gpupart_alloc(pb, 2 * GiB, 0, &z), GPUPART_ELIMIT, "together at most 4 GiB");
  cr_expect_null(z);
  cr_expect(message_has("budget"), "%s", gpupart_last_error());
  y = alloc_ok(pb, 1 * GiB);
  cr_expect_eq(dev_stats(a).reserved + dev_stats(b).reserved, 4 * GiB);
  cr_expect_eq(dev_stats(b).peak_reserved, 4 * GiB, "the ledger's peak is device-wide");
  test_check(a);
  test_check(b);
  gpupart_free(x);
  gpupart_free(y);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, guarantees_are_summed_across_the_handles_of_one_device) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 8 * GiB};
  gpupart_device *a = open_half(ctx, &sim, 0.5), *b = open_half(ctx, &sim, 0.5);
  test_partition(a, "floor", 3 * GiB, 3 * GiB);
  gpupart_partition_desc pd = {.name = "more", .limit = 2 * GiB, .guarantee = 2 * GiB};
  gpupart_partition *p = (gpupart_partition *)&pd;
  cr_expect_eq(gpupart_partition_create(b, &pd, &p), GPUPART_ELIMIT, "3 + 2 GiB of guarantees on 4");
  cr_expect_null(p);
  gpupart_partition *open = test_partition(b, "open", 0, 0), *q = test_partition(b, "rest", 1 * GiB, 1 * GiB);
  cr_expect_eq(dev_stats(b).guarantee, 4 * GiB, "device figures sum the guarantees of both handles");
  gpupart_allocation *z = NULL;
  cr_expect_eq(gpupart_alloc(open, 2 * MiB, 0, &z), GPUPART_ELIMIT, "the other handle's floor is held back");
  gpupart_allocation *x = alloc_ok(q, 1 * GiB);
  test_check(a);
  test_check(b);
  gpupart_free(x);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  x = alloc_ok(open, 2 * GiB); /* a's floor left with it */
  gpupart_free(x);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static char warn_log[1024];
static int warn_count;

static void capture_warnings(gpupart_log_level level, const char *message, void *user) {
  (void)user;
  if (level != GPUPART_LOG_WARN) return;
  warn_count++;
  snprintf(warn_log, sizeof warn_log, "%s", message);
}

Test(device, a_second_open_asking_another_budget_shares_the_first_and_warns) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .log = capture_warnings};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  warn_count = 0;
  gpupart_sim_desc sim = {.total_bytes = 8 * GiB};
  gpupart_device *a = open_half(ctx, &sim, 0.5), *same = open_half(ctx, &sim, 0.5);
  cr_expect_eq(warn_count, 0, "the same budget asked again is no mismatch");
  gpupart_device *b = open_half(ctx, &sim, 0.25);
  cr_expect_eq(gpupart_device_budget(b), 4 * GiB, "the first open fixed the budget");
  cr_expect_eq(warn_count, 1);
  cr_expect(strstr(warn_log, "4294967296") && strstr(warn_log, "2147483648"), "both figures: %s", warn_log);
  cr_expect(strstr(warn_log, "sim:0:8589934592"), "names the device: %s", warn_log);
  gpupart_partition *p = test_partition(b, "whole", 0, 0);
  cr_expect_eq(test_stats(p).limit, 4 * GiB, "its default partition spans the shared budget");
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(same), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, closing_one_handle_keeps_the_other_working) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device *a = test_sim_device(ctx, &sim, NULL), *b = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *pa = test_partition(a, "pa", 0, 512 * MiB), *pb = test_partition(b, "pb", 0, 0);
  gpupart_allocation *x = alloc_ok(pa, 256 * MiB), *y = alloc_ok(pb, 256 * MiB);
  gpupart_free(x);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  gpupart_allocation *z = alloc_ok(pb, 700 * MiB);
  cr_expect_eq(dev_stats(b).guarantee, 0, "a's guarantee went with it");
  test_check(b);
  gpupart_free(y);
  gpupart_free(z);
  gpupart_device *c = test_sim_device(ctx, &sim, NULL);
  cr_expect_eq(gpupart_partition_find(c, "pa"), NULL);
  test_partition(c, "pa", 0, 0); /* the name left with a */
  cr_expect_eq(gpupart_device_close(c), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, partition_names_are_unique_across_the_handles_of_one_device) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device *a = test_sim_device(ctx, &sim, NULL), *b = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p0 = make_partition(a, NULL), *pa = test_partition(a, "train", 0, 0);
  gpupart_partition_desc pd = {.name = "train"};
  gpupart_partition *p = (gpupart_partition *)&pd;
  cr_expect_eq(gpupart_partition_create(b, &pd, &p), GPUPART_EEXIST);
  cr_expect_null(p);
  cr_expect(message_has("'train'") && message_has("another handle"), "%s", gpupart_last_error());
  cr_expect_str_eq(gpupart_partition_name(p0), "p0");
  gpupart_partition *q = make_partition(b, NULL);
  cr_expect_str_eq(gpupart_partition_name(q), "p1", "an unnamed partition never clashes with the other handle's");
  cr_expect_eq(gpupart_partition_find(b, "train"), NULL, "find looks in this handle's partitions");
  cr_expect_eq(gpupart_partition_find(a, "train"), pa);
  test_check(a);
  test_check(b);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, distinct_sim_devices_have_their_own_budgets) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc big = {.total_bytes = 8 * GiB}, small = {.total_bytes = 4 * GiB};
  gpupart_device_desc one = {.index = 1, .memory_fraction = 0.5};
  gpupart_device *a = open_half(ctx, &big, 0.5), *b = test_sim_device(ctx, &big, &one);
  gpupart_device *c = open_half(ctx, &small, 0.5);
  cr_expect_eq(gpupart_device_budget(c), 2 * GiB, "index 0 of 4 GiB is another device than index 0 of 8");
  gpupart_allocation *x = alloc_ok(test_partition(a, "p", 0, 0), 4 * GiB);
  gpupart_allocation *y = alloc_ok(test_partition(b, "p", 0, 0), 4 * GiB);
  gpupart_allocation *z = alloc_ok(test_partition(c, "p", 0, 0), 2 * GiB);
  gpupart_free(x);
  gpupart_free(y);
  gpupart_free(z);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(c), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A sim device given a UUID (the layers' mirror of a real GPU) reports it and is that
 * device: another sim open of another index and size with the same UUID shares its
 * budget and partition names, as two backends reaching one GPU do. */
static gpupart_device *open_as(gpupart_context *ctx, gpupart_sim_desc *sim, uint32_t index) {
  gpupart_device_desc d = {
      .backend = GPUPART_BACKEND_SIM, .index = index, .backend_desc = sim, .backend_desc_size = sizeof *sim};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

Test(device, a_sim_device_given_a_uuid_reports_it_and_is_that_device) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc one = {.total_bytes = 1 * GiB, .uuid = {0xde, 0xad, 0xbe, 0xef, [15] = 1}};
  gpupart_sim_desc other = one;
  other.total_bytes = 2 * GiB;
  gpupart_device *a = open_as(ctx, &one, 3), *b = open_as(ctx, &other, 7);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(b, &info), GPUPART_OK);
  cr_expect_eq(memcmp(info.uuid, one.uuid, sizeof info.uuid), 0, "the descriptor's UUID is reported");
  cr_expect_str_eq(info.pci_bus_id, "");
  cr_expect_eq(gpupart_device_budget(b), 1 * GiB, "the first open's budget: one device");
  gpupart_partition *pa = test_partition(a, "job", 0, 0), *pb = NULL;
  gpupart_partition_desc pd = {.name = "job"};
  cr_expect_eq(gpupart_partition_create(b, &pd, &pb), GPUPART_EEXIST, "names are unique across its handles");
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  (void)pa;
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* The info of a sim device opened with given (index 0), and of a plain one (index 1)
 * beside it in the same context: what a mirror reports, and the sim's own. */
static void mirror_and_plain_info(gpupart_sim_desc *given, gpupart_device_info *mirror, gpupart_device_info *plain) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc own = {.total_bytes = 1 * GiB};
  gpupart_device *a = open_as(ctx, given, 0), *b = open_as(ctx, &own, 1);
  cr_assert_eq(gpupart_device_get_info(a, mirror), GPUPART_OK);
  cr_assert_eq(gpupart_device_get_info(b, plain), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(b), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A sim descriptor the open refuses with EINVAL, naming field. */
static void sim_desc_is_refused(gpupart_sim_desc *sim, const char *field) {
  gpupart_context *ctx = test_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = sim, .backend_desc_size = sizeof *sim};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect(strstr(gpupart_last_error(), field), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(device, a_sim_device_given_a_bus_id_reports_it_and_no_uuid) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .pci_bus_id = "0000:65:00.0"};
  gpupart_device_info info, plain;
  mirror_and_plain_info(&sim, &info, &plain);
  cr_expect_str_eq(info.pci_bus_id, "0000:65:00.0");
  uint8_t zero[16] = {0};
  cr_expect_eq(memcmp(info.uuid, zero, sizeof zero), 0, "the descriptor's (zero) UUID, not the sim's own");
  cr_expect(plain.uuid[0] == 1 && plain.uuid[15] == 0x5a && !plain.pci_bus_id[0], "without either: the sim's own");
}

/* The bus id is a string: one filling all 32 bytes without a NUL would be read past its
 * field by everything that takes gpupart_device_info.pci_bus_id as a string. */
Test(device, a_sim_device_given_an_unterminated_bus_id_is_refused) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  memset(sim.pci_bus_id, '0', sizeof sim.pci_bus_id);
  sim_desc_is_refused(&sim, "pci_bus_id");
}

/* Since 0.3: a mirror stands for a real GPU by its name too (what info and traces say). */
Test(device, a_sim_device_given_a_name_reports_it) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .name = "NVIDIA H200"};
  gpupart_device_info info, plain;
  mirror_and_plain_info(&sim, &info, &plain);
  cr_expect_str_eq(info.name, "NVIDIA H200");
  cr_expect_str_eq(plain.name, "gpupart simulated device", "without one: the sim's own");
}

Test(device, a_sim_device_given_an_unterminated_name_is_refused) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  memset(sim.name, 'x', sizeof sim.name);
  sim_desc_is_refused(&sim, "name");
}

Test(device, a_sim_device_reopened_with_another_uuid_is_refused) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .uuid = {1}};
  gpupart_device *a = open_as(ctx, &sim, 0), *b = NULL;
  gpupart_sim_desc other = {.total_bytes = 256 * MiB, .uuid = {2}};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &other, .backend_desc_size = sizeof other};
  cr_expect_eq(gpupart_device_open(ctx, &d, &b), GPUPART_EINVAL);
  cr_expect(message_has("other settings"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(a), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
