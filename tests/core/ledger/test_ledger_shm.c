/* The shared ledger (core/ledger/shm*.c) across processes: two processes that open one
 * device with GPUPART_DEVICE_SHARED share its budget and guarantees; they join one
 * partition by name and share its limit (a different descriptor is EEXIST; find joins
 * another process's; the partition goes with its last member); four processes hammering
 * one partition never take it past its limit; a member killed with SIGKILL has its bytes
 * returned, also when killed at random points of a churn (many of them inside the
 * ledger's lock, so the repair of a holder that died mid-update runs), with no drift over
 * 200 forked and 30 exec'd cycles; a trim asked by one process's OOM sequence is honoured
 * by another; a snapshot shows each member's bytes in use and counters; dead members
 * reclaimed and a budget other than the ledger's are logged. Hostile files and faults:
 * tests/core/ledger/test_ledger_faults.c. Helpers (each test's own scratch ledger folder, forked and
 * exec'd members): tests/core/ledger/shm_test.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm_test.h"

TestSuite(ledger_shm, .init = setup, .fini = teardown, .timeout = 60);

Test(ledger_shm, two_processes_share_one_budget) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "mine", 0, 0);
  child c = spawn_holder("theirs", 600 * MiB);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 600 * MiB, 0, &a), GPUPART_ELIMIT, "the other process holds 600 of 1024 MiB");
  cr_expect_eq(dev_stats(dev).guarantee, 0);
  test_check(dev);
  char go = 1;
  cr_assert_eq(write(c.go, &go, 1), 1);
  int status = wait_child(&c);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  a = alloc_ok(p, 600 * MiB);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, guarantees_hold_across_processes) {
  child c = spawn_holder("theirs", 2 * MiB);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "theirs", .limit = 4 * MiB};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &pd, &p), GPUPART_EEXIST, "another limit than the partition's");
  cr_expect(message_has("leave limit and guarantee 0"), "%s", gpupart_last_error());
  p = test_partition(dev, "floor", 800 * MiB, 800 * MiB);
  gpupart_partition_desc big = {.name = "big", .guarantee = 300 * MiB};
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create(dev, &big, &q), GPUPART_ELIMIT);
  char go = 1;
  cr_assert_eq(write(c.go, &go, 1), 1);
  cr_expect_eq(wait_child(&c), 0);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, a_killed_members_bytes_come_back) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "mine", 0, 0);
  child c = spawn_holder("victim", 800 * MiB);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 800 * MiB, 0, &a), GPUPART_ELIMIT);
  cr_assert_eq(kill(c.pid, SIGKILL), 0);
  int status = wait_child(&c);
  cr_expect(WIFSIGNALED(status), "status %d", status);
  a = alloc_ok(p, 800 * MiB); /* the refusal finds the dead member and returns its bytes */
  test_check(dev);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, the_environment_switches_the_shared_ledger_on) {
  setenv("GPUPART_SHARED", "1", 1);
  setenv("GPUPART_LEDGER_DIR", dir, 1);
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(NULL, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  char path[256];
  gpupart_device_info info;
  gpupart_device_get_info(dev, &info);
  gpupart__identity id;
  gpupart__identity_of(&info, &id);
  shm_folder f;
  cr_assert_eq(gpupart__shm_folder(dir, &f), GPUPART_OK);
  gpupart__ledger_shm_path(dir, &f, &id, path, sizeof path);
  cr_expect_eq(access(path, F_OK), 0, "%s exists", path);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  unsetenv("GPUPART_SHARED");
  unsetenv("GPUPART_LEDGER_DIR");
}

Test(ledger_shm, a_ledger_no_process_uses_takes_the_next_budget) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    gpupart_context *ctx = shared_context();
    gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
    gpupart_device_desc d = {
        .backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED, .memory_fraction = 0.5};
    gpupart_device *dev = NULL;
    if (!ctx || gpupart_device_open(ctx, &d, &dev) || gpupart_device_budget(dev) != 512 * MiB) _exit(2);
    _exit(0); /* exits without closing: the file stays, its member is dead */
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(dev), 1 * GiB, "the dead run's budget does not bind this one");
  gpupart_allocation *a = alloc_ok(test_partition(dev, "all", 0, 0), 1 * GiB);
  test_check(dev);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* In a child: allocates and frees for ever through the shared ledger (every free gives
 * its block back, so every step reserves and releases there), after one byte to ready. */
