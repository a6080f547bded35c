/* Configuration as a new user and an adversary meet it: a program that creates the
 * partition the configuration declared, variables changed after the context read them,
 * files whose text would otherwise be dropped in silence (text after ']', CR-only line
 * endings, a FIFO), other frameworks' variables, and messages that must name the right
 * input with the right code however long or odd the text. Criterion runs each test in its
 * own process, so setenv stays local. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "config.h"

static void clear_env(void) {
  static const char *const prefixes[] = {"GPUPART_", "XLA_", "TF_", "PYTORCH_"};
  test_unset_env(prefixes, 4);
}

TestSuite(config_user, .init = clear_env, .fini = test_remove_config);

static void env_fails(const char *a, const char *b) {
  gpupart_context_desc d = {0};
  test_context_fails(&d, a, b);
}

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

/* The result of opening a sim device with this descriptor in an environment context. */
static int open_result(const gpupart_device_desc *base) {
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = base ? *base : (gpupart_device_desc){0};
  d.backend = GPUPART_BACKEND_SIM;
  gpupart_device *dev = NULL;
  int rc = gpupart_device_open(ctx, &d, &dev);
  if (rc == GPUPART_OK) gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  return rc;
}

static int has(const char *text) { return strstr(gpupart_last_error(), text) != NULL; }

/* ---- a program and the configuration declaring the same partition ---------------- */

/* README: GPUPART_PARTITIONS="train:60%:40%,eval:30%" and a program that creates "train". */
Test(config_user, a_program_creating_a_configured_partition_gets_the_configured_one) {
  setenv("GPUPART_PARTITIONS", "train:60%:40%,eval:30%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *configured = gpupart_partition_find(dev, "train"), *train = NULL;
  cr_assert_not_null(configured);
  gpupart_partition_desc d = {.name = "train", .fraction = 0.6, .guarantee_fraction = 0.4};
  cr_assert_eq(gpupart_partition_create(dev, &d, &train), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(train, configured);
  cr_expect_eq(gpupart_partition_count(dev), 2);
  cr_expect(strstr(test_log_text, "'train' is declared by the configuration (GPUPART_PARTITIONS)"), "%s",
            test_log_text);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(train, 256 << 20, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(a);
  close_all(dev, ctx);
}

Test(config_user, the_configuration_values_win_and_a_difference_is_a_warning) {
  setenv("GPUPART_PARTITIONS", "train:25%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *train = NULL;
  gpupart_partition_desc d = {.name = "train", .fraction = 0.6};
  cr_assert_eq(gpupart_partition_create(dev, &d, &train), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(train).limit, 4 * GiB, "the configured 25%% of 16 GiB, not the descriptor's 60%%");
  cr_expect_eq(test_log_warnings, 1);
  cr_expect(strstr(test_log_text, "the descriptor's values are not used"), "%s", test_log_text);
  close_all(dev, ctx);
}

Test(config_user, a_configured_partition_is_handed_over_once) {
  setenv("GPUPART_PARTITIONS", "train:25%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *a = NULL, *b = NULL;
  gpupart_partition_desc d = {.name = "train"};
  cr_assert_eq(gpupart_partition_create(dev, &d, &a), GPUPART_OK);
  cr_expect_eq(gpupart_partition_create(dev, &d, &b), GPUPART_EEXIST, "the program already holds it");
  cr_expect_null(b);
  close_all(dev, ctx);
}

Test(config_user, a_program_partition_of_a_taken_name_is_still_eexist) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *a = test_partition(dev, "x", 64 * MiB, 0), *b = NULL;
  gpupart_partition_desc d = {.name = "x"};
  cr_expect_eq(gpupart_partition_create(dev, &d, &b), GPUPART_EEXIST);
  cr_expect_null(b);
  (void)a;
  close_all(dev, ctx);
}

static int reclaim(gpupart_partition *p, uint64_t bytes, void *user) {
  (void)p, (void)bytes;
  ++*(int *)user;
  return 0;
}

Test(config_user, the_program_reclaim_callback_is_installed_on_the_configured_partition) {
  setenv("GPUPART_PARTITIONS", "cache:4MiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  int calls = 0;
  gpupart_partition *p = NULL;
  gpupart_partition_desc d = {.name = "cache", .reclaim = reclaim, .reclaim_user = &calls};
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK);
  gpupart_allocation *a = NULL, *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 4 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_neq(gpupart_alloc(p, 1 * MiB, 0, &b), GPUPART_OK);
  cr_expect_geq(calls, 1, "the callback ran at the limit");
  gpupart_free(a);
  close_all(dev, ctx);
}

/* ---- configured after start -------------------------------------------------------- */

Test(config_user, a_variable_changed_after_context_creation_is_warned_about) {
  setenv("GPUPART_MEMORY_FRACTION", "50%", 1);
  gpupart_context *ctx = test_env_context();
  setenv("GPUPART_MEMORY_FRACTION", "25%", 1);
  setenv("GPUPART_HEADROOM", "1GiB", 1);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 8 * GiB, "the context keeps what it read");
  cr_expect_eq(test_log_warnings, 1);
  cr_expect(strstr(test_log_text, "GPUPART_MEMORY_FRACTION, GPUPART_HEADROOM changed after gpupart_context_create"),
            "%s", test_log_text);
  close_all(dev, ctx);
}

Test(config_user, unchanged_variables_give_no_warning) {
  setenv("GPUPART_MEMORY_FRACTION", "50%", 1);
  gpupart_context *ctx = test_env_context();
  setenv("GPUPART_MEMORY_FRACTION", "50%", 1);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(test_log_warnings, 0, "%s", test_log_text);
  close_all(dev, ctx);
}

Test(config_user, a_context_that_ignores_the_environment_never_warns) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .log = test_log_capture};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK);
  setenv("GPUPART_HEADROOM", "1GiB", 1);
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(test_log_warnings, 0, "%s", test_log_text);
  close_all(dev, ctx);
}

