/* Configuration of what a device's partitions do, and what a device open says about the
 * configuration it applies: the growth knobs (initial_block, max_block, growth_factor)
 * as defaults of the partitions that leave them 0, allow_growth = false with no partition
 * configured, an initial block above the largest, and configuration that can never
 * apply on this machine. Criterion runs each test in its own process, so setenv stays
 * local. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "internal.h" /* a partition's effective growth policy, a device's settings */

TestSuite(config_policy, .init = test_clear_gpupart_env, .fini = test_remove_config);

static gpupart_device *open_sim(gpupart_context *ctx, uint32_t index) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .index = index};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static void close_all(gpupart_device *dev, gpupart_context *ctx) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

/* The first block a growing partition takes, after one small allocation. */
static uint64_t first_block(gpupart_device *dev, const gpupart_partition_desc *pd) {
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_partition_create(dev, pd, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_alloc(p, 1, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  uint64_t reserved = test_stats(p).reserved;
  gpupart_free(a);
  cr_assert_eq(gpupart_partition_destroy(p), GPUPART_OK);
  return reserved;
}

Test(config_policy, initial_block_and_max_block_set_the_blocks_of_partitions_that_leave_them_0) {
  setenv("GPUPART_INITIAL_BLOCK", "8MiB", 1);
  setenv("GPUPART_CONFIG", test_write_config("policy", "[device sim:1]\nmax_block = 4MiB\n"), 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(first_block(dev, &(gpupart_partition_desc){.name = "env"}), 8 * MiB);
  cr_expect_eq(first_block(dev, &(gpupart_partition_desc){.name = "desc", .initial_block = 2 * MiB}), 2 * MiB,
               "the descriptor's field beats the variable");
  cr_expect_eq(dev->settings.v[GPUPART__OPT_MAX_BLOCK].u, GiB, "1 GiB: the default");
  gpupart_device *dev1 = open_sim(ctx, 1);
  cr_expect_eq(first_block(dev1, &(gpupart_partition_desc){.name = "capped"}), 4 * MiB,
               "the [device] section's max_block caps the initial block");
  gpupart_partition *p = test_partition(dev1, "policy", 64 * MiB, 0);
  cr_expect_eq(p->growth.max_block, 4 * MiB);
  cr_expect_float_eq(p->growth.factor, 2.0, 0, "2.0: the default");
  gpupart_device_close(dev1);
  close_all(dev, ctx);
}

Test(config_policy, growth_factor_per_device_and_from_the_file) {
  setenv("GPUPART_GROWTH_FACTOR", "1.5,sim:1=4", 1);
  setenv("GPUPART_CONFIG",
         test_write_config("policy", "[gpupart]\ngrowth_factor = 3\n[device sim:2]\ngrowth_factor = 1.25\n"), 1);
  gpupart_context *ctx = test_env_context();
  const double want[3] = {1.5, 4, 1.5}; /* the variable's bare value beats the file's section */
  for (uint32_t i = 0; i < 3; i++) {
    gpupart_device *dev = open_sim(ctx, i);
    gpupart_partition *p = test_partition(dev, "f", 64 * MiB, 0);
    cr_expect_float_eq(p->growth.factor, want[i], 0, "sim:%u", i);
    gpupart_partition *q = NULL;
    cr_assert_eq(gpupart_partition_create(dev, &(gpupart_partition_desc){.name = "own", .growth_factor = 1.1}, &q),
                 GPUPART_OK);
    cr_expect_float_eq(q->growth.factor, 1.1, 0, "the descriptor's factor beats the configuration");
    cr_assert_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  }
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  unsetenv("GPUPART_GROWTH_FACTOR");
  ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 2);
  gpupart_partition *p = test_partition(dev, "f", 64 * MiB, 0);
  cr_expect_float_eq(p->growth.factor, 1.25, 0, "the file's device section");
  close_all(dev, ctx);
}

Test(config_policy, bad_growth_knobs_name_the_variable_and_what_is_wrong) {
  gpupart_context_desc d = {0};
  setenv("GPUPART_GROWTH_FACTOR", "0.5", 1);
  test_context_fails(&d, "GPUPART_GROWTH_FACTOR", "is below 1");
  setenv("GPUPART_GROWTH_FACTOR", "2x", 1);
  test_context_fails(&d, "GPUPART_GROWTH_FACTOR", "not a number");
  unsetenv("GPUPART_GROWTH_FACTOR");
  setenv("GPUPART_INITIAL_BLOCK", "0", 1);
  test_context_fails(&d, "GPUPART_INITIAL_BLOCK", "above 0");
  unsetenv("GPUPART_INITIAL_BLOCK");
  setenv("GPUPART_CONFIG", test_write_config("policy", "[gpupart]\n\nmax_block = 50%\n"), 1);
  test_context_fails(&d, ":3: ", "bytes are expected");
}

Test(config_policy, allow_growth_false_alone_says_that_nothing_is_taken_until_a_partition_exists) {
  setenv("GPUPART_ALLOW_GROWTH", "false", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect(strstr(test_log_text,
                   "allow_growth = false (GPUPART_ALLOW_GROWTH) and no partition is configured for sim:0: "
                   "nothing is preallocated until the program creates a partition"),
            "%s", test_log_text);
  cr_expect_eq(test_stats(test_partition(dev, "a", 64 * MiB, 0)).reserved, 64 * MiB, "the partition preallocates");
  close_all(dev, ctx);
  test_log_text[0] = '\0';
  setenv("GPUPART_PARTITIONS", "tf:100%", 1); /* docs/configuration.md's migration row */
  ctx = test_env_context();
  dev = open_sim(ctx, 0);
  cr_expect_eq(strstr(test_log_text, "no partition is configured"), NULL, "%s", test_log_text);
  gpupart_partition *tf = gpupart_partition_find(dev, "tf");
  cr_assert_not_null(tf);
  cr_expect_eq(test_stats(tf).reserved, gpupart_device_budget(dev), "the whole budget, taken at open");
  close_all(dev, ctx);
}

Test(config_policy, an_initial_block_above_max_block_is_a_warning_naming_both) {
  setenv("GPUPART_INITIAL_BLOCK", "64MiB", 1);
  setenv("GPUPART_MAX_BLOCK", "16MiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect(strstr(test_log_text, "initial_block 67108864 (GPUPART_INITIAL_BLOCK) is above max_block 16777216 "
                                  "(GPUPART_MAX_BLOCK): partitions start at max_block"),
            "%s", test_log_text);
  cr_expect_eq(first_block(dev, &(gpupart_partition_desc){.name = "p"}), 16 * MiB);
  close_all(dev, ctx);
}

/* The first open tries cuda (the backend list's first), which cannot load here. */
static void unreachable_cuda_config(void) {
  setenv("GPUPART_BACKEND", "cuda,sim", 1);
  setenv("GPUPART_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1); /* no machine loads it */
  setenv("GPUPART_MEMORY_FRACTION", "50%,cuda:2=25%", 1);
  setenv("GPUPART_CONFIG",
         test_write_config("policy", "[device cuda:0]\nheadroom = 1MiB\n[device sim:3]\nheadroom = 2MiB\n"
                                     "[partition t]\ndevice = cuda:0\nsize = 10%\n"),
         1);
}

Test(config_policy, configuration_that_can_never_apply_here_is_logged_once_at_the_first_open) {
  unreachable_cuda_config();
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc auto_choice = {0};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &auto_choice, &dev), GPUPART_OK, "%s", gpupart_last_error());
  char want[256];
  snprintf(want, sizeof want,
           "configuration that can never apply on this machine: GPUPART_MEMORY_FRACTION's entry "
           "cuda:2 (GPUPART_MEMORY_FRACTION): cuda: ");
  cr_expect(strstr(test_log_text, want), "%s", test_log_text);
  snprintf(want, sizeof want, "; [device cuda:0] (%s:2): cuda: ", test_config_path);
  cr_expect(strstr(test_log_text, want), "%s", test_log_text);
  snprintf(want, sizeof want, "; partition 't' on cuda:0 (%s:5): cuda: ", test_config_path);
  cr_expect(strstr(test_log_text, want), "%s", test_log_text);
  cr_expect_eq(strstr(test_log_text, "sim:3"), NULL, "a sim device of any index can open: %s", test_log_text);
  size_t said = strlen(test_log_text);
  gpupart_device *dev3 = open_sim(ctx, 3);
  cr_expect_eq(strlen(test_log_text), said, "said once per context: %s", test_log_text + said);
  cr_expect_eq(gpupart_device_close(dev3), GPUPART_OK);
  close_all(dev, ctx);
}

/* An open that names its backend tries no other: no driver library is loaded only to
 * warn, so nothing is known of cuda, and nothing is said. */
Test(config_policy, an_open_loads_no_backend_only_to_warn) {
  unreachable_cuda_config();
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(strstr(test_log_text, "can never apply"), NULL, "%s", test_log_text);
  cr_expect_eq(ctx->backends[GPUPART_BACKEND_CUDA].tried, 0, "the CUDA backend was not loaded");
  close_all(dev, ctx);
}

/* gpupart_context_option: an option of a device as its open resolves it, for layers that
 * open devices in a context of their own. The per-device variable and a [device]
 * section reach only that device; what no device decides yet is written in the option's
 * syntax; what is not a one-valued option, and an out too small, are refused. */
Test(config_policy, context_option_resolves_an_option_for_one_device) {
  setenv("GPUPART_EXPANDABLE", "cuda:0=1", 1);
  gpupart_context_desc cd = {.config_text = "[gpupart]\nmax_block = 64MiB\n[device cuda:1]\nmax_block = 8MiB\n"};
  gpupart_context *ctx = NULL;
  char v[16];
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "expandable", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "true");
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 1, "EXPANDABLE", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "false");
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_SIM, 0, "expandable", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "false");
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "max_block", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "67108864");
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 1, "max_block", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "8388608");
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 1, "max_block", v, 7), GPUPART_EINVAL);
  cr_expect(strstr(gpupart_last_error(), "needs 8 bytes"), "%s", gpupart_last_error());
  cr_expect_str_eq(v, "");
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "partitions", v, sizeof v), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "expandible", v, sizeof v), GPUPART_EINVAL);
  cr_expect(strstr(gpupart_last_error(), "'expandible'"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_AUTO, 0, "expandable", v, sizeof v), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(ctx, (gpupart_backend)99, 0, "expandable", v, sizeof v), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(NULL, GPUPART_BACKEND_CUDA, 0, "expandable", v, sizeof v), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, NULL, v, sizeof v), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "expandable", NULL, 4), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_CUDA, 0, "expandable", v, 0), GPUPART_EINVAL);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* The device option of one device is that device's index (not "all", which an empty
 * visible list means), whatever GPUPART_DEVICE lists: the index is physical. */
Test(config_policy, context_option_device_is_the_index_asked_for) {
  setenv("GPUPART_DEVICE", "1,0", 1);
  gpupart_context *ctx = NULL;
  char v[16];
  cr_assert_eq(gpupart_context_create(NULL, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_SIM, 0, "device", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "0");
  cr_assert_eq(gpupart_context_option(ctx, GPUPART_BACKEND_SIM, 7, "device", v, sizeof v), GPUPART_OK);
  cr_expect_str_eq(v, "7");
  cr_expect_eq(gpupart_context_option(ctx, GPUPART_BACKEND_SIM, 7, "device", v, 1), GPUPART_EINVAL);
  cr_expect(strstr(gpupart_last_error(), "needs 2 bytes"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
