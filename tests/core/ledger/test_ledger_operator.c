/* The operator's ledger (core/ledger/shm_operator.c; `gpupart ledger create` and
 * `remove`, whose command-line side tests/cli/test_cli.py runs): a ledger made with no
 * member process keeps its budget and floors for the jobs that come later; figures that
 * cannot fit are refused before the file is touched; a second create and a removal of a
 * ledger that is not the operator's are refused; a removal names the live members that
 * hold bytes; and the operator's mark, written over a dead member's slot, does not keep
 * that member's bytes from being reaped (the file is hostile input); in a group folder the
 * operator's ledger is the group's file (0660, no uid in its name). Helpers:
 * tests/core/ledger/shm_test.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "shm_test.h"

TestSuite(ledger_operator, .init = setup, .fini = teardown, .timeout = 60);

/* Lets a holder free its bytes and exit; its status must be 0. */
static void child_release(child c) {
  char b = 1;
  cr_assert_eq(write(c.go, &b, 1), 1);
  cr_expect_eq(wait_child(&c), 0, "the holder ends cleanly");
}

static gpupart__identity sim_identity(void) {
  gpupart_device_info info = {.backend = GPUPART_BACKEND_SIM, .total_bytes = 1 * GiB};
  gpupart__identity id;
  gpupart__identity_of(&info, &id);
  return id;
}

static int operator_create(uint64_t budget, const gpupart__operator_part *parts, uint32_t n) {
  char path[4096];
  gpupart__identity id = sim_identity();
  return gpupart__ledger_shm_operator_create(gpupart__hostmem_default(), &id, budget, dir, parts, n, path, sizeof path);
}

static int operator_remove(int force) {
  char path[4096];
  gpupart__identity id = sim_identity();
  return gpupart__ledger_shm_operator_remove(gpupart__hostmem_default(), &id, dir, force, path, sizeof path);
}

Test(ledger_operator, a_floor_is_held_with_no_process_and_jobs_get_the_ledgers_figures) {
  gpupart__operator_part parts[] = {{"critical", {.limit = 512 * MiB, .guarantee = 400 * MiB}}};
  cr_assert_eq(operator_create(1 * GiB, parts, 1), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *be = test_partition(dev, "be", 0, 0);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(be, 700 * MiB, 0, &a), GPUPART_ELIMIT, "the operator's floor of 400 MiB is held");
  cr_expect(strstr(gpupart_last_error(), "the operator's ledger"), "%s", gpupart_last_error());
  a = alloc_ok(be, 600 * MiB);
  gpupart_partition_desc pd = {.name = "critical", .limit = 10 * MiB};
  gpupart_partition *crit = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &pd, &crit), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats st = {0};
  gpupart_partition_get_stats(crit, &st);
  cr_expect(st.limit == 512 * MiB && st.guarantee == 400 * MiB, "the ledger's figures, not the job's");
  gpupart_free(a);
  cr_expect_eq(operator_create(1 * GiB, parts, 1), GPUPART_EEXIST, "a second create");
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  cr_expect_eq(operator_remove(0), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(operator_remove(0), GPUPART_EINVAL, "nothing left to remove");
}

Test(ledger_operator, figures_that_cannot_fit_are_refused_before_the_file_is_made) {
  gpupart__operator_part over[] = {{"a", {.limit = 600 * MiB, .guarantee = 600 * MiB}},
                                   {"b", {.limit = 600 * MiB, .guarantee = 600 * MiB}}};
  cr_expect_eq(operator_create(1 * GiB, over, 2), GPUPART_ELIMIT, "floors past the budget");
  gpupart__operator_part twice[] = {{"a", {.limit = 1 * MiB, .guarantee = 0}},
                                    {"a", {.limit = 1 * MiB, .guarantee = 0}}};
  cr_expect_eq(operator_create(1 * GiB, twice, 2), GPUPART_EINVAL, "a name declared twice");
  gpupart__operator_part big[] = {{"a", {.limit = 2 * GiB, .guarantee = 0}}};
  cr_expect_eq(operator_create(1 * GiB, big, 1), GPUPART_ELIMIT, "a limit past the budget");
  gpupart__operator_part floor_over_limit[] = {{"a", {.limit = 1 * MiB, .guarantee = 2 * MiB}}};
  cr_expect_eq(operator_create(1 * GiB, floor_over_limit, 1), GPUPART_ELIMIT, "a floor past its limit");
  cr_expect_eq(operator_create(0, NULL, 0), GPUPART_EINVAL, "a budget of 0");
  char path[4096];
  ledger_path(path, sizeof path);
  cr_expect_neq(access(path, F_OK), 0, "no file was made");
}

Test(ledger_operator, remove_names_the_members_that_hold_bytes_and_refuses_an_ordinary_ledger) {
  child c = spawn_holder("theirs", 64 * MiB);
  cr_expect_eq(operator_remove(0), GPUPART_EINVAL, "an ordinary ledger is no operator's");
  child_release(c);
  cr_expect_eq(operator_remove(0), GPUPART_EINVAL, "an ordinary ledger no process uses");
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->budget, 1 * GiB, "a refused removal leaves the file as it was");
  free(s);
  cr_assert_eq(operator_create(1 * GiB, NULL, 0), GPUPART_OK, "%s", gpupart_last_error());
  c = spawn_holder("theirs", 64 * MiB);
  char pid[32];
  snprintf(pid, sizeof pid, "pid %d", (int)c.pid);
  cr_expect_eq(operator_remove(0), GPUPART_EBUSY);
  cr_expect(strstr(gpupart_last_error(), pid) && strstr(gpupart_last_error(), "67108864 bytes"), "%s",
            gpupart_last_error());
  cr_expect_eq(operator_remove(1), GPUPART_OK, "--force: %s", gpupart_last_error());
  child_release(c);
}

Test(ledger_operator, the_operators_mark_over_a_dead_members_slot_keeps_none_of_its_bytes) {
  cr_assert_eq(operator_create(1 * GiB, NULL, 0), GPUPART_OK, "%s", gpupart_last_error());
  child c = spawn_holder("theirs", 64 * MiB);
  cr_assert_eq(kill(c.pid, SIGKILL), 0);
  wait_child(&c);
  char path[4096];
  ledger_path(path, sizeof path);
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  shm_header *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  cr_assert_neq(h, MAP_FAILED);
  int marked = 0;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (h->member[i].pid == c.pid) h->member[i].pid = SHM_OPERATOR_PID, marked = 1;
  cr_assert(marked, "the dead member's slot");
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->dead_reserved, 64 * MiB, "a reader counts its bytes as dead");
  free(s);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "mine", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 1000 * MiB); /* only if the dead member's 64 MiB came back */
  gpupart_free(a);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  munmap(h, sizeof *h);
  close(fd);
}

Test(ledger_operator, in_a_group_folder_the_operators_ledger_is_the_groups) {
  cr_assert_eq(chmod(dir, 02770), 0);
  gpupart__operator_part parts[] = {{"critical", {.limit = 512 * MiB, .guarantee = 400 * MiB}}};
  cr_assert_eq(operator_create(1 * GiB, parts, 1), GPUPART_OK, "%s", gpupart_last_error());
  char path[4096];
  ledger_path(path, sizeof path);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s: the group's file, no uid in its name", path);
  cr_expect_eq(st.st_mode & 0777, 0660);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(test_partition(dev, "be", 0, 0), 700 * MiB, 0, &a), GPUPART_ELIMIT, "the floor holds");
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  cr_expect_eq(operator_remove(0), GPUPART_OK, "%s", gpupart_last_error());
}