static void child_churns(int ready) {
  die_with_parent();
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_partition_desc pd = {.name = "mine", .release_threshold = 1}; /* joins the parent's */
  if (!ctx || open_shared(ctx, &dev) || gpupart_partition_create(dev, &pd, &p)) _exit(2);
  char c = 1;
  if (write(ready, &c, 1) != 1) _exit(3);
  for (uint64_t i = 1;; i++) {
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(p, (i % 32 + 1) * 2 * MiB, 0, &a) == GPUPART_OK) gpupart_free(a);
  }
}

Test(ledger_shm, members_killed_at_random_points_leave_no_drift, .timeout = 120) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "mine", .release_threshold = 1};
  gpupart_partition *p = make_partition(dev, &pd);
  srand(7);
  for (int cycle = 0; cycle < 200; cycle++) {
    int r[2];
    cr_assert_eq(pipe(r), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) close(r[0]), child_churns(r[1]);
    close(r[1]);
    char c;
    cr_assert_eq(read(r[0], &c, 1), 1, "cycle %d: the child started", cycle);
    close(r[0]);
    usleep((useconds_t)(rand() % 1500)); /* somewhere in the churn, inside the lock or not */
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    gpupart_allocation *a = alloc_ok(p, 1 * GiB); /* all of the budget: nothing of the child's stays */
    test_check(dev);
    gpupart_free(a);
    cr_assert_eq(dev_stats(dev).reserved, 0);
  }
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- exec'd members (tests/core/ledger/shm_member.c) ---- */

Test(ledger_shm, two_processes_join_one_partition_and_share_its_limit) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "team", 512 * MiB, 0);
  child c = spawn_holder("team", 300 * MiB); /* leaves limit and guarantee 0: joins */
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 300 * MiB, 0, &a), GPUPART_ELIMIT, "300 + 300 MiB exceed the shared 512");
  cr_expect_eq(part_stats(p).reserved, 300 * MiB, "reserved is partition-wide");
  cr_expect_eq(part_stats(p).limit, 512 * MiB);
  cr_expect_eq(part_stats(p).in_use, 0, "in_use is this process's");
  a = alloc_ok(p, 200 * MiB);
  test_check(e.dev);
  char go = 1;
  cr_assert_eq(write(c.go, &go, 1), 1);
  cr_expect_eq(wait_child(&c), 0);
  gpupart_free(a);
  a = alloc_ok(p, 500 * MiB); /* the child's bytes are back */
  gpupart_free(a);
  close_shared_env(&e);
}

Test(ledger_shm, a_real_process_joins_with_the_same_figures_and_is_refused_with_others) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "team", 512 * MiB, 128 * MiB);
  gpupart_allocation *a = alloc_ok(p, 100 * MiB);
  cr_expect_eq(run_member((const char *[]){"part", "team", "256", "128", NULL}), 11, "another limit is EEXIST");
  cr_expect_eq(run_member((const char *[]){"part", "team", "512", "0", NULL}), 11, "another guarantee is EEXIST");
  cr_expect_eq(run_member((const char *[]){"part", "team", "512", "128", "alloc", "400", "refuse", "20", NULL}), 0,
               "the same figures join: 100 + 400 MiB of 512 held, 20 more refused");
  cr_expect_eq(run_member((const char *[]){"part", "team", "0", "0", "reserved", "100", NULL}), 0,
               "figures left 0 join whatever the partition has");
  cr_expect_eq(dev_stats(e.dev).guarantee, 128 * MiB, "a joined partition's guarantee counts once");
  gpupart_free(a);
  close_shared_env(&e);
}

