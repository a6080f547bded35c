/* The shares of the engines that came after HAMi and Slurm (core/config/shares.c): NVIDIA MPS's
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (by ordinal or GPU UUID), HAMi's AMD
 * HIP_DEVICE_MEMORY_LIMIT[_<i>] and KAI's GPU_PORTION (a part of the device's total), each
 * in its place in the order of precedence and each read as hostile input: what does not
 * parse is a warning and is ignored. Criterion runs each test in its own process, so
 * setenv and the cgroup paths stay local. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "internal.h"

static char log_text[16384];

static void clear_env(void) {
  static const char *const prefixes[] = {
      "GPUPART_",   "CUDA_DEVICE_MEMORY_LIMIT", "HIP_DEVICE_MEMORY_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "SLURM_",
      "GPU_PORTION"};
  test_unset_env(prefixes, sizeof prefixes / sizeof prefixes[0]);
  gpupart__cgroup = (gpupart__cgroup_paths){"/nonexistent/cgroup", "/nonexistent"};
  log_text[0] = 0;
}

TestSuite(config_engines, .init = clear_env);

static void capture(gpupart_log_level level, const char *message, void *user) {
  (void)level, (void)user;
  strncat(log_text, message, sizeof log_text - strlen(log_text) - 2);
  strcat(log_text, "\n");
}

/* The budget of sim device sim (index and identity) opened with the environment, and
 * the source of its memory_limit. */
static uint64_t budget_of(const gpupart_sim_desc *sim, uint32_t index, char *src, size_t n) {
  gpupart_context_desc cd = {.log = capture};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_desc d = {
      .backend = GPUPART_BACKEND_SIM, .backend_desc = sim, .index = index, .backend_desc_size = sim ? sizeof *sim : 0};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  uint64_t b = gpupart_device_budget(dev);
  if (src) gpupart__source_format(dev->settings.v[GPUPART__OPT_MEMORY_LIMIT].src, src, n);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  return b;
}

static uint64_t budget(uint32_t index, char *src, size_t n) { return budget_of(NULL, index, src, n); }

static const uint8_t uuid_a[16] = {0x7c, 0xe2, 0x3c, 0xd8, 0x5c, 0x91, 0x34, 0xa1,
                                   0x9a, 0x1b, 0xd0, 0xc6, 0xb1, 0xcd, 0x1e, 0xc8};

static gpupart__config *new_config(void) {
  gpupart__config *c = calloc(1, sizeof *c);
  cr_assert_not_null(c);
  return c;
}

/* ---- NVIDIA MPS -------------------------------------------------------------------- */

