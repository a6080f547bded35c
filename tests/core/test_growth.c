/* The growth policy of an arena: no memory until asked; blocks that grow geometrically
 * from initial_block but stay within 1/16 of what the partition holds; a block of its
 * own size for a request that would not fit twice; caps by the remaining limit, by what
 * the ledger grants and by the backend's largest allocation; release_threshold; and a
 * fragmentation sanity check on a synthetic training pattern (counts, never timings). */
#include "policy.h"

static sim_env env;
static gpupart_allocation *kept[4096]; /* what a test keeps live until teardown */
static int nkept;

static gpupart_allocation *keep(gpupart_partition *p, uint64_t size) {
  cr_assert_lt(nkept, 4096);
  return kept[nkept++] = alloc_ok(p, size);
}

static void release_kept(void) {
  while (nkept) gpupart_free(kept[--nkept]);
}

static void setup(void) { env = open_env(NULL, NULL); }

static void teardown(void) {
  release_kept();
  close_env(&env);
}

TestSuite(growth, .init = setup, .fini = teardown);

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

/* Allocates size bytes and returns the size of the block this made the partition take
 * from the driver, or 0 when the request fit in a block it already held. */
static uint64_t new_block_for(gpupart_partition *p, uint64_t size, gpupart_allocation **out) {
  uint64_t before = test_stats(p).driver_allocs;
  *out = keep(p, size);
  gpupart_stats s = test_stats(p);
  cr_assert_leq(s.driver_allocs, before + 1);
  return s.driver_allocs > before ? info_of(*out).block_size : 0;
}

/* Allocates chunks until n new blocks were taken; writes their sizes. Keeps everything. */
static void next_blocks(gpupart_partition *p, uint64_t chunk, uint64_t *sizes, int n) {
  for (int got = 0; got < n;) {
    gpupart_allocation *a;
    uint64_t b = new_block_for(p, chunk, &a);
    if (b) sizes[got++] = b;
  }
}

Test(growth, a_partition_takes_no_memory_until_asked) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_allocs, 0);
  cr_expect_eq(s.largest_free, 0);
  cr_expect_eq(dev_stats(env.dev).reserved, 0);
}

Test(growth, the_first_block_is_initial_block) {
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(test_partition(env.dev, "default", 0, 0), 4096, &a), 2 * MiB);
  gpupart_partition_desc d = {.name = "eight", .initial_block = 8 * MiB};
  cr_expect_eq(new_block_for(make_partition(env.dev, &d), 4096, &a), 8 * MiB);
  d = (gpupart_partition_desc){.name = "odd", .initial_block = 3 * MiB};
  cr_expect_eq(new_block_for(make_partition(env.dev, &d), 4096, &a), 4 * MiB, "rounded up to the granularity");
}

Test(growth, small_requests_share_a_block) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  for (int i = 0; i < 8; i++) keep(p, 256 * 1024);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 1);
  cr_expect_eq(s.reserved, 2 * MiB);
}

Test(growth, blocks_grow_geometrically_when_the_partition_holds_enough) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  keep(p, 1 * GiB); /* a block of its own, counted as the first step (2 MiB); now held / 16 = 64 MiB */
  uint64_t got[6];
  next_blocks(p, 256 * 1024, got, 6);
  /* doubling up to the held / 16 bound: (1 GiB + 124 MiB) / 16 = 71.75 MiB, rounded to 72 */
  const uint64_t want[6] = {4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB, 72 * MiB};
  for (int i = 0; i < 6; i++)
    cr_expect_eq(got[i], want[i], "block %d: %llu MiB", i, (unsigned long long)(got[i] / MiB));
}

Test(growth, the_growth_factor_sets_the_ratio) {
  gpupart_partition_desc d = {.name = "a", .growth_factor = 3.0};
  gpupart_partition *p = make_partition(env.dev, &d);
  keep(p, 1 * GiB);
  uint64_t got[4];
  next_blocks(p, 256 * 1024, got, 4);
  const uint64_t want[4] = {6 * MiB, 18 * MiB, 54 * MiB, 70 * MiB}; /* from the 2 MiB step; then held / 16 */
  for (int i = 0; i < 4; i++) cr_expect_eq(got[i], want[i], "block %d", i);
}

