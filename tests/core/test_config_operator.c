/* The operator's word (core/config/settings.c, core/config/shares.c, core/config/config.c): the ceilings
 * GPUPART_MEMORY_LIMIT_MAX and GPUPART_MEMORY_FRACTION_MAX lower what the code asks, and
 * the shares an orchestrator assigned (HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>], Slurm's
 * SLURM_SHARD_MEM_PER_GPU, the cgroup v2 dmem.max) become the memory_limit of a device
 * nothing else limits, each read as hostile input. The cgroup files are a fake tree under
 * /tmp (gpupart__cgroup), so no test depends on the machine's cgroups. Criterion runs each
 * test in its own process, so setenv and the cgroup paths stay local. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "internal.h"

static char tree[64]; /* the fake cgroup tree of this test */

static void clear_env(void) {
  static const char *const prefixes[] = {"GPUPART_", "CUDA_DEVICE_MEMORY_LIMIT", "SLURM_"};
  test_unset_env(prefixes, 3);
  gpupart__cgroup = (gpupart__cgroup_paths){"/nonexistent/cgroup", "/nonexistent"};
}

static void cleanup(void) {
  if (!tree[0]) return;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tree);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(config_operator, .init = clear_env, .fini = cleanup);

static gpupart_device *open_with(gpupart_context *ctx, gpupart_device_desc d) {
  gpupart_device *dev = NULL;
  d.backend = GPUPART_BACKEND_SIM;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

/* The budget and the memory_limit source of sim:index opened with descriptor d. */
static uint64_t budget_of(gpupart_device_desc d, char *src, size_t n) {
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_with(ctx, d);
  uint64_t b = gpupart_device_budget(dev);
  if (src) gpupart__source_format(dev->settings.v[GPUPART__OPT_MEMORY_LIMIT].src, src, n);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  return b;
}

/* ---- ceilings ---------------------------------------------------------------------- */

Test(config_operator, memory_limit_max_caps_a_limit_the_descriptor_sets) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "4GiB", 1);
  char src[64];
  cr_expect_eq(budget_of((gpupart_device_desc){.memory_limit = 8 * GiB}, src, sizeof src), 4 * GiB);
  cr_expect_str_eq(src, "GPUPART_MEMORY_LIMIT_MAX");
}

Test(config_operator, memory_fraction_max_caps_a_fraction_the_descriptor_sets) {
  setenv("GPUPART_MEMORY_FRACTION_MAX", "25%", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){.memory_fraction = 0.9}, NULL, 0), 4 * GiB); /* of 16 GiB */
}

Test(config_operator, memory_limit_max_caps_the_environment_and_a_device_with_no_limit) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "3GiB", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){0}, NULL, 0), 3 * GiB);
  setenv("GPUPART_MEMORY_LIMIT", "6GiB", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){0}, NULL, 0), 3 * GiB);
}

Test(config_operator, a_ceiling_above_what_is_asked_changes_nothing) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "8GiB", 1);
  setenv("GPUPART_MEMORY_FRACTION_MAX", "90%", 1);
  char src[64];
  cr_expect_eq(budget_of((gpupart_device_desc){.memory_limit = 2 * GiB, .memory_fraction = 0.5}, src, sizeof src),
               2 * GiB);
  cr_expect_str_eq(src, "descriptor");
}

Test(config_operator, a_ceiling_is_per_device_in_the_variable_and_the_file) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "1=2GiB", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){.memory_limit = 8 * GiB}, NULL, 0), 8 * GiB);
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 1, .memory_limit = 8 * GiB}, NULL, 0), 2 * GiB);
  unsetenv("GPUPART_MEMORY_LIMIT_MAX");
  gpupart_context_desc cd = {.config_text = "[device sim:0]\nmemory_limit_max = 1GiB\n"};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = open_with(ctx, (gpupart_device_desc){.memory_limit = 8 * GiB});
  cr_expect_eq(gpupart_device_budget(dev), 1 * GiB);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(config_operator, a_partition_the_code_asks_above_the_ceiling_is_refused) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "1GiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_with(ctx, (gpupart_device_desc){.memory_limit = 8 * GiB});
  gpupart_partition_desc pd = {.name = "big", .limit = 4 * GiB};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &pd, &p), GPUPART_ELIMIT);
  cr_expect(strstr(gpupart_last_error(), "exceeds the budget"), "%s", gpupart_last_error());
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(config_operator, verbose_output_says_what_the_ceiling_clipped) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "4GiB", 1);
  setenv("GPUPART_VERBOSE", "1", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_with(ctx, (gpupart_device_desc){.memory_limit = 8 * GiB});
  cr_expect(strstr(test_log_text, "memory_limit       = 4294967296 (GPUPART_MEMORY_LIMIT_MAX; clipped by the ceiling: "
                                  "descriptor asked 8589934592)"),
            "%s", test_log_text);
  cr_expect_eq(dev->settings.clipped[GPUPART__CLIP_LIMIT], 1);
  cr_expect_eq(dev->settings.clipped[GPUPART__CLIP_FRACTION], 0);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(config_operator, a_ceiling_below_the_granularity_is_a_config_error_naming_it) {
  setenv("GPUPART_MEMORY_LIMIT_MAX", "1MiB", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .memory_limit = 8 * GiB};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ECONFIG);
  cr_expect(strstr(gpupart_last_error(), "GPUPART_MEMORY_LIMIT_MAX"), "%s", gpupart_last_error());
  gpupart_context_destroy(ctx);
}

