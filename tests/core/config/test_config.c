/* Configuration end to end (core/config/config.c, core/config/ini.c, core/config/settings.c): every row
 * of docs/configuration.md through real variables and files, the precedence descriptor > environment >
 * file > default, errors that name their source, key and line, and that nothing is
 * half-applied. Criterion runs each test in its own process, so setenv stays local. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "config.h"

TestSuite(config, .init = test_clear_gpupart_env, .fini = test_remove_config);

static gpupart_context *context_with(const gpupart_context_desc *d) {
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

static gpupart_device *open_dev(gpupart_context *ctx, gpupart_backend b, uint32_t index) {
  gpupart_device_desc d = {.backend = b, .index = index};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static gpupart_device *open_sim(gpupart_context *ctx, uint32_t index) {
  return open_dev(ctx, GPUPART_BACKEND_SIM, index);
}

static void close_all(gpupart_device *dev, gpupart_context *ctx) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

static uint64_t budget_with(const char *var, const char *value) {
  setenv(var, value, 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  uint64_t b = gpupart_device_budget(dev);
  close_all(dev, ctx);
  return b;
}

static gpupart_stats stats_of(gpupart_device *dev, uint32_t i) {
  gpupart_partition *p = gpupart_partition_at(dev, i);
  cr_assert_not_null(p, "no partition %u", i);
  return test_stats(p);
}

static uint64_t share(uint64_t budget, double f, uint64_t granularity) {
  return (uint64_t)((long double)budget * f) & ~(granularity - 1);
}

/* ---- every row of docs/configuration.md ------------------------------------------------ */

Test(config, gpupart_config_names_the_file) {
  setenv("GPUPART_CONFIG", test_write_config("config", "[gpupart]\nbackend = sim\nmemory_fraction = 25%\n"), 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_info info;
  gpupart_device_get_info(dev, &info);
  cr_expect_eq(info.backend, GPUPART_BACKEND_SIM);
  cr_expect_eq(gpupart_device_budget(dev), 4 * GiB);
  close_all(dev, ctx);
}

Test(config, a_missing_file_is_an_error_naming_the_variable) {
  setenv("GPUPART_CONFIG", "/nonexistent/gpupart.ini", 1);
  test_context_fails(NULL, "GPUPART_CONFIG", "/nonexistent/gpupart.ini");
}

static gpupart_backend first_present(const gpupart_backend *order, int n) {
  gpupart_context *ctx = test_context();
  gpupart_backend found = GPUPART_BACKEND_AUTO;
  for (int i = 0; i < n && found == GPUPART_BACKEND_AUTO; i++) {
    uint32_t count = 0;
    if (gpupart_enumerate(ctx, order[i], NULL, &count) == GPUPART_OK && count > 0) found = order[i];
  }
  gpupart_context_destroy(ctx);
  return found;
}

static gpupart_backend opened_backend(void) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_info info;
  gpupart_device_get_info(dev, &info);
  close_all(dev, ctx);
  return info.backend;
}

Test(config, backend_auto_is_the_first_present_of_cuda_vulkan_opencl_sim) {
  const gpupart_backend order[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_VULKAN, GPUPART_BACKEND_OPENCL,
                                   GPUPART_BACKEND_SIM};
  cr_expect_eq(opened_backend(), first_present(order, 4));
  setenv("GPUPART_BACKEND", "auto", 1);
  cr_expect_eq(opened_backend(), first_present(order, 4));
}

Test(config, backend_list_takes_the_first_present) {
  const gpupart_backend order[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_SIM};
  setenv("GPUPART_BACKEND", "cuda,sim", 1);
  cr_expect_eq(opened_backend(), first_present(order, 2));
  setenv("GPUPART_BACKEND", "sim", 1);
  cr_expect_eq(opened_backend(), GPUPART_BACKEND_SIM);
}