Test(ledger_shm, find_joins_a_partition_another_process_made) {
  shared_env e = open_shared_env();
  member m = spawn_member((const char *[]){"part", "theirs", "256", "0", "alloc", "100", "ready", "wait", NULL});
  await_ready(&m);
  gpupart_partition *p = gpupart_partition_find(e.dev, "theirs");
  cr_assert_not_null(p, "%s", gpupart_last_error());
  cr_expect_eq(part_stats(p).limit, 256 * MiB);
  cr_expect_eq(part_stats(p).reserved, 100 * MiB, "the other process's bytes");
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 200 * MiB, 0, &a), GPUPART_ELIMIT, "the limit is shared");
  a = alloc_ok(p, 150 * MiB);
  cr_expect_eq(gpupart_partition_count(e.dev), 1);
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0);
  cr_expect_eq(part_stats(p).reserved, 150 * MiB, "this process is a member: the partition stays");
  gpupart_free(a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  cr_expect_null(gpupart_partition_find(e.dev, "theirs"), "gone with its last member");
  close_shared_env(&e);
}

static uint64_t available(const gpupart_partition *p) {
  uint64_t bytes = 0;
  cr_assert_eq(gpupart_partition_available(p, &bytes), GPUPART_OK, "%s", gpupart_last_error());
  return bytes;
}

/* gpupart_partition_available with a shared ledger (include/gpupart.h): another
 * process's blocks and its partition's unused guarantee are left out, a partition's own
 * figure is its limit less every member's bytes within what the budget leaves, and a
 * killed member's bytes come back into it. */
Test(ledger_shm, available_counts_every_processs_bytes_and_guarantees) {
  shared_env e = open_shared_env();
  member m = spawn_member((const char *[]){"part", "theirs", "256", "200", "alloc", "100", "ready", "wait", NULL});
  await_ready(&m);
  gpupart_partition *mine = test_partition(e.dev, "mine", 1 * GiB, 0);
  cr_expect_eq(available(mine), 824 * MiB, "1 GiB less their 100 MiB held and the 100 left of their floor");
  gpupart_partition *theirs = gpupart_partition_find(e.dev, "theirs");
  cr_assert_not_null(theirs, "%s", gpupart_last_error());
  cr_expect_eq(available(theirs), 156 * MiB, "their limit less what their other member holds");
  gpupart_allocation *a = alloc_ok(mine, 824 * MiB);
  cr_expect_eq(available(mine), 0);
  cr_expect_eq(available(theirs), 100 * MiB, "what the budget leaves them: their floor");
  cr_assert_eq(kill(m.pid, SIGKILL), 0);
  cr_expect_eq(reap_member(&m), 128 + SIGKILL);
  cr_expect_eq(available(theirs), 200 * MiB, "the killed member's 100 MiB are back");
  gpupart_free(a);
  cr_expect_eq(available(mine), 824 * MiB, "its cached block, within what their floor leaves");
  cr_expect_eq(gpupart_partition_destroy(theirs), GPUPART_OK);
  cr_expect_eq(available(mine), 1 * GiB, "no floor left but its own");
  close_shared_env(&e);
}

Test(ledger_shm, destroying_a_joined_partition_leaves_it_to_the_others) {
  shared_env e = open_shared_env();
  member m = spawn_member(
      (const char *[]){"part", "both", "256", "0", "alloc", "50", "ready", "wait", "reserved", "50", NULL});
  await_ready(&m);
  gpupart_partition *p = test_partition(e.dev, "both", 256 * MiB, 0);
  gpupart_free(alloc_ok(p, 100 * MiB));
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  p = gpupart_partition_find(e.dev, "both");
  cr_assert_not_null(p, "the other member keeps it");
  cr_expect_eq(part_stats(p).reserved, 50 * MiB);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0, "its figures are its own again");
  p = test_partition(e.dev, "both", 64 * MiB, 0); /* gone: a new one, any figures */
  cr_expect_eq(part_stats(p).limit, 64 * MiB);
  close_shared_env(&e);
}

Test(ledger_shm, four_processes_hammering_one_partition_never_pass_its_limit, .timeout = 120) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "hot", 256 * MiB, 0);
  member m[4];
  const char *seeds[4] = {"1", "2", "3", "4"};
  for (int i = 0; i < 4; i++)
    m[i] = spawn_member((const char *[]){"part", "hot", "256", "0", "hammer", "3000", seeds[i], "check", NULL});
  for (int i = 0; i < 200; i++) { /* this process reads the shared figures meanwhile */
    gpupart_stats s = part_stats(p);
    cr_assert_leq(s.reserved, s.limit, "read %d: reserved %llu", i, (unsigned long long)s.reserved);
  }
  for (int i = 0; i < 4; i++) cr_expect_eq(reap_member(&m[i]), 0, "member %d stayed within the limit", i);
  cr_expect_eq(part_stats(p).reserved, 0);
  cr_expect_gt(part_stats(p).peak_reserved, 128 * MiB, "they did contend");
  close_shared_env(&e);
}