/* ---- text that would change nothing, silently -------------------------------------- */

Test(config_user, text_after_a_section_bracket_is_an_error) {
  const char *path = test_write_config("user", "[gpupart] headroom = 1GiB\n");
  gpupart_context_desc d = {.config_path = path};
  test_context_fails(&d, ":1: text after ']' on a section line: 'headroom = 1GiB'", NULL);
  path = test_write_config("user", "[gpupart]   ; a comment\nheadroom = 1GiB\n[device 0] # another\nheadroom = 0\n");
  gpupart_context *ctx = NULL;
  cr_expect_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_context_destroy(ctx);
}

Test(config_user, cr_only_line_endings_are_lines) {
  const char *path = test_write_config("user", "[gpupart]\rbackend = sim\rmemory_fraction = 25%\r");
  gpupart_context_desc d = {.config_path = path};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(dev), 4 * GiB);
  close_all(dev, ctx);
  path = test_write_config("user", "[gpupart]\rmemroy = 1\r");
  test_context_fails(&d, ":2: unknown key 'memroy'", NULL);
}

Test(config_user, ini_partition_names_take_63_characters) {
  char text[512], name[64];
  memset(name, 'n', 63);
  name[63] = 0;
  snprintf(text, sizeof text, "[partition %s]\nsize = 10%%\n", name);
  gpupart_context_desc d = {.config_text = text, .flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_not_null(gpupart_partition_find(dev, name));
  close_all(dev, ctx);
  snprintf(text, sizeof text, "[partition %sn]\nsize = 10%%\n", name);
  test_context_fails(&d, "config_text:1:", "longer than 63 characters");
}

Test(config_user, an_unknown_variable_with_a_long_name_is_reported) {
  char name[300];
  memset(name, 'X', sizeof name - 1);
  memcpy(name, "GPUPART_", 8);
  name[sizeof name - 1] = 0;
  setenv(name, "1", 1);
  env_fails("unknown variable", "GPUPART_XXXX");
}

Test(config_user, other_frameworks_variables_are_reported_in_the_verbose_log_not_applied) {
  setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false", 1);
  setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".50", 1);
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
  setenv("GPUPART_VERBOSE", "1", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 16 * GiB, "not applied");
  cr_expect(strstr(test_log_text, "TF_FORCE_GPU_ALLOW_GROWTH=false is not read by gpupart (not applied); the "
                                  "equivalent: GPUPART_ALLOW_GROWTH=false"),
            "%s", test_log_text);
  cr_expect(strstr(test_log_text, "XLA_PYTHON_CLIENT_MEM_FRACTION=.50 is not read by gpupart (not applied); the "
                                  "equivalent: GPUPART_MEMORY_FRACTION=.50"),
            "%s", test_log_text);
  cr_expect(strstr(test_log_text, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), "%s", test_log_text);
  close_all(dev, ctx);
}