Test(config, a_single_missing_backend_reports_its_own_error) {
  gpupart_context *probe = test_context();
  uint32_t n = 0;
  int rc = gpupart_enumerate(probe, GPUPART_BACKEND_CUDA, NULL, &n);
  gpupart_context_destroy(probe);
  if (rc != GPUPART_ENOBACKEND) cr_skip_test("a CUDA driver is present");
  setenv("GPUPART_BACKEND", "cuda", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_ENOBACKEND);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static uint32_t physical_index(gpupart_device *dev) {
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  return info.index;
}

/* As CUDA_VISIBLE_DEVICES: GPUPART_DEVICE=1 makes program index 0 physical device 1, and
 * there is no program index 1, so opening 0 then 1 never gives device 1 twice. */
Test(config, gpupart_device_is_a_visible_list_that_maps_program_indexes) {
  setenv("GPUPART_DEVICE", "1", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *a = open_sim(ctx, 0), *b = NULL;
  cr_expect_eq(physical_index(a), 1);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .index = 1};
  cr_expect_eq(gpupart_device_open(ctx, &d, &b), GPUPART_ENODEV);
  cr_expect_null(b);
  cr_expect(strstr(gpupart_last_error(), "only 1 device visible (GPUPART_DEVICE=1)"), "%s", gpupart_last_error());
  close_all(a, ctx);
}

Test(config, a_visible_list_of_several_devices_keeps_their_order) {
  setenv("GPUPART_DEVICE", "2,0", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *a = open_sim(ctx, 0), *b = open_sim(ctx, 1), *c = NULL;
  cr_expect_eq(physical_index(a), 2);
  cr_expect_eq(physical_index(b), 0);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .index = 2};
  cr_expect_eq(gpupart_device_open(ctx, &d, &c), GPUPART_ENODEV, "only 2 devices visible");
  gpupart_device_close(b);
  close_all(a, ctx);
}

Test(config, without_a_visible_list_indexes_are_physical) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *a = open_sim(ctx, 0), *b = open_sim(ctx, 3);
  cr_expect_eq(physical_index(a), 0);
  cr_expect_eq(physical_index(b), 3);
  gpupart_device_close(b);
  close_all(a, ctx);
}

Test(config, allow_growth_false_preallocates_each_partition) {
  setenv("GPUPART_ALLOW_GROWTH", "false", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *p = test_partition(dev, "a", 64 * MiB, 0);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 64 * MiB);
  test_check(dev);
  close_all(dev, ctx);
}

