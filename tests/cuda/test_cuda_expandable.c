/* Expandable partitions on the CUDA backend (backends/cuda/cu_vm.c), on the driver test
 * double, whose virtual memory really aliases (a write through the device's mapping is
 * what a read returns): bytes written through the driver at every allocation, several
 * granules long too, come back intact; an expandable partition never calls cuMemAlloc
 * and maps what it needs with cuMemCreate + cuMemMap + cuMemSetAccess; trim unmaps the
 * wholly free top; nothing is left at the driver after everything is freed and trimmed;
 * a device without virtual memory management keeps blocks (or, when required, refuses);
 * and a refused cuMemCreate leaves nothing behind. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "gpupart_cuda.h"

#define MiB (1ull << 20)
#define GRANULE (2 * MiB)

static const cuda_test_api *api(void) {
  char why[256] = "";
  const cuda_test_api *cu = cuda_test_api_get(why, sizeof why);
  cr_assert_not_null(cu, "%s", why);
  cr_assert_not_null(cu->stats, "the CUDA suite runs on the test double (run it with meson test)");
  return cu;
}

typedef struct rig {
  const cuda_test_api *cu;
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p;
} rig;

static rig open_rig(uint64_t limit, uint32_t flags) {
  rig r = {.cu = api(), .ctx = cuda_test_context(NULL)};
  cr_assert_not_null(r.ctx, "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA};
  cr_assert_eq(gpupart_device_open(r.ctx, &d, &r.dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "x", .limit = limit, .flags = flags};
  cr_assert_eq(gpupart_partition_create(r.dev, &pd, &r.p), GPUPART_OK, "%s", gpupart_last_error());
  return r;
}

static void close_rig(rig *r) {
  cr_expect_eq(gpupart_device_check(r->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_destroy(r->p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(r->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(r->ctx), GPUPART_OK, "%s", gpupart_last_error());
  const cuda_double_vmm_counters *v = r->cu->vmm_stats;
  cr_expect_eq(v->live_allocations + v->live_mappings + v->live_reservations + v->live_handles, 0,
               "virtual memory left at the driver");
  cr_expect_eq(r->cu->stats->live_allocs, 0, "blocks left at the driver");
  cr_expect_eq(r->cu->stats->push_calls, r->cu->stats->pop_calls, "every push has its pop");
}

static gpupart_stats stats(const gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s;
}

static gpupart_allocation *alloc(gpupart_partition *p, uint64_t size) {
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, size, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  return a;
}

/* Writes a pattern of seed through the driver into a's size bytes. */
static void put(rig *r, const gpupart_allocation *a, uint64_t size, unsigned seed) {
  unsigned char *buf = malloc(size);
  for (uint64_t i = 0; i < size; i++) buf[i] = (unsigned char)(seed + i * 7);
  cr_assert_eq(cuda_test_copy(r->dev, a, buf, size, 1), 0, "copy to the device");
  free(buf);
}

static void expect_pattern(rig *r, const gpupart_allocation *a, uint64_t size, unsigned seed) {
  unsigned char *buf = calloc(1, size);
  cr_assert_eq(cuda_test_copy(r->dev, a, buf, size, 0), 0, "copy from the device");
  for (uint64_t i = 0; i < size; i++)
    if (buf[i] != (unsigned char)(seed + i * 7))
      cr_assert_fail("byte %llu of %llu differs", (unsigned long long)i, (unsigned long long)size);
  free(buf);
}

Test(cuda_expandable, data_written_at_every_allocation_is_intact_and_no_cuMemAlloc_is_made) {
  rig r = open_rig(256 * MiB, GPUPART_PARTITION_EXPANDABLE_REQUIRED | GPUPART_PARTITION_EXPANDABLE);
  static const uint64_t sizes[] = {1000, 3 * MiB + 17, 256, 5 * MiB, 64 * 1024, 9 * MiB + 1, 2 * MiB, 100};
  gpupart_allocation *a[8];
  for (int i = 0; i < 8; i++) {
    a[i] = alloc(r.p, sizes[i]);
    put(&r, a[i], sizes[i], (unsigned)i);
    gpupart_stats s = stats(r.p);
    cr_assert_lt(s.reserved, s.in_use + GRANULE + 8 * 256, "reserved %llu, in use %llu", (unsigned long long)s.reserved,
                 (unsigned long long)s.in_use);
  }
  for (int i = 0; i < 8; i++) expect_pattern(&r, a[i], sizes[i], (unsigned)i);
  gpupart_stats s = stats(r.p);
  const cuda_double_vmm_counters *v = r.cu->vmm_stats;
  cr_expect_eq(r.cu->stats->alloc_calls, 0, "no cuMemAlloc");
  cr_expect_eq(v->create_calls, s.driver_allocs, "one cuMemCreate per growth");
  cr_expect_eq(v->map_calls, s.driver_allocs, "one cuMemMap per growth");
  cr_expect_eq(v->set_access_calls, s.driver_allocs, "and its cuMemSetAccess");
  cr_expect_eq(v->reserve_calls, 1, "one range per partition");
  cr_expect_eq(v->mapped_bytes, s.reserved, "the driver maps what the partition counts");
  cr_expect_eq(v->no_context_calls, 0, "every call with the device's context pushed");
  for (int i = 0; i < 8; i++) gpupart_free(a[i]);
  close_rig(&r);
}

