/* Arbitration across the processes of a shared ledger (docs/design.md, "Give-back and
 * floors") on the Vulkan backend: the key scenarios of tests/core/ledger/
 * test_ledger_arbitration.c (which runs them on sim) on gpupart's own device on the
 * system's Vulkan driver (lavapipe here), under the validation layer (vulkan_test.h),
 * with real processes (shm_member --backend vulkan, exec'd): an idle process gives its
 * cached blocks back through its responder to a new floor (and, without a responder, the
 * floor is refused naming it); a killed holder's bytes go to a new floor; a stopped
 * holder is named in the EBUSY refusal. Every process caps the device with the same
 * memory_limit (BUDGET), so the figures do not depend on the driver's heap. The program
 * exits 77 (skipped) where no Vulkan device answers. Every wait is bounded; nothing is
 * timed. */
#include <criterion/criterion.h>

#include "common.h"
#include "core/ledger/shm_test.h"
#include "vulkan_test.h"

#define CONFIG "[gpupart]\nmemory_limit = 256MiB\n"
#define CONFIG_NO_RESPONDER "[gpupart]\nmemory_limit = 256MiB\nresponder = 0\n"

static void vk_setup(void) {
  vkt_require_validation();
  setup();
}

TestSuite(vulkan_arbitration, .init = vk_setup, .fini = teardown, .timeout = 120);

static int has(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

/* This test's own member of the shared Vulkan device. */
static shared_env open_vulkan_env(void) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .config_text = CONFIG};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_VULKAN, .flags = GPUPART_DEVICE_SHARED};
  shared_env e = {NULL, NULL};
  cr_assert_eq(gpupart_context_create(&cd, &e.ctx), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_device_open(e.ctx, &dd, &e.dev), GPUPART_OK, "%s", gpupart_last_error());
  return e;
}

/* A member on the Vulkan device that allocated 150 MiB of the 256 MiB budget in partition
 * 'be' (how: cpart keeps its blocks cached after freeall, part holds them live) and now
 * waits on its stdin, making no gpupart call. */
static member idle_member(const char *how, const char *config) {
  const char *cached[] = {"--backend", "vulkan", how,       "be",    "0",    "0",     "alloc", "75",
                          "alloc",     "75",     "freeall", "ready", "wait", "check", NULL};
  const char *live[] = {"--backend", "vulkan", how,  "be",    "0",    "0",     "alloc",
                        "75",        "alloc",  "75", "ready", "wait", "check", NULL};
  setenv("SHM_MEMBER_CONFIG", config, 1);
  member m = spawn_member(strcmp(how, "cpart") ? live : cached);
  unsetenv("SHM_MEMBER_CONFIG");
  await_ready(&m);
  return m;
}

static gpupart_result create_floor(gpupart_device *dev, uint64_t guarantee, gpupart_partition **out) {
  gpupart_partition_desc d = {.name = "crit", .guarantee = guarantee};
  return gpupart_partition_create(dev, &d, out);
}

static void floor_is_usable(gpupart_partition *p, uint64_t bytes) {
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, bytes, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(a);
}

static void finish(member *m) {
  release_member(m);
  cr_expect_eq(reap_member(m), 0);
}

Test(vulkan_arbitration, an_idle_process_gives_its_cached_blocks_back_to_a_new_floor) {
  member m = idle_member("cpart", CONFIG);
  shared_env e = open_vulkan_env();
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 200 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved <= s->budget, "%s", s->why);
  cr_expect_eq(s->budget, 256 * MiB);
  free(s);
  finish(&m);
  close_shared_env(&e);
}

Test(vulkan_arbitration, without_a_responder_the_floor_is_refused_naming_the_holder) {
  member m = idle_member("cpart", CONFIG_NO_RESPONDER);
  shared_env e = open_vulkan_env();
  gpupart_partition *crit = NULL;
  cr_expect_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_EBUSY);
  cr_expect_null(crit);
  char who[64];
  snprintf(who, sizeof who, "pid %d (shm_member) ", (int)m.pid); /* its bytes: the driver's block sizes */
  cr_expect(has(who) && has("cached)") && has("give-back was asked") && has("partition 'be'"), "%s",
            gpupart_last_error());
  finish(&m);
  cr_assert_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 200 * MiB);
  close_shared_env(&e);
}

Test(vulkan_arbitration, a_killed_holder_s_bytes_go_to_the_floor_at_once) {
  /* A member from before the kill to after it: the ledger lives on, so only reaping the
   * dead one's slot frees its bytes (a ledger whose members are all gone starts anew). */
  shared_env e = open_vulkan_env();
  member m = idle_member("part", CONFIG); /* live bytes, no callback: only its death frees them */
  cr_assert_eq(kill(m.pid, SIGKILL), 0);
  cr_expect_eq(reap_member(&m), 128 + SIGKILL);
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 200 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved <= s->budget, "%s", s->why);
  free(s);
  close_shared_env(&e);
}

Test(vulkan_arbitration, a_stopped_process_is_named_and_answers_once_it_runs_again) {
  member m = idle_member("cpart", CONFIG);
  cr_assert_eq(kill(m.pid, SIGSTOP), 0);
  shared_env e = open_vulkan_env();
  gpupart_partition *crit = NULL;
  cr_expect_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_EBUSY);
  char who[32];
  snprintf(who, sizeof who, "pid %d (shm_member)", (int)m.pid);
  cr_expect(has(who), "%s", gpupart_last_error());
  cr_assert_eq(kill(m.pid, SIGCONT), 0);
  cr_assert_eq(create_floor(e.dev, 200 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 200 * MiB);
  finish(&m);
  close_shared_env(&e);
}

/* 0 when gpupart finds a Vulkan device, asked in a child so that the runner loads no
 * driver. */
static int vulkan_device_here(void) {
  pid_t pid = fork();
  if (pid == 0) {
    gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
    gpupart_context *ctx = NULL;
    gpupart_device_info info[4];
    uint32_t n = 4;
    _exit(gpupart_context_create(&cd, &ctx) || gpupart_enumerate(ctx, GPUPART_BACKEND_VULKAN, info, &n) || n == 0);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
  if (!vulkan_device_here()) return fprintf(stderr, "skipped: no Vulkan device (lavapipe) here\n"), 77;
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return result;
}
