/* The 0.2 ABI rules inside one build (core/base/extstruct.c, core/device.c): the _sized entry
 * points against larger and smaller structs than the library's, the typed backend_desc
 * (a backend descriptor is never read as another backend's, whatever configuration
 * chooses), and double frees as a result and a counter. The cross-header half (clients
 * built against other copies of gpupart.h) is tests/abi/. Criterion runs each test in
 * its own process, so setenv stays local. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "extstruct.h"

static void clear_env(void) {
  unsetenv("GPUPART_BACKEND");
  unsetenv("GPUPART_CONFIG");
}

TestSuite(extstruct, .init = clear_env);

/* Every field set, as a real program's descriptor would be: read as a gpupart_vulkan_desc
 * its words are an instance, a physical device and a device. */
static const gpupart_sim_desc full_sim = {
    .total_bytes = 1 * GiB, .max_block_bytes = 256 * MiB, .min_alignment = 4096, .max_blocks = 64};

static gpupart_context *env_context(const char *config_text) {
  gpupart_context_desc cd = {.config_text = config_text};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

static void expect_refused(gpupart_context *ctx, const gpupart_device_desc *d, const char *a, const char *b) {
  gpupart_device *dev = (gpupart_device *)d;
  cr_expect_eq(gpupart_device_open(ctx, d, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect_neq(strstr(gpupart_last_error(), a), NULL, "%s", gpupart_last_error());
  cr_expect_neq(strstr(gpupart_last_error(), b), NULL, "%s", gpupart_last_error());
}

Test(extstruct, an_untyped_sim_descriptor_is_refused_when_the_environment_chooses_vulkan) {
  setenv("GPUPART_BACKEND", "vulkan", 1);
  gpupart_context *ctx = env_context(NULL);
  gpupart_device_desc d = {.backend_desc = &full_sim};
  expect_refused(ctx, &d, "backend_desc is set", "both auto");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, a_sim_descriptor_is_refused_when_the_environment_chooses_vulkan_naming_both) {
  setenv("GPUPART_BACKEND", "vulkan", 1);
  gpupart_context *ctx = env_context(NULL);
  gpupart_device_desc d = {.backend_desc = &full_sim, .backend_desc_type = GPUPART_BACKEND_SIM};
  expect_refused(ctx, &d, "a sim descriptor, but the device opens through vulkan", "GPUPART_BACKEND");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, a_sim_descriptor_is_refused_when_the_configuration_chooses_opencl) {
  gpupart_context *ctx = env_context("[gpupart]\nbackend = opencl\n");
  gpupart_device_desc d = {.backend_desc = &full_sim};
  expect_refused(ctx, &d, "backend_desc is set", "both auto");
  d.backend_desc_type = GPUPART_BACKEND_SIM;
  expect_refused(ctx, &d, "a sim descriptor, but the device opens through opencl", "config_text");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, a_typed_descriptor_opens_when_its_backend_is_the_one_chosen) {
  setenv("GPUPART_BACKEND", "sim", 1);
  gpupart_context *ctx = env_context(NULL);
  gpupart_device_desc d = {
      .backend_desc = &full_sim, .backend_desc_type = GPUPART_BACKEND_SIM, .backend_desc_size = sizeof full_sim};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_info info;
  cr_expect_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  cr_expect_eq(info.total_bytes, 1 * GiB);
  cr_expect_eq(info.min_alignment, 4096);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, backend_and_backend_desc_type_must_agree) {
  gpupart_context *ctx = test_context();
  gpupart_device_desc d = {
      .backend = GPUPART_BACKEND_SIM, .backend_desc = &full_sim, .backend_desc_type = GPUPART_BACKEND_VULKAN};
  expect_refused(ctx, &d, "a vulkan descriptor", "opens through sim");
  d.backend_desc_type = (gpupart_backend)42;
  expect_refused(ctx, &d, "backend_desc_type 42", "not a gpupart_backend");
  d.backend_desc = NULL; /* the type of no descriptor is never looked at */
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A newer program's gpupart_sim_desc: the 0.2 fields, then one this library lacks. */
typedef struct newer_sim_desc {
  gpupart_sim_desc base;
  uint64_t future;
} newer_sim_desc;

Test(extstruct, backend_desc_size_follows_the_struct_rule) {
  gpupart_context *ctx = test_context();
  newer_sim_desc newer = {.base = full_sim};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &newer, .backend_desc_size = sizeof newer};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "a zero tail is fine: %s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  newer.future = 1;
  char has[64];
  snprintf(has, sizeof has, "sim: gpupart_sim_desc has %zu bytes", sizeof newer);
  expect_refused(ctx, &d, has, "is not zero: built against a newer gpupart?");
  d.backend_desc_size = 8;
  expect_refused(ctx, &d, "gpupart_sim_desc has 8 bytes", "smallest layout");
  d.backend_desc_size = 0; /* 0 = the 0.2 layout: the tail is not even read */
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, a_descriptor_cut_at_its_0_2_layout_gets_the_rest_as_defaults) {
  gpupart_context *ctx = test_context();
  struct {
    gpupart_partition_desc d;
    uint64_t guard;
  } cut = {.d = {.name = "cut", .limit = 64 * MiB}, .guard = 0};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &full_sim};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open_sized(ctx, &dd, GPUPART__DEVICE_DESC_SIZE_0_2, &dev), GPUPART_OK, "%s",
               gpupart_last_error());
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create_sized(dev, &cut.d, sizeof cut, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).limit, 64 * MiB);
  cut.guard = 0x100;
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create_sized(dev, &cut.d, sizeof cut, &q), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "knows"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_count(dev), 1);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, a_larger_output_struct_gets_a_zeroed_tail_and_a_smaller_one_is_refused) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = test_sim_device(ctx, &full_sim, NULL);
  gpupart_partition *p = test_partition(dev, "a", 64 * MiB, 0);
  struct {
    gpupart_stats s;
    uint64_t extra[3];
  } big;
  memset(&big, 0xff, sizeof big);
  cr_assert_eq(gpupart_partition_get_stats_sized(p, &big.s, sizeof big), GPUPART_OK);
  cr_expect_eq(big.s.limit, 64 * MiB);
  cr_expect_eq(big.s.double_frees, 0);
  for (int i = 0; i < 3; i++) cr_expect_eq(big.extra[i], 0);
  gpupart_stats small;
  memset(&small, 0xff, sizeof small);
  cr_expect_eq(gpupart_partition_get_stats_sized(p, &small, GPUPART__STATS_SIZE_0_2 - 8), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "smallest layout"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(small.limit, UINT64_MAX, "a refused output is left untouched");
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, enumerate_writes_each_entry_at_the_callers_stride) {
  gpupart_context *ctx = test_context();
  struct wide {
    gpupart_device_info info;
    uint64_t extra;
  } wide[2];
  memset(wide, 0x5a, sizeof wide);
  uint32_t count = 2;
  cr_assert_eq(gpupart_enumerate_sized(ctx, GPUPART_BACKEND_SIM, &wide[0].info, sizeof wide[0], &count), GPUPART_OK);
  cr_expect_eq(count, 1);
  cr_expect_eq(wide[0].info.backend, GPUPART_BACKEND_SIM);
  cr_expect_eq(wide[0].extra, 0, "the tail of an entry is zeroed");
  cr_expect_eq(wide[1].info.index, 0x5a5a5a5a, "entries past the count are untouched");
  cr_expect_eq(gpupart_enumerate_sized(ctx, GPUPART_BACKEND_SIM, &wide[0].info, 8, &count), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(extstruct, double_frees_are_results_and_stay_counted_after_the_partition_is_gone) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = test_sim_device(ctx, &full_sim, NULL);
  gpupart_partition *p = test_partition(dev, "twice", 64 * MiB, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK);
  cr_expect_eq(gpupart_free(a), GPUPART_OK);
  cr_expect_eq(gpupart_free(a), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "partition 'twice'"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_free(NULL), GPUPART_OK);
  gpupart_stats s;
  cr_expect_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  cr_expect_eq(s.double_frees, 1);
  cr_expect_eq(s.total_frees, 1);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  cr_expect_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  cr_expect_eq(s.double_frees, 1, "a destroyed partition's count is retired into the device");
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* The plain names are real functions too, taking the 0.2 layouts: code that takes their
 * address (function tables, harnesses) or finds them by name gets working entry points. */
Test(extstruct, the_plain_names_are_functions_that_take_the_0_2_layouts) {
  gpupart_result (*create)(const gpupart_context_desc *, gpupart_context **) = gpupart_context_create;
  gpupart_result (*open)(gpupart_context *, const gpupart_device_desc *, gpupart_device **) = gpupart_device_open;
  gpupart_result (*part)(gpupart_device *, const gpupart_partition_desc *, gpupart_partition **) =
      gpupart_partition_create;
  gpupart_result (*stats)(const gpupart_partition *, gpupart_stats *) = gpupart_partition_get_stats;
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  cr_assert_eq(create(&(gpupart_context_desc){.flags = GPUPART_CONTEXT_IGNORE_ENV}, &ctx), GPUPART_OK);
  cr_assert_eq(open(ctx, &(gpupart_device_desc){.backend = GPUPART_BACKEND_SIM}, &dev), GPUPART_OK, "%s",
               gpupart_last_error());
  cr_assert_eq(part(dev, &(gpupart_partition_desc){.name = "plain", .limit = 64 << 20}, &p), GPUPART_OK);
  gpupart_stats st;
  memset(&st, 0xff, sizeof st);
  cr_assert_eq(stats(p, &st), GPUPART_OK);
  cr_expect_eq(st.limit, 64 << 20);
  cr_expect_eq(st.double_frees, 0, "the whole 0.2 layout is written");
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