Test(config_user, a_jax_style_fraction_is_accepted) {
  setenv("GPUPART_MEMORY_FRACTION", ".50", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  cr_expect_eq(gpupart_device_budget(dev), 8 * GiB);
  close_all(dev, ctx);
}

/* ---- hangs ------------------------------------------------------------------------- */

Test(config_user, a_fifo_is_refused_without_blocking, .timeout = 20) {
  snprintf(test_config_path, sizeof test_config_path, "/tmp/gpupart-fifo-%d", (int)getpid());
  cr_assert_eq(mkfifo(test_config_path, 0600), 0);
  setenv("GPUPART_CONFIG", test_config_path, 1);
  env_fails("it is a FIFO, not a regular file", "GPUPART_CONFIG");
  cr_expect_eq(gpupart__config_check_file(test_config_path, NULL, NULL), 1);
}

Test(config_user, a_directory_is_refused) {
  setenv("GPUPART_CONFIG", "/tmp", 1);
  env_fails("it is a directory, not a regular file", NULL);
}

/* ---- errors that mislead ----------------------------------------------------------- */

Test(config_user, a_tiny_fraction_is_named_as_the_cause) {
  setenv("GPUPART_MEMORY_FRACTION", "0.0000001", 1);
  cr_expect_eq(open_result(NULL), GPUPART_ECONFIG);
  cr_expect(has("memory_fraction leaves 1717 bytes (GPUPART_MEMORY_FRACTION)"), "%s", gpupart_last_error());
}

Test(config_user, a_memory_limit_below_the_granularity_is_named_as_the_cause) {
  setenv("GPUPART_MEMORY_LIMIT", "1MiB", 1);
  cr_expect_eq(open_result(NULL), GPUPART_ECONFIG);
  cr_expect(has("memory_limit leaves 1048576 bytes (GPUPART_MEMORY_LIMIT), below the granularity"), "%s",
            gpupart_last_error());
}

Test(config_user, a_tiny_sim_total_is_econfig_naming_it) {
  setenv("GPUPART_SIM_TOTAL", "1KiB", 1);
  cr_expect_eq(open_result(NULL), GPUPART_ECONFIG, "%s", gpupart_last_error());
  cr_expect(has("(GPUPART_SIM_TOTAL)"), "%s", gpupart_last_error());
}

Test(config_user, a_tiny_descriptor_fraction_is_einval) {
  gpupart_device_desc d = {.memory_fraction = 1e-300};
  cr_expect_eq(open_result(&d), GPUPART_EINVAL);
  cr_expect(has("memory_fraction leaves 0 bytes (descriptor)"), "%s", gpupart_last_error());
}

Test(config_user, a_descriptor_backend_out_of_range_is_named) {
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = {.backend = (gpupart_backend)256};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect(has("unknown backend 256"), "%s", gpupart_last_error());
  gpupart_context_destroy(ctx);
}

Test(config_user, a_backend_list_says_why_each_backend_was_skipped) {
  setenv("GPUPART_BACKEND", "vulkan,opencl", 1);
  setenv("GPUPART_VULKAN_LIBRARY", "/nonexistent/libvulkan.so", 1);
  setenv("GPUPART_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, NULL, &dev), GPUPART_ENODEV);
  cr_expect(has("vulkan: GPUPART_VULKAN_LIBRARY=/nonexistent/libvulkan.so: "), "%s", gpupart_last_error());
  cr_expect(has("; opencl: ") && has("/nonexistent/libOpenCL.so"), "%s", gpupart_last_error());
  gpupart_context_destroy(ctx);
}

/* A ~730-character path: /tmp/gpupart-long-PID-ddd.../eee.../fff....ini */
Test(config_user, a_long_config_path_keeps_the_line_and_the_reason) {
  char dir[300], sub[600], path[1000];
  snprintf(dir, sizeof dir, "/tmp/gpupart-long-%d-%0200d", (int)getpid(), 0);
  snprintf(sub, sizeof sub, "%s/%0250d", dir, 1);
  snprintf(path, sizeof path, "%s/%0240d.ini", sub, 2);
  cr_assert_eq(mkdir(dir, 0700), 0);
  cr_assert_eq(mkdir(sub, 0700), 0);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs("[gpupart]\n\nmemroy_fraction = 50%\n", f);
  fclose(f);
  gpupart_context_desc d = {.config_path = path};
  test_context_fails(&d, ":3: unknown key 'memroy_fraction'", "...");
  unlink(path);
  rmdir(sub);
  rmdir(dir);
}

Test(config_user, a_long_partition_name_keeps_the_reason) {
  char spec[2100];
  memset(spec, 'n', 2000);
  strcpy(spec + 2000, ":10%");
  setenv("GPUPART_PARTITIONS", spec, 1);
  env_fails("GPUPART_PARTITIONS:", "longer than 63 characters");
  unsetenv("GPUPART_PARTITIONS");
  spec[2000] = 0; /* a program's own name has no such limit, but its messages stay whole */
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx, 0);
  gpupart_partition *a = test_partition(dev, spec, 64 * MiB, 0), *b = NULL;
  gpupart_partition_desc d = {.name = spec};
  cr_expect_eq(gpupart_partition_create(dev, &d, &b), GPUPART_EEXIST);
  cr_expect(has("...") && has("' exists on this device"), "%s", gpupart_last_error());
  (void)a;
  close_all(dev, ctx);
}

Test(config_user, control_characters_are_escaped_in_messages) {
  setenv("GPUPART_ALLOW_GROWTH", "yes\033[2J", 1);
  env_fails("'yes\\x1b[2J' is not a boolean", NULL);
  cr_expect_null(strchr(gpupart_last_error(), '\033'));
}

Test(config_user, a_decimal_comma_in_a_variable_says_so) {
  setenv("GPUPART_MEMORY_FRACTION", "0,5", 1);
  env_fails("'0,5' has a decimal comma", NULL);
}

Test(config_user, one_more_error_is_singular) {
  const char *path = test_write_config("user", "[gpupart]\nheadroom = x\ngranularity = 3\n");
  gpupart_context_desc d = {.config_path = path};
  test_context_fails(&d, "(and 1 more error)", NULL);
}

/* ---- check-config judges the file as a whole --------------------------------------- */

static char reported[8192];

static void collect(const char *message, void *user) {
  (void)user;
  strncat(reported, message, sizeof reported - strlen(reported) - 2);
  strcat(reported, "\n");
}

static int check_text(const char *text) {
  reported[0] = 0;
  return gpupart__config_check_file(test_write_config("user", text), collect, NULL);
}

Test(config_user, check_config_refuses_sections_for_an_excluded_backend) {
  cr_expect_eq(check_text("[gpupart]\nbackend = vulkan, opencl\n\n[device cuda:0]\nmemory_fraction = 50%\n"
                          "allow_growth = false\n\n[partition train]\ndevice = cuda:0\nsize = 60%\n"),
               2, "%s", reported);
  cr_expect(strstr(reported, ":5: a [device] section's value on cuda:0 can never apply: this file's backend = "
                             "vulkan,opencl (line 2) excludes cuda"),
            "%s", reported);
  cr_expect(strstr(reported, ":8: partition 'train' on cuda:0 can never apply"), "%s", reported);
  cr_expect_eq(check_text("[gpupart]\nbackend = cuda, vulkan\n[device cuda:0]\nheadroom = 1GiB\n"), 0, "%s", reported);
  cr_expect_eq(check_text("[gpupart]\nbackend = sim\n[device cuda:0]\nheadroom = 1GiB\ngranularity = 4MiB\n"
                          "[device opencl:1]\nheadroom = 1GiB\n"),
               2, "one report per section:\n%s", reported);
}

Test(config_user, check_config_sums_guarantees_however_the_device_is_written) {
  cr_expect_eq(check_text("[partition a]\nsize = 50%\nguarantee = 40%\n[partition b]\ndevice = 0\nsize = 50%\n"
                          "guarantee = 40%\n[partition c]\ndevice = sim:0\nsize = 50%\nguarantee = 40%\n"),
               1, "%s", reported);
  cr_expect(strstr(reported, ":8: partition 'c': the guarantees on sim:0 add up to more than the budget"), "%s",
            reported);
}

Test(config_user, check_config_sums_preallocated_sizes) {
  cr_expect_eq(check_text("[gpupart]\nallow_growth = false\n[partition a]\nsize = 70%\n[partition b]\nsize = 70%\n"), 1,
               "%s", reported);
  cr_expect(strstr(reported, ":5: partition 'b': the sizes of the preallocated partitions"), "%s", reported);
  cr_expect_eq(check_text("[partition a]\nsize = 70%\nallow_growth = false\n[partition b]\nsize = 70%\n"), 0, "%s",
               reported);
}

/* ---- the sim backend's sharing, as docs/backends.md states it ----------------------- */

static uint64_t free_bytes(gpupart_device *dev) {
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  return info.free_bytes;
}

Test(config_user, sim_devices_share_memory_within_a_context_not_across_contexts) {
  gpupart_context *c1 = test_context(), *c2 = test_context();
  gpupart_device *a = open_sim(c1, 0), *b = open_sim(c1, 0), *other = open_sim(c2, 0);
  gpupart_partition *p = test_partition(a, "p", 64 * MiB, 0);
  gpupart_allocation *x = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &x), GPUPART_OK);
  cr_expect_eq(free_bytes(b), 16 * GiB - 64 * MiB, "the same device in one context");
  cr_expect_eq(free_bytes(other), 16 * GiB, "another context's sim device is its own");
  gpupart_free(x);
  gpupart_device_close(other);
  gpupart_device_close(b);
  gpupart_device_close(a);
  gpupart_context_destroy(c2);
  gpupart_context_destroy(c1);
}

/* The suite's init removes every GPUPART_* variable; the DRA metadata folder stays pinned
 * (tests/config_env.h), so that a context reading the environment never reads the
 * machine's /var/run/kubernetes.io/dra-device-attributes. */
Test(config_user, the_dra_metadata_folder_stays_pinned_when_the_variables_are_cleared) {
  const char *dra = getenv("GPUPART_DRA_METADATA_DIR");
  cr_assert_not_null(dra, "a context would read the machine's DRA metadata");
  cr_expect_str_neq(dra, "/var/run/kubernetes.io/dra-device-attributes");
}