Test(ledger_shm, real_processes_killed_at_random_points_leave_no_drift, .timeout = 120) {
  shared_env e = open_shared_env();
  gpupart_partition_desc pd = {.name = "mine", .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &pd);
  srand(11);
  for (int cycle = 0; cycle < 30; cycle++) {
    member m = spawn_member((const char *[]){"part", "mine", "0", "0", "ready", "hammer", "1000000", "5", NULL});
    await_ready(&m);
    usleep((useconds_t)(rand() % 3000));
    cr_assert_eq(kill(m.pid, SIGKILL), 0);
    cr_assert_eq(reap_member(&m), 128 + SIGKILL, "cycle %d: killed mid-run", cycle);
    gpupart_allocation *a = alloc_ok(p, 1 * GiB); /* the whole budget: nothing of the member stays */
    test_check(e.dev);
    gpupart_free(a);
  }
  close_shared_env(&e);
}

Test(ledger_shm, a_trim_asked_by_another_process_is_honoured) {
  shared_env e = open_shared_env();
  gpupart_partition *idle = test_partition(e.dev, "idle", 0, 0); /* keeps emptied blocks cached */
  gpupart_free(alloc_ok(idle, 800 * MiB));
  cr_expect_eq(part_stats(idle).reserved, 800 * MiB, "cached after the free");
  member m =
      spawn_member((const char *[]){"part", "needy", "0", "0", "refuse", "600", "ready", "wait", "alloc", "600", NULL});
  await_ready(&m); /* its refusal asked this process to trim */
  gpupart_partition *other = test_partition(e.dev, "other", 0, 0);
  gpupart_allocation *a = alloc_ok(other, 2 * MiB); /* a growth: the slow path honours the request */
  cr_expect_eq(part_stats(idle).reserved, 0, "the cached blocks went back");
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0, "the other process got its 600 MiB");
  gpupart_free(a);
  close_shared_env(&e);
}

Test(ledger_shm, a_hundred_dead_members_are_reclaimed_by_one_call) {
  shared_env e = open_shared_env();
  for (int i = 0; i < 100; i++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) { /* a member holding 8 MiB, gone without closing */
      gpupart_context *ctx = shared_context();
      gpupart_device *dev = NULL;
      gpupart_partition *p = NULL;
      gpupart_allocation *a = NULL;
      gpupart_partition_desc pd = {.name = "dead"};
      _exit(!ctx || open_shared(ctx, &dev) || gpupart_partition_create(dev, &pd, &p) ||
            gpupart_alloc(p, 8 * MiB, 0, &a));
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "member %d", i);
  }
  cr_expect_eq(dev_stats(e.dev).reserved, 0, "one read of the ledger returned all 800 MiB");
  gpupart_free(alloc_ok(test_partition(e.dev, "all", 0, 0), 1 * GiB));
  close_shared_env(&e);
}

