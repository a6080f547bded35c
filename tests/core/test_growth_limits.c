/* Growth within real drivers' limits, on a sim device that emulates them: at most 4096
 * driver blocks (maxMemoryAllocationCount of many Vulkan drivers) and 64 KiB alignment
 * (bufferImageGranularity of some). The policy must keep the number of blocks far below
 * the cap (here: under a sixteenth of it) for streams of small, large and mixed
 * requests up to tens of GiB, and the cap must still hold (EDEVMEM, nothing leaked) when
 * a policy is told to use one block per request. */
#include <stdlib.h>

#include "common.h"

#define CAP 4096u
#define FAR_BELOW (CAP / 16)

static gpupart_context *ctx;
static gpupart_device *dev;
static gpupart_sim_desc limits = {
    .total_bytes = 96 * GiB, .max_block_bytes = 4 * GiB, .min_alignment = 64 * 1024, .max_blocks = CAP};

static void setup(void) {
  ctx = test_context();
  dev = test_sim_device(ctx, &limits, NULL);
}

static void teardown(void) {
  test_check(dev);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

TestSuite(growth_limits, .init = setup, .fini = teardown);

static uint64_t blocks_held(const gpupart_partition *p) {
  gpupart_stats s = test_stats(p);
  return s.driver_allocs - s.driver_frees;
}

/* Allocates n requests of size_of(i) bytes, checking the block count after each and, if
 * check_waste, that the bytes held beyond the requests stay near the 1/16 growth bound
 * (plus the 64 KiB rounding of each request); frees. */
static void grow(gpupart_partition *p, uint64_t (*size_of)(uint32_t), uint32_t n, int check_waste) {
  gpupart_allocation **a = calloc(n, sizeof *a);
  cr_assert_not_null(a);
  uint64_t most = 0;
  for (uint32_t i = 0; i < n; i++) {
    cr_assert_eq(gpupart_alloc(p, size_of(i), 0, &a[i]), GPUPART_OK, "request %u: %s", i, gpupart_last_error());
    uint64_t held = blocks_held(p);
    if (held > most) most = held;
  }
  gpupart_stats s = test_stats(p);
  cr_expect_lt(most, FAR_BELOW, "%llu blocks held for %llu bytes in %u requests", (unsigned long long)most,
               (unsigned long long)s.in_use, n);
  if (check_waste)
    cr_expect_leq(s.reserved - s.in_use, s.reserved / 8 + n * 64 * 1024, "%llu bytes held for %llu in use",
                  (unsigned long long)s.reserved, (unsigned long long)s.in_use);
  for (uint32_t i = 0; i < n; i++) gpupart_free(a[i]);
  free(a);
}

static uint64_t four_mib(uint32_t i) { return (void)i, 4 * MiB; }
static uint64_t just_over_3_mib(uint32_t i) { return (void)i, 3 * MiB + 1; }
static uint64_t granule(uint32_t i) { return (void)i, 64 * 1024; }
static uint64_t hundred_mib(uint32_t i) { return (void)i, 100 * MiB; }
static uint64_t mixed(uint32_t i) {
  uint32_t x = i * 2654435761u;
  return x % 5 == 0 ? x % (64 * MiB) + 1 : x % (256 * 1024) + 1;
}
/* Ever larger requests: each block's tail is too small for the next one, so this checks
 * the block count only (the tail waste of such a stream is near 15%). */
static uint64_t creeping(uint32_t i) { return 2 * MiB + (uint64_t)i * 3 * MiB / 2; }

Test(growth_limits, a_stream_of_4_mib_requests_shares_blocks) {
  grow(test_partition(dev, "w", 0, 0), four_mib, 4000, 1);
}

Test(growth_limits, requests_just_above_the_granularity_share_blocks) {
  grow(test_partition(dev, "w", 0, 0), just_over_3_mib, 5000, 1);
}

Test(growth_limits, a_hundred_thousand_granule_sized_requests) {
  grow(test_partition(dev, "w", 0, 0), granule, 100000, 1);
}

Test(growth_limits, large_requests_up_to_60_gib) { grow(test_partition(dev, "w", 0, 0), hundred_mib, 600, 1); }

Test(growth_limits, mixed_small_and_large_requests) { grow(test_partition(dev, "w", 0, 0), mixed, 10000, 1); }

Test(growth_limits, growing_request_sizes) { grow(test_partition(dev, "w", 0, 0), creeping, 280, 0); }

Test(growth_limits, preallocating_the_whole_device_stays_within_the_cap) {
  gpupart_partition_desc d = {.name = "all", .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_lt(blocks_held(p), FAR_BELOW);
  cr_expect_eq(test_stats(p).reserved, gpupart_device_budget(dev));
}

Test(growth_limits, the_cap_refuses_cleanly_when_a_policy_asks_for_more) {
  /* growth_factor 1 with 2 MiB blocks and no room to grow: one block per 2 MiB, so
   * the 4097th block must be refused by the (emulated) driver, nothing changing. */
  gpupart_partition_desc d = {.name = "flat", .initial_block = 2 * MiB, .max_block = 2 * MiB, .growth_factor = 1.0};
  gpupart_partition *p;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation **a = calloc(CAP + 1, sizeof *a);
  cr_assert_not_null(a);
  for (uint32_t i = 0; i < CAP; i++) cr_assert_eq(gpupart_alloc(p, 2 * MiB, 0, &a[i]), GPUPART_OK, "%u", i);
  gpupart_stats before = test_stats(p);
  cr_expect_eq(gpupart_alloc(p, 2 * MiB, 0, &a[CAP]), GPUPART_EDEVMEM);
  gpupart_stats after = test_stats(p);
  cr_expect_eq(after.reserved, before.reserved);
  cr_expect_eq(after.failed_allocations, before.failed_allocations + 1);
  for (uint32_t i = 0; i < CAP; i++) gpupart_free(a[i]);
  free(a);
}
