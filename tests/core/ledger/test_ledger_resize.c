/* Changing a shared ledger from outside (core/ledger/resize.h, `gpupart resize`): this
 * test process attaches to the ledger file without joining it, while the members are
 * other processes (shm_member, exec'd) that see the new figures at their next
 * reservation; a shrink below what they hold asks their responders to give back, then is
 * refused naming them; a job started later with the partition's original figures joins
 * it. Every wait is bounded; nothing is timed. */
#include <criterion/criterion.h>

#include "common.h"
#include "resize.h"
#include "shm_test.h"

TestSuite(ledger_resize, .init = setup, .fini = teardown, .timeout = 120);

static int has(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

static int change(const char *partition, uint64_t limit, uint64_t guarantee, int wait_ms) {
  char path[4096];
  ledger_path(path, sizeof path);
  gpupart__ledger_change c = {.partition = partition, .limit = limit, .guarantee = guarantee, .wait_ms = wait_ms};
  return gpupart__ledger_change_file(path, &c);
}

static member started(const char *const *steps) {
  member m = spawn_member(steps);
  await_ready(&m);
  return m;
}

static void finish(member *m, int code) {
  release_member(m);
  cr_expect_eq(reap_member(m), code);
}

/* The partition's figures as gpupart top reads them. */
static gpupart__ledger_figures figures_of(const char *name) {
  gpupart__ledger_snapshot *s = scan_one();
  gpupart__ledger_figures f = {0};
  for (uint32_t i = 0; i < s->entries; i++)
    if (!strcmp(s->entry[i].name, name)) f = s->entry[i].figures;
  cr_expect(s->consistent, "%s", s->why);
  free(s);
  return f;
}

Test(ledger_resize, a_grown_limit_binds_the_member_at_once) {
  const char *steps[] = {"part", "be", "200", "0", "refuse", "300", "ready", "wait", "alloc", "300", "check", NULL};
  member m = started(steps);
  cr_expect_eq(change("be", 400 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(figures_of("be").limit, 400 * MiB);
  finish(&m, 0); /* its 300 MiB were granted after the change, refused before it */
}

Test(ledger_resize, a_shrunk_limit_binds_the_member_at_once) {
  const char *steps[] = {"part", "be", "800", "0", "alloc", "100", "ready", "wait", "refuse", "300", "check", NULL};
  member m = started(steps);
  cr_expect_eq(change("be", 300 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_OK, "%s", gpupart_last_error());
  finish(&m, 0);
}

Test(ledger_resize, a_shrink_below_cached_blocks_is_given_back_by_the_responder) {
  const char *steps[] = {"cpart", "be",      "800",   "0",    "alloc", "300", "alloc",
                         "300",   "freeall", "ready", "wait", "check", NULL};
  member m = started(steps); /* 600 MiB of empty blocks kept, no gpupart call from now on */
  cr_expect_eq(figures_of("be").reserved, 600 * MiB);
  cr_expect_eq(change("be", 100 * MiB, GPUPART__LEDGER_KEEP, 10000), GPUPART_OK, "%s", gpupart_last_error());
  gpupart__ledger_figures f = figures_of("be");
  cr_expect_eq(f.limit, 100 * MiB);
  cr_expect_leq(f.reserved, 100 * MiB);
  finish(&m, 0);
}

Test(ledger_resize, a_shrink_below_live_bytes_is_refused_naming_the_holder) {
  const char *steps[] = {"part", "be", "800", "0", "alloc", "300", "ready", "wait", "check", NULL};
  member m = started(steps);
  cr_expect_eq(change("be", 100 * MiB, GPUPART__LEDGER_KEEP, 100), GPUPART_EBUSY);
  char who[64];
  snprintf(who, sizeof who, "pid %d (shm_member)", (int)m.pid);
  cr_expect(has(who) && has("asked to give back") && has("nothing was changed"), "%s", gpupart_last_error());
  cr_expect_eq(figures_of("be").limit, 800 * MiB, "the refused shrink changed nothing");
  finish(&m, 0);
}

Test(ledger_resize, figures_the_ledger_cannot_hold_are_refused) {
  const char *steps[] = {"part", "be", "800", "200", "part", "crit", "100", "100", "ready", "wait", "check", NULL};
  member m = started(steps);
  cr_expect_eq(change("be", 100 * MiB, 200 * MiB, 0), GPUPART_EINVAL, "a guarantee above the limit");
  cr_expect_eq(change("be", 2048 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_ELIMIT, "a limit above the budget");
  cr_expect(has("exceeds the device budget"), "%s", gpupart_last_error());
  cr_expect_eq(change("be", 1000 * MiB, 1000 * MiB, 0), GPUPART_ELIMIT, "guarantees past the budget");
  cr_expect_eq(change("nope", 100 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_EINVAL);
  cr_expect(has("no partition 'nope'"), "%s", gpupart_last_error());
  cr_expect_eq(change("be", 0, GPUPART__LEDGER_KEEP, 0), GPUPART_EINVAL, "a limit of 0");
  cr_expect_eq(change(NULL, 250 * MiB, 0, 0), GPUPART_ELIMIT, "a budget below the guarantees (300 MiB)");
  cr_expect_eq(change(NULL, 500 * MiB, 0, 0), GPUPART_EINVAL, "a budget below be's limit");
  cr_expect(has("'be' has the limit"), "%s", gpupart_last_error());
  gpupart__ledger_figures f = figures_of("be");
  cr_expect(f.limit == 800 * MiB && f.guarantee == 200 * MiB, "nothing changed");
  cr_expect_eq(change("be", 400 * MiB, 300 * MiB, 0), GPUPART_OK, "%s", gpupart_last_error());
  f = figures_of("be");
  cr_expect(f.limit == 400 * MiB && f.guarantee == 300 * MiB);
  cr_expect_eq(change("be", 250 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(figures_of("be").guarantee, 250 * MiB, "a kept guarantee is lowered to the new limit");
  finish(&m, 0);
}

Test(ledger_resize, the_budget_changes_without_joining) {
  const char *steps[] = {"part", "a",     "300",  "0",    "alloc", "250",  "part", "b",     "300", "0",     "alloc",
                         "250",  "ready", "wait", "part", "big",   "1536", "0",    "alloc", "300", "check", NULL};
  member m = started(steps);
  gpupart__ledger_snapshot *s = scan_one();
  uint32_t members = s->members;
  free(s);
  cr_expect_eq(change(NULL, 400 * MiB, 0, 100), GPUPART_EBUSY, "below the 500 MiB held");
  cr_expect(has("the device still holds"), "%s", gpupart_last_error());
  cr_expect_eq(change(NULL, 2048 * MiB, 0, 0), GPUPART_OK, "%s", gpupart_last_error());
  s = scan_one();
  cr_expect_eq(s->budget, 2048 * MiB);
  cr_expect_eq(s->members, members, "the outside change joined nothing");
  free(s);
  finish(&m, 0); /* a partition past the budget it opened with, within the ledger's */
}

static char logged[1024];
static void keep_line(gpupart_log_level level, const char *message, void *user) {
  (void)user;
  if (level <= GPUPART_LOG_WARN && strstr(message, "resized")) snprintf(logged, sizeof logged, "%s", message);
}

Test(ledger_resize, a_later_job_with_the_original_figures_joins_the_resized_partition) {
  const char *steps[] = {"part", "be", "800", "100", "ready", "wait", "check", NULL};
  member m = started(steps);
  cr_expect_eq(change("be", 300 * MiB, 50 * MiB, 0), GPUPART_OK, "%s", gpupart_last_error());
  const char *later[] = {"part", "be", "800", "100", "alloc", "200", "refuse", "200", "check", NULL};
  cr_expect_eq(run_member(later), 0, "another process joins it with its original figures");
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .log = keep_line};
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = NULL;
  gpupart_partition_desc d = {.name = "be", .limit = 800 * MiB, .guarantee = 100 * MiB};
  cr_expect_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats st = part_stats(p);
  cr_expect(st.limit == 300 * MiB && st.guarantee == 50 * MiB, "the ledger's figures apply");
  cr_expect(strstr(logged, "the ledger's figures apply") != NULL, "logged: '%s'", logged);
  gpupart_partition_desc other = {.name = "be", .limit = 700 * MiB};
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &other, &q), GPUPART_EEXIST, "one process joins a partition once");
  test_check(dev);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  finish(&m, 0);
}

Test(ledger_resize, a_partition_never_resized_still_refuses_other_figures) {
  const char *steps[] = {"part", "be", "800", "0", "ready", "wait", "check", NULL};
  member m = started(steps);
  const char *other[] = {"part", "be", "700", "0", NULL};
  cr_expect_eq(run_member(other), 11, "EEXIST, as before");
  finish(&m, 0);
}

Test(ledger_resize, a_missing_or_foreign_file_is_refused) {
  char path[4096];
  snprintf(path, sizeof path, "%s/none.ledger", dir);
  gpupart__ledger_change c = {.partition = "be", .limit = MiB, .guarantee = GPUPART__LEDGER_KEEP};
  cr_expect_eq(gpupart__ledger_change_file(path, &c), GPUPART_ECONFIG);
  write_file(path, 0600, "not a ledger", 12);
  cr_expect_eq(gpupart__ledger_change_file(path, &c), GPUPART_ECORRUPT, "%s", gpupart_last_error());
  cr_expect_eq(gpupart__ledger_change_file(NULL, &c), GPUPART_EINVAL);
  c.wait_ms = -1;
  cr_expect_eq(gpupart__ledger_change_file(path, &c), GPUPART_EINVAL);
}

/* ---- ceilings: memory_limit_max and memory_fraction_max bind in shared mode ---------- */

static gpupart_device *open_with(const char *config, gpupart_context **ctx) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .config_text = config};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_context_create(&cd, ctx), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(open_shared(*ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static void ceiling_binds(const char *config, const char *name) {
  const char *steps[] = {"part", "be", "0", "0", "alloc", "100", "ready", "wait", "check", NULL};
  member m = started(steps); /* made the ledger with the whole 1 GiB as its budget */
  gpupart_context *ctx = NULL;
  gpupart_device *dev = open_with(config, &ctx);
  cr_expect_eq(gpupart_device_budget(dev), 1024 * MiB, "the shared budget applies");
  gpupart_partition *p = NULL;
  gpupart_partition_desc d = {.name = "mine", .limit = 800 * MiB, .release_threshold = 1};
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = NULL, *b = NULL;
  cr_expect_eq(gpupart_alloc(p, 200 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &b), GPUPART_ELIMIT, "past the 256 MiB ceiling");
  cr_expect(has("ceiling") && has(name), "%s", gpupart_last_error());
  cr_expect_leq(part_stats(p).reserved, 256 * MiB);
  gpupart_free(a);
  cr_expect_eq(gpupart_alloc(p, 250 * MiB, 0, &b), GPUPART_OK, "freed bytes count again: %s", gpupart_last_error());
  gpupart_free(b);
  test_check(dev);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  finish(&m, 0);
}

Test(ledger_resize, memory_limit_max_binds_inside_a_larger_shared_budget) {
  ceiling_binds("[gpupart]\nmemory_limit_max = 256MiB\n", "memory_limit_max");
}

Test(ledger_resize, memory_fraction_max_binds_inside_a_larger_shared_budget) {
  ceiling_binds("[gpupart]\nmemory_fraction_max = 25%\n", "memory_fraction_max");
}

Test(ledger_resize, a_ceiling_binds_another_process_too) {
  const char *first[] = {"part", "be", "0", "0", "alloc", "100", "ready", "wait", "check", NULL};
  member m = started(first);
  setenv("SHM_MEMBER_CONFIG", "[gpupart]\nmemory_limit_max = 256MiB\n", 1);
  const char *capped[] = {"part", "own", "800", "0", "alloc", "200", "refuse", "100", "check", NULL};
  int code = run_member(capped);
  unsetenv("SHM_MEMBER_CONFIG");
  cr_expect_eq(code, 0, "the capped process was refused past its ceiling, not past the shared budget");
  finish(&m, 0);
}

/* The partition's reserved as gpupart top reads it, once it is bytes or 10 s passed. */
static uint64_t await_reserved(const char *name, uint64_t bytes) {
  uint64_t r = figures_of(name).reserved;
  for (int i = 0; i < 1000 && r != bytes; i++) {
    usleep(10000);
    r = figures_of(name).reserved;
  }
  return r;
}

/* A preallocated partition (allow_growth = false) whose limit grows from outside
 * preallocates the new bytes: at once through its responder, which the resize wakes. */
Test(ledger_resize, a_preallocated_partition_takes_a_grown_limit_through_its_responder) {
  setenv("SHM_MEMBER_CONFIG", "[gpupart]\nallow_growth = false\n", 1);
  const char *steps[] = {"part", "pre", "200", "0", "ready", "wait", "alloc", "200", "alloc", "150", "check", NULL};
  member m = started(steps);
  unsetenv("SHM_MEMBER_CONFIG");
  cr_expect_eq(figures_of("pre").reserved, 200 * MiB, "preallocated at creation");
  cr_expect_eq(change("pre", 400 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(await_reserved("pre", 400 * MiB), 400 * MiB, "the member preallocated the grown limit");
  finish(&m, 0); /* and its 350 MiB fit in it */
}

/* Without a responder, the partition's next allocation that does not fit takes it, as a
 * preallocation (not one block of the request's size). */
Test(ledger_resize, a_preallocated_partition_without_responder_takes_a_grown_limit_at_its_next_slow_path) {
  setenv("SHM_MEMBER_CONFIG", "[gpupart]\nallow_growth = false\nresponder = 0\n", 1);
  const char *steps[] = {"part", "pre",   "200", "0",        "alloc", "150",   "ready",
                         "wait", "alloc", "150", "reserved", "400",   "check", NULL};
  member m = started(steps);
  unsetenv("SHM_MEMBER_CONFIG");
  cr_expect_eq(change("pre", 400 * MiB, GPUPART__LEDGER_KEEP, 0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(figures_of("pre").reserved, 200 * MiB, "no call, no responder: nothing taken yet");
  finish(&m, 0); /* its second 150 MiB did not fit in the first 200: the slow path preallocated the new 200
                  * (grown on demand instead, it would hold 350) */
}

/* A budget change leaves every partition's bytes as they are (the ledger holds bytes,
 * not shares) and marks the partitions resized: a job whose configuration sizes the
 * partition as a share of the budget, which now resolves to other bytes, joins it with
 * the ledger's figures instead of meeting EEXIST. */
Test(ledger_resize, a_budget_change_keeps_a_share_sized_partition_s_bytes_and_later_jobs_join_it) {
  member a = started((const char *[]){"fpart", "half", "50", "ready", "wait", "check", NULL});
  uint64_t limit = figures_of("half").limit;
  cr_assert_eq(limit, 512 * MiB);
  gpupart__ledger_change c = {.limit = 800 * MiB, .guarantee = GPUPART__LEDGER_KEEP};
  char path[4096];
  ledger_path(path, sizeof path);
  cr_assert_eq(gpupart__ledger_change_file(path, &c), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(figures_of("half").limit, limit, "its bytes are kept");
  /* 50 % of the new budget is 400 MiB: another figure than the ledger's */
  cr_expect_eq(run_member((const char *[]){"fpart", "half", "50", "alloc", "500", "check", NULL}), 0,
               "the later job joined, the ledger's 512 MiB applying");
  finish(&a, 0);
}
