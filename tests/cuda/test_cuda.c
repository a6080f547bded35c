/* The CUDA backend's own behaviours, on the driver test double (cuda_double.c): loading
 * (no driver, a driver too old for an entry point, cuGetProcAddress_v2's failure modes),
 * devices and their identity, the primary context's reference, adopted contexts (valid,
 * invalid, destroyed while open), driver refusals in the middle of growth, and the
 * caller's current context, which must survive every call. Every test ends with the
 * double holding no memory and no primary-context reference of gpupart's. Criterion runs
 * each test in its own process, so the double starts fresh and the knobs a test sets in
 * its environment stay its own. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda_test.h"
#include "gpupart_cuda.h"

#define MiB (1ull << 20)

static const cuda_test_api *api(void) {
  char why[256] = "";
  const cuda_test_api *cu = cuda_test_api_get(why, sizeof why);
  cr_assert_not_null(cu, "%s", why);
  cr_assert_not_null(cu->stats, "the CUDA suite runs on the test double (run it with meson test)");
  return cu;
}

static gpupart_context *context(void) {
  gpupart_context *ctx = cuda_test_context(NULL);
  cr_assert_not_null(ctx, "%s", gpupart_last_error());
  return ctx;
}

static gpupart_device *open_device(gpupart_context *ctx, const gpupart_cuda_desc *cd) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA, .backend_desc = cd};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static gpupart_partition *partition(gpupart_device *dev, uint64_t limit) {
  gpupart_partition_desc pd = {.name = "p", .limit = limit};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &pd, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static CUcontext current(const cuda_test_api *cu) {
  CUcontext c = (CUcontext)(uintptr_t)1;
  cr_assert_eq(cu->ctx_get_current(&c), CUDA_SUCCESS);
  return c;
}

/* Nothing of gpupart's is left at the driver. */
static void expect_driver_clean(const cuda_test_api *cu) {
  cr_expect_eq(cu->stats->live_allocs, 0, "%llu allocations left at the driver",
               (unsigned long long)cu->stats->live_allocs);
  cr_expect_eq(cu->vmm_stats->live_allocations + cu->vmm_stats->live_mappings + cu->vmm_stats->live_reservations, 0,
               "virtual memory left at the driver");
  cr_expect_eq(cu->stats->primary_refs[0], 0, "primary context references left: %d", cu->stats->primary_refs[0]);
  cr_expect_eq(cu->stats->legacy_calls, 0, "an unversioned (old ABI) entry point was called");
  cr_expect_eq(cu->stats->push_calls, cu->stats->pop_calls, "every push has its pop");
}

