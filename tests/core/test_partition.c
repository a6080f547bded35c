/* Partitions: creation by fraction, bytes and defaults with rounding to the granularity;
 * the creation errors of include/gpupart.h; guarantees and their sum; preallocation (including a
 * driver that cannot back it); resize, trim, destroy, and find/count/at in creation
 * order. The device has a 1 GiB budget unless a test says otherwise. */
#include <math.h>

#include "policy.h"

static sim_env env;

static void setup(void) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  env = open_env(&sim, NULL);
}

static void teardown(void) { close_env(&env); }

TestSuite(partition, .init = setup, .fini = teardown);

static gpupart_result create_rc(const gpupart_partition_desc *d) {
  gpupart_partition *p = (gpupart_partition *)&p;
  gpupart_result rc = gpupart_partition_create(env.dev, d, &p);
  if (rc) cr_expect_null(p, "out is NULL on failure");
  return rc;
}

static gpupart_partition *preallocated(gpupart_device *dev, const char *name, uint64_t limit, uint64_t max_block) {
  gpupart_partition_desc d = {.name = name, .limit = limit, .max_block = max_block, .growth = GPUPART_GROWTH_OFF};
  return make_partition(dev, &d);
}

Test(partition, created_by_fraction_of_the_budget) {
  gpupart_partition_desc d = {.name = "quarter", .fraction = 0.25};
  gpupart_stats s = test_stats(make_partition(env.dev, &d));
  cr_expect_eq(s.limit, 256 * MiB);
  cr_expect_eq(s.guarantee, 0);
  d = (gpupart_partition_desc){.name = "odd", .fraction = 0.3, .guarantee_fraction = 0.1};
  s = test_stats(make_partition(env.dev, &d));
  cr_expect_eq(s.limit, 306 * MiB, "0.3 GiB rounds down to 153 granules");
  cr_expect_eq(s.guarantee, 102 * MiB, "0.1 GiB rounds down to 51 granules");
  d = (gpupart_partition_desc){.name = "all", .fraction = 1.0};
  cr_expect_eq(test_stats(make_partition(env.dev, &d)).limit, 1 * GiB);
}

Test(partition, a_fraction_takes_precedence_over_bytes) {
  gpupart_partition_desc d = {
      .name = "f", .fraction = 0.5, .limit = 10 * MiB, .guarantee_fraction = 0.25, .guarantee = 2 * MiB};
  gpupart_stats s = test_stats(make_partition(env.dev, &d));
  cr_expect_eq(s.limit, 512 * MiB);
  cr_expect_eq(s.guarantee, 256 * MiB);
}

Test(partition, created_by_bytes_rounded_down_to_the_granularity) {
  gpupart_partition_desc d = {.name = "b", .limit = 100 * MiB + 5, .guarantee = 3 * MiB};
  gpupart_stats s = test_stats(make_partition(env.dev, &d));
  cr_expect_eq(s.limit, 100 * MiB);
  cr_expect_eq(s.guarantee, 2 * MiB);
}

Test(partition, defaults_are_the_whole_budget_no_floor_and_no_memory) {
  gpupart_partition *p = make_partition(env.dev, NULL);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 1 * GiB);
  cr_expect_eq(s.guarantee, 0);
  cr_expect_eq(s.reserved, 0, "a growth partition holds nothing until asked");
  cr_expect_eq(s.driver_allocs, 0);
  cr_expect_str_eq(gpupart_partition_name(p), "p0");
}

Test(partition, default_names_follow_creation_order) {
  gpupart_partition *p0 = make_partition(env.dev, NULL);
  test_partition(env.dev, "named", 0, 0);
  gpupart_partition *p2 = make_partition(env.dev, NULL);
  cr_expect_str_eq(gpupart_partition_name(p0), "p0");
  cr_expect_str_eq(gpupart_partition_name(p2), "p2");
  cr_expect_eq(gpupart_partition_find(env.dev, "p2"), p2);
  cr_expect_eq(gpupart_partition_destroy(p0), GPUPART_OK);
  gpupart_partition *p3 = make_partition(env.dev, NULL);
  cr_expect_str_eq(gpupart_partition_name(p3), "p3", "a destroyed partition's name is not handed out again");
}