Test(config_engines, mps_ordinals_limit_those_indexes) {
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=512MB", 1);
  char src[64];
  cr_expect_eq(budget(0, src, sizeof src), 1 * GiB);
  cr_expect_str_eq(src, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
  cr_expect_eq(budget(1, NULL, 0), 512 * MiB);
  cr_expect_eq(budget(2, src, sizeof src), 16 * GiB);
  cr_expect_str_eq(src, "default");
}

Test(config_engines, an_mps_uuid_limits_the_device_of_that_uuid_whole_or_a_prefix) {
  gpupart_sim_desc sim = {0};
  memcpy(sim.uuid, uuid_a, sizeof uuid_a);
  char src[64];
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU-7ce23cd8-5c91-34a1-9a1b-d0c6b1cd1ec8=2G,1=512M", 1);
  cr_expect_eq(budget_of(&sim, 0, src, sizeof src), 2 * GiB);
  cr_expect_str_eq(src, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "gpu-7CE23CD8=3G", 1); /* a prefix, as CUDA_VISIBLE_DEVICES */
  cr_expect_eq(budget_of(&sim, 0, NULL, 0), 3 * GiB);
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU-7ce23cd9=3G", 1); /* another GPU */
  cr_expect_eq(budget_of(&sim, 0, NULL, 0), 16 * GiB);
}

Test(config_engines, mps_units_are_powers_of_1024_with_an_optional_b) {
  static const struct {
    const char *text;
    uint64_t bytes;
  } ok[] = {{"0=1G", GiB},          {"0=1g", GiB},       {"0=1GB", GiB},      {"0=512M", 512 * MiB},
            {"0=512mb", 512 * MiB}, {"0=1048576K", GiB}, {"0=2T", 2048 * GiB}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    gpupart__config *c = new_config();
    gpupart__share_mps(c, ok[i].text);
    const gpupart__share *s = gpupart__config_share(c, 0, "");
    cr_expect(s && s->bytes == ok[i].bytes && c->nshare_warnings == 0, "%s", ok[i].text);
    free(c);
  }
}

Test(config_engines, garbage_mps_entries_are_warnings_and_ignored) {
  gpupart__config *c = new_config();
  gpupart__share_mps(c, "0=1024,0=1.5G,0=-1G,x=1G,GPU-zz=1G,=1G,0=,0=1GiB");
  cr_expect_eq(c->nshares, 0);
  cr_expect_eq(c->nshare_warnings, GPUPART__MAX_SHARE_WARNINGS);
  cr_expect(strstr(c->share_warnings[0], "entry '0=1024' is not DEVICE=AMOUNT"), "%s", c->share_warnings[0]);
  free(c);
  c = new_config();
  gpupart__share_mps(c, "0=99999999999999999999G,MIG-7ce23cd8=1G,GPU-=1G,0=1G=2G,,1=64M");
  cr_expect_eq(c->nshares, 1);
  cr_expect_eq(c->nshare_warnings, 5);
  cr_expect_eq(gpupart__config_share(c, 1, "")->bytes, 64 * MiB);
  cr_expect_null(gpupart__config_share(c, 0, ""));
  free(c);
}

Test(config_engines, an_ignored_mps_value_is_logged_at_the_device_open) {
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=lots", 1);
  cr_expect_eq(budget(0, NULL, 0), 16 * GiB);
  cr_expect(strstr(log_text, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: entry '0=lots' is not DEVICE=AMOUNT"), "%s", log_text);
}

/* ---- HAMi's AMD hook --------------------------------------------------------------- */

Test(config_engines, hip_limits_are_per_index_then_every_device) {
  setenv("HIP_DEVICE_MEMORY_LIMIT", "2g", 1);
  setenv("HIP_DEVICE_MEMORY_LIMIT_1", "4096m", 1);
  char src[64];
  cr_expect_eq(budget(1, src, sizeof src), 4 * GiB);
  cr_expect_str_eq(src, "HIP_DEVICE_MEMORY_LIMIT_1");
  cr_expect_eq(budget(0, src, sizeof src), 2 * GiB);
  cr_expect_str_eq(src, "HIP_DEVICE_MEMORY_LIMIT");
}

Test(config_engines, hip_takes_t_and_bytes_as_its_hook_does) {
  gpupart__config *c = new_config();
  gpupart__share_hami(c, "HIP_DEVICE_MEMORY_LIMIT_0", "1t");
  gpupart__share_hami(c, "HIP_DEVICE_MEMORY_LIMIT", "3221225472");
  cr_expect_eq(gpupart__config_share(c, 0, "")->bytes, 1024 * GiB);
  cr_expect_eq(gpupart__config_share(c, 1, "")->bytes, 3 * GiB);
  cr_expect_eq(c->nshare_warnings, 0);
  free(c);
}

Test(config_engines, garbage_hip_values_are_warnings_and_ignored) {
  static const char *const bad[] = {"4096MB", "1.5G", "-1", "4096 M", "abc", "99999999999G"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clear_env();
    setenv("HIP_DEVICE_MEMORY_LIMIT", bad[i], 1);
    setenv("HIP_DEVICE_MEMORY_LIMIT_x", "1g", 1);
    char src[64];
    cr_expect_eq(budget(0, src, sizeof src), 16 * GiB, "%s", bad[i]);
    cr_expect_str_eq(src, "default");
    cr_expect(strstr(log_text, "HIP_DEVICE_MEMORY_LIMIT: '"), "%s: %s", bad[i], log_text);
    cr_expect(strstr(log_text, "HIP_DEVICE_MEMORY_LIMIT_x: not a device index after HIP_DEVICE_MEMORY_LIMIT_"), "%s",
              log_text);
  }
}

/* ---- KAI --------------------------------------------------------------------------- */

Test(config_engines, a_kai_portion_is_that_part_of_every_devices_total) {
  setenv("GPU_PORTION", "0.50", 1);
  char src[64];
  cr_expect_eq(budget(0, src, sizeof src), 8 * GiB);
  cr_expect_str_eq(src, "GPU_PORTION");
  gpupart_sim_desc small = {.total_bytes = 4 * GiB};
  cr_expect_eq(budget_of(&small, 3, NULL, 0), 2 * GiB);
  setenv("GPU_PORTION", "1.00", 1);
  cr_expect_eq(budget(0, NULL, 0), 16 * GiB);
  setenv("GPU_PORTION", "0.25", 1);
  cr_expect_eq(budget(0, NULL, 0), 4 * GiB);
}

Test(config_engines, the_bytes_of_a_portion_never_pass_the_total) {
  gpupart__config *c = new_config();
  gpupart__share_kai(c, "1");
  const gpupart__share *s = gpupart__config_share_for(c, 0, "", NULL, UINT64_MAX);
  cr_assert_not_null(s);
  cr_expect_eq(gpupart__share_bytes(s, UINT64_MAX), UINT64_MAX);
  cr_expect_null(gpupart__config_share(c, 0, "")); /* no total known: a portion of nothing */
  free(c);
  c = new_config();
  gpupart__share_kai(c, "0.999999999");
  cr_expect_lt(gpupart__share_bytes(gpupart__config_share_for(c, 0, "", NULL, UINT64_MAX), UINT64_MAX), UINT64_MAX);
  free(c);
}

Test(config_engines, garbage_kai_portions_are_warnings_and_ignored) {
  static const char *const bad[] = {"0",    "0.00", "1.5",  "2",    "abc",          ".5",         "0.",
                                    "0.5x", "1e-1", "-0.5", " 0.5", "0.1234567891", "00000000.5", "0,5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupart__config *c = new_config();
    gpupart__share_kai(c, bad[i]);
    cr_expect_eq(c->nshares, 0, "%s", bad[i]);
    cr_expect(c->nshare_warnings == 1 && strstr(c->share_warnings[0], "GPU_PORTION: '"), "%s", bad[i]);
    free(c);
  }
}

/* ---- the order of precedence ------------------------------------------------------- */

Test(config_engines, the_order_is_hami_hip_mps_slurm_kai) {
  static const struct {
    const char *name, *value;
    uint64_t bytes;
  } order[] = {{"CUDA_DEVICE_MEMORY_LIMIT", "7g", 7 * GiB},
               {"HIP_DEVICE_MEMORY_LIMIT", "6g", 6 * GiB},
               {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=5G", 5 * GiB},
               {"SLURM_SHARD_MEM_PER_GPU", "4096M", 4 * GiB},
               {"GPU_PORTION", "0.75", 12 * GiB}};
  size_t n = sizeof order / sizeof order[0];
  for (size_t i = 0; i < n; i++) setenv(order[i].name, order[i].value, 1);
  for (size_t i = 0; i < n; i++) {
    char src[64];
    cr_expect_eq(budget(0, src, sizeof src), order[i].bytes, "%s", order[i].name);
    cr_expect_str_eq(src, order[i].name);
    unsetenv(order[i].name);
  }
}

Test(config_engines, kai_comes_before_dmem) {
  char tree[] = "/tmp/gpupart-cgroup-XXXXXX", path[160], proc[64], root[64];
  cr_assert_not_null(mkdtemp(tree));
  snprintf(proc, sizeof proc, "%s/self-cgroup", tree);
  snprintf(root, sizeof root, "%s/fs", tree);
  snprintf(path, sizeof path, "%s/x", root);
  cr_assert_eq(mkdir(root, 0700), 0);
  cr_assert_eq(mkdir(path, 0700), 0);
  FILE *f = fopen(proc, "w");
  fputs("0::/x\n", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/x/dmem.max", root);
  f = fopen(path, "w");
  fputs("drm/0000:03:00.0/vram0 1073741824\n", f);
  fclose(f);
  gpupart__cgroup = (gpupart__cgroup_paths){proc, root};
  gpupart_sim_desc sim = {.pci_bus_id = "0000:03:00.0"};
  char src[64];
  cr_expect_eq(budget_of(&sim, 0, src, sizeof src), 1 * GiB);
  cr_expect_str_eq(src, "dmem.max of cgroup /x");
  setenv("GPU_PORTION", "0.25", 1);
  cr_expect_eq(budget_of(&sim, 0, src, sizeof src), 4 * GiB);
  cr_expect_str_eq(src, "GPU_PORTION");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tree);
  cr_expect_eq(system(cmd), 0);
}

Test(config_engines, gpupart_settings_and_ceilings_beat_the_engines) {
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G", 1);
  setenv("GPUPART_MEMORY_LIMIT", "6GiB", 1);
  char src[64];
  cr_expect_eq(budget(0, src, sizeof src), 6 * GiB);
  cr_expect_str_eq(src, "GPUPART_MEMORY_LIMIT");
  unsetenv("GPUPART_MEMORY_LIMIT");
  unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
  setenv("GPU_PORTION", "0.75", 1);
  setenv("GPUPART_MEMORY_LIMIT_MAX", "3GiB", 1);
  cr_expect_eq(budget(0, NULL, 0), 3 * GiB);
}

Test(config_engines, engine_names_are_not_unknown_gpupart_variables) {
  setenv("HIP_DEVICE_MEMORY_LIMIT_0", "1g", 1);
  setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,junk", 1);
  setenv("GPU_PORTION", "0.5", 1);
  gpupart_context_desc cd = {0};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(ctx->cfg->nshares, 3);
  cr_expect_eq(ctx->cfg->nshare_warnings, 1);
  cr_expect_eq(ctx->cfg->nforeign, 0);
  gpupart_context_destroy(ctx);
}
