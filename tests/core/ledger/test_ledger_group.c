/* Ledgers shared by a group (core/ledger/shm_folder.c), with real processes of different
 * user ids: forked children drop to two unprivileged uids (numeric, no passwd entry
 * needed) whose supplementary group is a group folder's (mode 2770), open one sim device
 * shared through it and see each other's bytes in one ledger, whose name carries no uid
 * and whose mode is 0660 whatever their umask; the outside reader (as gpupart top and the
 * exporter) lists every ledger of the folder, whoever made it; a ledger deleted under its
 * members is made anew 0660 for the group, and a member then sees the survivor's bytes;
 * a third uid outside the group is refused with a message that says so; a world-writable
 * group folder, a world-accessible ledger, one the group cannot write and one of another
 * group are refused. The children change their credentials, which needs root: the suite exits 77
 * (skipped) otherwise. Each test has its own scratch folder, made a group folder. */
#include <criterion/criterion.h>
#include <grp.h>
#include <sys/stat.h>

#include "shm_test.h"

#define GROUP 61000u   /* the group folder's group */
#define MEMBER_A 61001 /* two users in it (their primary group is their own: the folder gives the group) */
#define MEMBER_B 61002
#define OUTSIDER 61003 /* a user outside it */

static void group_setup(void) {
  setup();
  cr_assert_eq(chown(dir, 0, GROUP), 0);
  cr_assert_eq(chmod(dir, 02770), 0);
}

TestSuite(ledger_group, .init = group_setup, .fini = teardown, .timeout = 60);

/* In a forked child: becomes uid (in GROUP when member), with a umask that would make a
 * file 0640, and goes with the test's process. */
static void become(uid_t uid, int member) {
  gid_t groups[1] = {GROUP};
  if (setgroups(member ? 1 : 0, groups) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
    _exit(10);
  die_with_parent(); /* after the change: a change of credentials clears the death signal */
  umask(022);
}

/* In a forked child of uid (a member of GROUP): holds bytes in partition name of the
 * shared device, then, when more is given, asks for that much again and exits 0 only when
 * it is refused (the other member's bytes count); waits for go. */
static void member_holds(uid_t uid, const char *name, uint64_t bytes, uint64_t more, int ready, int go) {
  become(uid, 1);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL, *b = NULL;
  gpupart_partition_desc pd = {.name = name};
  if (!ctx || open_shared(ctx, &dev) || gpupart_partition_create(dev, &pd, &p) || gpupart_alloc(p, bytes, 0, &a))
    _exit(2);
  if (more && gpupart_alloc(p, more, 0, &b) != GPUPART_ELIMIT) _exit(5);
  char c = 1;
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) _exit(3);
  gpupart_free(a);
  _exit(gpupart_device_close(dev) || gpupart_context_destroy(ctx) ? 4 : 0);
}

static child spawn_member_of(uid_t uid, const char *name, uint64_t bytes, uint64_t more) {
  int r[2], g[2];
  cr_assert_eq(pipe(r), 0);
  cr_assert_eq(pipe(g), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) member_holds(uid, name, bytes, more, r[1], g[0]);
  close(r[1]), close(g[0]);
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the member of uid %u holds its bytes", (unsigned)uid);
  return (child){pid, r[0], g[1]};
}

static void end_member(child *c) {
  char go = 1;
  cr_assert_eq(write(c->go, &go, 1), 1);
  int status = wait_child(c);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "member status %d", status);
}

/* Opens the shared device in a forked child of uid (in GROUP when member); the child
 * exits 0 when the open is refused with ECONFIG. Returns its wait status, with the
 * child's last error message in msg. */
static int refused_open_as(uid_t uid, int member, char *msg, size_t len) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    become(uid, member);
    gpupart_context *ctx = shared_context();
    gpupart_device *dev = NULL;
    int rc = ctx ? open_shared(ctx, &dev) : -1;
    const char *why = gpupart_last_error();
    if (write(p[1], why, strlen(why)) < 0) _exit(3);
    _exit(rc == GPUPART_ECONFIG ? 0 : 2);
  }
  close(p[1]);
  cr_expect_geq(read(p[0], msg, len - 1), 0);
  close(p[0]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  return status;
}

Test(ledger_group, two_users_of_the_group_share_one_ledger) {
  child a = spawn_member_of(MEMBER_A, "a", 300 * MiB, 0);
  child b = spawn_member_of(MEMBER_B, "b", 300 * MiB, 500 * MiB); /* 1024 - 300 - 300 < 500 */
  char path[256];
  ledger_path(path, sizeof path);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s: the name carries no uid", path);
  cr_expect_eq(st.st_mode & 0777, 0660, "mode %o whatever the maker's umask", st.st_mode & 0777);
  cr_expect_eq(st.st_gid, GROUP);
  cr_expect(st.st_uid == MEMBER_A || st.st_uid == MEMBER_B, "made by a member, not uid %u", (unsigned)st.st_uid);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_OK, "%s", s->why);
  cr_expect_eq(s->members, 2);
  cr_expect_eq(s->reserved, 600 * MiB);
  cr_expect_not_null(member_of(s, a.pid));
  cr_expect_not_null(member_of(s, b.pid));
  free(s);
  end_member(&a);
  end_member(&b);
}