Test(config, memory_fraction_and_its_per_device_form) {
  cr_expect_eq(budget_with("GPUPART_MEMORY_FRACTION", "50%"), 8 * GiB);
  cr_expect_eq(budget_with("GPUPART_MEMORY_FRACTION", "0.25"), 4 * GiB);
  setenv("GPUPART_MEMORY_FRACTION", "0=50%,1=0.25", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d0 = open_sim(ctx, 0), *d1 = open_sim(ctx, 1), *d2 = open_sim(ctx, 2);
  cr_expect_eq(gpupart_device_budget(d0), 8 * GiB);
  cr_expect_eq(gpupart_device_budget(d1), 4 * GiB);
  cr_expect_eq(gpupart_device_budget(d2), 16 * GiB, "a device the list leaves out keeps the default");
  gpupart_device_close(d1);
  gpupart_device_close(d2);
  close_all(d0, ctx);
}

Test(config, a_backend_specific_entry_beats_an_index_and_a_bare_value) {
  setenv("GPUPART_MEMORY_FRACTION", "75%,1=50%,sim:1=25%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d0 = open_sim(ctx, 0), *d1 = open_sim(ctx, 1);
  cr_expect_eq(gpupart_device_budget(d0), 12 * GiB);
  cr_expect_eq(gpupart_device_budget(d1), 4 * GiB);
  gpupart_device_close(d1);
  close_all(d0, ctx);
}

Test(config, memory_limit_caps_the_budget) {
  cr_expect_eq(budget_with("GPUPART_MEMORY_LIMIT", "4GiB"), 4 * GiB);
  setenv("GPUPART_MEMORY_FRACTION", "10%", 1);
  cr_expect_eq(budget_with("GPUPART_MEMORY_LIMIT", "4GiB"), share(16 * GiB, 0.1, 2 * MiB));
  cr_expect_eq(budget_with("GPUPART_MEMORY_LIMIT", "1=1GiB"), share(16 * GiB, 0.1, 2 * MiB));
}

Test(config, headroom_is_left_out_of_the_budget) { cr_expect_eq(budget_with("GPUPART_HEADROOM", "1GiB"), 15 * GiB); }

Test(config, too_much_headroom_is_a_config_error_naming_the_variable) {
  setenv("GPUPART_HEADROOM", "20GiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev = (gpupart_device *)1;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ECONFIG);
  cr_expect_null(dev);
  cr_expect(strstr(gpupart_last_error(), "GPUPART_HEADROOM"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(config, granularity_rounds_budget_and_limits) {
  setenv("GPUPART_MEMORY_FRACTION", "0.3", 1);
  setenv("GPUPART_GRANULARITY", "1GiB", 1);
  setenv("GPUPART_PARTITIONS", "a:1.5GiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 4 * GiB);
  cr_expect_eq(stats_of(dev, 0).limit, 1 * GiB);
  close_all(dev, ctx);
}

static gpupart_stats after_alloc_and_free(void) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *p = test_partition(dev, "a", 0, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(a);
  gpupart_stats s = test_stats(p);
  close_all(dev, ctx);
  return s;
}

Test(config, release_threshold_one_releases_every_emptied_block) {
  gpupart_stats kept = after_alloc_and_free();
  cr_expect_eq(kept.reserved, 2 * MiB, "the default keeps empty blocks");
  setenv("GPUPART_RELEASE_THRESHOLD", "1", 1);
  gpupart_stats released = after_alloc_and_free();
  cr_expect_eq(released.reserved, 0);
  cr_expect_eq(released.driver_frees, 1);
}

Test(config, partitions_are_created_in_order_when_the_device_opens) {
  setenv("GPUPART_PARTITIONS", "train:60%:40%,eval:30%,scratch:256MiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_OK, "%s", gpupart_last_error());
  uint64_t b = gpupart_device_budget(dev);
  cr_assert_eq(gpupart_partition_count(dev), 3);
  const char *names[] = {"train", "eval", "scratch"};
  for (uint32_t i = 0; i < 3; i++) cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(dev, i)), names[i]);
  cr_expect_eq(stats_of(dev, 0).limit, share(b, 0.6, 2 * MiB));
  cr_expect_eq(stats_of(dev, 0).guarantee, share(b, 0.4, 2 * MiB));
  cr_expect_eq(stats_of(dev, 1).limit, share(b, 0.3, 2 * MiB));
  cr_expect_eq(stats_of(dev, 1).guarantee, 0);
  cr_expect_eq(stats_of(dev, 2).limit, 256 * MiB);
  cr_expect_not_null(gpupart_partition_find(dev, "scratch"));
  test_check(dev);
  close_all(dev, ctx);
}

Test(config, partitions_for_several_devices) {
  setenv("GPUPART_PARTITIONS", "sim:0=train:60%:60%,eval:30%;sim:1=serve:8GiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d0 = open_sim(ctx, 0), *d1 = open_sim(ctx, 1), *d2 = open_sim(ctx, 2);
  cr_expect_eq(gpupart_partition_count(d0), 2);
  cr_expect_eq(gpupart_partition_count(d1), 1);
  cr_expect_eq(gpupart_partition_count(d2), 0);
  cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(d1, 0)), "serve");
  cr_expect_eq(stats_of(d1, 0).limit, 8 * GiB);
  gpupart_device_close(d1);
  gpupart_device_close(d2);
  close_all(d0, ctx);
}

Test(config, unprefixed_partitions_belong_to_the_default_device) {
  setenv("GPUPART_PARTITIONS", "a:50%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d1 = open_sim(ctx, 1);
  cr_expect_eq(gpupart_partition_count(d1), 0);
  gpupart_device_close(d1);
  gpupart_context_destroy(ctx);
  setenv("GPUPART_DEVICE", "1", 1); /* program index 0 is now physical device 1 */
  ctx = test_env_context();
  d1 = open_sim(ctx, 0);
  cr_expect_eq(physical_index(d1), 1);
  cr_expect_eq(gpupart_partition_count(d1), 1);
  close_all(d1, ctx);
}

Test(config, unprefixed_partitions_skip_a_backend_the_list_excludes) {
  setenv("GPUPART_BACKEND", "cuda", 1);
  setenv("GPUPART_PARTITIONS", "a:50%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_partition_count(dev), 0);
  close_all(dev, ctx);
}

Test(config, shared_opens_the_ledger_in_the_ledger_dir) {
  char dir[] = "/tmp/gpupart-cfg-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  setenv("GPUPART_SHARED", "1", 1);
  setenv("GPUPART_LEDGER_DIR", "/nonexistent-gpupart-dir", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ECONFIG);
  cr_expect(strstr(gpupart_last_error(), "/nonexistent-gpupart-dir") &&
                strstr(gpupart_last_error(), "GPUPART_LEDGER_DIR"),
            "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  setenv("GPUPART_LEDGER_DIR", dir, 1);
  ctx = test_env_context();
  dev = open_sim(ctx, 0);
  close_all(dev, ctx);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

Test(config, ledger_dir_is_validated) {
  setenv("GPUPART_LEDGER_DIR", "shm", 1);
  test_context_fails(NULL, "GPUPART_LEDGER_DIR", "absolute");
  setenv("GPUPART_LEDGER_DIR", " /run/user/gpupart\n", 1); /* white space around a path is trimmed */
  setenv("GPUPART_VERBOSE", "1", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect(strstr(test_log_text, "ledger_dir         = /run/user/gpupart (GPUPART_LEDGER_DIR)"), "%s", test_log_text);
  close_all(dev, ctx);
}

Test(config, sim_total_sizes_a_sim_device_whose_descriptor_leaves_it_0) {
  setenv("GPUPART_SIM_TOTAL", "4GiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *a = open_sim(ctx, 0);
  gpupart_sim_desc sim = {.total_bytes = GiB};
  gpupart_device *b = test_sim_device(ctx, &sim, NULL);
  gpupart_device_info ia, ib;
  gpupart_device_get_info(a, &ia);
  gpupart_device_get_info(b, &ib);
  cr_expect_eq(ia.total_bytes, 4 * GiB);
  cr_expect_eq(ib.total_bytes, GiB);
  gpupart_device_close(b);
  close_all(a, ctx);
}

Test(config, verbose_prints_every_option_with_its_source) {
  setenv("GPUPART_VERBOSE", "1", 1);
  setenv("GPUPART_MEMORY_FRACTION", "50%", 1);
  setenv("GPUPART_CONFIG", test_write_config("config", "[gpupart]\n\ngranularity = 4MiB\n"), 1);
  setenv("GPUPART_PARTITIONS", "train:50%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  char expect[256];
  snprintf(expect, sizeof expect, "granularity        = 4194304 (%s:3)", test_config_path);
  cr_expect(strstr(test_log_text, "memory_fraction    = 0.5 (GPUPART_MEMORY_FRACTION)"), "%s", test_log_text);
  cr_expect(strstr(test_log_text, expect), "%s", test_log_text);
  cr_expect(strstr(test_log_text, "headroom           = 0 (default)"), "%s", test_log_text);
  cr_expect(strstr(test_log_text, "backend            = sim (descriptor)"), "%s", test_log_text);
  cr_expect(strstr(test_log_text, "partition train: limit 4294967296, guarantee 0 bytes (GPUPART_PARTITIONS)"), "%s",
            test_log_text);
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (o != GPUPART__OPT_PARTITIONS)
      cr_expect(strstr(test_log_text, gpupart__options[o].key), "%s missing", gpupart__options[o].key);
  close_all(dev, ctx);
}

Test(config, quiet_without_verbose) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_str_eq(test_log_text, "");
  close_all(dev, ctx);
}

Test(config, a_library_variable_reaches_the_backend_loader) {
  setenv("GPUPART_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  setenv("GPUPART_VERBOSE", "1", 1);
  gpupart_context *ctx = test_env_context();
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n), GPUPART_ENOBACKEND);
#ifdef GPUPART_HAVE_OPENCL
  cr_expect(strstr(gpupart_last_error(), "/nonexistent/libOpenCL.so.1"), "%s", gpupart_last_error());
#endif
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect(strstr(test_log_text, "opencl_library     = /nonexistent/libOpenCL.so.1 (GPUPART_OPENCL_LIBRARY)"), "%s",
            test_log_text);
  close_all(dev, ctx);
}

Test(config, unknown_variables_are_errors_but_script_prefixes_are_not) {
  setenv("GPUPART_MEMROY_FRACTION", "50%", 1);
  test_context_fails(NULL, "GPUPART_MEMROY_FRACTION", "unknown variable");
  unsetenv("GPUPART_MEMROY_FRACTION");
  setenv("GPUPART_TEST_SEED", "1", 1);
  setenv("GPUPART_BENCH_QUICK", "1", 1);
  gpupart_context_destroy(test_env_context());
}

Test(config, the_python_packages_variables_are_not_errors) {
  setenv("GPUPART_PYTHON_LIBRARY", "/opt/gpupart/lib/libgpupart.so", 1);
  gpupart_context_destroy(test_env_context());
}

/* GPUPART_PARTITION and GPUPART_PRELOAD_ARENA are the interposers' (interpose/): the
 * library leaves them to them, but a near miss is still an error. */
Test(config, the_interposers_variable_is_not_unknown) {
  setenv("GPUPART_PARTITION", "job", 1);
  setenv("GPUPART_PRELOAD_ARENA", "1", 1);
  gpupart_context_destroy(test_env_context());
  setenv("GPUPART_PARTITIONX", "job", 1);
  test_context_fails(NULL, "GPUPART_PARTITIONX", "unknown variable");
}

Test(config, an_empty_variable_is_unset) { cr_expect_eq(budget_with("GPUPART_MEMORY_FRACTION", ""), 16 * GiB); }

Test(config, a_bad_variable_names_itself_and_what_is_wrong) {
  setenv("GPUPART_MEMORY_FRACTION", "150%", 1);
  test_context_fails(NULL, "GPUPART_MEMORY_FRACTION", "'150%' is above 100%");
  setenv("GPUPART_MEMORY_FRACTION", "0=50%,0=60%", 1);
  test_context_fails(NULL, "GPUPART_MEMORY_FRACTION: device '0'", "set twice");
  setenv("GPUPART_MEMORY_FRACTION", "gpu:0=50%", 1);
  test_context_fails(NULL, "GPUPART_MEMORY_FRACTION", "not a device");
  unsetenv("GPUPART_MEMORY_FRACTION");
  setenv("GPUPART_PARTITIONS", "a:60%:70%", 1);
  test_context_fails(NULL, "GPUPART_PARTITIONS", "guarantee is above the size");
  setenv("GPUPART_PARTITIONS", "a:1GiB", 1);
  setenv("GPUPART_GRANULARITY", "3MiB", 1);
  test_context_fails(NULL, "GPUPART_GRANULARITY", "not a power of two");
}

/* ---- precedence ----------------------------------------------------------------- */

Test(config, descriptor_beats_environment_beats_file_beats_default) {
  const char *file = test_write_config("config", "[gpupart]\nmemory_fraction = 50%\n");
  gpupart_context_desc cd = {.config_path = file};
  gpupart_context *ctx = context_with(&cd);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 8 * GiB, "file over default");
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  setenv("GPUPART_MEMORY_FRACTION", "25%", 1);
  ctx = context_with(&cd);
  dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 4 * GiB, "environment over file");
  gpupart_device_close(dev);
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .memory_fraction = 0.125};
  cr_assert_eq(gpupart_device_open(ctx, &dd, &dev), GPUPART_OK);
  cr_expect_eq(gpupart_device_budget(dev), 2 * GiB, "descriptor over environment");
  close_all(dev, ctx);
}

Test(config, descriptor_growth_beats_the_environment) {
  setenv("GPUPART_ALLOW_GROWTH", "false", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc dd = {.growth = GPUPART_GROWTH_ON};
  gpupart_device *dev = test_sim_device(ctx, NULL, &dd);
  gpupart_partition *p = test_partition(dev, "a", 64 * MiB, 0);
  cr_expect_eq(test_stats(p).reserved, 0);
  close_all(dev, ctx);
}

Test(config, a_device_section_beats_the_global_one_but_not_the_environment) {
  setenv("GPUPART_CONFIG",
         test_write_config("config", "[gpupart]\nmemory_fraction = 50%\n[device sim:1]\nmemory_fraction = 25%\n"), 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d0 = open_sim(ctx, 0), *d1 = open_sim(ctx, 1);
  cr_expect_eq(gpupart_device_budget(d0), 8 * GiB);
  cr_expect_eq(gpupart_device_budget(d1), 4 * GiB);
  gpupart_device_close(d1);
  close_all(d0, ctx);
  setenv("GPUPART_MEMORY_FRACTION", "75%", 1);
  ctx = test_env_context();
  d1 = open_sim(ctx, 1);
  cr_expect_eq(gpupart_device_budget(d1), 12 * GiB);
  close_all(d1, ctx);
}

Test(config, config_text_replaces_the_file_key_by_key_and_partition_by_name) {
  const char *file = test_write_config("config", "[gpupart]\nmemory_fraction = 50%\nheadroom = 1GiB\n"
                                                 "[partition a]\nsize = 10%\n[partition b]\nsize = 20%\n");
  gpupart_context_desc cd = {.config_path = file,
                             .config_text = "[gpupart]\nmemory_fraction = 100%\n[partition b]\nsize = 1GiB\n"
                                            "[partition c]\nsize = 2GiB\n"};
  gpupart_context *ctx = context_with(&cd);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 15 * GiB);
  cr_assert_eq(gpupart_partition_count(dev), 3);
  cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(dev, 1)), "b");
  cr_expect_eq(stats_of(dev, 1).limit, GiB);
  cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(dev, 2)), "c");
  close_all(dev, ctx);
}

Test(config, environment_partitions_replace_the_files_for_that_device) {
  setenv("GPUPART_CONFIG",
         test_write_config("config", "[partition a]\nsize = 10%\n[partition z]\nsize = 10%\ndevice = sim:1\n"), 1);
  setenv("GPUPART_PARTITIONS", "b:20%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *d0 = open_sim(ctx, 0), *d1 = open_sim(ctx, 1);
  cr_assert_eq(gpupart_partition_count(d0), 1);
  cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(d0, 0)), "b");
  cr_assert_eq(gpupart_partition_count(d1), 1, "the file still speaks for sim:1");
  cr_expect_str_eq(gpupart_partition_name(gpupart_partition_at(d1, 0)), "z");
  gpupart_device_close(d1);
  close_all(d0, ctx);
}

Test(config, ignore_env_ignores_variables_and_files_but_not_config_text) {
  setenv("GPUPART_MEMORY_FRACTION", "garbage", 1);
  setenv("GPUPART_CONFIG", "/nonexistent.ini", 1);
  setenv("GPUPART_PARTITIONS", "a:50%", 1);
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV,
                             .config_path = "/nonexistent/either.ini",
                             .config_text = "[gpupart]\nheadroom = 2GiB\n"};
  gpupart_context *ctx = context_with(&cd);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 14 * GiB);
  cr_expect_eq(gpupart_partition_count(dev), 0);
  close_all(dev, ctx);
}

Test(config, the_file_partition_section_of_config_md) {
  const char *file =
      test_write_config("config", "[gpupart]\nbackend = vulkan, opencl, sim\nallow_growth = true\n"
                                  "memory_fraction = 90%\ngranularity = 2MiB\n\n"
                                  "[device sim:0]\nmemory_fraction = 50%\nallow_growth = false\n\n"
                                  "[partition train]\ndevice = sim:0          ; default: the default device\n"
                                  "size = 60%\nguarantee = 40%\n");
  gpupart_context_desc cd = {.config_path = file};
  gpupart_context *ctx = context_with(&cd);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 8 * GiB);
  cr_assert_eq(gpupart_partition_count(dev), 1);
  gpupart_stats s = stats_of(dev, 0);
  cr_expect_eq(s.limit, share(8 * GiB, 0.6, 2 * MiB));
  cr_expect_eq(s.guarantee, share(8 * GiB, 0.4, 2 * MiB));
  cr_expect_eq(s.reserved, s.limit, "allow_growth = false preallocates");
  close_all(dev, ctx);
}