Test(ledger_shm, two_handles_of_one_process_join_one_shared_partition) {
  shared_env e = open_shared_env();
  gpupart_device *second = NULL;
  cr_assert_eq(open_shared(e.ctx, &second), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(e.dev, "both", 256 * MiB, 0);
  gpupart_partition *q = test_partition(second, "both", 256 * MiB, 0); /* joins */
  gpupart_allocation *a = alloc_ok(p, 100 * MiB), *b = alloc_ok(q, 100 * MiB);
  cr_expect_eq(part_stats(p).reserved, 200 * MiB);
  test_check(e.dev);
  test_check(second);
  gpupart_free(a), gpupart_free(b);
  cr_expect_eq(gpupart_device_close(second), GPUPART_OK, "%s", gpupart_last_error());
  close_shared_env(&e);
}

Test(ledger_shm, count_and_at_list_every_partition_of_the_ledger) {
  shared_env e = open_shared_env();
  member m = spawn_member((const char *[]){"part", "a", "64", "0", "ready", "wait", NULL});
  await_ready(&m);
  member n = spawn_member((const char *[]){"part", "b", "64", "0", "ready", "wait", NULL});
  await_ready(&n);
  test_partition(e.dev, "mine", 64 * MiB, 0);
  cr_assert_eq(gpupart_partition_count(e.dev), 3, "this handle's and the two others'");
  int seen_a = 0, seen_b = 0;
  for (uint32_t i = 0; i < gpupart_partition_count(e.dev); i++) {
    gpupart_partition *p = gpupart_partition_at(e.dev, i);
    cr_assert_not_null(p, "at %u: %s", i, gpupart_last_error());
    seen_a += !strcmp(gpupart_partition_name(p), "a"), seen_b += !strcmp(gpupart_partition_name(p), "b");
  }
  cr_expect(seen_a == 1 && seen_b == 1);
  cr_expect_null(gpupart_partition_at(e.dev, 3));
  release_member(&m), release_member(&n);
  cr_expect_eq(reap_member(&m), 0);
  cr_expect_eq(reap_member(&n), 0);
  close_shared_env(&e);
}

/* ---- the snapshot outside readers take (gpupart top, metrics) ---- */

Test(ledger_shm, a_snapshot_shows_every_processs_partitions_and_members) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = alloc_ok(test_partition(dev, "mine", 512 * MiB, 64 * MiB), 2 * MiB);
  child c = spawn_holder("theirs", 600 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_OK, "%s", s->why);
  cr_expect(s->consistent, "%s", s->why);
  cr_expect_str_eq(s->identity, "sim:0:1073741824");
  cr_expect_eq(s->budget, 1 * GiB);
  cr_expect_geq(s->reserved, 602 * MiB);
  cr_expect_eq(s->guarantees, 64 * MiB);
  cr_assert_eq(s->entries, 2);
  cr_assert_eq(s->members, 2);
  const gpupart__ledger_snapshot_member *theirs = member_of(s, c.pid), *mine = member_of(s, getpid());
  cr_assert(theirs && mine, "both processes are members");
  cr_expect(theirs->alive && mine->alive);
  cr_expect_eq(theirs->entries, 1);
  cr_expect_geq(theirs->reserved, 600 * MiB);
  for (uint32_t i = 0; i < s->entries; i++) {
    const gpupart__ledger_snapshot_entry *e = &s->entry[i];
    int is_mine = strcmp(e->name, "mine") == 0;
    cr_expect(is_mine || strcmp(e->name, "theirs") == 0, "entry '%s'", e->name);
    cr_expect_eq(e->pid, is_mine ? getpid() : c.pid);
    cr_expect_eq(e->figures.limit, is_mine ? 512 * MiB : 1 * GiB);
    cr_expect_eq(e->figures.guarantee, is_mine ? 64 * MiB : 0);
    cr_expect_geq(e->figures.peak_reserved, e->figures.reserved);
  }
  free(s);
  char go = 1;
  cr_assert_eq(write(c.go, &go, 1), 1);
  cr_expect_eq(wait_child(&c), 0);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, snapshots_taken_during_churn_and_kills_are_never_torn, .timeout = 120) {
  for (int cycle = 0; cycle < 10; cycle++) {
    int r[2];
    cr_assert_eq(pipe(r), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) close(r[0]), child_churns(r[1]);
    close(r[1]);
    char c;
    cr_assert_eq(read(r[0], &c, 1), 1, "cycle %d: the child started", cycle);
    close(r[0]);
    for (int i = 0; i < 50; i++) {
      gpupart__ledger_snapshot *s = scan_one();
      cr_assert_eq(s->status, GPUPART_OK, "cycle %d: %s", cycle, s->why);
      cr_assert(s->consistent, "cycle %d, read %d: %s", cycle, i, s->why);
      cr_assert_leq(s->reserved, s->budget);
      free(s);
    }
    cr_assert_eq(kill(pid, SIGKILL), 0); /* somewhere in the churn, inside the lock or not */
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    gpupart__ledger_snapshot *s = scan_one();
    cr_assert_eq(s->status, GPUPART_OK, "%s", s->why);
    cr_assert(s->consistent, "after the kill: %s", s->why);
    cr_assert(s->members == 0 || !s->member[0].alive, "the killed member is not alive");
    free(s);
  }
}