Test(config_operator, a_bad_ceiling_fails_context_creation) {
  setenv("GPUPART_MEMORY_FRACTION_MAX", "150%", 1);
  gpupart_context_desc d = {0};
  gpupart_context *ctx = NULL;
  cr_expect_eq(gpupart_context_create(&d, &ctx), GPUPART_ECONFIG);
  cr_expect(strstr(gpupart_last_error(), "GPUPART_MEMORY_FRACTION_MAX: '150%' is above 100%"), "%s",
            gpupart_last_error());
}

/* ---- HAMi -------------------------------------------------------------------------- */

Test(config_operator, hami_per_device_limit_is_the_memory_limit_of_that_index) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "4096m", 1);
  char src[64];
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 1}, src, sizeof src), 4 * GiB);
  cr_expect_str_eq(src, "CUDA_DEVICE_MEMORY_LIMIT_1");
  cr_expect_eq(budget_of((gpupart_device_desc){0}, src, sizeof src), 16 * GiB);
  cr_expect_str_eq(src, "default");
}

Test(config_operator, hami_plain_limit_is_every_devices_and_a_per_device_one_beats_it) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "2g", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1G", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_2", "0m", 1); /* none: the plain value applies, as in HAMi-core */
  cr_expect_eq(budget_of((gpupart_device_desc){0}, NULL, 0), 1 * GiB);
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 1}, NULL, 0), 2 * GiB);
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 2}, NULL, 0), 2 * GiB);
}

Test(config_operator, hami_units_are_powers_of_1024_and_bytes_without_one) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1048576k", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "3221225472", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){0}, NULL, 0), 1 * GiB);
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 1}, NULL, 0), 3 * GiB);
}

Test(config_operator, gpupart_settings_beat_orchestrator_shares) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "2g", 1);
  setenv("SLURM_SHARD_MEM_PER_GPU", "1024M", 1);
  char src[64];
  cr_expect_eq(budget_of((gpupart_device_desc){.memory_limit = 8 * GiB}, src, sizeof src), 8 * GiB);
  cr_expect_str_eq(src, "descriptor");
  setenv("GPUPART_MEMORY_LIMIT", "6GiB", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){0}, src, sizeof src), 6 * GiB);
  cr_expect_str_eq(src, "GPUPART_MEMORY_LIMIT");
  unsetenv("GPUPART_MEMORY_LIMIT");
  cr_expect_eq(budget_of((gpupart_device_desc){0}, src, sizeof src), 2 * GiB); /* HAMi before Slurm */
  cr_expect_str_eq(src, "CUDA_DEVICE_MEMORY_LIMIT");
}

Test(config_operator, a_ceiling_caps_an_orchestrator_share_too) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "8g", 1);
  setenv("GPUPART_MEMORY_LIMIT_MAX", "3GiB", 1);
  cr_expect_eq(budget_of((gpupart_device_desc){0}, NULL, 0), 3 * GiB);
}