Test(partition, an_unnamed_partition_never_clashes_with_a_callers_name) {
  test_partition(env.dev, "p1", 0, 0);
  gpupart_partition *p = make_partition(env.dev, NULL);
  cr_expect_str_eq(gpupart_partition_name(p), "p2", "p1 was taken by the caller: the next free number");
  gpupart_partition *q = make_partition(env.dev, NULL);
  cr_expect_str_eq(gpupart_partition_name(q), "p3");
  gpupart_partition_desc d = {.name = "p3"};
  cr_expect_eq(create_rc(&d), GPUPART_EEXIST, "a caller's name still must be unique");
}

Test(partition, fraction_outside_zero_one_is_einval) {
  const double bad[] = {-0.5, 1.5, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupart_partition_desc d = {.name = "x", .fraction = bad[i]};
    cr_expect_eq(create_rc(&d), GPUPART_EINVAL, "fraction %g", bad[i]);
    d = (gpupart_partition_desc){.name = "x", .guarantee_fraction = bad[i]};
    cr_expect_eq(create_rc(&d), GPUPART_EINVAL, "guarantee_fraction %g", bad[i]);
  }
  cr_expect_eq(gpupart_partition_count(env.dev), 0);
}

Test(partition, a_limit_that_rounds_to_zero_is_einval) {
  gpupart_partition_desc d = {.name = "tiny", .limit = 1 * MiB};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  d = (gpupart_partition_desc){.name = "tiny", .fraction = 0.001};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL, "0.1%% of 1 GiB is below one granule");
}

Test(partition, a_guarantee_above_the_limit_is_einval) {
  gpupart_partition_desc d = {.name = "g", .limit = 100 * MiB, .guarantee = 200 * MiB};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  cr_expect(message_has("guarantee"), "%s", gpupart_last_error());
  d.guarantee = 100 * MiB;
  cr_expect_eq(create_rc(&d), GPUPART_OK, "a guarantee equal to the limit is fine");
}

Test(partition, a_limit_above_the_budget_is_elimit) {
  gpupart_partition_desc d = {.name = "big", .limit = 2 * GiB};
  cr_expect_eq(create_rc(&d), GPUPART_ELIMIT);
  cr_expect_eq(gpupart_partition_count(env.dev), 0);
}

Test(partition, limits_may_oversubscribe_the_budget) {
  test_partition(env.dev, "a", 800 * MiB, 0);
  test_partition(env.dev, "b", 800 * MiB, 0);
  test_partition(env.dev, "c", 1 * GiB, 0);
  cr_expect_eq(gpupart_partition_count(env.dev), 3);
}

Test(partition, guarantees_that_sum_past_the_budget_are_elimit) {
  gpupart_partition *a = test_partition(env.dev, "a", 0, 600 * MiB);
  gpupart_partition_desc d = {.name = "b", .guarantee = 500 * MiB};
  cr_expect_eq(create_rc(&d), GPUPART_ELIMIT);
  cr_expect(message_has("guarantee"), "%s", gpupart_last_error());
  test_partition(env.dev, "c", 0, 424 * MiB);
  cr_expect_eq(dev_stats(env.dev).guarantee, 1 * GiB, "guarantees may sum to exactly the budget");
  d = (gpupart_partition_desc){.name = "d", .guarantee = 2 * MiB};
  cr_expect_eq(create_rc(&d), GPUPART_ELIMIT);
  test_partition(env.dev, "e", 0, 0);
  cr_expect_eq(gpupart_partition_destroy(a), GPUPART_OK);
  cr_expect_eq(dev_stats(env.dev).guarantee, 424 * MiB, "a destroyed partition's guarantee is free again");
  d = (gpupart_partition_desc){.name = "b", .guarantee = 500 * MiB};
  cr_expect_eq(create_rc(&d), GPUPART_OK);
}

