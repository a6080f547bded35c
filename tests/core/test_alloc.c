/* Allocation and free through the public API on the sim backend: the fast path, growth,
 * alignment, bad input and double frees. */
#include <string.h>

#include "common.h"

static gpupart_context *ctx;
static gpupart_device *dev;

static void setup(void) {
  ctx = test_context();
  dev = test_sim_device(ctx, NULL, NULL);
}

static void teardown(void) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

TestSuite(alloc, .init = setup, .fini = teardown);

Test(alloc, first_allocation_grows_then_free_keeps_the_block) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 1000, 0, &a), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, 1000);
  cr_expect_eq(s.live_allocations, 1);
  cr_expect_eq(s.driver_allocs, 1);
  cr_expect_eq(s.reserved, 2 * MiB);
  gpupart_free(a);
  s = test_stats(p);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.peak_in_use, 1000);
  cr_expect_eq(s.reserved, 2 * MiB, "default keeps empty blocks cached");
  cr_expect_eq(s.total_frees, 1);
  test_check(dev);
}

Test(alloc, allocations_do_not_overlap_and_honour_alignment) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *a[64];
  for (int i = 0; i < 64; i++) {
    uint64_t align = 1ull << (8 + i % 12);
    cr_assert_eq(gpupart_alloc(p, 1000 + 977 * i, align, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    gpupart_allocation_info info;
    cr_assert_eq(gpupart_allocation_get_info(a[i], &info), GPUPART_OK);
    cr_expect_eq(info.device_address % align, 0);
    cr_expect_eq(info.size, (uint64_t)(1000 + 977 * i));
    cr_expect(info.offset + info.size <= info.block_size);
    cr_expect_eq(info.partition, p);
  }
  for (int i = 0; i < 64; i++)
    for (int j = i + 1; j < 64; j++) {
      gpupart_allocation_info x, y;
      gpupart_allocation_get_info(a[i], &x);
      gpupart_allocation_get_info(a[j], &y);
      cr_expect(x.device_address + x.size <= y.device_address || y.device_address + y.size <= x.device_address);
    }
  test_check(dev);
  for (int i = 0; i < 64; i++) gpupart_free(a[i]);
  test_check(dev);
}

Test(alloc, bad_input_is_refused_with_nothing_changed) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *a = (gpupart_allocation *)&a;
  cr_expect_eq(gpupart_alloc(NULL, 16, 0, &a), GPUPART_EINVAL);
  cr_expect_null(a);
  cr_expect_eq(gpupart_alloc(p, 16, 0, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, 0, 0, &a), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, 16, 3, &a), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, UINT64_MAX, 0, &a), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, UINT64_MAX - 100, 0, &a), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, 17 * GiB, 0, &a), GPUPART_EINVAL, "above the largest driver block");
  cr_expect_eq(gpupart_alloc_ex(p, NULL, &a), GPUPART_EINVAL);
  gpupart_alloc_desc d = {.size = 16, .flags = 0x80};
  cr_expect_eq(gpupart_alloc_ex(p, &d, &a), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "flags"), NULL);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.total_allocations, 0);
  cr_expect_eq(s.failed_allocations, 0);
  cr_expect_eq(s.driver_allocs, 0);
  test_check(dev);
}

Test(alloc, double_free_is_reported_and_changes_nothing) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *a, *b;
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &b), GPUPART_OK);
  gpupart_free(a);
  gpupart_stats before = test_stats(p);
  cr_expect_eq(gpupart_free(a), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "of partition 'a' was already freed"), NULL, "%s", gpupart_last_error());
  gpupart_stats after = test_stats(p);
  cr_expect_eq(after.double_frees, before.double_frees + 1, "the double free is counted");
  after.double_frees = before.double_frees;
  cr_expect_eq(memcmp(&before, &after, sizeof before), 0, "and changes nothing else");
  gpupart_allocation_info info;
  cr_expect_eq(gpupart_allocation_get_info(a, &info), GPUPART_EINVAL);
  test_check(dev);
  gpupart_free(b);
  gpupart_free(NULL);
  test_check(dev);
}