Test(ledger_group, the_reader_lists_every_ledger_of_the_folder) {
  child a = spawn_member_of(MEMBER_A, "a", 100 * MiB, 0);
  char stray[300];
  snprintf(stray, sizeof stray, "%s/gpupart-%u-sim_9_4096.ledger", dir, MEMBER_B); /* a user's name: not the group's */
  write_file(stray, 0660, "x", 1);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) { /* the other member's device: another ledger of the folder */
    become(MEMBER_B, 1);
    gpupart_context *ctx = shared_context();
    gpupart_sim_desc sim = {.total_bytes = 2 * GiB};
    gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
    gpupart_device *dev = NULL;
    _exit(!ctx || gpupart_device_open(ctx, &d, &dev) ? 2 : 0); /* its file stays */
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  cr_assert_eq(gpupart__ledger_shm_scan(dir, 200, &s, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(n, 2, "both members' ledgers, not the user's name");
  for (uint32_t i = 0; i < n; i++) cr_expect_eq(s[i].status, GPUPART_OK, "%s: %s", s[i].file, s[i].why);
  free(s);
  end_member(&a);
}

Test(ledger_group, a_user_outside_the_group_is_refused) {
  child a = spawn_member_of(MEMBER_A, "a", 100 * MiB, 0);
  char msg[1024] = "";
  int status = refused_open_as(OUTSIDER, 0, msg, sizeof msg);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ECONFIG for the outsider: status %d (%s)", status, msg);
  cr_expect(strstr(msg, "not in that group") != NULL, "%s", msg);
  cr_expect(strstr(msg, dir) != NULL, "the message names the folder: %s", msg);
  end_member(&a);
}

Test(ledger_group, a_group_folder_anyone_may_write_is_refused) {
  cr_assert_eq(chmod(dir, 02777), 0);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_expect_eq(open_shared(ctx, &dev), GPUPART_ECONFIG);
  cr_expect(message_has("anyone may write"), "%s", gpupart_last_error());
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  cr_expect_eq(gpupart__ledger_shm_scan(dir, 200, &s, &n), GPUPART_ECONFIG, "the reader refuses it too");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_group, a_deleted_ledger_is_made_anew_for_the_group) {
  shared_env e = open_shared_env(); /* root: in every group */
  gpupart_partition *p = test_partition(e.dev, "p", 256 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 200 * MiB);
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(unlink(path), 0);
  let_members_look();
  test_check(e.dev); /* finds the file gone and makes it anew, with its figures */
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s made anew", path);
  cr_expect_eq(st.st_mode & 0777, 0660);
  cr_expect_eq(st.st_gid, GROUP);
  child b = spawn_member_of(MEMBER_B, "p", 10 * MiB, 100 * MiB); /* 200 + 10 + 100 > 256: it sees root's bytes */
  end_member(&b);
  gpupart_free(a);
  close_shared_env(&e);
}

/* The ledger made by a member, then changed by hand (mode, group; given to the other
 * member, so that the kernel lets it open the file and the check has its say): its
 * opening by that member, and the reader, refuse it with a message that has want. */
static void changed_ledger_is_refused(mode_t mode, gid_t gid, const char *want) {
  child a = spawn_member_of(MEMBER_A, "a", 1 * MiB, 0);
  end_member(&a);
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(chown(path, MEMBER_B, gid), 0);
  cr_assert_eq(chmod(path, mode), 0);
  char msg[1024] = "";
  int status = refused_open_as(MEMBER_B, 1, msg, sizeof msg);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ECONFIG for the member: status %d (%s)", status, msg);
  cr_expect(strstr(msg, want) != NULL, "%s", msg);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_ECONFIG, "the reader refuses it: %s", s->why);
  free(s);
}

Test(ledger_group, a_ledger_anyone_may_use_is_refused) {
  changed_ledger_is_refused(0666, GROUP, "users outside the group may use it");
}

Test(ledger_group, a_ledger_the_group_cannot_write_is_refused) {
  changed_ledger_is_refused(0640, GROUP, "the group cannot read and write it");
}

Test(ledger_group, a_ledger_of_another_group_is_refused) {
  changed_ledger_is_refused(0660, MEMBER_A, "not of its group folder's gid");
}

/* Changing credentials needs root: anyone else skips the whole suite (exit 77, which
 * meson counts as skipped). */
int main(int argc, char *argv[]) {
  if (geteuid() != 0) {
    fprintf(stderr, "ledger_group: needs root to run processes of other uids: skipped\n");
    return 77;
  }
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return result;
}