/* ---- file errors: source, key, line ----------------------------------------------- */

static char reported[8192];

static void collect(const char *message, void *user) {
  (void)user;
  strncat(reported, message, sizeof reported - strlen(reported) - 2);
  strcat(reported, "\n");
}

/* Checks the file and expects exactly the lines given (each prefixed with FILE:). */
static void check_reports(const char *text, int count, const char *const *lines) {
  const char *path = test_write_config("config", text);
  reported[0] = 0;
  cr_expect_eq(gpupart__config_check_file(path, collect, NULL), count, "reported:\n%s", reported);
  for (int i = 0; i < count; i++) {
    char want[512];
    snprintf(want, sizeof want, "%s:%s", path, lines[i]);
    cr_expect(strstr(reported, want), "missing '%s' in:\n%s", want, reported);
  }
}

Test(config, a_typo_in_a_key_names_file_line_and_key) {
  const char *path = test_write_config("config", "[gpupart]\nbackend = sim\nmemroy_fraction = 50%\n");
  gpupart_context_desc cd = {.config_path = path};
  char want[128];
  snprintf(want, sizeof want, "%s:3: unknown key 'memroy_fraction' in [gpupart]", path);
  test_context_fails(&cd, want, NULL);
}

Test(config, a_bad_value_names_file_line_key_and_what_is_wrong) {
  const char *lines[] = {"4: memory_fraction: '150%' is above 100%"};
  check_reports("; comment\n[gpupart]\n\nmemory_fraction = 150%\n", 1, lines);
}

