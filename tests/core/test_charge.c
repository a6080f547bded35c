/* Account-only charges (gpupart_partition_charge, gpupart_charge_release) through the
 * public API on the sim backend: exact bytes against the limit (no block tail), release
 * once (a second release refused and counted), the figures and peaks, the budget and the
 * other partitions' floors, the OOM sequence's cached blocks, the refusal's message, and a
 * shared ledger with a second process (a forked child) charging the same partition. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static gpupart_context *ctx;
static gpupart_device *dev;

static void setup(void) {
  ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 4 * GiB};
  dev = test_sim_device(ctx, &sim, NULL);
}

static void teardown(void) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

TestSuite(charge, .init = setup, .fini = teardown, .timeout = 120);

static int said(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

/* The preload's pattern that a mirror of growth blocks refused at 1012 MiB: 200 x 1 MiB,
 * 199 released, then charges up to the limit: they reach it to the byte. */
Test(charge, charges_reach_the_limit_exactly_after_a_churn) {
  gpupart_partition *p = test_partition(dev, "job", 1 * GiB, 0);
  gpupart_charge *c[1024] = {0};
  for (int i = 0; i < 200; i++)
    cr_assert_eq(gpupart_partition_charge(p, MiB, &c[i]), GPUPART_OK, "%s", gpupart_last_error());
  for (int i = 1; i < 200; i++) cr_assert_eq(gpupart_charge_release(c[i]), GPUPART_OK);
  for (int i = 1; i < 1024; i++)
    cr_assert_eq(gpupart_partition_charge(p, MiB, &c[i]), GPUPART_OK, "%d: %s", i, gpupart_last_error());
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, 1 * GiB);
  cr_expect_eq(s.reserved, 1 * GiB);
  cr_expect_eq(s.live_allocations, 1024);
  cr_expect_eq(s.driver_allocs, 0, "an account-only partition holds no block");
  gpupart_charge *over = (gpupart_charge *)1;
  cr_expect_eq(gpupart_partition_charge(p, 1, &over), GPUPART_ELIMIT);
  cr_expect_null(over);
  cr_expect(said("cannot charge 1 bytes") && said("the partition limit is reached"), "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).failed_allocations, 1);
  uint64_t avail = 1;
  cr_expect_eq(gpupart_partition_available(p, &avail), GPUPART_OK);
  cr_expect_eq(avail, 0);
  test_check(dev);
  for (int i = 0; i < 1024; i++) cr_expect_eq(gpupart_charge_release(c[i]), GPUPART_OK);
  s = test_stats(p);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.peak_in_use, 1 * GiB);
  cr_expect_eq(s.peak_reserved, 1 * GiB);
  cr_expect_eq(s.total_frees, 1223);
  test_check(dev);
}

Test(charge, odd_sizes_are_charged_to_the_byte) {
  gpupart_partition *p = test_partition(dev, "job", 64 * MiB, 0);
  gpupart_charge *a = NULL, *b = NULL;
  cr_assert_eq(gpupart_partition_charge(p, 12345, &a), GPUPART_OK);
  cr_expect_eq(gpupart_charge_size(a), 12345);
  uint64_t exact = 0, rounded = 0;
  cr_assert_eq(gpupart_partition_chargeable(p, &exact), GPUPART_OK);
  cr_expect_eq(exact, 64 * MiB - 12345, "what a charge can still take, to the byte");
  cr_assert_eq(gpupart_partition_available(p, &rounded), GPUPART_OK);
  cr_expect_eq(rounded, 62 * MiB, "what new blocks can take, in granules");
  cr_expect_eq(gpupart_partition_chargeable(NULL, &exact), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_chargeable(p, NULL), GPUPART_EINVAL);
  cr_assert_eq(gpupart_partition_charge(p, 64 * MiB - 12345, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).in_use, 64 * MiB);
  test_check(dev);
  gpupart_charge_release(a);
  gpupart_charge_release(b);
}