Test(partition, names_are_unique_per_device) {
  test_partition(env.dev, "train", 0, 0);
  gpupart_partition_desc d = {.name = "train"};
  cr_expect_eq(create_rc(&d), GPUPART_EEXIST);
  cr_expect(message_has("train"), "%s", gpupart_last_error());
  d.name = "";
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL, "an empty name");
  gpupart_sim_desc other = {.total_bytes = 2 * GiB};
  gpupart_device *dev2 = test_sim_device(env.ctx, &other, NULL);
  test_partition(dev2, "train", 0, 0);
  cr_expect_eq(gpupart_device_close(dev2), GPUPART_OK);
  cr_expect_eq(gpupart_partition_count(env.dev), 1);
}

Test(partition, bad_growth_parameters_are_einval) {
  gpupart_partition_desc d = {.name = "g", .growth = 7};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  d = (gpupart_partition_desc){.name = "g", .growth = -1};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  d = (gpupart_partition_desc){.name = "g", .growth_factor = 0.5};
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  d.growth_factor = NAN;
  cr_expect_eq(create_rc(&d), GPUPART_EINVAL);
  d.growth_factor = 1.0;
  cr_expect_eq(create_rc(&d), GPUPART_OK, "a factor of 1 is allowed (constant blocks)");
}

Test(partition, find_count_and_at_follow_creation_order) {
  gpupart_partition *p[4];
  const char *names[] = {"zeta", "alpha", "mid", "beta"};
  for (int i = 0; i < 4; i++) p[i] = test_partition(env.dev, names[i], 0, 0);
  cr_expect_eq(gpupart_partition_count(env.dev), 4);
  for (uint32_t i = 0; i < 4; i++) {
    cr_expect_eq(gpupart_partition_at(env.dev, i), p[i]);
    cr_expect_eq(gpupart_partition_find(env.dev, names[i]), p[i]);
    cr_expect_str_eq(gpupart_partition_name(p[i]), names[i]);
  }
  cr_expect_null(gpupart_partition_at(env.dev, 4));
  cr_expect_null(gpupart_partition_at(env.dev, UINT32_MAX));
  cr_expect_null(gpupart_partition_find(env.dev, "ALPHA"), "names are case-sensitive");
  cr_expect_eq(gpupart_partition_destroy(p[1]), GPUPART_OK);
  cr_expect_eq(gpupart_partition_count(env.dev), 3);
  cr_expect_eq(gpupart_partition_at(env.dev, 0), p[0]);
  cr_expect_eq(gpupart_partition_at(env.dev, 1), p[2]);
  cr_expect_eq(gpupart_partition_at(env.dev, 2), p[3]);
  cr_expect_null(gpupart_partition_find(env.dev, "alpha"));
}

Test(partition, the_name_is_copied) {
  char name[16] = "copied";
  gpupart_partition *p = test_partition(env.dev, name, 0, 0);
  strcpy(name, "changed");
  cr_expect_str_eq(gpupart_partition_name(p), "copied");
  cr_expect_eq(gpupart_partition_find(env.dev, "copied"), p);
}

Test(partition, destroy_is_refused_while_allocations_live) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 100 * MiB);
  gpupart_allocation *a = alloc_ok(p, 1 * MiB);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_EBUSY);
  cr_expect_eq(gpupart_partition_find(env.dev, "a"), p, "nothing was freed");
  cr_expect_eq(test_stats(p).live_allocations, 1);
  gpupart_free(a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  gpupart_stats s = dev_stats(env.dev);
  cr_expect_eq(s.reserved, 0, "destroy returns its blocks");
  cr_expect_eq(s.guarantee, 0, "and its guarantee");
  cr_expect_eq(gpupart_partition_count(env.dev), 0);
}

Test(partition, preallocation_reserves_the_whole_limit_at_creation) {
  gpupart_partition *p = preallocated(env.dev, "pre", 10 * MiB, 4 * MiB);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 10 * MiB);
  cr_expect_eq(s.peak_reserved, 10 * MiB);
  cr_expect_eq(s.driver_allocs, 3, "blocks of at most max_block: 4 + 4 + 2 MiB");
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.largest_free, 4 * MiB);
  gpupart_device_info info;
  gpupart_device_get_info(env.dev, &info);
  cr_expect_eq(info.free_bytes, 1 * GiB - 10 * MiB);
}