Test(growth, a_new_block_is_bounded_by_what_the_partition_holds) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  uint64_t held = 0, blocks = 0;
  while (held < 512 * MiB) {
    gpupart_allocation *a;
    uint64_t b = new_block_for(p, 1 * MiB, &a);
    if (!b) continue;
    uint64_t bound = held / 16 > 2 * MiB ? round_up(held / 16, 2 * MiB) : 2 * MiB;
    cr_expect_leq(b, bound, "a block of %llu bytes while holding %llu", (unsigned long long)b,
                  (unsigned long long)held);
    held += b, blocks++;
  }
  gpupart_stats s = test_stats(p);
  cr_log_info("512 MiB in 1 MiB requests: %llu driver blocks, %llu bytes unused", (unsigned long long)blocks,
              (unsigned long long)(s.reserved - s.in_use));
  cr_expect_eq(s.reserved, held);
  /* 32 blocks of 2 MiB reach 64 MiB; from there each block adds about 1/16, so 512 MiB
   * takes about 16 * ln(8) = 33 more. Blocks of a fixed 2 MiB would take 256. */
  cr_expect_leq(blocks, 72, "%llu driver calls for 512 MiB", (unsigned long long)blocks);
  cr_expect_geq(blocks, 48, "%llu driver calls: the bound should keep blocks small", (unsigned long long)blocks);
  cr_expect_leq(s.reserved - s.in_use, s.reserved / 16 + 2 * MiB, "the unused tail stays small");
  test_check(env.dev);
}

Test(growth, a_request_that_would_not_fit_twice_gets_a_block_of_its_own_size) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 40 * MiB, &a), 40 * MiB);
  cr_expect_eq(new_block_for(p, 3 * MiB + 1, &a), 4 * MiB, "its own size, rounded up to the granularity");
  cr_expect_eq(new_block_for(p, 1 * MiB, &a), 4 * MiB,
               "own-size blocks count as steps: the next is min(2 * 4 MiB, 44 MiB / 16) = 2.75, rounded to 4");
}

Test(growth, the_own_size_rule_compares_the_request_with_half_the_growth_block) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  keep(p, 1 * GiB); /* its own block, counted as the step of 2 MiB */
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 2 * MiB + 4096, &a), 4 * MiB, "not twice in the 4 MiB step: its own size, rounded");
  cr_expect_eq(new_block_for(p, 3 * MiB, &a), 8 * MiB, "twice in the 8 MiB step: a growth block");
  cr_expect_eq(new_block_for(p, 6 * MiB, &a), 16 * MiB, "and the sequence went on from there");
}

Test(growth, a_block_never_passes_the_remaining_limit) {
  gpupart_partition_desc d = {.name = "a", .limit = 12 * MiB, .initial_block = 8 * MiB};
  gpupart_partition *p = make_partition(env.dev, &d);
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 7 * MiB / 2, &a), 8 * MiB);
  cr_expect_eq(new_block_for(p, 7 * MiB / 2, &a), 0);
  cr_expect_eq(new_block_for(p, 2 * MiB, &a), 4 * MiB, "an 8 MiB block would pass the 12 MiB limit");
  cr_expect_eq(test_stats(p).reserved, 12 * MiB);
}

Test(growth, a_block_never_passes_what_the_ledger_grants) {
  gpupart_sim_desc sim = {.total_bytes = 16 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_allocation *hold = alloc_ok(test_partition(e.dev, "other", 0, 0), 10 * MiB);
  gpupart_partition_desc d = {.name = "a", .initial_block = 8 * MiB};
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(make_partition(e.dev, &d), 1 * MiB, &a), 6 * MiB, "the budget has 6 MiB left");
  release_kept();
  gpupart_free(hold);
  close_env(&e);
}

Test(growth, a_block_never_takes_another_partitions_unused_guarantee) {
  gpupart_sim_desc sim = {.total_bytes = 16 * MiB};
  sim_env e = open_env(&sim, NULL);
  test_partition(e.dev, "floor", 0, 10 * MiB);
  gpupart_partition_desc d = {.name = "a", .initial_block = 8 * MiB};
  gpupart_partition *p = make_partition(e.dev, &d);
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 1 * MiB, &a), 6 * MiB);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 6 * MiB, 0, &x), GPUPART_ELIMIT);
  release_kept();
  close_env(&e);
}

Test(growth, a_block_never_passes_the_backend_largest_allocation) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_block_bytes = 4 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "a", .initial_block = 16 * MiB};
  gpupart_partition *p = make_partition(e.dev, &d);
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 1 * MiB, &a), 4 * MiB);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 4 * MiB + 1, 0, &x), GPUPART_EINVAL, "no driver allocation could hold it");
  cr_expect_eq(test_stats(p).failed_allocations, 0, "EINVAL is not a refusal");
  release_kept();
  close_env(&e);
}

