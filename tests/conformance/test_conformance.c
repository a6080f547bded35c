/* The backend conformance suite: the same behaviours checked on every backend. Each
 * test runs once per backend (sim, opencl, vulkan, cuda); a backend that is not built,
 * or whose driver or device is absent, is reported as skipped, never passed. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"

#define MiB (1ull << 20)

static gpupart_backend all_backends[] = {GPUPART_BACKEND_SIM, GPUPART_BACKEND_OPENCL,
                                         GPUPART_BACKEND_VULKAN, GPUPART_BACKEND_CUDA};

typedef struct fixture {
  const conformance_adapter *ad;
  gpupart_context *ctx;
  gpupart_device *dev;
} fixture;

/* Opens the backend's device with the given policy, or skips the test saying why. */
static fixture open_or_skip(gpupart_backend b, const gpupart_device_desc *base) {
  fixture f = {conformance_adapter_for(b), NULL, NULL};
  if (!f.ad) cr_skip_test("%s: backend not built into this test", gpupart_backend_name(b));
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  cr_assert_eq(gpupart_context_create(&cd, &f.ctx), GPUPART_OK);
  gpupart_device_desc none = {0};
  gpupart_result rc = f.ad->open(f.ctx, base ? base : &none, &f.dev);
  if (rc == GPUPART_ENOBACKEND || rc == GPUPART_ENODEV) {
    char why[512];
    snprintf(why, sizeof why, "%s", gpupart_last_error());
    gpupart_context_destroy(f.ctx);
    cr_skip_test("%s: no driver or device here (%s)", gpupart_backend_name(b), why);
  }
  cr_assert_eq(rc, GPUPART_OK, "%s: %s", gpupart_backend_name(b), gpupart_last_error());
  return f;
}

static void close_fixture(fixture *f) {
  cr_expect_eq(gpupart_device_check(f->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(f->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(f->ctx), GPUPART_OK, "%s", gpupart_last_error());
}

static gpupart_partition *make_partition(gpupart_device *dev, const char *name, uint64_t limit) {
  gpupart_partition_desc d = {.name = name, .limit = limit};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static gpupart_stats stats_of(const gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s;
}

ParameterizedTestParameters(conformance, enumerate_reports_sane_devices) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, enumerate_reports_sane_devices) {
  fixture f = open_or_skip(*b, NULL);
  uint32_t n = 0;
  cr_assert_eq(gpupart_enumerate(f.ctx, *b, NULL, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_geq(n, 1);
  gpupart_device_info info;
  uint32_t cap = 1;
  cr_assert_eq(gpupart_enumerate(f.ctx, *b, &info, &cap), GPUPART_OK);
  cr_expect_eq(cap, n, "count is the number found, not the capacity");
  cr_expect_eq(info.backend, *b);
  cr_expect_gt(info.total_bytes, 0);
  cr_expect_gt(info.max_block_bytes, 0);
  cr_expect_leq(info.max_block_bytes, info.total_bytes);
  cr_expect_eq(info.min_alignment & (info.min_alignment - 1), 0, "alignment is a power of two");
  cr_expect_gt(strlen(info.name), 0);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, budget_follows_fraction_limit_and_headroom) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, budget_follows_fraction_limit_and_headroom) {
  gpupart_device_desc d = {.memory_fraction = 0.5, .headroom = 4 * MiB};
  fixture f = open_or_skip(*b, &d);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(f.dev, &info), GPUPART_OK);
  uint64_t want = ((uint64_t)((long double)info.total_bytes * 0.5) - 4 * MiB) & ~(2 * MiB - 1);
  cr_expect_eq(gpupart_device_budget(f.dev), want);
  close_fixture(&f);
  gpupart_device_desc l = {.memory_limit = 64 * MiB + 12345};
  f = open_or_skip(*b, &l);
  cr_expect_eq(gpupart_device_budget(f.dev), 64 * MiB);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, data_written_is_read_back_from_two_partitions) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, data_written_is_read_back_from_two_partitions) {
  fixture f = open_or_skip(*b, NULL);
  gpupart_partition *p[2] = {make_partition(f.dev, "a", 48 * MiB), make_partition(f.dev, "b", 16 * MiB)};
  enum { N = 8, SIZE = 256 * 1024 };
  gpupart_allocation *a[N];
  static unsigned char buf[SIZE], back[SIZE];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(gpupart_alloc(p[i % 2], SIZE - 64 * i, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    memset(buf, 0x10 + i, SIZE);
    cr_assert_eq(f.ad->write(f.dev, a[i], buf, SIZE - 64 * i), 0, "%s", gpupart_last_error());
  }
  for (int i = 0; i < N; i++) {
    memset(back, 0, SIZE);
    cr_assert_eq(f.ad->read(f.dev, a[i], back, SIZE - 64 * i), 0, "%s", gpupart_last_error());
    memset(buf, 0x10 + i, SIZE);
    cr_expect_eq(memcmp(buf, back, SIZE - 64 * i), 0, "allocation %d lost its bytes", i);
  }
  for (int i = 0; i < N; i++) gpupart_free(a[i]);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, limit_refuses_without_a_driver_call) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, limit_refuses_without_a_driver_call) {
  fixture f = open_or_skip(*b, NULL);
  gpupart_partition *p = make_partition(f.dev, "small", 8 * MiB);
  gpupart_allocation *a, *c;
  cr_assert_eq(gpupart_alloc(p, 6 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats before = stats_of(p);
  cr_expect_eq(gpupart_alloc(p, 4 * MiB, 0, &c), GPUPART_ELIMIT);
  cr_expect_null(c);
  gpupart_stats after = stats_of(p);
  cr_expect_eq(after.driver_allocs, before.driver_allocs, "no driver call for a refused request");
  cr_expect_eq(after.failed_allocations, before.failed_allocations + 1);
  cr_expect_eq(after.reserved, before.reserved);
  gpupart_free(a);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, trim_returns_empty_blocks_to_the_driver) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, trim_returns_empty_blocks_to_the_driver) {
  fixture f = open_or_skip(*b, NULL);
  gpupart_partition *p = make_partition(f.dev, "t", 64 * MiB);
  gpupart_allocation *a[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
  for (int i = 0; i < 4; i++) gpupart_free(a[i]);
  gpupart_stats held = stats_of(p);
  cr_expect_gt(held.reserved, 0, "empty blocks stay cached until trim");
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s = stats_of(p);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_frees, held.driver_frees + held.driver_allocs - held.driver_frees);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, request_above_the_largest_block_is_invalid) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, request_above_the_largest_block_is_invalid) {
  fixture f = open_or_skip(*b, NULL);
  gpupart_partition *p = make_partition(f.dev, "x", 0);
  gpupart_device_info info;
  gpupart_device_get_info(f.dev, &info);
  gpupart_allocation *a;
  cr_expect_eq(gpupart_alloc(p, info.max_block_bytes + 1, 0, &a), GPUPART_EINVAL);
  cr_expect_eq(stats_of(p).driver_allocs, 0);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, adopted_handles_stay_the_applications) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, adopted_handles_stay_the_applications) {
  fixture f = open_or_skip(*b, NULL);
  close_fixture(&f);
  if (!f.ad->adopt_roundtrip) cr_skip_test("%s: the backend has no native handles to adopt", gpupart_backend_name(*b));
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  char why[512] = "";
  cr_expect_eq(f.ad->adopt_roundtrip(ctx, why, sizeof why), 0, "%s", why);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