Test(partition, the_device_policy_decides_unless_the_partition_says) {
  gpupart_sim_desc sim = {.total_bytes = 512 * MiB};
  gpupart_device_desc off = {.growth = GPUPART_GROWTH_OFF};
  sim_env e = open_env(&sim, &off);
  gpupart_partition *p = test_partition(e.dev, "inherits", 64 * MiB, 0);
  cr_expect_eq(test_stats(p).reserved, 64 * MiB);
  gpupart_partition_desc d = {.name = "grows", .limit = 64 * MiB, .growth = GPUPART_GROWTH_ON};
  cr_expect_eq(test_stats(make_partition(e.dev, &d)).reserved, 0);
  close_env(&e);
}

static void expect_nothing_left_behind(const sim_env *e, const char *name) {
  cr_expect_eq(gpupart_partition_count(e->dev), 0);
  cr_expect_null(gpupart_partition_find(e->dev, name));
  gpupart_stats s = dev_stats(e->dev);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.guarantee, 0);
  gpupart_device_info info;
  gpupart_device_get_info(e->dev, &info);
  cr_expect_eq(info.free_bytes, info.total_bytes, "every block taken was given back");
  test_check(e->dev);
}

Test(partition, preallocation_the_driver_refuses_is_edevmem_with_nothing_left_behind) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .fail_block_alloc_at = 2};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {
      .name = "pre", .limit = 10 * MiB, .guarantee = 8 * MiB, .max_block = 4 * MiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = (gpupart_partition *)&p;
  cr_expect_eq(gpupart_partition_create(e.dev, &d, &p), GPUPART_EDEVMEM);
  cr_expect_null(p);
  expect_nothing_left_behind(&e, "pre");
  cr_expect_eq(gpupart_partition_create(e.dev, &d, &p), GPUPART_OK, "the name and guarantee are free again");
  cr_expect_eq(test_stats(p).reserved, 10 * MiB);
  close_env(&e);
}

Test(partition, preallocation_past_max_blocks_is_edevmem_with_nothing_left_behind) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_blocks = 2};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "pre", .limit = 10 * MiB, .max_block = 4 * MiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p;
  cr_expect_eq(gpupart_partition_create(e.dev, &d, &p), GPUPART_EDEVMEM);
  expect_nothing_left_behind(&e, "pre");
  d.max_block = 8 * MiB;
  cr_expect_eq(gpupart_partition_create(e.dev, &d, &p), GPUPART_OK, "two blocks are enough: %s", gpupart_last_error());
  close_env(&e);
}

Test(partition, preallocation_the_budget_cannot_grant_is_elimit) {
  gpupart_partition *big = test_partition(env.dev, "big", 0, 0);
  gpupart_allocation *a = alloc_ok(big, 900 * MiB);
  gpupart_partition_desc d = {.name = "pre", .limit = 200 * MiB, .growth = GPUPART_GROWTH_OFF};
  cr_expect_eq(create_rc(&d), GPUPART_ELIMIT);
  cr_expect_eq(gpupart_partition_count(env.dev), 1);
  cr_expect_eq(dev_stats(env.dev).reserved, 900 * MiB);
  gpupart_free(a);
}