Test(config_operator, garbage_hami_values_are_warnings_and_ignored) {
  static const char *const bad[] = {"4096x", "-1", "0x10", "4096 m", "1.5g", "99999999999999999999g", "m", "4096mb"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clear_env();
    test_log_text[0] = 0;
    setenv("CUDA_DEVICE_MEMORY_LIMIT", bad[i], 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_x", "1g", 1);
    char src[64];
    cr_expect_eq(budget_of((gpupart_device_desc){0}, src, sizeof src), 16 * GiB, "%s", bad[i]);
    cr_expect_str_eq(src, "default");
    cr_expect(strstr(test_log_text, "is not an amount (4096m, 4g, bytes): ignored"), "%s: %s", bad[i], test_log_text);
    cr_expect(strstr(test_log_text, "CUDA_DEVICE_MEMORY_LIMIT_x: not a device index"), "%s", test_log_text);
  }
}

Test(config_operator, orchestrator_names_are_not_unknown_gpupart_variables) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1g", 1);
  setenv("SLURM_SHARD_MEM_PER_GPU", "garbage", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_junk", "garbage", 1);
  gpupart_context *ctx = test_env_context();
  cr_expect_eq(ctx->cfg->nshares, 1);
  cr_expect_eq(ctx->cfg->nshare_warnings, 2);
  cr_expect_eq(ctx->cfg->nforeign, 0); /* read by gpupart, so not an other framework's */
  gpupart_context_destroy(ctx);
}

/* ---- Slurm ------------------------------------------------------------------------- */

static gpupart__config *new_config(void) {
  gpupart__config *c = calloc(1, sizeof *c);
  cr_assert_not_null(c);
  return c;
}

Test(config_operator, slurm_amounts_are_mib_by_default_and_keyed_by_pci_address) {
  gpupart__config *c = new_config();
  gpupart__share_slurm(c, "0000:3b:00.0=3072M,0000:AF:00.0=2048,0000:d8:00.0=1G");
  cr_assert_eq(c->nshares, 3);
  cr_expect_eq(c->nshare_warnings, 0);
  cr_expect_eq(gpupart__config_share(c, 5, "0000:3b:00.0")->bytes, 3072 * MiB);
  cr_expect_eq(gpupart__config_share(c, 0, "0000:af:00.0")->bytes, 2048 * MiB); /* case-insensitive */
  cr_expect_eq(gpupart__config_share(c, 0, "0000:d8:00.0")->bytes, 1 * GiB);
  cr_expect_null(gpupart__config_share(c, 0, "0000:3b:00.1"));
  cr_expect_null(gpupart__config_share(c, 0, "")); /* a device whose address is unknown */
  free(c);
}

Test(config_operator, garbage_slurm_entries_are_warnings_and_ignored) {
  gpupart__config *c = new_config();
  gpupart__share_slurm(c, "0000:3b:00.0=-5M,nonsense=1M,=4M,0000:3b:00.0=,0000:3b:00.0=12Q,0000:3b:00.0=4M4,,"
                          "0000:3b:00.0=99999999999999999999T,0000:3c:00.0=64M");
  cr_expect_eq(c->nshares, 1);
  cr_expect_eq(c->nshare_warnings, GPUPART__MAX_SHARE_WARNINGS); /* 8 bad entries: every one reported */
  cr_expect(strstr(c->share_warnings[1], "entry 'nonsense=1M' is not ADDRESS=AMOUNT"), "%s", c->share_warnings[1]);
  cr_expect_eq(gpupart__config_share(c, 0, "0000:3c:00.0")->bytes, 64 * MiB);
  free(c);
}

Test(config_operator, a_slurm_amount_without_address_is_every_devices_end_to_end) {
  setenv("SLURM_SHARD_MEM_PER_GPU", "3072M", 1);
  char src[64];
  cr_expect_eq(budget_of((gpupart_device_desc){.index = 3}, src, sizeof src), 3 * GiB);
  cr_expect_str_eq(src, "SLURM_SHARD_MEM_PER_GPU");
}

/* ---- cgroup dmem.max --------------------------------------------------------------- */

static void put(const char *rel, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", tree, rel);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs(text, f);
  fclose(f);
}

static void make_dirs(const char *rel) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s'", tree, rel);
  cr_assert_eq(system(cmd), 0);
}

/* A fake tree: tree/self-cgroup holds cgroup_line, tree/fs/... the cgroup hierarchy. */
static void fake_cgroup(const char *cgroup_line) {
  snprintf(tree, sizeof tree, "/tmp/gpupart-cgroup-XXXXXX");
  cr_assert_not_null(mkdtemp(tree));
  make_dirs("fs/kubepods/pod1");
  put("self-cgroup", cgroup_line);
  static char proc[96], root[96];
  snprintf(proc, sizeof proc, "%s/self-cgroup", tree);
  snprintf(root, sizeof root, "%s/fs", tree);
  gpupart__cgroup = (gpupart__cgroup_paths){proc, root};
}