Test(growth, the_partitions_max_block_caps_growth_blocks) {
  gpupart_partition_desc d = {.name = "a", .max_block = 4 * MiB};
  gpupart_partition *p = make_partition(env.dev, &d);
  keep(p, 1 * GiB);
  uint64_t got[4];
  next_blocks(p, 256 * 1024, got, 4);
  const uint64_t want[4] = {4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB};
  for (int i = 0; i < 4; i++) cr_expect_eq(got[i], want[i], "block %d", i);
  gpupart_allocation *a;
  cr_expect_eq(new_block_for(p, 24 * MiB, &a), 24 * MiB, "a larger request still gets its own block");
}

Test(growth, a_request_near_a_largest_allocation_off_the_granularity_fits) {
  /* OpenCL drivers report CL_DEVICE_MAX_MEM_ALLOC_SIZE values such as total / 4 that are
   * not multiples of 2 MiB; a request the driver could hold must not be refused. */
  const uint64_t max = 3 * MiB + 256;
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_block_bytes = max};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 3 * MiB);
  cr_expect_leq(info_of(a).block_size, max);
  gpupart_allocation *b = alloc_ok(p, 3 * MiB + 1);
  cr_expect_leq(info_of(b).block_size, max);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, max + 1, 0, &x), GPUPART_EINVAL);
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}

/* Four blocks of 2 MiB each with one allocation; frees them all; returns what is held. */
static gpupart_stats free_four_blocks(uint64_t threshold) {
  gpupart_partition_desc d = {.release_threshold = threshold};
  gpupart_partition *p = make_partition(env.dev, &d);
  gpupart_allocation *a[4];
  for (int i = 0; i < 4; i++) a[i] = alloc_ok(p, 2 * MiB);
  cr_assert_eq(test_stats(p).driver_allocs, 4);
  for (int i = 0; i < 4; i++) gpupart_free(a[i]);
  test_check(env.dev);
  return test_stats(p);
}

Test(growth, release_threshold_zero_keeps_every_empty_block) {
  gpupart_stats s = free_four_blocks(0);
  cr_expect_eq(s.reserved, 8 * MiB);
  cr_expect_eq(s.driver_frees, 0);
}

Test(growth, release_threshold_one_releases_every_emptied_block_at_once) {
  gpupart_stats s = free_four_blocks(1);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_frees, 4);
}

Test(growth, release_threshold_keeps_empty_blocks_up_to_it) {
  gpupart_stats s = free_four_blocks(4 * MiB);
  cr_expect_eq(s.reserved, 4 * MiB);
  cr_expect_eq(s.driver_frees, 2);
  s = free_four_blocks(5 * MiB);
  cr_expect_eq(s.reserved, 4 * MiB, "a third 2 MiB block would pass 5 MiB");
}

Test(growth, release_threshold_never_releases_a_block_still_in_use) {
  gpupart_partition_desc d = {.release_threshold = 1};
  gpupart_partition *p = make_partition(env.dev, &d);
  gpupart_allocation *a = alloc_ok(p, 256 * 1024), *b = alloc_ok(p, 256 * 1024);
  gpupart_free(a);
  cr_expect_eq(test_stats(p).reserved, 2 * MiB);
  gpupart_free(b);
  cr_expect_eq(test_stats(p).reserved, 0);
}

/* Emptiness is read from the sub-allocator (one FREE range over the block), not counted:
 * whatever the order of the frees and the alignment pad left between the ranges, a block
 * is empty, and released under a threshold of one byte, at its last free and not before. */
Test(growth, a_block_is_released_at_its_last_free_whatever_the_order) {
  static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  gpupart_partition_desc d = {.release_threshold = 1};
  gpupart_partition *p = make_partition(env.dev, &d);
  for (uint64_t o = 0; o < 6; o++) {
    gpupart_allocation *a[3];
    a[0] = alloc_ok(p, 256 * 1024);
    cr_assert_eq(gpupart_alloc(p, 100 * 1024, 512 * 1024, &a[1]), GPUPART_OK, "%s", gpupart_last_error());
    a[2] = alloc_ok(p, 300 * 1024);
    gpupart_stats s = test_stats(p);
    cr_assert_eq(s.driver_allocs, o + 1, "the three share one block");
    uint64_t block = s.reserved;
    for (int i = 0; i < 3; i++) {
      gpupart_free(a[orders[o][i]]);
      test_check(env.dev);
      s = test_stats(p);
      cr_expect_eq(s.reserved, i < 2 ? block : 0, "order %llu, free %d", (unsigned long long)o, i);
      cr_expect_eq(s.driver_frees, i < 2 ? o : o + 1);
    }
  }
}