Test(config, every_error_of_a_file_is_reported_with_its_line) {
  const char *lines[] = {
      "1: key 'backend' is outside a section (start with [gpupart])",
      "3: unknown key 'memroy_fraction' in [gpupart]",
      "4: expected 'key = value', '[section]' or a comment",
      "5: granularity: '3MiB' (3145728 bytes) is not a power of two",
      "6: unknown section [devices 0] (use [gpupart], [device B:I] or [partition NAME])",
      "8: [device gpu:0]: 'gpu:0' is not a device (use backend:index, e.g. cuda:0, or an index)",
      "11: unknown key 'backend' in [device sim:0]",
      "12: [partition empty] has no size",
      "15: size: '-5GiB' is negative",
      "16: unknown key 'limit' in [partition bad] (use size, guarantee, device, allow_growth or release_threshold)",
      "17: [partition g] has no size",
  };
  check_reports("backend = sim\n[gpupart]\nmemroy_fraction = 50%\nthis line has no equals sign\n"
                "granularity = 3MiB\n[devices 0]\nx = 1\n[device gpu:0]\nheadroom = 0\n[device sim:0]\n"
                "backend = sim\n[partition empty]\n[partition bad]\n\nsize = -5GiB\nlimit = 1GiB\n"
                "[partition g]\nguarantee = 1GiB\n",
                11, lines);
}