Test(cuda_expandable, trim_unmaps_the_free_top_and_nothing_is_held_after_everything_is_freed) {
  rig r = open_rig(256 * MiB, GPUPART_PARTITION_EXPANDABLE);
  gpupart_allocation *a[12];
  for (int i = 0; i < 12; i++) a[i] = alloc(r.p, 2 * MiB);
  for (int i = 0; i < 12; i++) put(&r, a[i], 2 * MiB, (unsigned)i + 40);
  uint64_t mapped = r.cu->vmm_stats->mapped_bytes;
  cr_assert_geq(mapped, 24 * MiB);
  for (int i = 6; i < 12; i++) gpupart_free(a[i]);
  cr_expect_eq(r.cu->vmm_stats->mapped_bytes, mapped, "a free unmaps nothing");
  cr_assert_eq(gpupart_partition_trim(r.p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(r.cu->vmm_stats->mapped_bytes, 12 * MiB, "the free top went back");
  cr_expect_eq(stats(r.p).reserved, 12 * MiB);
  for (int i = 0; i < 6; i++) expect_pattern(&r, a[i], 2 * MiB, (unsigned)i + 40);
  for (int i = 0; i < 6; i++) gpupart_free(a[i]);
  cr_assert_eq(gpupart_partition_trim(r.p), GPUPART_OK);
  cr_expect_eq(r.cu->vmm_stats->live_allocations, 0, "no physical memory held");
  cr_expect_eq(r.cu->vmm_stats->mapped_bytes, 0);
  cr_expect_eq(stats(r.p).reserved, 0);
  close_rig(&r);
}

Test(cuda_expandable, a_device_without_virtual_memory_keeps_blocks_or_refuses_when_required) {
  setenv("GPUPART_TEST_CUDA_NO_VMM", "1", 1);
  rig r = open_rig(64 * MiB, GPUPART_PARTITION_EXPANDABLE);
  gpupart_allocation *a = alloc(r.p, 1 * MiB);
  cr_expect_eq(r.cu->stats->alloc_calls, 1, "a cuMemAlloc block");
  gpupart_free(a);
  gpupart_partition_desc pd = {
      .name = "y", .limit = 64 * MiB, .flags = GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED};
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create(r.dev, &pd, &q), GPUPART_ENOTSUP);
  cr_expect_not_null(strstr(gpupart_last_error(), "virtual memory"), "%s", gpupart_last_error());
  cr_expect_null(q);
  close_rig(&r);
}

Test(cuda_expandable, a_refused_cuMemCreate_leaves_nothing_behind) {
  setenv("GPUPART_TEST_CUDA_FAIL_CREATE_AT", "2", 1);
  rig r = open_rig(64 * MiB, GPUPART_PARTITION_EXPANDABLE);
  gpupart_allocation *a = alloc(r.p, 1 * MiB), *b = NULL;
  gpupart_stats before = stats(r.p);
  cr_expect_eq(gpupart_alloc(r.p, 8 * MiB, 0, &b), GPUPART_EDEVMEM, "%s", gpupart_last_error());
  cr_expect_null(b);
  gpupart_stats after = stats(r.p);
  cr_expect_eq(after.reserved, before.reserved, "nothing counted");
  cr_expect_eq(r.cu->vmm_stats->live_allocations, 1, "only the first granule");
  cr_expect_eq(gpupart_device_check(r.dev), GPUPART_OK, "%s", gpupart_last_error());
  b = alloc(r.p, 8 * MiB);
  put(&r, b, 8 * MiB, 3);
  expect_pattern(&r, b, 8 * MiB, 3);
  gpupart_free(a);
  gpupart_free(b);
  close_rig(&r);
}