/* ---- version 3: counters, events ---- */

static const gpupart__ledger_snapshot_entry *entry_of(const gpupart__ledger_snapshot *s, const char *name) {
  for (uint32_t i = 0; i < s->entries; i++)
    if (strcmp(s->entry[i].name, name) == 0) return &s->entry[i];
  return NULL;
}

Test(ledger_shm, a_snapshot_shows_each_members_bytes_in_use_and_counters) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "mine", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 2 * MiB), *b = alloc_ok(p, 3 * MiB), *x = NULL;
  for (int i = 0; i < 4; i++) cr_expect_eq(gpupart_alloc(p, 80 * MiB, 0, &x), GPUPART_ELIMIT);
  child c = spawn_holder("theirs", 600 * MiB);
  gpupart__ledger_snapshot *s = scan_one();
  cr_assert_eq(s->status, GPUPART_OK, "%s", s->why);
  const gpupart__ledger_snapshot_entry *mine = entry_of(s, "mine"), *theirs = entry_of(s, "theirs");
  cr_assert(mine && theirs);
  cr_expect_eq(mine->in_use, 5 * MiB);
  cr_expect_eq(theirs->in_use, 600 * MiB);
  const gpupart__ledger_snapshot_member *me = member_of(s, getpid()), *them = member_of(s, c.pid);
  cr_assert(me && them);
  cr_expect_eq(me->sum.in_use, 5 * MiB);
  cr_expect_eq(me->sum.failures, 4, "the refused allocations");
  cr_expect_eq(me->sum.driver_allocs, test_stats(p).driver_allocs, "the driver allocations, as the stats count them");
  cr_expect_eq(them->sum.in_use, 600 * MiB);
  cr_expect_eq(them->sum.failures, 0);
  cr_expect_geq(them->sum.driver_allocs, 1);
  cr_expect_eq(s->shares, 2);
  free(s);
  gpupart_free(b);
  s = scan_one();
  cr_expect_eq(entry_of(s, "mine")->in_use, 2 * MiB, "a free is published at once");
  free(s);
  char go = 1;
  cr_assert_eq(write(c.go, &go, 1), 1);
  cr_expect_eq(wait_child(&c), 0);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

typedef struct hammer {
  gpupart_partition *p;
  unsigned seed;
  int ok;
  gpupart_allocation *live[8];
} hammer;

/* 2,000 allocations and frees of 4 KiB to 3 MiB, a refusal every 100, eight left live. */
static void *hammer_partition(void *arg) {
  hammer *h = arg;
  gpupart_allocation **live = h->live;
  h->ok = 1;
  for (int i = 0; i < 2000; i++) {
    gpupart_allocation **slot = &live[rand_r(&h->seed) % 8], *x = NULL;
    if (*slot) gpupart_free(*slot), *slot = NULL;
    if (gpupart_alloc(h->p, 4096 + rand_r(&h->seed) % (3 * MiB), 0, slot)) h->ok = 0;
    if (i % 100 == 0 && gpupart_alloc(h->p, 200 * MiB, 0, &x) != GPUPART_ELIMIT) h->ok = 0;
  }
  return NULL;
}