Test(partition, a_preallocated_partition_makes_no_driver_call_when_allocating) {
  /* Three blocks at creation; the fourth driver call fails. If any allocation below
   * called the driver, it would consume that failure, and the last alloc would pass. */
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .fail_block_alloc_at = 4};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = preallocated(e.dev, "pre", 12 * MiB, 4 * MiB);
  gpupart_allocation *a[6];
  for (int i = 0; i < 6; i++) a[i] = alloc_ok(p, 2 * MiB);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 2 * MiB, 0, &x), GPUPART_ELIMIT);
  cr_expect_eq(gpupart_alloc(p, 6 * MiB, 0, &x), GPUPART_ELIMIT);
  for (int i = 0; i < 6; i += 2) gpupart_free(a[i]);
  for (int i = 0; i < 3; i++) a[2 * i] = alloc_ok(p, 2 * MiB);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 3);
  cr_expect_eq(s.driver_frees, 0);
  cr_expect_eq(s.failed_allocations, 2);
  gpupart_partition *g = test_partition(e.dev, "grow", 0, 0);
  cr_expect_eq(gpupart_alloc(g, 1 * MiB, 0, &x), GPUPART_EDEVMEM, "the fourth driver call is this one");
  for (int i = 0; i < 6; i++) gpupart_free(a[i]);
  close_env(&e);
}

Test(partition, trim_and_oom_never_release_preallocated_blocks) {
  gpupart_partition *p = preallocated(env.dev, "pre", 512 * MiB, 0);
  gpupart_free(alloc_ok(p, 100 * MiB));
  cr_expect_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 512 * MiB);
  cr_expect_eq(s.driver_frees, 0);
  gpupart_partition *q = test_partition(env.dev, "q", 0, 0);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(q, 600 * MiB, 0, &x), GPUPART_ELIMIT, "the budget refuses; the OOM sequence cannot help");
  s = test_stats(p);
  cr_expect_eq(s.reserved, 512 * MiB);
  cr_expect_eq(s.driver_frees, 0);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  s = dev_stats(env.dev);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_frees, 1, "destroy returns the preallocated block");
  gpupart_free(alloc_ok(q, 600 * MiB));
}

Test(partition, resize_to_zero_is_einval) {
  gpupart_partition *p = test_partition(env.dev, "a", 100 * MiB, 0);
  cr_expect_eq(gpupart_partition_resize(p, 0), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_resize(p, 1 * MiB), GPUPART_EINVAL, "rounds down to 0");
  cr_expect_eq(test_stats(p).limit, 100 * MiB);
}

Test(partition, resize_grows_within_the_budget) {
  gpupart_partition *p = test_partition(env.dev, "a", 100 * MiB, 50 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 300 * MiB + 1), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 300 * MiB, "rounded down to the granularity");
  cr_expect_eq(s.guarantee, 50 * MiB);
  gpupart_free(alloc_ok(p, 250 * MiB));
  cr_expect_eq(gpupart_partition_resize(p, 1 * GiB), GPUPART_OK);
  cr_expect_eq(gpupart_partition_resize(p, 1 * GiB + 2 * MiB), GPUPART_ELIMIT);
  cr_expect_eq(test_stats(p).limit, 1 * GiB, "limit unchanged");
  cr_expect_eq(gpupart_partition_resize(p, 1 * GiB), GPUPART_OK, "the same limit is a no-op");
}

Test(partition, resize_shrinks_and_clamps_the_guarantee) {
  gpupart_partition *p = test_partition(env.dev, "a", 500 * MiB, 400 * MiB);
  gpupart_allocation *a = alloc_ok(p, 10 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 100 * MiB), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 100 * MiB);
  cr_expect_eq(s.guarantee, 100 * MiB);
  cr_expect_eq(dev_stats(env.dev).guarantee, 100 * MiB, "the device's sum follows");
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 95 * MiB, 0, &x), GPUPART_ELIMIT, "the new limit holds");
  test_partition(env.dev, "b", 0, 924 * MiB);
  gpupart_free(a);
}

Test(partition, shrink_below_in_use_is_refused) {
  gpupart_partition_desc d = {.name = "a", .limit = 500 * MiB, .guarantee = 300 * MiB};
  gpupart_partition *p = make_partition(env.dev, &d);
  gpupart_allocation *big = alloc_ok(p, 200 * MiB);
  gpupart_free(alloc_ok(p, 100 * MiB)); /* an empty cached block */
  gpupart_stats before = test_stats(p);
  cr_expect_eq(before.reserved, 300 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 150 * MiB), GPUPART_EBUSY);
  cr_expect(message_has("'a'"), "%s", gpupart_last_error());
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 500 * MiB, "limit unchanged");
  cr_expect_eq(s.guarantee, 300 * MiB, "guarantee unchanged");
  cr_expect_eq(s.reserved, 200 * MiB, "the trim stays done");
  cr_expect_eq(s.driver_frees, before.driver_frees + 1);
  cr_expect_eq(gpupart_partition_resize(p, 200 * MiB), GPUPART_OK, "exactly what is held");
  gpupart_free(big);
}

