/* The backend contract as the core uses it (core/base/backend.h): block sizes follow the
 * backend's block granularity while the sub-allocator keeps the alignment as its
 * granule; a driver that allocates more than asked is accounted at what it allocated;
 * backends take host memory from the context's allocator; the driver's own error code
 * travels with a failure; optional entries past a table's struct_size read as NULL; and
 * the one registry of backends names, orders and builds the tables. Runs on sim. */
#include <stdlib.h>

#include "backend.h"
#include "error.h"
#include "policy.h"
#include "registry.h"

static gpupart_partition *partition(gpupart_device *dev, uint64_t limit) {
  gpupart_partition_desc d = {.name = "p", .limit = limit};
  return make_partition(dev, &d);
}

static gpupart_device_info device_info(const gpupart_device *dev) {
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK, "%s", gpupart_last_error());
  return info;
}

/* ---- block granularity ------------------------------------------------------------- */

Test(contract, blocks_are_multiples_of_the_backends_block_granularity) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .block_granularity = 8 * MiB};
  sim_env e = open_env(&sim, NULL);
  cr_expect_eq(device_info(e.dev).block_granularity, 8 * MiB);
  gpupart_partition *p = partition(e.dev, 256 * MiB);
  gpupart_allocation *a = alloc_ok(p, 4096), *b = alloc_ok(p, 9 * MiB);
  cr_expect_eq(info_of(a).block_size % (8 * MiB), 0, "block of %llu", (unsigned long long)info_of(a).block_size);
  cr_expect_eq(info_of(b).block_size % (8 * MiB), 0, "block of %llu", (unsigned long long)info_of(b).block_size);
  cr_expect_eq(test_stats(p).reserved % (8 * MiB), 0);
  cr_expect_eq(gpupart_device_budget(e.dev) % (8 * MiB), 0, "the budget rounds to the raised granularity");
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}

Test(contract, the_sub_allocator_granule_stays_the_alignment) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .block_granularity = 2 * MiB, .min_alignment = 256};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = partition(e.dev, 64 * MiB);
  gpupart_allocation *a = alloc_ok(p, 100), *b = alloc_ok(p, 100);
  gpupart_allocation_info ia = info_of(a), ib = info_of(b);
  cr_expect_eq(ia.native_block, ib.native_block, "both fit one block");
  uint64_t gap = ia.offset > ib.offset ? ia.offset - ib.offset : ib.offset - ia.offset;
  cr_expect_eq(gap, 256, "two small allocations sit one alignment apart, not one block granule");
  gpupart_free(a);
  gpupart_free(b);
  close_env(&e);
}

/* ---- actual-size accounting -------------------------------------------------------- */

Test(contract, a_driver_that_allocates_more_is_accounted_at_what_it_allocated) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .block_round_up = 8 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *p = partition(e.dev, 256 * MiB);
  gpupart_allocation *a = alloc_ok(p, 1 * MiB);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 8 * MiB, "reserved %llu: the driver allocated 8 MiB", (unsigned long long)s.reserved);
  cr_expect_eq(info_of(a).block_size, 8 * MiB);
  cr_expect_eq(device_info(e.dev).free_bytes, 1 * GiB - 8 * MiB, "the driver holds what gpupart accounts");
  test_check(e.dev); /* the ledger holds the 8 MiB, not the 2 MiB asked */
  gpupart_allocation *more = alloc_ok(p, 5 * MiB);
  cr_expect_eq(test_stats(p).driver_allocs, 1, "the extra bytes serve later requests");
  gpupart_free(a);
  gpupart_free(more);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_expect_eq(test_stats(p).reserved, 0);
  cr_expect_eq(device_info(e.dev).free_bytes, 1 * GiB);
  close_env(&e);
}

Test(contract, preallocation_accounts_what_the_driver_allocated) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .block_round_up = 4 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "pre", .limit = 8 * MiB, .max_block = 2 * MiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = make_partition(e.dev, &d);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 2, "each 4 MiB block covers two of the 2 MiB chunks");
  cr_expect_eq(s.reserved, 8 * MiB);
  cr_expect_eq(device_info(e.dev).free_bytes, 1 * GiB - 8 * MiB);
  close_env(&e);
}

Test(contract, an_extra_the_budget_cannot_grant_gives_the_block_back) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .block_round_up = 64 * MiB};
  gpupart_device_desc base = {.memory_limit = 32 * MiB};
  sim_env e = open_env(&sim, &base);
  gpupart_partition *p = partition(e.dev, 0);
  gpupart_allocation *a;
  gpupart_result rc = gpupart_alloc(p, 1 * MiB, 0, &a);
  cr_expect_eq(rc, GPUPART_ELIMIT, "%s: %s", gpupart_result_name(rc), gpupart_last_error());
  cr_expect_null(a);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_allocs, 0, "the block is not kept");
  cr_expect_eq(device_info(e.dev).free_bytes, 1 * GiB, "the driver got the block back");
  close_env(&e);
}