Test(ledger_shm, what_four_threads_publish_equals_the_partitions_counters_once_quiet) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "busy", 128 * MiB, 0);
  pthread_t t[4];
  hammer h[4];
  for (unsigned i = 0; i < 4; i++) {
    h[i] = (hammer){p, i + 1, 0, {NULL}};
    cr_assert_eq(pthread_create(&t[i], NULL, hammer_partition, &h[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    cr_expect(h[i].ok, "thread %d", i);
  }
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK); /* some blocks go back: driver frees too */
  gpupart_stats st = test_stats(p);
  gpupart__ledger_snapshot *s = scan_one();
  cr_assert_eq(s->shares, 1);
  const gpupart__ledger_counters *c = &s->share[0].c;
  cr_expect_eq(c->in_use, st.in_use);
  cr_expect_eq(s->entry[0].in_use, st.in_use);
  cr_expect_eq(c->failures, st.failed_allocations);
  cr_expect_eq(c->failures, 4 * 20);
  cr_expect_eq(c->driver_allocs, st.driver_allocs);
  cr_expect_eq(c->driver_frees, st.driver_frees);
  free(s);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 8; k++) gpupart_free(h[i].live[k]);
  s = scan_one();
  cr_expect_eq(s->share[0].c.in_use, 0, "every free published");
  free(s);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* In a child forked while the parent holds partition p: allocates from the parent's
 * block, is refused a growth (the child is no member of the shared ledger: EINVAL),
 * frees the parent's allocation a, and exits without cleaning up. */
static void child_uses_inherited(gpupart_partition *p, gpupart_allocation *a) {
  gpupart_allocation *x = NULL, *y = NULL;
  if (gpupart_alloc(p, 3 * MiB, 0, &x) || gpupart_alloc(p, 80 * MiB, 0, &y) != GPUPART_EINVAL ||
      !strstr(gpupart_last_error(), "forked"))
    _exit(2);
  gpupart_free(a);
  _exit(0);
}

Test(ledger_shm, a_forked_child_never_publishes_into_its_parents_share) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "mine", .limit = 64 * MiB, .initial_block = 16 * MiB};
  gpupart_partition *p = make_partition(dev, &pd);
  gpupart_allocation *a = alloc_ok(p, 2 * MiB); /* in a 16 MiB block, which the child allocates from */
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) child_uses_inherited(p, a);
  int status = -1;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert_eq(status, 0, "the child allocated, was refused and freed");
  gpupart__ledger_snapshot *s = scan_one();
  const gpupart__ledger_snapshot_member *me = member_of(s, getpid());
  cr_assert(me);
  cr_expect_eq(me->sum.in_use, 2 * MiB, "the parent's figures, not the child's copy's");
  cr_expect_eq(me->sum.failures, 0, "the child's refusal is not the parent's");
  free(s);
  gpupart_allocation *b = alloc_ok(p, 1 * MiB);
  s = scan_one();
  cr_expect_eq(member_of(s, getpid())->sum.in_use, 3 * MiB, "the parent still publishes");
  free(s);
  gpupart_free(b), gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* What the log callback heard: every line, and whether the ledger could be read from
 * inside it (it could not, were the callback run under the ledger's lock). */
typedef struct tape {
  int n, warn, readable;
  char line[16][512];
} tape;

static void record(gpupart_log_level level, const char *message, void *user) {
  tape *t = user;
  if (strncmp(message, "shared ledger of", 16) && !strstr(message, "budget mismatch")) return;
  t->warn += level == GPUPART_LOG_WARN;
  if (t->n < 16) snprintf(t->line[t->n], sizeof t->line[0], "%s", message);
  t->n++;
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  t->readable = gpupart__ledger_shm_scan(dir, 100, &s, &n) == GPUPART_OK && n == 1 && s[0].status == GPUPART_OK;
  free(s);
}

static gpupart_context *recording_context(tape *t) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .log = record, .log_user = t};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

Test(ledger_shm, dead_members_reclaimed_are_logged_once_after_the_lock) {
  tape t = {0};
  gpupart_context *ctx = recording_context(&t);
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  child c[3];
  for (int i = 0; i < 3; i++) c[i] = spawn_holder((const char *[]){"d0", "d1", "d2"}[i], 100 * MiB);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(kill(c[i].pid, SIGKILL), 0);
    wait_child(&c[i]);
  }
  cr_expect_eq(t.n, 0, "nothing found yet");
  cr_expect_eq(dev_stats(dev).reserved, 0, "the call that reads the ledger reaps them");
  cr_assert_eq(t.n, 1, "one event for the three");
  cr_expect_eq(t.warn, 1, "at GPUPART_LOG_WARN");
  char want[128];
  snprintf(want, sizeof want, "3 dead members found (its process is gone); %llu bytes", 300ull * MiB);
  cr_expect(strstr(t.line[0], want) && strstr(t.line[0], "sim:0:1073741824"), "%s", t.line[0]);
  cr_expect(t.readable, "the callback ran with the ledger unlocked");
  dev_stats(dev);
  cr_expect_eq(t.n, 1, "nobody else to reap");
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A log callback that calls the library back on the device it hears about. */
typedef struct caller {
  gpupart_device *dev;
  int heard, stats_rc;
} caller;