Test(alloc, tag_appears_in_the_failure_message) {
  gpupart_partition *p = test_partition(dev, "small", 4 * MiB, 0);
  gpupart_alloc_desc d = {.size = 8 * MiB, .tag = 4242};
  gpupart_allocation *a;
  cr_expect_eq(gpupart_alloc_ex(p, &d, &a), GPUPART_ELIMIT);
  const char *m = gpupart_last_error();
  cr_expect_neq(strstr(m, "4242"), NULL, "%s", m);
  cr_expect_neq(strstr(m, "'small'"), NULL, "%s", m);
  cr_expect_neq(strstr(m, "limit 4194304"), NULL, "%s", m);
  cr_expect_eq(test_stats(p).failed_allocations, 1);
  cr_expect_eq(test_stats(p).driver_allocs, 0, "a refused request makes no driver call");
}

Test(alloc, host_backed_memory_can_be_written) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .host_backed = 1};
  gpupart_device *hd = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(hd, "h", 0, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 1 * MiB, 4096, &a), GPUPART_OK);
  gpupart_allocation_info info;
  gpupart_allocation_get_info(a, &info);
  memset((void *)(uintptr_t)info.device_address, 0xab, info.size);
  cr_expect_eq(((unsigned char *)(uintptr_t)info.device_address)[info.size - 1], 0xab);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(hd), GPUPART_OK);
}

Test(alloc, a_terabyte_device_costs_nothing) {
  gpupart_sim_desc sim = {.total_bytes = 1ull << 40};
  gpupart_device *big = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(big, "big", 0, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 512 * GiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).reserved, 512 * GiB);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(big), GPUPART_OK);
}

Test(alloc, device_peak_bounds_the_peak_of_the_sum_over_partitions_within_two_granules_each) {
  gpupart_partition *p[3] = {test_partition(dev, "x", 0, 0), test_partition(dev, "y", 0, 0),
                             test_partition(dev, "z", 0, 0)};
  gpupart_allocation *live[3][40] = {{0}};
  uint64_t rng = 0x9e3779b97f4a7c15ull, sum = 0, peak = 0, sizes[3][40] = {{0}};
  for (int step = 0; step < 4000; step++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    int k = (int)(rng % 3), slot = (int)((rng >> 8) % 40);
    if (live[k][slot]) {
      gpupart_free(live[k][slot]);
      live[k][slot] = NULL;
      sum -= sizes[k][slot];
    } else {
      sizes[k][slot] = 1 + (rng >> 20) % (3 * MiB);
      cr_assert_eq(gpupart_alloc(p[k], sizes[k][slot], 0, &live[k][slot]), GPUPART_OK);
      sum += sizes[k][slot];
      if (sum > peak) peak = sum;
    }
    gpupart_stats s;
    gpupart_device_get_stats(dev, &s);
    cr_assert_eq(s.in_use, sum, "step %d", step);
    cr_assert_geq(s.peak_in_use, peak, "step %d", step);
    cr_assert_lt(s.peak_in_use, peak + 3 * 2 * 2 * MiB, "step %d", step);
  }
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 40; i++) gpupart_free(live[k][i]);
  test_check(dev);
}