Test(partition, resize_of_a_preallocated_partition_reserves_the_difference) {
  gpupart_partition *p = preallocated(env.dev, "pre", 8 * MiB, 4 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 18 * MiB), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 18 * MiB);
  cr_expect_eq(s.reserved, 18 * MiB);
  cr_expect_eq(s.driver_allocs, 2 + 3, "10 MiB more in blocks of at most 4 MiB");
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  gpupart_free(a);
  cr_expect_eq(test_stats(p).driver_allocs, 5);
}

Test(partition, resize_of_a_preallocated_partition_the_driver_refuses_changes_nothing) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .fail_block_alloc_at = 4};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = preallocated(e.dev, "pre", 8 * MiB, 4 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 20 * MiB), GPUPART_EDEVMEM);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 8 * MiB);
  cr_expect_eq(s.reserved, 8 * MiB);
  cr_expect_eq(dev_stats(e.dev).reserved, 8 * MiB);
  test_check(e.dev);
  cr_expect_eq(gpupart_partition_resize(p, 20 * MiB), GPUPART_OK, "the driver recovers");
  cr_expect_eq(test_stats(p).reserved, 20 * MiB);
  close_env(&e);
}

Test(partition, resize_of_a_preallocated_partition_past_the_budget_is_elimit) {
  gpupart_partition *p = preallocated(env.dev, "pre", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(test_partition(env.dev, "other", 0, 0), 900 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 2 * GiB), GPUPART_ELIMIT);
  cr_expect_eq(gpupart_partition_resize(p, 256 * MiB), GPUPART_ELIMIT, "others hold what it would need");
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 64 * MiB);
  cr_expect_eq(s.reserved, 64 * MiB);
  gpupart_free(a);
}

Test(partition, shrinking_a_preallocated_partition_is_busy) {
  /* Preallocated blocks are released only at destroy, so they are always "held". */
  gpupart_partition *p = preallocated(env.dev, "pre", 64 * MiB, 8 * MiB);
  cr_expect_eq(gpupart_partition_resize(p, 32 * MiB), GPUPART_EBUSY);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.limit, 64 * MiB);
  cr_expect_eq(s.reserved, 64 * MiB);
  cr_expect_eq(s.driver_frees, 0);
}

Test(partition, trim_returns_empty_blocks_and_keeps_live_ones) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *keep = alloc_ok(p, 30 * MiB);
  gpupart_allocation *a = alloc_ok(p, 40 * MiB);
  gpupart_allocation *b = alloc_ok(p, 50 * MiB);
  gpupart_free(a);
  gpupart_free(b);
  cr_expect_eq(test_stats(p).reserved, 120 * MiB, "emptied blocks stay cached by default");
  cr_expect_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 30 * MiB);
  cr_expect_eq(s.driver_frees, 2);
  cr_expect_eq(s.peak_reserved, 120 * MiB);
  cr_expect_eq(gpupart_partition_trim(p), GPUPART_OK, "trimming twice is harmless");
  cr_expect_eq(test_stats(p).driver_frees, 2);
  test_check(env.dev);
  gpupart_free(keep);
}