static void call_back(gpupart_log_level level, const char *message, void *user) {
  caller *c = user;
  (void)level;
  if (!c->dev || !strstr(message, "dead member")) return;
  c->heard++;
  gpupart_stats st;
  c->stats_rc = gpupart_device_get_stats(c->dev, &st); /* deadlocks were the device's lock held */
}

Test(ledger_shm, the_dead_member_event_runs_with_no_lock_so_it_may_call_the_library, .timeout = 30) {
  caller c = {0};
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .log = call_back, .log_user = &c};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  c.dev = dev;
  gpupart_partition *p = test_partition(dev, "mine", 1 * GiB, 0);
  for (int round = 0; round < 2; round++) {
    child k = spawn_holder("theirs", 800 * MiB);
    cr_assert_eq(kill(k.pid, SIGKILL), 0);
    wait_child(&k);
    c.stats_rc = -1;
    if (round == 0) cr_expect_eq(dev_stats(dev).reserved, 0, "stats reap it"); /* under the device's lock */
    gpupart_allocation *a = round == 1 ? alloc_ok(p, 600 * MiB) : NULL;        /* growth reaps it: the same lock */
    cr_expect_eq(c.heard, round + 1, "round %d: the reaping is heard", round);
    cr_expect_eq(c.stats_rc, GPUPART_OK, "round %d: and the callback's call answered", round);
    if (a) gpupart_free(a);
  }
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, a_dead_member_a_dump_reaps_is_heard_when_the_dump_returns, .timeout = 30) {
  caller c = {0};
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .log = call_back, .log_user = &c};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  c.dev = dev;
  child k = spawn_holder("theirs", 300 * MiB);
  cr_assert_eq(kill(k.pid, SIGKILL), 0);
  wait_child(&k);
  c.stats_rc = -1;
  char *json = NULL;
  cr_assert_eq(gpupart_device_dump(dev, 0, &json, NULL), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(c.heard, 1, "the dump's reaping is heard as it returns, not at some later call");
  cr_expect_eq(c.stats_rc, GPUPART_OK, "and the callback's call answered");
  gpupart_dump_free(json);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_shm, a_budget_other_than_the_ledgers_is_logged_saying_which_applies) {
  gpupart_context *first = shared_context();
  gpupart_device *one = NULL, *two = NULL;
  static gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device_desc d = {
      .backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED, .memory_limit = 512 * MiB};
  cr_assert_eq(gpupart_device_open(first, &d, &one), GPUPART_OK, "%s", gpupart_last_error());
  tape t = {0};
  gpupart_context *second = recording_context(&t); /* another attachment, as another process has */
  cr_assert_eq(open_shared(second, &two), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(two), 512 * MiB, "the ledger's budget applies");
  cr_assert_eq(t.n, 1);
  cr_expect_eq(t.warn, 1);
  cr_expect(strstr(t.line[0], "asked for 1073741824 bytes; the shared ledger's budget of 536870912") &&
                strstr(t.line[0], "applies"),
            "%s", t.line[0]);
  gpupart_device *three = NULL;
  d.memory_limit = 0;
  cr_assert_eq(gpupart_device_open(first, &d, &three), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(t.n, 1, "the other context's log hears nothing of this one");
  gpupart_device_close(three);
  gpupart_device_close(two), gpupart_context_destroy(second);
  gpupart_device_close(one), gpupart_context_destroy(first);
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

Test(ledger_shm, a_run_of_dead_members_cannot_flood_the_log) {
  tape t = {0};
  gpupart_context *ctx = recording_context(&t);
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  double start = seconds_now();
  for (int i = 0; i < 16; i++) {
    char name[16];
    snprintf(name, sizeof name, "dead%d", i);
    child c = spawn_holder(name, 2 * MiB);
    cr_assert_eq(kill(c.pid, SIGKILL), 0);
    wait_child(&c);
    cr_assert_eq(dev_stats(dev).reserved, 0, "each one reaped by the next call");
  }
  double windows = (seconds_now() - start) + 2;
  cr_expect_geq(t.n, 1);
  cr_expect_leq(t.n, GPUPART__EVENTS_PER_WINDOW * windows, "%d lines for 16 reapings", t.n);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