static void close_all(gpupart_device *dev, gpupart_context *ctx) {
  cr_expect_eq(gpupart_device_check(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

/* ---- loading --------------------------------------------------------------------------- */

Test(cuda, missing_driver_is_enobackend_naming_the_library) {
  gpupart_context *ctx = cuda_test_context("/nonexistent/libcuda.so.1");
  cr_assert_not_null(ctx);
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_not_null(strstr(gpupart_last_error(), "/nonexistent/libcuda.so.1"), "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENOBACKEND);
  cr_expect_null(dev);
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_AUTO, NULL, &n), GPUPART_OK, "auto lists the others");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(cuda, driver_without_an_entry_point_is_enobackend_naming_it_and_the_version) {
  const char *old = getenv("GPUPART_TEST_CUDA_DOUBLE_OLD");
  cr_assert_not_null(old, "run with meson test");
  gpupart_context *ctx = cuda_test_context(old);
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, NULL, &n), GPUPART_ENOBACKEND);
  const char *msg = gpupart_last_error();
  cr_expect_not_null(strstr(msg, "cuDevicePrimaryCtxRelease_v2"), "%s", msg);
  cr_expect_not_null(strstr(msg, "10.2"), "the driver's version is named: %s", msg);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(cuda, entry_points_come_from_cuGetProcAddress_at_their_versions) {
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device *dev = open_device(ctx, NULL);
  cr_expect_gt(cu->stats->proc_queries, 0);
  cr_expect_eq(cu->stats->proc_refusals, 0, "every pinned version is one the driver has");
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(partition(dev, 64 * MiB), MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(cu->stats->alloc_calls, 1);
  gpupart_free(a);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

static void cycle_with_proc_mode(const char *mode) {
  setenv("GPUPART_TEST_CUDA_PROC", mode, 1);
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device *dev = open_device(ctx, NULL);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(partition(dev, 64 * MiB), MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_neq(gpupart_cuda_ptr(a), 0);
  gpupart_free(a);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

Test(cuda, proc_address_success_with_null_falls_back_to_the_versioned_exports) {
  cycle_with_proc_mode("null");
  cr_expect_gt(api()->stats->proc_null_returns, 0);
}

Test(cuda, proc_address_failure_falls_back_to_the_versioned_exports) {
  cycle_with_proc_mode("fail");
  cr_expect_gt(api()->stats->proc_refusals, 0);
}

Test(cuda, driver_with_no_device_has_zero_devices) {
  setenv("GPUPART_TEST_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
  gpupart_context *ctx = context();
  uint32_t n = 7;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, NULL, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(n, 0);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(cuda, failing_cuInit_is_enobackend_with_the_error_name) {
  setenv("GPUPART_TEST_CUDA_INIT_ERROR", "999", 1); /* CUDA_ERROR_UNKNOWN */
  gpupart_context *ctx = context();
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_not_null(strstr(gpupart_last_error(), "CUDA_ERROR_UNKNOWN"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- devices --------------------------------------------------------------------------- */

Test(cuda, enumerate_reports_name_uuid_total_and_free_memory) {
  setenv("GPUPART_TEST_CUDA_DEVICES", "2", 1);
  setenv("GPUPART_TEST_CUDA_TOTAL", "1073741824", 1);
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device_info info[3];
  uint32_t n = 3;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, info, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(n, 2);
  for (uint32_t i = 0; i < n; i++) {
    cr_expect_eq(info[i].backend, GPUPART_BACKEND_CUDA);
    cr_expect_eq(info[i].index, i);
    cr_expect_not_null(strstr(info[i].name, "test double"));
    cr_expect_str_eq(info[i].vendor, "NVIDIA");
    cr_expect_eq((unsigned char)info[i].uuid[0], 0xc0 + 16 * i, "cuDeviceGetUuid_v2's bytes");
    cr_expect_eq(info[i].total_bytes, 1ull << 30);
    cr_expect_eq(info[i].free_bytes, 1ull << 30, "free memory through the primary context");
    cr_expect_eq(info[i].max_block_bytes, 1ull << 30);
    cr_expect_eq(info[i].min_alignment, 256);
  }
  cr_expect_eq(cu->stats->primary_refs[0] + cu->stats->primary_refs[1], 0, "the query's retains are released");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  expect_driver_clean(cu);
}

Test(cuda, opening_a_device_past_the_count_is_enodev) {
  gpupart_context *ctx = context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA, .index = 1};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  expect_driver_clean(api());
}

Test(cuda, primary_context_is_retained_while_open_and_released_at_close) {
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device *dev = open_device(ctx, NULL);
  cr_expect_eq(cu->stats->primary_refs[0], 1);
  CUcontext primary = NULL;
  cr_assert_eq(cu->primary_retain(&primary, 0), CUDA_SUCCESS);
  cr_expect_eq(gpupart_cuda_context(dev), primary, "the device's context is the primary one");
  cr_expect_eq(cu->primary_release(0), CUDA_SUCCESS);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(partition(dev, 64 * MiB), 3 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_cuda_ptr(a) % 256, 0);
  gpupart_stats s;
  cr_assert_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  cr_expect_eq(info.free_bytes, info.total_bytes - s.reserved, "free memory is cuMemGetInfo_v2's, queried anew");
  gpupart_free(a);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

/* ---- the caller's current context ------------------------------------------------------ */

/* A full life of a device, checking after each call that current is still current. */
static void life_keeping(const cuda_test_api *cu, CUcontext expect) {
  gpupart_context *ctx = context();
  gpupart_device_info info;
  uint32_t n = 1;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_CUDA, &info, &n), GPUPART_OK);
  cr_expect_eq(current(cu), expect, "after enumerate");
  gpupart_device *dev = open_device(ctx, NULL);
  cr_expect_eq(current(cu), expect, "after open");
  gpupart_partition *p = partition(dev, 64 * MiB);
  gpupart_allocation *a[4];
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    cr_expect_eq(current(cu), expect, "after alloc %d", i);
  }
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  cr_expect_eq(current(cu), expect, "after get_info (cuMemGetInfo_v2)");
  for (int i = 0; i < 4; i++) gpupart_free(a[i]);
  cr_expect_eq(current(cu), expect, "after free");
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_expect_eq(current(cu), expect, "after trim");
  close_all(dev, ctx);
  cr_expect_eq(current(cu), expect, "after close");
}

Test(cuda, callers_current_context_survives_every_call) {
  const cuda_test_api *cu = api();
  CUcontext mine = NULL, popped;
  cr_assert_eq(cu->ctx_create(&mine, 0, 0), CUDA_SUCCESS);
  life_keeping(cu, mine);
  cr_assert_eq(cu->ctx_pop(&popped), CUDA_SUCCESS);
  cr_expect_eq(popped, mine);
  cr_expect_null(current(cu), "the stack holds only the application's context");
  cr_expect_eq(cu->ctx_destroy(mine), CUDA_SUCCESS);
  expect_driver_clean(cu);
}

Test(cuda, no_current_context_stays_none_after_every_call) {
  const cuda_test_api *cu = api();
  life_keeping(cu, NULL);
  cr_expect_eq(cu->stats->no_context_calls, 0, "no driver call ran without a context");
  expect_driver_clean(cu);
}

/* ---- adopted contexts ------------------------------------------------------------------ */

Test(cuda, adopted_context_is_used_and_left_alive) {
  const cuda_test_api *cu = api();
  CUcontext mine = NULL, popped;
  cr_assert_eq(cu->ctx_create(&mine, 0, 0), CUDA_SUCCESS);
  cr_assert_eq(cu->ctx_pop(&popped), CUDA_SUCCESS);
  gpupart_context *ctx = context();
  gpupart_cuda_desc cd = {mine};
  gpupart_device *dev = open_device(ctx, &cd);
  cr_expect_eq(gpupart_cuda_context(dev), mine);
  cr_expect_eq(cu->stats->primary_refs[0], 0, "adopting retains no primary context");
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(partition(dev, 64 * MiB), 4096, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  unsigned char in[4096], out[4096] = {0};
  memset(in, 0x3c, sizeof in);
  cr_expect_eq(cuda_test_copy(dev, a, in, sizeof in, 1), 0);
  cr_expect_eq(cuda_test_copy(dev, a, out, sizeof out, 0), 0);
  cr_expect_eq(memcmp(in, out, sizeof in), 0);
  gpupart_free(a);
  close_all(dev, ctx);
  cr_expect_eq(cu->stats->created_alive, 1, "gpupart did not destroy the application's context");
  cr_expect_eq(cu->ctx_push(mine), CUDA_SUCCESS);
  cr_expect_eq(cu->ctx_destroy(mine), CUDA_SUCCESS);
  expect_driver_clean(cu);
}

static void expect_adopt_refused(CUcontext bad) {
  gpupart_context *ctx = context();
  gpupart_cuda_desc cd = {bad};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA, .backend_desc = &cd};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect_not_null(strstr(gpupart_last_error(), "not a valid CUcontext"), "%s", gpupart_last_error());
  cr_expect_not_null(strstr(gpupart_last_error(), "CUDA_ERROR_INVALID_CONTEXT"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(cuda, adopting_a_context_the_driver_does_not_know_is_einval) {
  const cuda_test_api *cu = api();
  static int not_a_context;
  expect_adopt_refused((CUcontext)(void *)&not_a_context);
  expect_driver_clean(cu);
}

Test(cuda, adopting_a_destroyed_context_is_einval) {
  const cuda_test_api *cu = api();
  CUcontext mine = NULL;
  cr_assert_eq(cu->ctx_create(&mine, 0, 0), CUDA_SUCCESS);
  cr_assert_eq(cu->ctx_destroy(mine), CUDA_SUCCESS);
  expect_adopt_refused(mine);
  expect_driver_clean(cu);
}

Test(cuda, adopted_context_destroyed_while_open_is_ebackend_and_accounting_holds) {
  const cuda_test_api *cu = api();
  CUcontext mine = NULL, popped;
  cr_assert_eq(cu->ctx_create(&mine, 0, 0), CUDA_SUCCESS);
  cr_assert_eq(cu->ctx_pop(&popped), CUDA_SUCCESS);
  gpupart_context *ctx = context();
  gpupart_cuda_desc cd = {mine};
  gpupart_device *dev = open_device(ctx, &cd);
  gpupart_partition *p = partition(dev, 64 * MiB);
  gpupart_allocation *a, *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats before, after;
  cr_assert_eq(gpupart_partition_get_stats(p, &before), GPUPART_OK);
  cr_assert_eq(cu->ctx_destroy(mine), CUDA_SUCCESS); /* the driver frees its memory too */
  cr_expect_eq(gpupart_alloc(p, 8 * MiB, 0, &b), GPUPART_EBACKEND);
  cr_expect_null(b);
  cr_expect_not_null(strstr(gpupart_last_error(), "CUDA_ERROR_INVALID_CONTEXT"), "%s", gpupart_last_error());
  cr_expect_not_null(strstr(gpupart_last_error(), "adopted context destroyed"), "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_get_stats(p, &after), GPUPART_OK);
  cr_expect_eq(after.in_use, before.in_use);
  cr_expect_eq(after.reserved, before.reserved);
  cr_expect_eq(after.driver_allocs, before.driver_allocs);
  gpupart_free(a);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

/* ---- driver refusals ------------------------------------------------------------------- */

Test(cuda, out_of_memory_in_the_middle_of_growth_is_edevmem_and_keeps_accounting) {
  setenv("GPUPART_TEST_CUDA_MAX_LIVE", "2", 1);
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device *dev = open_device(ctx, NULL);
  gpupart_partition *p = partition(dev, 256 * MiB);
  gpupart_allocation *a[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 2; i++) cr_assert_eq(gpupart_alloc(p, 6 * MiB, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats before, after;
  cr_assert_eq(gpupart_partition_get_stats(p, &before), GPUPART_OK);
  cr_expect_eq(gpupart_alloc(p, 6 * MiB, 0, &a[2]), GPUPART_EDEVMEM);
  cr_expect_not_null(strstr(gpupart_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"), "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_get_stats(p, &after), GPUPART_OK);
  cr_expect_eq(after.in_use, before.in_use);
  cr_expect_eq(after.reserved, before.reserved);
  cr_expect_eq(after.failed_allocations, before.failed_allocations + 1);
  cr_expect_eq(cu->stats->live_bytes, after.reserved, "the driver holds exactly what gpupart reserved");
  cr_expect_eq(gpupart_device_check(dev), GPUPART_OK, "%s", gpupart_last_error());
  for (int i = 0; i < 2; i++) gpupart_free(a[i]);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

Test(cuda, other_driver_failures_are_ebackend_with_the_error_name) {
  setenv("GPUPART_TEST_CUDA_FAIL_ALLOC_AT", "2", 1);
  setenv("GPUPART_TEST_CUDA_FAIL_ALLOC_CODE", "999", 1); /* CUDA_ERROR_UNKNOWN */
  const cuda_test_api *cu = api();
  gpupart_context *ctx = context();
  gpupart_device *dev = open_device(ctx, NULL);
  gpupart_partition *p = partition(dev, 256 * MiB);
  gpupart_allocation *a, *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 6 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats before, after;
  cr_assert_eq(gpupart_partition_get_stats(p, &before), GPUPART_OK);
  cr_expect_eq(gpupart_alloc(p, 6 * MiB, 0, &b), GPUPART_EBACKEND);
  cr_expect_not_null(strstr(gpupart_last_error(), "CUDA_ERROR_UNKNOWN"), "%s", gpupart_last_error());
  cr_expect_not_null(strstr(gpupart_last_error(), "cuMemAlloc_v2"), "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_get_stats(p, &after), GPUPART_OK);
  cr_expect_eq(after.in_use, before.in_use);
  cr_expect_eq(after.reserved, before.reserved);
  cr_expect_eq(cu->stats->live_bytes, after.reserved);
  cr_expect_eq(gpupart_alloc(p, 6 * MiB, 0, &b), GPUPART_OK, "the next call succeeds: %s", gpupart_last_error());
  gpupart_free(a);
  gpupart_free(b);
  close_all(dev, ctx);
  expect_driver_clean(cu);
}

/* ---- interop --------------------------------------------------------------------------- */

Test(cuda, interop_of_null_or_another_backend_is_null_with_a_message) {
  cr_expect_null(gpupart_cuda_context(NULL));
  cr_expect_str_eq(gpupart_last_error(), "cuda_context: device is NULL");
  cr_expect_eq(gpupart_cuda_ptr(NULL), 0);
  cr_expect_str_eq(gpupart_last_error(), "cuda_ptr: allocation is NULL");
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(partition(dev, 64 * MiB), 4096, 0, &a), GPUPART_OK);
  cr_expect_null(gpupart_cuda_context(dev));
  cr_expect_eq(gpupart_cuda_ptr(a), 0);
  cr_expect_not_null(strstr(gpupart_last_error(), "sim"), "%s", gpupart_last_error());
  gpupart_free(a);
  cr_expect_eq(gpupart_cuda_ptr(a), 0, "a freed allocation has no pointer");
  cr_expect_str_eq(gpupart_last_error(), "cuda_ptr: device is a sim device, not cuda");
  close_all(dev, ctx);
}

/* A Kubernetes DRA claim's metadata file (KEP-5304) names the second GPU by the UUID the
 * driver reports (cuDeviceGetUuid_v2): that GPU's budget is the claim's memory, the other
 * GPU's is its own; a newer generation read at the GPU's open resizes the claim's partition. */
static void write_dra_claim(const char *file, unsigned gen, unsigned long long memory) {
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "{\"apiVersion\": \"metadata.resource.k8s.io/v1beta1\", \"kind\": \"DeviceMetadata\", \"metadata\": "
          "{\"name\": \"c\", \"namespace\": \"n\", \"generation\": %u}, \"requests\": [{\"name\": \"gpu\", "
          "\"devices\": [{\"driver\": \"gpu.nvidia.com\", \"pool\": \"p\", \"name\": \"gpu-1\", \"attributes\": "
          "{\"uuid\": {\"string\": \"GPU-d0d1d2d3-d4d5-d6d7-d8d9-dadbdcdddedf\"}, \"gpupart.io/memory\": "
          "{\"int\": %llu}}}]}]}\n",
          gen, memory);
  fclose(f);
}

Test(cuda, a_dra_claim_names_its_gpu_by_uuid) {
  char root[] = "/tmp/gpupart-cuda-dra-XXXXXX", dir[128], file[192];
  cr_assert_not_null(mkdtemp(root));
  snprintf(dir, sizeof dir, "%s/resourceclaims", root);
  mkdir(dir, 0755);
  strcat(dir, "/c");
  mkdir(dir, 0755);
  strcat(dir, "/gpu");
  mkdir(dir, 0755);
  snprintf(file, sizeof file, "%s/gpu.nvidia.com-metadata.json", dir);
  write_dra_claim(file, 1, 256 * MiB);
  setenv("GPUPART_TEST_CUDA_DEVICES", "2", 1);
  setenv("GPUPART_TEST_CUDA_TOTAL", "1073741824", 1);
  setenv("GPUPART_CUDA_LIBRARY", getenv("GPUPART_TEST_CUDA_DOUBLE"), 1);
  setenv("GPUPART_DRA_METADATA_DIR", root, 1);
  setenv("GPUPART_PARTITIONS", "claim:256MiB", 1);
  setenv("GPUPART_DEVICE", "1,0", 1); /* the claim's GPU first, as CUDA_VISIBLE_DEVICES would put it */
  const cuda_test_api *cu = api();
  gpupart_context_desc cd = {0};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_desc d0 = {.backend = GPUPART_BACKEND_CUDA, .index = 1}, d1 = {.backend = GPUPART_BACKEND_CUDA};
  gpupart_device *dev0 = NULL, *dev1 = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d0, &dev0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(dev0), 1ull << 30);
  cr_assert_eq(gpupart_device_close(dev0), GPUPART_OK);
  write_dra_claim(file, 2, 128 * MiB); /* the claim shrank before this GPU opened */
  cr_assert_eq(gpupart_device_open(ctx, &d1, &dev1), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(dev1), 256 * MiB, "the context read generation 1");
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(gpupart_partition_find(dev1, "claim"), &s), GPUPART_OK);
  cr_expect_eq(s.limit, 128 * MiB, "generation 2, read at the open");
  close_all(dev1, ctx);
  expect_driver_clean(cu);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_expect_eq(system(cmd), 0);
}
