/* Arbitration across the processes of a shared ledger (docs/design.md, "Give-back and
 * floors"): a floor created after others filled the budget is honoured (their cached
 * blocks through their responder threads, then their reclaim callbacks) or refused at
 * creation naming who holds the bytes; never accepted and then unusable. The other
 * processes are real ones (shm_member, exec'd; forked children), idle, stopped or killed.
 * Every wait is bounded; nothing is timed. */
#include <criterion/criterion.h>

#include "common.h"
#include "shm_test.h"

TestSuite(ledger_arbitration, .init = setup, .fini = teardown, .timeout = 120);

static int has(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

/* A member that allocated 600 MiB of the 1 GiB budget in partition 'be' (its blocks kept
 * cached after freeall for cpart, live for rpart) and now waits on its stdin, making no
 * gpupart call. */
static member idle_member(const char *how, int free_all) {
  const char *cached[] = {how,   "be",      "0",     "0",    "alloc", "300", "alloc",
                          "300", "freeall", "ready", "wait", "check", NULL};
  const char *live[] = {how, "be", "0", "0", "alloc", "300", "alloc", "300", "ready", "wait", "check", NULL};
  member m = spawn_member(free_all ? cached : live);
  await_ready(&m);
  return m;
}

static gpupart_result create_floor(gpupart_device *dev, const char *name, uint64_t guarantee, gpupart_partition **out) {
  gpupart_partition_desc d = {.name = name, .guarantee = guarantee};
  return gpupart_partition_create(dev, &d, out);
}

static void floor_is_usable(gpupart_partition *p, uint64_t bytes) {
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, bytes, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(a);
}

static void finish(member *m, int code) {
  release_member(m);
  cr_expect_eq(reap_member(m), code);
}

Test(ledger_arbitration, an_idle_process_gives_its_cached_blocks_back_to_a_new_floor) {
  member m = idle_member("cpart", 1);
  shared_env e = open_shared_env();
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved <= s->budget, "%s", s->why);
  free(s);
  finish(&m, 0);
  close_shared_env(&e);
}

Test(ledger_arbitration, an_idle_process_runs_its_reclaim_callback_for_a_floor) {
  member m = idle_member("rpart", 0); /* its 600 MiB stay live until its callback frees them */
  shared_env e = open_shared_env();
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  finish(&m, 0);
  close_shared_env(&e);
}

Test(ledger_arbitration, without_a_responder_the_floor_is_refused_naming_the_holder) {
  setenv("SHM_MEMBER_CONFIG", "[gpupart]\nresponder = 0\n", 1);
  member m = idle_member("cpart", 1);
  unsetenv("SHM_MEMBER_CONFIG");
  shared_env e = open_shared_env();
  gpupart_partition *crit = NULL;
  cr_expect_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_EBUSY);
  cr_expect_null(crit);
  char who[64];
  snprintf(who, sizeof who, "pid %d (shm_member) 629145600 bytes (629145600 cached)", (int)m.pid);
  cr_expect(has(who) && has("give-back was asked") && has("partition 'be'"), "%s", gpupart_last_error());
  gpupart_stats st;
  cr_expect_eq(gpupart_device_get_stats(e.dev, &st), GPUPART_OK);
  cr_expect_eq(st.reserved, 600 * MiB, "the refused floor left nothing behind");
  cr_expect_null(gpupart_partition_find(e.dev, "crit"));
  finish(&m, 0);
  /* gone: its bytes with it */
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  close_shared_env(&e);
}

Test(ledger_arbitration, a_stopped_process_is_named_and_answers_once_it_runs_again) {
  member m = idle_member("cpart", 1);
  cr_assert_eq(kill(m.pid, SIGSTOP), 0);
  shared_env e = open_shared_env();
  gpupart_partition *crit = NULL;
  cr_expect_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_EBUSY);
  char who[32];
  snprintf(who, sizeof who, "pid %d (shm_member)", (int)m.pid);
  cr_expect(has(who) && has("timed out after"), "%s", gpupart_last_error());
  cr_assert_eq(kill(m.pid, SIGCONT), 0);
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  finish(&m, 0);
  close_shared_env(&e);
}

Test(ledger_arbitration, a_killed_holder_s_bytes_go_to_the_floor_at_once) {
  /* This process is a member from before the kill to after it: the ledger lives on, so
   * only reaping the dead one's slot frees its bytes (a ledger whose members are all gone
   * starts anew, which would hide a reaping that does not work). */
  shared_env e = open_shared_env();
  member m = idle_member("part", 0); /* live bytes, no callback: only its death frees them */
  cr_assert_eq(kill(m.pid, SIGKILL), 0);
  cr_expect_eq(reap_member(&m), 128 + SIGKILL);
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved <= s->budget, "%s", s->why);
  free(s);
  close_shared_env(&e);
}

Test(ledger_arbitration, a_floor_takes_this_process_s_own_cached_blocks) {
  shared_env e = open_shared_env();
  gpupart_partition_desc bd = {.name = "be"};
  gpupart_partition *be = NULL, *crit = NULL;
  cr_assert_eq(gpupart_partition_create(e.dev, &bd, &be), GPUPART_OK);
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(be, 900 * MiB, 0, &a), GPUPART_OK);
  gpupart_free(a); /* kept cached */
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "%s", gpupart_last_error());
  floor_is_usable(crit, 800 * MiB);
  close_shared_env(&e);
}

/* Old guarantees with the responders at work: members allocating at random never take
 * the partitions past their limits or the device past its budget, and the sums match. */
Test(ledger_arbitration, members_hammering_beside_a_floor_keep_the_sums) {
  member a = spawn_member((const char *[]){"cpart", "x", "400", "0", "hammer", "300", "1", "check", NULL});
  member b = spawn_member((const char *[]){"cpart", "y", "400", "0", "hammer", "300", "2", "check", NULL});
  shared_env e = open_shared_env();
  gpupart_partition *crit = NULL;
  gpupart_result rc = create_floor(e.dev, "crit", 200 * MiB, &crit);
  cr_expect(rc == GPUPART_OK || rc == GPUPART_EBUSY, "%s", gpupart_last_error());
  if (rc == GPUPART_OK) floor_is_usable(crit, 200 * MiB);
  cr_expect_eq(reap_member(&a), 0);
  cr_expect_eq(reap_member(&b), 0);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved <= s->budget, "%s", s->why);
  free(s);
  close_shared_env(&e);
}

/* A child forked from a process whose shared device has a responder has no such thread:
 * closing the device there must neither wait for it nor touch the parent's. */
Test(ledger_arbitration, a_forked_child_closes_without_the_parent_s_responder) {
  shared_env e = open_shared_env();
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    die_with_parent();
    _exit(gpupart_device_close(e.dev) || gpupart_context_destroy(e.ctx) ? 2 : 0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  member m = idle_member("cpart", 1);
  gpupart_partition *crit = NULL;
  cr_assert_eq(create_floor(e.dev, "crit", 800 * MiB, &crit), GPUPART_OK, "the parent's responder is still there: %s",
               gpupart_last_error());
  finish(&m, 0);
  close_shared_env(&e);
}