Test(charge, a_second_release_is_refused_counted_and_changes_nothing) {
  gpupart_partition *p = test_partition(dev, "job", 0, 0);
  gpupart_charge *a = NULL, *b = NULL;
  cr_assert_eq(gpupart_partition_charge(p, 3 * MiB, &a), GPUPART_OK);
  cr_assert_eq(gpupart_partition_charge(p, 5 * MiB, &b), GPUPART_OK);
  cr_expect_eq(gpupart_charge_release(a), GPUPART_OK);
  cr_expect_eq(gpupart_charge_size(a), 0, "a released charge has no bytes");
  cr_expect_eq(gpupart_charge_release(a), GPUPART_EINVAL);
  cr_expect(said("already released") && said("'job'"), "%s", gpupart_last_error());
  gpupart_charge *again = NULL; /* a's record is handed out again: a stays stale */
  cr_assert_eq(gpupart_partition_charge(p, 7 * MiB, &again), GPUPART_OK);
  cr_expect_eq(gpupart_charge_release(a), GPUPART_EINVAL);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.double_frees, 2);
  cr_expect_eq(s.in_use, 12 * MiB);
  cr_expect_eq(s.live_allocations, 2);
  test_check(dev);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_EBUSY, "live charges keep the partition");
  cr_expect(said("2 live allocation(s), 2 of them charge(s)"), "the message says what is live: %s",
            gpupart_last_error());
  cr_expect_eq(gpupart_device_close(dev), GPUPART_EBUSY);
  cr_expect(said("2 allocation(s) still live, 2 of them charge(s)"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_charge_release(b), GPUPART_OK);
  cr_expect_eq(gpupart_charge_release(again), GPUPART_OK);
  cr_expect_eq(gpupart_charge_release(NULL), GPUPART_OK);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
}

Test(charge, bad_input_is_refused) {
  gpupart_partition *p = test_partition(dev, "job", 0, 0);
  gpupart_charge *c = (gpupart_charge *)1;
  cr_expect_eq(gpupart_partition_charge(NULL, MiB, &c), GPUPART_EINVAL);
  cr_expect_null(c);
  cr_expect_eq(gpupart_partition_charge(p, MiB, NULL), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_charge(p, 0, &c), GPUPART_EINVAL);
  cr_expect_eq(gpupart_partition_charge(p, UINT64_MAX, &c), GPUPART_ELIMIT);
  cr_expect_eq(gpupart_charge_size(NULL), 0);
  cr_expect_eq(test_stats(p).in_use, 0);
  test_check(dev);
}

/* A charge above its partition's whole limit can never fit: it is refused at once, and
 * the OOM sequence is not run for it: no partition's cached block is given back, no
 * reclaim callback is asked (before, UINT64_MAX emptied every cache and asked the
 * callback for 2 MiB, block_need's wrap-around). */
static int reclaim_calls;
static int count_reclaim(gpupart_partition *p, uint64_t wanted, void *user) {
  (void)p;
  (void)wanted;
  (void)user;
  reclaim_calls++;
  return 0;
}

Test(charge, a_charge_above_the_whole_limit_runs_no_oom_sequence) {
  gpupart_partition_desc cd = {.name = "cache", .limit = 1 * GiB, .reclaim = count_reclaim};
  gpupart_partition_desc jd = {.name = "job", .reclaim = count_reclaim};
  gpupart_partition *cache = NULL, *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &cd, &cache), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_create(dev, &jd, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(cache, 64 * MiB, 0, &a), GPUPART_OK);
  gpupart_free(a); /* the block stays cached */
  const uint64_t sizes[] = {UINT64_MAX, 4 * GiB + 1, 5 * GiB};
  for (int i = 0; i < 3; i++) {
    gpupart_charge *c = (gpupart_charge *)1;
    reclaim_calls = 0;
    cr_expect_eq(gpupart_partition_charge(p, sizes[i], &c), GPUPART_ELIMIT);
    cr_expect_null(c);
    cr_expect(said("the partition limit is reached"), "%s", gpupart_last_error());
    cr_expect_eq(reclaim_calls, 0, "%" PRIu64 " bytes: no callback asked", sizes[i]);
    cr_expect_eq(test_stats(cache).reserved, 64 * MiB, "%" PRIu64 " bytes: the cache stays", sizes[i]);
  }
  gpupart_charge *c = NULL;
  cr_expect_eq(gpupart_partition_charge(cache, 1 * GiB + 1, &c), GPUPART_ELIMIT);
  cr_expect_eq(reclaim_calls, 0);
  cr_expect_eq(test_stats(cache).reserved, 64 * MiB, "its own cache stays too");
  cr_expect_eq(test_stats(p).failed_allocations, 3);
  cr_expect_eq(test_stats(p).in_use, 0);
  cr_expect_eq(gpupart_partition_charge(cache, 1 * GiB, &c), GPUPART_OK, "the whole limit still fits: %s",
               gpupart_last_error());
  cr_expect_eq(test_stats(cache).reserved, 1 * GiB, "its cache gave way to the charge");
  test_check(dev);
  gpupart_charge_release(c);
}