/* Growth gives back the empty blocks first when a new block would set a new peak of
 * reserved bytes; a block that still holds an allocation stays. */
Test(growth, growth_releases_empty_blocks_before_a_new_peak_and_keeps_used_ones) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 2 * MiB), *b = alloc_ok(p, 2 * MiB);
  cr_assert_eq(test_stats(p).driver_allocs, 2);
  gpupart_free(a); /* its block is empty and cached (no threshold) */
  cr_expect_eq(test_stats(p).reserved, 4 * MiB);
  gpupart_allocation *c = alloc_ok(p, 6 * MiB); /* fits neither: the empty block goes first */
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_frees, 1);
  cr_expect_eq(s.reserved, 2 * MiB + info_of(c).block_size);
  test_check(env.dev);
  gpupart_free(b);
  gpupart_free(c);
}

/* A deterministic generator, so the synthetic pattern is the same on every run. */
static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* One training step: 24 layers of activations allocated forward and freed in reverse,
 * with a short-lived workspace per layer. */
static void training_step(gpupart_partition *p, uint64_t seed) {
  gpupart_allocation *act[24];
  for (int l = 0; l < 24; l++) {
    uint64_t s = seed + (uint64_t)l;
    act[l] = alloc_ok(p, 512 * 1024 + lcg(&s) % (8 * MiB));
    gpupart_free(alloc_ok(p, 256 * 1024 + lcg(&s) % (4 * MiB)));
  }
  for (int l = 23; l >= 0; l--) gpupart_free(act[l]);
}

Test(growth, a_repeated_training_step_reaches_a_steady_state_with_little_waste) {
  gpupart_partition *p = test_partition(env.dev, "train", 0, 0);
  uint64_t seed = 42;
  gpupart_allocation *weights[64];
  for (int i = 0; i < 64; i++) weights[i] = alloc_ok(p, 1 * MiB + lcg(&seed) % (20 * MiB));
  training_step(p, 7);
  uint64_t warm = test_stats(p).driver_allocs;
  for (int step = 0; step < 8; step++) training_step(p, 7);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, warm, "the same step again makes no driver call");
  cr_expect_eq(s.driver_frees, 0);
  double frag = 1.0 - (double)s.peak_in_use / (double)s.peak_reserved;
  cr_log_info("training pattern: fragmentation %.4f, %llu driver blocks", frag, (unsigned long long)s.driver_allocs);
  cr_expect_leq(frag, 0.125, "fragmentation %.3f (peak in use %llu, peak reserved %llu)", frag,
                (unsigned long long)s.peak_in_use, (unsigned long long)s.peak_reserved);
  test_check(env.dev);
  for (int i = 0; i < 64; i++) gpupart_free(weights[i]);
}

Test(growth, a_strict_alignment_gets_a_block_with_room_for_it) {
  gpupart_partition *p = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *a[4];
  const uint64_t align[4] = {4 * MiB, 64 * MiB, 1 * MiB, 256 * MiB};
  for (int i = 0; i < 4; i++) {
    gpupart_allocation_info info;
    cr_assert_eq(gpupart_alloc(p, 3 * MiB, align[i], &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    info = info_of(a[i]);
    cr_expect_eq(info.device_address % align[i], 0, "aligned to %llu", (unsigned long long)align[i]);
    cr_expect_leq(info.offset + info.size, info.block_size);
  }
  test_check(env.dev);
  for (int i = 0; i < 4; i++) gpupart_free(a[i]);
}

Test(growth, a_request_of_exactly_the_largest_allocation_fits) {
  /* Block bases are aligned to the device, so a request of the driver's largest block
   * (a Vulkan maxMemoryAllocationSize, say) needs no slack at the default alignment. */
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB, .max_block_bytes = 16 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 16 * MiB), *b = alloc_ok(p, 16 * MiB - 100), *x;
  cr_expect_eq(info_of(a).block_size, 16 * MiB);
  cr_expect_eq(gpupart_alloc(p, 16 * MiB + 1, 0, &x), GPUPART_EINVAL);
  cr_expect_eq(gpupart_alloc(p, 16 * MiB, 256, &x), GPUPART_OK, "the device's own alignment: %s", gpupart_last_error());
  gpupart_free(x);
  cr_expect_eq(gpupart_alloc(p, 16 * MiB, 512, &x), GPUPART_EINVAL, "a stricter alignment needs slack");
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}