Test(alloc, a_stale_handle_freed_again_never_frees_a_newer_allocation) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *x, *a, *b[100], *held[510];
  for (int i = 0; i < 510; i++) /* the node pool is nearly empty: freed nodes are reused at once */
    cr_assert_eq(gpupart_alloc(p, 512, 0, &held[i]), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &x), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK);
  gpupart_free(a);
  for (int i = 0; i < 100; i++) {
    cr_assert_eq(gpupart_alloc(p, 4096 + 256 * (uint64_t)i, 0, &b[i]), GPUPART_OK);
    cr_expect_neq(b[i], a, "a new allocation never gets the freed handle back, even on the same node");
  }
  gpupart_stats before = test_stats(p);
  cr_expect_eq(gpupart_free(a), GPUPART_EINVAL, "a stale handle is refused");
  cr_expect_neq(strstr(gpupart_last_error(), "already freed"), NULL, "%s", gpupart_last_error());
  gpupart_stats after = test_stats(p);
  cr_expect_eq(after.double_frees, before.double_frees + 1);
  after.double_frees = before.double_frees;
  cr_expect_eq(memcmp(&before, &after, sizeof before), 0, "accounting unchanged");
  gpupart_allocation_info info;
  for (int i = 0; i < 100; i++) cr_expect_eq(gpupart_allocation_get_info(b[i], &info), GPUPART_OK);
  for (int i = 0; i < 100; i++) gpupart_free(b[i]);
  for (int i = 0; i < 510; i++) gpupart_free(held[i]);
  gpupart_free(x);
  test_check(dev);
}

static void expect_same_info(gpupart_allocation *a, const gpupart_allocation_info *got) {
  gpupart_allocation_info want;
  cr_assert_eq(gpupart_allocation_get_info(a, &want), GPUPART_OK);
  cr_expect_eq(memcmp(&want, got, sizeof want), 0, "alloc_info says what get_info says");
}

Test(alloc, alloc_info_describes_the_new_allocation_on_the_slow_and_the_fast_path) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_alloc_desc d = {.size = 1000, .alignment = 4096, .tag = 7};
  gpupart_allocation *a, *b;
  gpupart_allocation_info ia, ib;
  cr_assert_eq(gpupart_alloc_info(p, &d, &a, &ia), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).driver_allocs, 1, "the first allocation grew the partition (slow path)");
  expect_same_info(a, &ia);
  cr_assert_eq(gpupart_alloc_info(p, &d, &b, &ib), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).driver_allocs, 1, "the second fit the block (fast path)");
  expect_same_info(b, &ib);
  cr_expect_eq(ib.size, 1000);
  cr_expect_eq(ib.partition, p);
  cr_expect_eq(ib.offset % 4096, 0, "aligned");
  gpupart_free(a);
  gpupart_free(b);
  test_check(dev);
}

Test(alloc, alloc_info_refuses_short_structs_and_unknown_tails_with_nothing_changed) {
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  struct {
    gpupart_alloc_desc d;
    uint64_t future;
  } big = {.d = {.size = 256}, .future = 1};
  struct {
    gpupart_allocation_info info;
    uint64_t future;
  } out = {.future = 99};
  gpupart_allocation *a = (gpupart_allocation *)&a;
  gpupart_stats before = test_stats(p);
  cr_expect_eq(gpupart_alloc_info_sized(p, &big.d, sizeof big, &a, &out.info, sizeof out), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "newer gpupart"), NULL, "%s", gpupart_last_error());
  cr_expect_null(a);
  cr_expect_eq(gpupart_alloc_info_sized(p, &big.d, sizeof big.d - 1, &a, &out.info, sizeof out), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc_info_sized(p, &big.d, sizeof big.d, &a, &out.info, sizeof out.info - 1), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc_info(p, NULL, &a, &out.info), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc_info(p, &big.d, &a, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc_info(p, &big.d, NULL, &out.info), GPUPART_EINVAL);
  gpupart_stats after = test_stats(p);
  cr_expect_eq(memcmp(&before, &after, sizeof before), 0, "nothing allocated");
  big.future = 0;
  cr_assert_eq(gpupart_alloc_info_sized(p, &big.d, sizeof big, &a, &out.info, sizeof out), GPUPART_OK);
  cr_expect_eq(out.future, 0, "a larger info gets its tail zeroed");
  expect_same_info(a, &out.info);
  gpupart_free(a);
  test_check(dev);
}