Test(partition, borrowing_takes_only_the_unguaranteed_remainder) {
  gpupart_partition *a = test_partition(env.dev, "a", 0, 400 * MiB);
  gpupart_partition *b = test_partition(env.dev, "b", 0, 200 * MiB);
  gpupart_partition *c = test_partition(env.dev, "c", 0, 0);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(c, 426 * MiB, 0, &x), GPUPART_ELIMIT, "the guarantees hold 600 MiB back");
  gpupart_allocation *cx = alloc_ok(c, 424 * MiB);
  gpupart_free(cx);
  gpupart_partition_trim(c);
  gpupart_allocation *ax = alloc_ok(a, 824 * MiB); /* its floor and the whole remainder */
  cr_expect_eq(gpupart_alloc(a, 2 * MiB, 0, &x), GPUPART_ELIMIT, "b's floor is not a's to borrow");
  gpupart_allocation *bx = alloc_ok(b, 200 * MiB);
  cr_expect_eq(dev_stats(env.dev).reserved, 1 * GiB);
  test_check(env.dev);
  gpupart_free(ax);
  gpupart_free(bx);
}

/* A context whose configuration is the given INI text (no environment). */
static gpupart_context *context_with(const char *text) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = text};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

Test(partition, an_empty_preallocated_partition_serves_one_request_as_large_as_its_limit) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 16 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc d = {.name = "pre", .limit = 8 * GiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = make_partition(dev, &d);
  cr_expect_eq(test_stats(p).driver_allocs, 1, "one block where the driver allows it");
  gpupart_free(alloc_ok(p, 2 * GiB));
  gpupart_free(alloc_ok(p, 8 * GiB));
  cr_expect_eq(test_stats(p).driver_allocs, 1, "and no driver call after creation");
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(partition, preallocation_takes_the_largest_blocks_the_driver_allows_and_says_so_when_a_request_is_larger) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 16 * GiB, .max_block_bytes = 3 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc d = {.name = "pre", .limit = 8 * GiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = make_partition(dev, &d);
  cr_expect_eq(test_stats(p).driver_allocs, 3, "3 + 3 + 2 GiB");
  gpupart_free(alloc_ok(p, 3 * GiB));
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 3 * GiB + 1, 0, &a), GPUPART_EINVAL, "no driver block could hold it");
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(partition, the_preallocation_block_size_is_set_by_configuration_and_named_when_it_refuses) {
  gpupart_context *ctx = context_with("[gpupart]\nprealloc_block = 1GiB\n");
  gpupart_sim_desc sim = {.total_bytes = 16 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc d = {.name = "pre", .limit = 4 * GiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = make_partition(dev, &d);
  cr_expect_eq(test_stats(p).driver_allocs, 4);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 2 * GiB, 0, &a), GPUPART_ELIMIT);
  cr_expect(message_has("larger than the preallocation block size"), "%s", gpupart_last_error());
  cr_expect(message_has("GPUPART_PREALLOC_BLOCK"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(partition, unknown_flags_are_refused) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 16 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc d = {.name = "x", .flags = 0x80};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &d, &p), GPUPART_EINVAL);
  cr_expect_null(p);
  cr_expect(message_has("unknown flags"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* The caller's own serialisation: every figure stays exact, double frees are caught. */
Test(partition, an_unsynchronized_partition_keeps_exact_figures_and_refuses_double_frees) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 16 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc d = {.name = "mine", .flags = GPUPART_PARTITION_UNSYNCHRONIZED};
  gpupart_partition *p = make_partition(dev, &d);
  gpupart_allocation *a[64];
  for (int i = 0; i < 64; i++) cr_assert_eq(gpupart_alloc(p, (uint64_t)(i + 1) * 1000, 0, &a[i]), GPUPART_OK);
  for (int i = 0; i < 64; i += 2) cr_assert_eq(gpupart_free(a[i]), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.live_allocations, 32);
  cr_expect_eq(s.in_use, 32ull * 33 * 1000, "the odd sizes still live: 2+4+...+64 thousand bytes");
  cr_expect_eq(s.peak_in_use, 64ull * 65 / 2 * 1000);
  cr_expect_eq(gpupart_free(a[0]), GPUPART_EINVAL, "a double free is still refused");
  cr_expect_eq(test_stats(p).double_frees, 1);
  test_check(dev);
  for (int i = 1; i < 64; i += 2) gpupart_free(a[i]);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