Test(contract, backends_allocate_host_memory_through_the_context_allocator) {
  test_counting c = {0};
  gpupart_context_desc cd = test_counting_desc(&c);
  gpupart_context *ctx;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  long before = c.live;
  uint32_t n = 0;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, NULL, &n), GPUPART_OK);
  cr_expect_gt(c.live, before, "loading sim took its state from the context's allocator");
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  cr_expect_eq(c.live, 0, "%ld host allocations left behind", c.live);
}

/* ---- native error codes ------------------------------------------------------------ */

Test(contract, a_failure_carries_the_drivers_code_until_the_next_failure) {
  cr_expect_eq(gpupart__fail_native(GPUPART_EDEVMEM, -2, "driver said %s", "no"), GPUPART_EDEVMEM);
  cr_expect_eq(gpupart_last_native_error(), -2);
  cr_expect_str_eq(gpupart_last_error(), "driver said no");
  gpupart__error_append(" (and more)");
  cr_expect_eq(gpupart_last_native_error(), -2, "appending context keeps the code");
  gpupart_context *ctx = test_context();
  gpupart_device_desc d = {.memory_fraction = 2.0};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_eq(gpupart_last_native_error(), 0, "a failure with no driver call has no code");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- the table and the registry ---------------------------------------------------- */

Test(contract, entries_past_a_tables_struct_size_read_as_null) {
  gpupart_backend_ops t = *gpupart__backend_ops(GPUPART_BACKEND_SIM);
  cr_expect_not_null(GPUPART__BACKEND_OP(&t, mem_info));
  t.struct_size = (uint32_t)GPUPART__BACKEND_OPS_MIN_SIZE; /* built before mem_info existed */
  cr_expect_null(GPUPART__BACKEND_OP(&t, mem_info));
  cr_expect_null(GPUPART__BACKEND_OP(&t, view_release));
  cr_expect_null(GPUPART__BACKEND_OP(&t, trim));
}

Test(contract, every_built_backend_is_registered_under_its_id_with_a_complete_table) {
  int built = 0;
  for (int b = 0; b < GPUPART__BACKEND_COUNT; b++) {
    const gpupart_backend_ops *o = gpupart__backend_ops((gpupart_backend)b);
    if (!o) continue;
    built++;
    cr_expect_eq(o->abi_version, GPUPART__BACKEND_ABI, "%s", o->name);
    cr_expect_eq(o->id, (gpupart_backend)b, "%s", o->name);
    cr_expect_str_eq(o->name, gpupart_backend_name((gpupart_backend)b));
    cr_expect_geq(o->struct_size, GPUPART__BACKEND_OPS_MIN_SIZE, "%s", o->name);
    cr_expect(o->load && o->unload && o->enumerate && o->open && o->close && o->info && o->block_alloc && o->block_free,
              "%s lacks a required entry", o->name);
    cr_expect(!(o->caps & GPUPART__CAP_VIEWS) || GPUPART__BACKEND_OP(o, view_release), "%s: views need view_release",
              o->name);
  }
  cr_expect_null(gpupart__backend_ops(GPUPART_BACKEND_AUTO));
  cr_expect_null(gpupart__backend_ops((gpupart_backend)GPUPART__BACKEND_COUNT));
  cr_expect_geq(built, 1, "sim is always built");
}

Test(contract, names_and_the_auto_order_come_from_the_registry) {
  cr_expect_str_eq(gpupart_backend_name(GPUPART_BACKEND_AUTO), "auto");
  cr_expect_str_eq(gpupart_backend_name(GPUPART_BACKEND_CUDA), "cuda");
  cr_expect_str_eq(gpupart_backend_name((gpupart_backend)GPUPART__BACKEND_COUNT), "unknown");
  gpupart_backend order[GPUPART__BACKEND_COUNT];
  unsigned n = gpupart__backend_auto_order(order, 1);
  cr_assert_eq(n, GPUPART__BACKEND_COUNT - 1, "every backend once");
  cr_expect_eq(order[0], GPUPART_BACKEND_CUDA);
  cr_expect_eq(order[1], GPUPART_BACKEND_VULKAN);
  cr_expect_eq(order[2], GPUPART_BACKEND_OPENCL);
  cr_expect_eq(order[3], GPUPART_BACKEND_SIM, "sim is the last resort");
  cr_expect_eq(gpupart__backend_auto_order(order, 0), n - 1, "AUTO enumeration leaves sim out");
  char names[96];
  gpupart__backend_names(names, sizeof names);
  cr_expect_str_eq(names, "cuda, vulkan, opencl or sim", "messages list them in AUTO's order");
  gpupart__backend_names(names, 8);
  cr_expect_str_eq(names, "cuda, v", "a short buffer is cut, terminated");
  static const gpupart_backend all[] = {GPUPART__BACKEND_IDS};
  cr_expect_eq(sizeof all / sizeof all[0], GPUPART__BACKEND_COUNT - 1);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cr_expect_eq(gpupart__backend_from_name(gpupart_backend_name(all[i])), (int)all[i], "each name maps back");
  cr_expect_eq(gpupart__backend_from_name("auto"), -1);
}
