/* The backend conformance suite: the same behaviours checked on every backend. Each
 * test runs once per backend (sim, opencl, vulkan, cuda); a backend that is not built,
 * or whose driver or device is absent, is reported as skipped, never passed. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "registry.h"

#define MiB (1ull << 20)

/* Every backend of the registry (core/base/registry.h), built or not. */
#define CONFORMANCE_BACKEND(ID, name, rank) GPUPART_BACKEND_##ID,
static gpupart_backend all_backends[] = {GPUPART__BACKENDS(CONFORMANCE_BACKEND)};
#undef CONFORMANCE_BACKEND

typedef struct fixture {
  const conformance_adapter *ad;
  gpupart_context *ctx;
  gpupart_device *dev;
} fixture;

/* A context that reads nothing from the environment, with the adapter's configuration
 * (e.g. the driver library to load) where it has one. */
static gpupart_context *suite_context(const conformance_adapter *ad) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV,
                             .config_text = ad->context_config ? ad->context_config() : NULL};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

/* Opens the backend's device with the given policy, or skips the test saying why. */
static fixture open_or_skip(gpupart_backend b, const gpupart_device_desc *base) {
  fixture f = {conformance_adapter_for(b), NULL, NULL};
  if (!f.ad) cr_skip_test("%s: backend not built into this test", gpupart_backend_name(b));
  f.ctx = suite_context(f.ad);
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

/* Opens the backend's device with its driver instrumented (a refusal after
 * max_live_blocks live blocks, and driver_bytes), or skips when the driver is absent. */
static fixture open_instrumented_or_skip(gpupart_backend b, const gpupart_device_desc *base, uint64_t max_live_blocks) {
  fixture probe = open_or_skip(b, NULL);
  cr_assert_eq(gpupart_device_close(probe.dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(probe.ctx), GPUPART_OK);
  if (!probe.ad->open_instrumented || !probe.ad->driver_bytes)
    cr_skip_test("%s: the adapter has no instrumented driver", gpupart_backend_name(b));
  fixture f = {probe.ad, NULL, NULL};
  gpupart_device_desc none = {0};
  char why[512] = "";
  gpupart_result rc = f.ad->open_instrumented(&f.ctx, base ? base : &none, max_live_blocks, &f.dev, why, sizeof why);
  if (rc == GPUPART_ENOTSUP) cr_skip_test("%s: %s", gpupart_backend_name(b), why);
  cr_assert_eq(rc, GPUPART_OK, "%s: instrumented open failed: %s", gpupart_backend_name(b), why);
  return f;
}

/* Bytes the driver itself counts as held by gpupart. */
static uint64_t driver_bytes(const fixture *f) {
  uint64_t bytes = 0;
  cr_assert_eq(f->ad->driver_bytes(f->dev, &bytes), 0, "the driver's count is unavailable");
  return bytes;
}

static void close_fixture(fixture *f) {
  cr_expect_eq(gpupart_device_check(f->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(f->dev), GPUPART_OK, "%s", gpupart_last_error());
  char why[256] = "";
  if (f->ad->release) cr_expect_eq(f->ad->release(why, sizeof why), 0, "%s", why);
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
  for (int i = 0; i < 4; i++) cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
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
  gpupart_context *ctx = suite_context(f.ad);
  char why[512] = "";
  cr_expect_eq(f.ad->adopt_roundtrip(ctx, why, sizeof why), 0, "%s", why);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

ParameterizedTestParameters(conformance, partitions_split_the_budget_by_ratio) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, partitions_split_the_budget_by_ratio) {
  gpupart_device_desc d = {.memory_limit = 256 * MiB};
  fixture f = open_or_skip(*b, &d);
  gpupart_partition_desc td = {.name = "train", .fraction = 0.75}, ed = {.name = "eval", .fraction = 0.25};
  gpupart_partition *train, *eval;
  cr_assert_eq(gpupart_partition_create(f.dev, &td, &train), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_create(f.dev, &ed, &eval), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(stats_of(train).limit, 192 * MiB);
  cr_expect_eq(stats_of(eval).limit, 64 * MiB);
  gpupart_allocation *big, *small;
  cr_expect_eq(gpupart_alloc(eval, 80 * MiB, 0, &big), GPUPART_ELIMIT, "eval's 25%% cannot hold 80 MiB");
  cr_expect_eq(stats_of(eval).driver_allocs, 0);
  cr_assert_eq(gpupart_alloc(train, 80 * MiB, 0, &big), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_alloc(eval, 48 * MiB, 0, &small), GPUPART_OK, "%s", gpupart_last_error());
  static unsigned char in[2][65536], out[65536];
  memset(in[0], 0xa1, sizeof in[0]);
  memset(in[1], 0xb2, sizeof in[1]);
  cr_assert_eq(f.ad->write(f.dev, big, in[0], sizeof in[0]), 0, "%s", gpupart_last_error());
  cr_assert_eq(f.ad->write(f.dev, small, in[1], sizeof in[1]), 0, "%s", gpupart_last_error());
  cr_assert_eq(f.ad->read(f.dev, big, out, sizeof out), 0, "%s", gpupart_last_error());
  cr_expect_eq(memcmp(out, in[0], sizeof out), 0, "train's allocation lost its bytes");
  cr_assert_eq(f.ad->read(f.dev, small, out, sizeof out), 0, "%s", gpupart_last_error());
  cr_expect_eq(memcmp(out, in[1], sizeof out), 0, "eval's allocation lost its bytes");
  gpupart_free(big);
  gpupart_free(small);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, guarantee_is_kept_from_other_partitions) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, guarantee_is_kept_from_other_partitions) {
  gpupart_device_desc d = {.memory_limit = 64 * MiB};
  fixture f = open_or_skip(*b, &d);
  gpupart_partition_desc sd = {.name = "serve", .guarantee = 32 * MiB};
  gpupart_partition *serve, *batch = make_partition(f.dev, "batch", 0);
  cr_assert_eq(gpupart_partition_create(f.dev, &sd, &serve), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a, *c, *g;
  cr_assert_eq(gpupart_alloc(batch, 30 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_alloc(batch, 4 * MiB, 0, &c), GPUPART_ELIMIT, "batch may not take serve's guarantee");
  cr_expect_eq(stats_of(batch).driver_allocs, 1);
  cr_assert_eq(gpupart_alloc(serve, 32 * MiB, 0, &g), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc xd = {.name = "extra", .guarantee = 40 * MiB};
  gpupart_partition *x;
  cr_expect_eq(gpupart_partition_create(f.dev, &xd, &x), GPUPART_ELIMIT, "guarantees may not sum past the budget");
  cr_expect_null(x);
  gpupart_free(a);
  gpupart_free(g);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, alignment_requests_are_honoured_and_ranges_are_disjoint) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, alignment_requests_are_honoured_and_ranges_are_disjoint) {
  fixture f = open_or_skip(*b, NULL);
  gpupart_partition *p = make_partition(f.dev, "al", 64 * MiB);
  gpupart_device_info dev;
  cr_assert_eq(gpupart_device_get_info(f.dev, &dev), GPUPART_OK);
  enum { N = 8 };
  static const uint64_t sizes[N] = {1000, 12345, 300000, 5, 4096, 77777, 1, 65536};
  static const uint64_t aligns[N] = {0, 4096, 65536, 0, MiB, 256, 8192, 0};
  gpupart_allocation *a[N];
  static unsigned char buf[300000], back[300000];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(gpupart_alloc(p, sizes[i], aligns[i], &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    gpupart_allocation_info info;
    cr_assert_eq(gpupart_allocation_get_info(a[i], &info), GPUPART_OK);
    uint64_t where = info.device_address ? info.device_address : info.offset;
    if (aligns[i])
      cr_expect_eq(where % aligns[i], 0, "allocation %d is not aligned to %llu", i, (unsigned long long)aligns[i]);
    cr_expect_eq(info.offset % dev.min_alignment, 0, "offsets keep the backend's minimum alignment");
    memset(buf, 0x30 + i, sizes[i]);
    cr_assert_eq(f.ad->write(f.dev, a[i], buf, sizes[i]), 0, "%s", gpupart_last_error());
  }
  for (int i = 0; i < N; i++) {
    memset(buf, 0x30 + i, sizes[i]);
    cr_assert_eq(f.ad->read(f.dev, a[i], back, sizes[i]), 0, "%s", gpupart_last_error());
    cr_expect_eq(memcmp(buf, back, sizes[i]), 0, "allocation %d was overwritten by another", i);
  }
  for (int i = 0; i < N; i++) gpupart_free(a[i]);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, trim_is_seen_by_the_driver) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, trim_is_seen_by_the_driver) {
  fixture f = open_instrumented_or_skip(*b, NULL, 0);
  gpupart_partition *p = make_partition(f.dev, "t", 64 * MiB);
  cr_expect_eq(driver_bytes(&f), 0);
  gpupart_allocation *a[4];
  for (int i = 0; i < 4; i++) cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats held = stats_of(p);
  cr_expect_eq(driver_bytes(&f), held.reserved, "the driver holds what gpupart reserved");
  for (int i = 0; i < 4; i++) gpupart_free(a[i]);
  cr_expect_eq(driver_bytes(&f), held.reserved, "empty blocks stay cached until trim");
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s = stats_of(p);
  cr_expect_eq(driver_bytes(&f), 0, "the driver got every block back");
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.driver_frees, s.driver_allocs);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, release_threshold_returns_emptied_blocks_at_once) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, release_threshold_returns_emptied_blocks_at_once) {
  fixture f = open_instrumented_or_skip(*b, NULL, 0);
  gpupart_partition_desc d = {.name = "r", .limit = 64 * MiB, .release_threshold = 1};
  gpupart_partition *p;
  cr_assert_eq(gpupart_partition_create(f.dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_geq(driver_bytes(&f), 3 * MiB);
  gpupart_free(a);
  cr_expect_eq(driver_bytes(&f), 0, "the emptied block went back to the driver at free");
  cr_expect_eq(stats_of(p).reserved, 0);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, driver_refusal_is_edevmem_and_obtains_nothing) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, driver_refusal_is_edevmem_and_obtains_nothing) {
  fixture f = open_instrumented_or_skip(*b, NULL, 1);
  gpupart_partition *p = make_partition(f.dev, "p", 64 * MiB);
  gpupart_allocation *a, *c;
  cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats before = stats_of(p);
  uint64_t held = driver_bytes(&f);
  cr_expect_eq(gpupart_alloc(p, 8 * MiB, 0, &c), GPUPART_EDEVMEM, "the driver refuses a second block");
  cr_expect_null(c);
  cr_expect_gt(strlen(gpupart_last_error()), 0);
  gpupart_stats after = stats_of(p);
  cr_expect_eq(after.failed_allocations, before.failed_allocations + 1);
  cr_expect_eq(after.driver_allocs, before.driver_allocs);
  cr_expect_eq(after.reserved, before.reserved);
  cr_expect_eq(driver_bytes(&f), held, "a refused request leaves nothing at the driver");
  gpupart_free(a);
  cr_assert_eq(gpupart_alloc(p, 8 * MiB, 0, &c), GPUPART_OK,
               "the OOM sequence returns the cached empty block and retries: %s", gpupart_last_error());
  cr_expect_eq(stats_of(p).driver_frees, before.driver_frees + 1);
  gpupart_free(c);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, driver_refusal_carries_the_drivers_own_code) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, driver_refusal_carries_the_drivers_own_code) {
  fixture f = open_instrumented_or_skip(*b, NULL, 1);
  gpupart_partition *p = make_partition(f.dev, "p", 64 * MiB);
  gpupart_allocation *a, *c;
  cr_assert_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_alloc(p, 8 * MiB, 0, &c), GPUPART_EDEVMEM, "the driver refuses a second block");
  int64_t code = gpupart_last_native_error();
  if (f.ad->refusal_code != CONFORMANCE_CODE_VARIES)
    cr_expect_eq(code, f.ad->refusal_code, "native %lld: %s", (long long)code, gpupart_last_error());
  if (f.ad->refusal_name)
    cr_expect_not_null(strstr(gpupart_last_error(), f.ad->refusal_name), "%s", gpupart_last_error());
  gpupart_free(a);
  close_fixture(&f);
}

ParameterizedTestParameters(conformance, preallocation_the_driver_cannot_back_leaves_nothing) {
  return cr_make_param_array(gpupart_backend, all_backends, sizeof all_backends / sizeof all_backends[0]);
}
ParameterizedTest(gpupart_backend *b, conformance, preallocation_the_driver_cannot_back_leaves_nothing) {
  fixture f = open_instrumented_or_skip(*b, NULL, 2);
  gpupart_partition_desc d = {.name = "pre", .limit = 8 * MiB, .growth = GPUPART_GROWTH_OFF, .max_block = 2 * MiB};
  gpupart_partition *p;
  cr_expect_eq(gpupart_partition_create(f.dev, &d, &p), GPUPART_EDEVMEM, "four blocks, the driver gives two");
  cr_expect_null(p);
  cr_expect_eq(gpupart_partition_count(f.dev), 0);
  cr_expect_eq(driver_bytes(&f), 0, "the blocks obtained on the way went back");
  d.limit = 4 * MiB;
  cr_assert_eq(gpupart_partition_create(f.dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(driver_bytes(&f), 4 * MiB);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(stats_of(p).driver_allocs, 2, "no driver call after preallocation");
  gpupart_free(a);
  close_fixture(&f);
}