/* Charges and allocations share the partition's figures and the device's peak. */
Test(charge, charges_and_allocations_add_up) {
  gpupart_partition *p = test_partition(dev, "job", 0, 0);
  gpupart_allocation *a = NULL;
  gpupart_charge *c = NULL;
  cr_assert_eq(gpupart_alloc(p, MiB, 0, &a), GPUPART_OK);
  cr_assert_eq(gpupart_partition_charge(p, 10 * MiB, &c), GPUPART_OK);
  gpupart_stats s = test_stats(p), d;
  cr_expect_eq(s.in_use, 11 * MiB);
  cr_expect_eq(s.reserved, 12 * MiB, "the 2 MiB block and the charge");
  cr_expect_eq(s.live_allocations, 2);
  cr_assert_eq(gpupart_device_get_stats(dev, &d), GPUPART_OK);
  cr_expect_eq(d.in_use, 11 * MiB);
  cr_expect_geq(d.peak_in_use, 11 * MiB);
  test_check(dev);
  gpupart_free(a);
  gpupart_charge_release(c);
  s = test_stats(p);
  cr_expect_eq(s.peak_reserved, 12 * MiB);
  cr_expect_eq(s.peak_in_use, 11 * MiB);
  test_check(dev);
}

/* The other partitions' unused guarantees are floors a charge cannot take; the budget
 * refusal names the holders. */
Test(charge, floors_of_others_and_the_budget_hold) {
  gpupart_partition *floor = test_partition(dev, "floor", 0, 1 * GiB);
  gpupart_partition *p = test_partition(dev, "job", 0, 0);
  gpupart_charge *big = NULL, *more = NULL;
  cr_assert_eq(gpupart_partition_charge(p, 3 * GiB, &big), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_charge(p, 1, &more), GPUPART_ELIMIT);
  cr_expect(said("device budget") && said("floor"), "%s", gpupart_last_error());
  gpupart_charge *f = NULL;
  cr_expect_eq(gpupart_partition_charge(floor, 1 * GiB, &f), GPUPART_OK, "the floor stays whole: %s",
               gpupart_last_error());
  test_check(dev);
  gpupart_charge_release(f);
  gpupart_charge_release(big);
}

/* A budget refusal first gives back other partitions' cached empty blocks (the OOM
 * sequence's step 2), as an allocation's does. */
Test(charge, cached_blocks_of_others_make_room) {
  gpupart_partition *cache = test_partition(dev, "cache", 0, 0);
  gpupart_partition *p = test_partition(dev, "job", 0, 0);
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(cache, 1 * GiB, 0, &a), GPUPART_OK);
  gpupart_free(a); /* the block stays cached */
  cr_assert_eq(test_stats(cache).reserved, 1 * GiB);
  gpupart_charge *c = NULL;
  cr_expect_eq(gpupart_partition_charge(p, 4 * GiB, &c), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(cache).reserved, 0);
  test_check(dev);
  gpupart_charge_release(c);
}

/* A preallocated partition's blocks hold its limit: a charge is refused and told why. */
Test(charge, a_preallocated_partition_says_its_blocks_hold_the_limit) {
  gpupart_partition_desc d = {.name = "pre", .limit = 64 * MiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_charge *c = NULL;
  cr_expect_eq(gpupart_partition_charge(p, MiB, &c), GPUPART_ELIMIT);
  cr_expect(said("blocks hold the rest of its limit"), "%s", gpupart_last_error());
  test_check(dev);
}

/* ---- a shared ledger with a second process ------------------------------------------ */

static char dir[64];

static gpupart_device *open_shared(gpupart_context **c) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir};
  static gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  gpupart_device *d = NULL;
  if (gpupart_context_create(&cd, c) || gpupart_device_open(*c, &dd, &d)) return NULL;
  return d;
}