Test(config, duplicates_are_errors_within_one_source) {
  const char *lines[] = {"3: memory_fraction: set twice (first at ", "6: size: set twice in [partition a]",
                         "7: [partition a] is declared twice (first at line 4)"};
  check_reports("[gpupart]\nmemory_fraction = 50%\nmemory_fraction = 60%\n[partition a]\nsize = 1GiB\nsize = 2GiB\n"
                "[partition a]\nguarantee = 0\n",
                3, lines);
}

Test(config, lines_inih_would_pass_over_are_errors) {
  char long_line[400];
  snprintf(long_line, sizeof long_line, "[gpupart]\nledger_dir = /%0300d\n[gpupart\nheadroom = 0\n  0\n", 0);
  const char *lines[] = {"2: the line is longer than 197 characters", "3: the section header has no ']'",
                         "5: headroom: continuation lines are not supported; write the value on one line"};
  check_reports(long_line, 3, lines);
}

Test(config, a_partition_whose_bytes_and_share_disagree_fails_at_open_naming_the_line) {
  const char *path =
      test_write_config("config", "[gpupart]\nbackend = sim\n\n[partition a]\nsize = 1GiB\nguarantee = 50%\n");
  gpupart_context_desc cd = {.config_path = path};
  gpupart_context *ctx = context_with(&cd);
  gpupart_device *dev = (gpupart_device *)1;
  cr_expect_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_ECONFIG);
  cr_expect_null(dev);
  char want[128];
  snprintf(want, sizeof want, "%s:4: partition 'a' on sim:0", path);
  cr_expect(strstr(gpupart_last_error(), want), "'%s' lacks '%s'", gpupart_last_error(), want);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(config, a_file_with_several_errors_fails_context_creation_with_the_first) {
  const char *path = test_write_config("config", "[gpupart]\nheadroom = x\nverbose = maybe\n");
  gpupart_context_desc cd = {.config_path = path};
  test_context_fails(&cd, ":2: headroom:", "(and 1 more error)");
}