static gpupart__config *load(void) {
  gpupart_context_desc d = {0};
  gpupart__config *c = NULL;
  cr_assert_eq(gpupart__config_load(gpupart__hostmem_default(), &d, &c), GPUPART_OK, "%s", gpupart_last_error());
  return c;
}

Test(config_operator, dmem_max_limits_the_device_of_its_region_smallest_on_the_path) {
  fake_cgroup("12:memory:/x\n0::/kubepods/pod1\n");
  put("fs/kubepods/pod1/dmem.max", "drm/0000:03:00.0/vram0 1073741824\ndrm/0000:04:00.0/vram0 max\n");
  put("fs/kubepods/dmem.max", "drm/0000:03:00.0/vram0 536870912\n");
  gpupart__config *c = load();
  const gpupart__share *s = gpupart__config_share(c, 0, "0000:03:00.0");
  cr_assert_not_null(s);
  cr_expect_eq(s->bytes, 512 * MiB);
  cr_expect_str_eq(s->source, "dmem.max of cgroup /kubepods");
  cr_expect_null(gpupart__config_share(c, 0, "0000:04:00.0")); /* max: no limit */
  cr_expect_null(gpupart__config_share(c, 0, "0000:03:00"));   /* a prefix is not the address */
  cr_expect_eq(c->nshare_warnings, 0);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(config_operator, hami_comes_before_dmem_in_the_order) {
  fake_cgroup("0::/kubepods/pod1\n");
  put("fs/kubepods/pod1/dmem.max", "drm/0000:03:00.0/vram0 1073741824\n");
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "2g", 1);
  gpupart__config *c = load();
  cr_expect_str_eq(gpupart__config_share(c, 0, "0000:03:00.0")->source, "CUDA_DEVICE_MEMORY_LIMIT");
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(config_operator, garbage_dmem_lines_are_warnings_and_ignored) {
  fake_cgroup("0::/kubepods/pod1\n");
  put("fs/kubepods/pod1/dmem.max", "drm/0000:03:00.0/vram0 -1\njust-one-word\ndrm/0000:03:00.0/vram0 12 extra\n"
                                   "drm/0000:03:00.0/vram0 99999999999999999999999\ndrm/0000:05:00.0/vram0 4194304\n");
  gpupart__config *c = load();
  cr_expect_eq(c->nshare_warnings, 4);
  cr_expect_null(gpupart__config_share(c, 0, "0000:03:00.0"));
  cr_expect_eq(gpupart__config_share(c, 0, "0000:05:00.0")->bytes, 4 * MiB);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(config_operator, a_hostile_cgroup_path_is_refused) {
  static const char *const bad[] = {"0::/kubepods/../../etc\n", "0::relative\n", "0::/a/..\n", "0::/a/\x1b[2J\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fake_cgroup(bad[i]);
    put("fs/kubepods/pod1/dmem.max", "drm/0000:03:00.0/vram0 1048576\n");
    gpupart__config *c = load();
    cr_expect_eq(c->nshares, 0, "%s", bad[i]);
    cr_expect_eq(c->nshare_warnings, 1, "%s", bad[i]);
    cr_expect(strstr(c->share_warnings[0], "is refused"), "%s", c->share_warnings[0]);
    gpupart__config_free(gpupart__hostmem_default(), c);
    cleanup();
  }
  tree[0] = 0;
}

Test(config_operator, an_oversized_or_odd_dmem_file_is_ignored_without_blocking) {
  fake_cgroup("0::/kubepods/pod1\n");
  char big[10000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  put("fs/kubepods/pod1/dmem.max", big);
  char fifo[128];
  snprintf(fifo, sizeof fifo, "%s/fs/kubepods/dmem.max", tree);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  gpupart__config *c = load(); /* a FIFO with no writer would block an ordinary open */
  cr_expect_eq(c->nshares, 0);
  cr_expect_eq(c->nshare_warnings, 1);
  cr_expect(strstr(c->share_warnings[0], "larger than 8191 bytes"), "%s", c->share_warnings[0]);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(config_operator, no_cgroup_v2_line_and_no_dmem_file_mean_no_share) {
  fake_cgroup("4:memory:/x\n");
  gpupart__config *c = load();
  cr_expect_eq(c->nshares + c->nshare_warnings, 0);
  gpupart__config_free(gpupart__hostmem_default(), c);
  put("self-cgroup", "0::/\n");
  c = load();
  cr_expect_eq(c->nshares + c->nshare_warnings, 0);
  gpupart__config_free(gpupart__hostmem_default(), c);
}