/* The child: charges 300 MiB in 'job' (limit 512 MiB), says so, waits, releases. */
static void child_charges(int ready, int go) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1) _exit(4);
  gpupart_context *c = NULL;
  gpupart_device *d = open_shared(&c);
  gpupart_partition_desc pd = {.name = "job", .limit = 512 * MiB};
  gpupart_partition *p = NULL;
  gpupart_charge *ch = NULL;
  if (!d || gpupart_partition_create(d, &pd, &p) || gpupart_partition_charge(p, 300 * MiB, &ch)) _exit(2);
  char b = 1;
  if (write(ready, &b, 1) != 1 || read(go, &b, 1) != 1) _exit(3);
  if (gpupart_charge_release(ch)) _exit(5);
  _exit(gpupart_device_close(d) || gpupart_context_destroy(c) ? 6 : 0);
}

Test(charge, a_shared_partition_counts_the_other_process_s_charges) {
  snprintf(dir, sizeof dir, "/tmp/gpupart-charge-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  int r[2], g[2];
  cr_assert_eq(pipe(r), 0);
  cr_assert_eq(pipe(g), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) child_charges(r[1], g[0]);
  char b;
  cr_assert_eq(read(r[0], &b, 1), 1, "the child charged its bytes");
  gpupart_context *c = NULL;
  gpupart_device *d = open_shared(&c);
  cr_assert_not_null(d, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "job", .limit = 512 * MiB};
  gpupart_partition *p = NULL, *other = NULL;
  cr_assert_eq(gpupart_partition_create(d, &pd, &p), GPUPART_OK, "joins: %s", gpupart_last_error());
  gpupart_charge *mine = NULL, *over = NULL, *rest = NULL;
  cr_expect_eq(gpupart_partition_charge(p, 212 * MiB, &mine), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_charge(p, 1, &over), GPUPART_ELIMIT);
  char who[64];
  snprintf(who, sizeof who, "pid %d", (int)pid);
  cr_expect(said("other members of the shared partition hold 314572800 bytes") && said(who), "%s",
            gpupart_last_error());
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  cr_expect_eq(s.reserved, 512 * MiB, "the partition's bytes across both processes");
  cr_expect_eq(s.in_use, 212 * MiB, "this process's own");
  gpupart_partition_desc od = {.name = "other"};
  cr_assert_eq(gpupart_partition_create(d, &od, &other), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_charge(other, 512 * MiB + 1, &rest), GPUPART_ELIMIT, "the budget counts both");
  cr_expect(said("device budget"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_charge(other, 512 * MiB, &rest), GPUPART_OK, "%s", gpupart_last_error());
  test_check(d);
  cr_assert_eq(write(g[1], &b, 1), 1);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  cr_expect_eq(gpupart_partition_charge(p, 300 * MiB, &over), GPUPART_OK, "the child's release gave them back: %s",
               gpupart_last_error());
  gpupart_charge_release(over);
  gpupart_charge_release(mine);
  gpupart_charge_release(rest);
  cr_expect_eq(gpupart_device_close(d), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(c), GPUPART_OK);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

/* A charge above this process's ceiling (memory_limit_max) on a shared device whose
 * budget is larger can never fit either, even within its partition's limit: refused at
 * once as the ceiling's refusal, counted, with no cached block given back and no reclaim
 * callback asked; one within the ceiling is charged, this process's cached block in
 * another partition given back for it. */
Test(charge, a_charge_above_the_ceiling_runs_no_oom_sequence) {
  snprintf(dir, sizeof dir, "/tmp/gpupart-charge-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  gpupart_context *first = NULL, *c = NULL;
  gpupart_device *made = open_shared(&first); /* makes the ledger with the whole 1 GiB */
  cr_assert_not_null(made, "%s", gpupart_last_error());
  gpupart_context_desc cd = {
      .flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir, .config_text = "[gpupart]\nmemory_limit_max = 256MiB\n"};
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  gpupart_device *d = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &c), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_device_open(c, &dd, &d), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(d), 1 * GiB, "the shared budget applies");
  gpupart_partition_desc cdesc = {.name = "cache", .reclaim = count_reclaim};
  gpupart_partition_desc jd = {.name = "job", .limit = 800 * MiB, .reclaim = count_reclaim};
  gpupart_partition *cache = NULL, *p = NULL;
  cr_assert_eq(gpupart_partition_create(d, &cdesc, &cache), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_create(d, &jd, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(cache, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(a); /* the block stays cached */
  gpupart_charge *ch = (gpupart_charge *)1;
  reclaim_calls = 0;
  cr_expect_eq(gpupart_partition_charge(p, 300 * MiB, &ch), GPUPART_ELIMIT, "above the 256 MiB ceiling");
  cr_expect_null(ch);
  cr_expect(said("ceiling") && said("memory_limit_max"), "%s", gpupart_last_error());
  cr_expect_eq(reclaim_calls, 0, "no callback asked");
  cr_expect_eq(test_stats(cache).reserved, 64 * MiB, "the cache stays");
  cr_expect_eq(test_stats(p).failed_allocations, 1);
  /* Within the ceiling only once this process's own cached block goes: step 2 (other
   * partitions' empty blocks) counts for the ceiling, as they are this process's bytes. */
  cr_expect_eq(gpupart_partition_charge(p, 200 * MiB, &ch), GPUPART_OK, "within the ceiling: %s", gpupart_last_error());
  cr_expect_eq(test_stats(p).in_use, 200 * MiB);
  cr_expect_eq(test_stats(cache).reserved, 0, "this process's cache made room under its ceiling");
  test_check(d);
  gpupart_charge_release(ch);
  cr_expect_eq(gpupart_device_close(d), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(c), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(made), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(first), GPUPART_OK);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

/* A child forked after the shared device was opened is no member of its ledger: its
 * charge is EINVAL saying so, and its release of the parent's charge leaves the parent's
 * bytes in the ledger; the parent's figures are the same afterwards. */
Test(charge, a_forked_child_of_a_shared_device_charges_nothing) {
  snprintf(dir, sizeof dir, "/tmp/gpupart-charge-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  gpupart_context *c = NULL;
  gpupart_device *d = open_shared(&c);
  cr_assert_not_null(d, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "job", .limit = 512 * MiB};
  gpupart_partition *p = NULL;
  gpupart_charge *mine = NULL;
  cr_assert_eq(gpupart_partition_create(d, &pd, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_partition_charge(p, 100 * MiB, &mine), GPUPART_OK, "%s", gpupart_last_error());
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    gpupart_charge *ch = (gpupart_charge *)1;
    if (gpupart_partition_charge(p, MiB, &ch) != GPUPART_EINVAL || ch) _exit(2);
    if (!strstr(gpupart_last_error(), "forked")) _exit(3);
    gpupart_charge_release(mine); /* the parent's: its ledger bytes stay */
    _exit(0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  uint64_t left = 0;
  cr_expect_eq(gpupart_partition_chargeable(p, &left), GPUPART_OK);
  cr_expect_eq(left, 412 * MiB, "the parent's 100 MiB are still charged");
  gpupart_stats st = test_stats(p);
  cr_expect_eq(st.reserved, 100 * MiB);
  cr_expect_eq(st.live_allocations, 1);
  test_check(d);
  cr_expect_eq(gpupart_charge_release(mine), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).reserved, 0);
  cr_expect_eq(gpupart_device_close(d), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(c), GPUPART_OK);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

/* Threads charging and releasing at once, beside allocations on the same partition: the
 * figures and the ledger balance, and the limit is never passed. */
typedef struct worker {
  gpupart_partition *p;
  unsigned seed;
  int errors;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  gpupart_charge *held[16] = {0};
  for (int i = 0; i < 2000; i++) {
    int k = (int)(rand_r(&w->seed) % 16);
    if (held[k]) {
      w->errors += gpupart_charge_release(held[k]) != GPUPART_OK;
      held[k] = NULL;
    } else {
      gpupart_result r = gpupart_partition_charge(w->p, 1 + rand_r(&w->seed) % (3 * MiB), &held[k]);
      w->errors += r != GPUPART_OK && r != GPUPART_ELIMIT;
    }
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(w->p, 4096, 0, &a) == GPUPART_OK) gpupart_free(a);
  }
  for (int k = 0; k < 16; k++) w->errors += gpupart_charge_release(held[k]) != GPUPART_OK;
  return NULL;
}

Test(charge, threads_at_once_leave_the_figures_balanced) {
  gpupart_partition *p = test_partition(dev, "job", 64 * MiB, 0);
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){p, 7u + (unsigned)i, 0};
    cr_assert_eq(pthread_create(&t[i], NULL, churn, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    cr_expect_eq(w[i].errors, 0);
  }
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.live_allocations, 0);
  cr_expect_leq(s.peak_in_use, 64 * MiB);
  test_check(dev);
}