Test(config, a_nul_byte_in_the_file_is_an_error) {
  const char *path = test_write_config("config", "[gpupart]\n");
  FILE *f = fopen(path, "ab");
  fputc(0, f);
  fputs("x = 1\n", f);
  fclose(f);
  gpupart_context_desc cd = {.config_path = path};
  test_context_fails(&cd, "config_path", "NUL byte");
}

/* ---- nothing half-applied ------------------------------------------------------- */

Test(config, a_bad_last_line_leaves_no_context) {
  setenv("GPUPART_MEMORY_FRACTION", "50%", 1);
  const char *path =
      test_write_config("config", "[gpupart]\nbackend = sim\nheadroom = 1GiB\n[partition a]\nsize = 50%\n"
                                  "[partition b]\nsize = 50%\nguarantee = 60%\n");
  gpupart_context_desc cd = {.config_path = path};
  test_context_fails(&cd, ":6: partition 'b': the guarantee is above the size", NULL);
}

Test(config, a_partition_that_does_not_fit_closes_the_device_and_names_its_source) {
  setenv("GPUPART_PARTITIONS", "a:50%:50%,b:40%:40%,c:20%:20%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev = (gpupart_device *)1;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ECONFIG);
  cr_expect_null(dev);
  cr_expect(strstr(gpupart_last_error(), "GPUPART_PARTITIONS: partition 'c' on sim:0"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "no device was left open");
}

/* The driver refuses the second configured partition's preallocation: the open fails
 * naming it, and the first one's blocks go back (they are host memory here, so a leak
 * would show under the sanitizers), leaving no device open. */
Test(config, a_preallocation_the_driver_refuses_releases_what_was_taken) {
  setenv("GPUPART_ALLOW_GROWTH", "false", 1);
  setenv("GPUPART_SIM_TOTAL", "64MiB", 1);
  setenv("GPUPART_PARTITIONS", "a:25%,b:50%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_sim_desc sim = {.fail_block_alloc_at = 2, .host_backed = 1};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
  gpupart_device *dev = (gpupart_device *)1;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EDEVMEM);
  cr_expect_null(dev);
  cr_expect(strstr(gpupart_last_error(), "GPUPART_PARTITIONS: partition 'b' on sim:0"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "no device was left open");
}

/* Configured partitions belong to the physical device: a second open of a device that is
 * open already shares its ledger, where they exist, and does not make them again. */
Test(config, a_second_open_of_a_device_leaves_its_configured_partitions_to_the_first) {
  setenv("GPUPART_PARTITIONS", "a:25%,b:50%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *first = open_sim(ctx, 0), *second = open_sim(ctx, 0);
  cr_expect_eq(gpupart_partition_count(first), 2);
  cr_expect_eq(gpupart_partition_count(second), 0, "a and b are the first handle's");
  gpupart_partition_desc pd = {.name = "a"};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(second, &pd, &p), GPUPART_EEXIST, "names are device-wide");
  test_check(second);
  cr_expect_eq(gpupart_device_close(second), GPUPART_OK);
  test_check(first);
  close_all(first, ctx);
}
