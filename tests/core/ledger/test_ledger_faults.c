/* The shared ledger (core/ledger/shm*.c) under hostile files and faults, with real
 * processes: bytes scribbled over the whole file (a pthread mutex's bytes in particular)
 * never crash a reader or a member; a member stopped (SIGSTOP) while it holds the lock is
 * named in an EBUSY, and a partition destroyed and a device closed meanwhile neither crash
 * nor lose their releases (applied by the next call that gets the lock); a file truncated
 * under a live member fails its calls with ECORRUPT instead of SIGBUS, and a SIGBUS of
 * another mapping still reaches the program's handler; a forked child that frees,
 * destroys and closes what it inherited leaves its parent's shares alone; a file deleted
 * under its members is made anew with the survivors' figures (also those of survivors
 * that made no call since, and merged into a newcomer's file); a holder killed mid-update
 * is repaired; outside readers leave out the bytes of dead members nobody reaped; and
 * refusals say who holds the bytes. Each test has its own scratch ledger folder. */
#include <setjmp.h>
#include <sys/mman.h>

#include "shm_test.h"

TestSuite(ledger_faults, .init = setup, .fini = teardown, .timeout = 60);

static void patch_at(size_t at, const void *bytes, size_t n) {
  char path[256];
  ledger_path(path, sizeof path);
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  cr_assert_eq(pwrite(fd, bytes, n, (off_t)at), (ssize_t)n);
  close(fd);
}

/* A forked child that takes the ledger's lock as a member does (naming itself "holder")
 * and is then stopped with it. */
static pid_t stopped_holder(void) {
  char path[256];
  int r[2];
  ledger_path(path, sizeof path);
  cr_assert_eq(pipe(r), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) close(r[0]), child_holds_the_lock(path, r[1]);
  close(r[1]);
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the child holds the lock");
  close(r[0]);
  int status = 0;
  cr_assert_eq(kill(pid, SIGSTOP), 0);
  cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
  cr_assert(WIFSTOPPED(status));
  return pid;
}

static void kill_child(pid_t pid) {
  cr_assert_eq(kill(pid, SIGKILL), 0);
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
}

static int has(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

/* ---- hostile files (refused with a clear error), a lock held from outside ---- */

/* Opens the shared device expecting code, with want in the message. */
static void expect_refused(gpupart_result code, const char *want) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = (gpupart_device *)&dev;
  cr_expect_eq(open_shared(ctx, &dev), code, "%s", gpupart_last_error());
  cr_expect_null(dev);
  cr_expect(message_has(want) && message_has(dir), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static size_t ledger_size(void) {
  char path[256];
  struct stat st;
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  ledger_path(path, sizeof path);
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600, "a new ledger is 0600");
  cr_expect_eq(st.st_uid, geteuid());
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  unlink(path);
  return (size_t)st.st_size;
}

Test(ledger_faults, a_corrupt_or_truncated_ledger_is_refused) {
  char path[256];
  size_t n = ledger_size();
  ledger_path(path, sizeof path);
  char *junk = malloc(n);
  cr_assert_not_null(junk);
  memset(junk, 0x5a, n);
  write_file(path, 0600, junk, n);
  expect_refused(GPUPART_ECORRUPT, "not a gpupart");
  write_file(path, 0600, junk, n / 2);
  expect_refused(GPUPART_ECORRUPT, "bytes");
  free(junk);
}

/* The folder's default is the configuration's (the ledger_dir option): the ledger itself
 * has none, so a caller that forgot to resolve it is refused, never sent to /dev/shm. */
Test(ledger_faults, the_ledger_has_no_folder_of_its_own) {
  gpupart__identity id = {"sim:0:1024"};
  gpupart__ledger *l = (gpupart__ledger *)1;
  gpupart__ledger_snapshot *s = (gpupart__ledger_snapshot *)1;
  uint32_t n = 7;
  cr_expect_eq(gpupart__ledger_shm_create(gpupart__hostmem_default(), &id, 1 << 20, NULL, &l), GPUPART_EINVAL);
  cr_expect_null(l);
  cr_expect_eq(gpupart__ledger_shm_create(gpupart__hostmem_default(), &id, 1 << 20, "", &l), GPUPART_EINVAL);
  cr_expect_eq(gpupart__ledger_shm_scan(NULL, 100, &s, &n), GPUPART_EINVAL);
  cr_expect_null(s);
  cr_expect_eq(n, 0);
  cr_expect_eq(gpupart__ledger_shm_scan("", 100, &s, &n), GPUPART_EINVAL);
}

Test(ledger_faults, a_ledger_others_may_read_is_refused) {
  char path[256];
  ledger_path(path, sizeof path);
  write_file(path, 0644, "", 0);
  expect_refused(GPUPART_ECONFIG, "0600");
}

Test(ledger_faults, a_ledger_of_another_user_is_refused) {
  if (geteuid() != 0) cr_skip_test("needs root to give a file to another user");
  char path[256];
  ledger_path(path, sizeof path);
  write_file(path, 0600, "", 0);
  cr_assert_eq(chown(path, 65534, 65534), 0);
  expect_refused(GPUPART_ECONFIG, "belongs to uid 65534");
}

Test(ledger_faults, a_snapshot_of_a_held_lock_is_busy_and_a_dead_holder_is_recovered) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *a = alloc_ok(test_partition(dev, "mine", 0, 0), 4 * MiB);
  char path[256];
  ledger_path(path, sizeof path);
  int r[2];
  cr_assert_eq(pipe(r), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) close(r[0]), child_holds_the_lock(path, r[1]);
  close(r[1]);
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the child holds the lock");
  close(r[0]);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_EBUSY, "%s", s->why);
  cr_expect(strstr(s->why, "held past 200 ms") && !s->consistent && s->entries == 0, "%s", s->why);
  free(s);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
  s = scan_one();
  cr_expect_eq(s->status, GPUPART_OK, "a holder that died is recovered from: %s", s->why);
  cr_expect(s->consistent, "%s", s->why);
  cr_expect_eq(s->entries, 1);
  cr_expect_geq(s->reserved, 4 * MiB);
  free(s);
  test_check(dev); /* the library's own lock works after the outside recovery */
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* Reads file of the test's folder, expecting code with want in the message. */
static void expect_read(const char *file, gpupart_result code, const char *want) {
  gpupart__ledger_snapshot *s = malloc(sizeof *s);
  cr_assert_not_null(s);
  cr_expect_eq(gpupart__ledger_shm_read(dir, file, 100, s), code, "%s: %s", file, s->why);
  cr_expect_eq(s->status, code);
  cr_expect(strstr(s->why, want), "%s: '%s' wanted in '%s'", file, want, s->why);
  cr_expect(!s->consistent && s->entries == 0 && s->members == 0);
  free(s);
}

Test(ledger_faults, a_snapshot_refuses_hostile_files_and_names_each) {
  char path[256], other[300];
  size_t n = ledger_size();
  ledger_path(path, sizeof path);
  const char *file = strrchr(path, '/') + 1;
  char *junk = malloc(n);
  cr_assert_not_null(junk);
  memset(junk, 0x5a, n);
  write_file(path, 0600, junk, n);
  expect_read(file, GPUPART_ECORRUPT, "not a gpupart");
  write_file(path, 0600, junk, n / 2);
  expect_read(file, GPUPART_ECORRUPT, "bytes");
  write_file(path, 0644, junk, n);
  expect_read(file, GPUPART_ECONFIG, "0600");
  free(junk);
  unlink(path);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  snprintf(other, sizeof other, "%s/gpupart-%u-sim_1_1073741824.ledger", dir, (unsigned)geteuid());
  cr_assert_eq(link(path, other), 0);
  expect_read(strrchr(other, '/') + 1, GPUPART_ECORRUPT, "names device 'sim:0:1073741824'");
  expect_read("../x", GPUPART_EINVAL, "not a file name");
  unlink(other);
  cr_assert_eq(symlink(path, other), 0);
  expect_read(strrchr(other, '/') + 1, GPUPART_ECONFIG, other);
  unlink(other);
  snprintf(other, sizeof other, "%s/gpupart-%u-x.notaledger", dir, (unsigned)geteuid());
  write_file(other, 0600, "", 0);
  gpupart__ledger_snapshot *s = scan_one(); /* a file of another name is not read */
  cr_expect_eq(s->status, GPUPART_OK, "%s", s->why);
  free(s);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* A process stopped while it holds the ledger's lock (or a mutex whose bytes were
 * damaged) makes the others' calls fail after the bounded wait, never hang them. */
Test(ledger_faults, a_lock_held_without_end_fails_the_call_instead_of_hanging, .timeout = 60) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "mine", 0, 0);
  char path[256];
  ledger_path(path, sizeof path);
  int r[2];
  cr_assert_eq(pipe(r), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) close(r[0]), child_holds_the_lock(path, r[1]);
  close(r[1]);
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the child holds the lock");
  close(r[0]);
  cr_assert_eq(kill(pid, SIGSTOP), 0);
  gpupart_allocation *a = NULL;
  gpupart_result rc = gpupart_alloc(p, 64 * MiB, 0, &a); /* a growth: it must reserve in the ledger */
  cr_expect_neq(rc, GPUPART_OK, "a growth cannot reserve while the lock is held");
  cr_expect_null(a);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
  a = alloc_ok(p, 64 * MiB); /* the holder died: recovered, and the call works again */
  test_check(dev);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(ledger_faults, a_ledger_of_another_version_is_refused_naming_it) {
  char path[256];
  size_t n = ledger_size();
  ledger_path(path, sizeof path);
  uint8_t *old = calloc(1, n);
  cr_assert_not_null(old);
  const uint64_t magic = 0x3174726170757067ull; /* "gpupart1" */
  const uint32_t version = 2;
  memcpy(old, &magic, sizeof magic), memcpy(old + 8, &version, sizeof version);
  write_file(path, 0600, old, n - 4096); /* a version 2 file is smaller */
  expect_refused(GPUPART_ECONFIG, "version 2 ledger");
  cr_expect(message_has("version 5") && message_has("stop the processes"), "%s", gpupart_last_error());
  expect_read(strrchr(path, '/') + 1, GPUPART_ECONFIG, "is a version 2 ledger");
  write_file(path, 0600, old, n); /* even one of this version's size */
  expect_refused(GPUPART_ECONFIG, "version 2 ledger");
  /* the version before the request slots: its file is smaller, and of this size it is
   * no file of this layout either */
  const uint32_t four = 4;
  memcpy(old + 8, &four, sizeof four);
  write_file(path, 0600, old, n - sizeof(shm_request) * SHM_REQUESTS - 16);
  expect_refused(GPUPART_ECONFIG, "version 4 ledger");
  expect_read(strrchr(path, '/') + 1, GPUPART_ECONFIG, "is a version 4 ledger");
  write_file(path, 0600, old, n);
  expect_refused(GPUPART_ECONFIG, "version 4 ledger");
  free(old);
}

/* Writes with at the first place the ledger file holds what, of the same length. */
static void patch_ledger(const char *what, const char *with, size_t len) {
  char path[256];
  ledger_path(path, sizeof path);
  size_t n = ledger_size_bytes(path);
  char *bytes = malloc(n);
  int fd = open(path, O_RDWR);
  cr_assert(bytes && fd >= 0 && pread(fd, bytes, n, 0) == (ssize_t)n);
  const char *at = memmem(bytes, n, what, len);
  cr_assert_not_null(at, "'%s' is in the ledger", what);
  cr_assert_eq(pwrite(fd, with, len, at - bytes), (ssize_t)len);
  close(fd), free(bytes);
}

Test(ledger_faults, two_partitions_of_one_name_make_the_ledger_inconsistent) {
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_assert_eq(open_shared(ctx, &dev), GPUPART_OK, "%s", gpupart_last_error());
  test_partition(dev, "first", 64 * MiB, 0), test_partition(dev, "other", 64 * MiB, 0);
  cr_assert_eq(gpupart_device_check(dev), GPUPART_OK, "%s", gpupart_last_error());
  patch_ledger("other", "first", 6); /* a damaged file: the name's NUL too */
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_OK);
  cr_expect(!s->consistent && strstr(s->why, "one name"), "%s", s->why);
  free(s);
  cr_expect_eq(gpupart_device_check(dev), GPUPART_ECORRUPT);
  patch_ledger("first", "other", 6); /* the first of them: back as it was, for the close */
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- item: any bytes ---- */

/* A forked child that exits at once: its pid names a thread that is gone. */
static int32_t dead_pid(void) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) _exit(0);
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
  return pid;
}

/* Fills bytes with round's hostile pattern: glibc's process-shared robust PI mutex whose
 * owner is a thread that is gone (what made glibc assert when the file held a mutex), every
 * byte 0xff, or random bytes. */
static void hostile(uint8_t *bytes, size_t n, int round, int32_t dead) {
  int32_t mutex[10] = {dead, 0, dead, 1, 16 | 32 | 128}; /* lock, count, owner, nusers, kind */
  unsigned seed = (unsigned)round;
  for (size_t i = 0; i < n; i++)
    bytes[i] = round == 0 ? ((uint8_t *)mutex)[i % sizeof mutex] : round == 1 ? 0xff : (uint8_t)rand_r(&seed);
}

/* Whatever the bytes, an exec'd member exits by itself (its code may say it failed). */
static void a_member_survives(void) {
  member m = spawn_member((const char *[]){"part", "x", "0", "0", "alloc", "1", "check", NULL});
  int code = reap_member(&m);
  cr_expect_lt(code, 128, "the member was killed by signal %d", code - 128);
}

Test(ledger_faults, scribbled_bytes_never_crash_a_reader_or_a_member, .timeout = 120) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "mine", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  char path[256];
  ledger_path(path, sizeof path);
  size_t n = ledger_size_bytes(path), keep = gpupart__ledger_shm_field("epoch"); /* magic, sizes, identity */
  uint8_t *saved = malloc(n), *bytes = malloc(n);
  int fd = open(path, O_RDWR);
  cr_assert(saved && bytes && fd >= 0 && pread(fd, saved, n, 0) == (ssize_t)n);
  int32_t dead = dead_pid();
  for (int round = 0; round < 12; round++) {
    memcpy(bytes, saved, keep);
    hostile(bytes + keep, n - keep, round, dead);
    cr_assert_eq(pwrite(fd, bytes, n, 0), (ssize_t)n);
    gpupart__ledger_snapshot *s = NULL;
    uint32_t count = 0;
    cr_expect_eq(gpupart__ledger_shm_scan(dir, 100, &s, &count), GPUPART_OK, "round %d: the reader read", round);
    free(s);
    a_member_survives();
    gpupart_allocation *b = NULL;
    gpupart_result rc = gpupart_alloc(p, 64 * MiB, 0, &b); /* a growth: the ledger's lock and figures */
    if (rc == GPUPART_OK) gpupart_free(b);
    cr_assert_eq(pwrite(fd, saved, n, 0), (ssize_t)n); /* back as it was, for the next round */
  }
  close(fd);
  free(saved), free(bytes);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(e.dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(e.ctx), GPUPART_OK);
}

/* ---- items: a stopped holder; releases never lost ---- */

Test(ledger_faults, a_stopped_holder_is_named_and_destroy_and_close_meanwhile_survive) {
  shared_env e = open_shared_env();
  gpupart_partition_desc pd = {.name = "mine", .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &pd);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB), *b = NULL;
  pid_t holder = stopped_holder();
  char want[64];
  snprintf(want, sizeof want, "pid %d (holder)", (int)holder);
  cr_expect_eq(gpupart_alloc(p, 64 * MiB, 0, &b), GPUPART_EBUSY, "%s", gpupart_last_error());
  cr_expect(has(want) && has("held") && !has("unusable"), "%s", gpupart_last_error());
  gpupart_context *other = shared_context(); /* another attachment, as another process has */
  gpupart_device *dev = (gpupart_device *)&dev;
  cr_expect_eq(open_shared(other, &dev), GPUPART_EBUSY, "joining waits, then names the holder");
  cr_expect(has(want) && !has("unusable"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(other), GPUPART_OK);
  gpupart_free(a); /* its block goes back: the release is queued */
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(e.dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(e.ctx), GPUPART_OK);
  kill_child(holder);
  e = open_shared_env(); /* the holder died mid-update and this process left: nothing of either stays */
  gpupart_free(alloc_ok(test_partition(e.dev, "all", 0, 0), 1 * GiB));
  close_shared_env(&e);
}

Test(ledger_faults, a_free_made_while_the_lock_is_held_is_applied_by_the_next_call) {
  shared_env e = open_shared_env();
  gpupart_partition_desc pd = {.name = "mine", .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &pd);
  gpupart_allocation *a = alloc_ok(p, 64 * MiB);
  pid_t holder = stopped_holder();
  gpupart_free(a); /* the block goes back to the driver; the ledger cannot be told yet */
  kill_child(holder);
  test_check(e.dev); /* the queued release is applied first */
  cr_expect_eq(dev_stats(e.dev).reserved, 0);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->status == GPUPART_OK && s->consistent && s->reserved == 0, "%s", s->why);
  free(s);
  gpupart_free(alloc_ok(p, 1 * GiB));
  close_shared_env(&e);
}

Test(ledger_faults, a_holder_killed_mid_update_is_repaired_by_the_next_locker) {
  shared_env e = open_shared_env();
  gpupart_allocation *a = alloc_ok(test_partition(e.dev, "mine", 0, 0), 8 * MiB);
  pid_t holder = stopped_holder();
  uint64_t garbage = 77 * MiB;
  patch_at(gpupart__ledger_shm_field("reserved"), &garbage, sizeof garbage); /* a sum it was changing */
  kill_child(holder);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent && s->reserved == 8 * MiB, "the reader recomputes its copy: %s", s->why);
  free(s);
  test_check(e.dev);
  cr_expect_eq(dev_stats(e.dev).reserved, 8 * MiB);
  gpupart_free(a);
  close_shared_env(&e);
}

/* ---- item: a truncated file ---- */

static void truncate_ledger(off_t size) {
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(truncate(path, size), 0);
}

Test(ledger_faults, a_truncated_ledger_fails_calls_instead_of_raising_sigbus) {
  for (int half = 0; half < 2; half++) {
    shared_env e = open_shared_env();
    gpupart_partition_desc pd = {.name = "mine", .initial_block = 16 * MiB};
    gpupart_partition *p = make_partition(e.dev, &pd);
    gpupart_allocation *a = alloc_ok(p, 2 * MiB), *b = NULL;
    char path[256];
    ledger_path(path, sizeof path);
    truncate_ledger(half ? (off_t)ledger_size_bytes(path) / 2 : 0);
    let_members_look();
    gpupart_allocation *c = alloc_ok(p, 1 * MiB); /* from the held block: publishes its counters */
    cr_expect_eq(gpupart_alloc(p, 64 * MiB, 0, &b), GPUPART_ECORRUPT, "%s", gpupart_last_error());
    cr_expect(has("truncated") && has(path), "%s", gpupart_last_error());
    cr_expect_eq(gpupart_device_check(e.dev), GPUPART_ECORRUPT);
    gpupart_free(c), gpupart_free(a);
    cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
    cr_expect_eq(gpupart_device_close(e.dev), GPUPART_OK, "%s", gpupart_last_error());
    cr_expect_eq(gpupart_context_destroy(e.ctx), GPUPART_OK);
    unlink(path);
  }
}

static sigjmp_buf escape;
static volatile sig_atomic_t heard;

static void programs_handler(int sig) {
  (void)sig;
  heard++;
  siglongjmp(escape, 1);
}

/* A SIGBUS of a mapping of the program's own reaches the program's handler, while a
 * shared ledger is mapped and after. */
static void touch_truncated_mapping(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/mine", dir);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  cr_assert(fd >= 0 && ftruncate(fd, 8192) == 0);
  volatile char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  cr_assert_neq((void *)m, MAP_FAILED);
  cr_assert_eq(ftruncate(fd, 0), 0);
  if (sigsetjmp(escape, 1) == 0) m[4096] = 1;
  munmap((void *)m, 8192);
  close(fd);
}

Test(ledger_faults, a_sigbus_of_another_mapping_reaches_the_programs_handler) {
  struct sigaction mine = {.sa_handler = programs_handler}, before;
  sigemptyset(&mine.sa_mask);
  cr_assert_eq(sigaction(SIGBUS, &mine, &before), 0);
  shared_env e = open_shared_env();
  touch_truncated_mapping();
  cr_expect_eq(heard, 1, "passed on while the ledger is mapped");
  close_shared_env(&e);
  touch_truncated_mapping();
  cr_expect_eq(heard, 2, "the program's handler is back in place");
  sigaction(SIGBUS, &before, NULL);
}

/* ---- item: a forked child ---- */

Test(ledger_faults, a_forked_child_that_frees_destroys_and_closes_leaves_its_parents_shares) {
  shared_env e = open_shared_env();
  gpupart_partition_desc pd = {.name = "mine", .limit = 256 * MiB, .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &pd);
  gpupart_allocation *a = alloc_ok(p, 100 * MiB);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    gpupart_free(a);
    _exit(gpupart_partition_destroy(p) || gpupart_device_close(e.dev) || gpupart_context_destroy(e.ctx));
  }
  int status = -1;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect_eq(status, 0, "the child freed, destroyed and closed");
  test_check(e.dev);
  cr_expect_eq(part_stats(p).reserved, 100 * MiB, "the parent's bytes are still in the ledger");
  cr_expect_eq(run_member((const char *[]){"part", "mine", "0", "0", "refuse", "200", "alloc", "150", NULL}), 0,
               "another process gets 156 MiB of the 256, not 256");
  gpupart_free(a);
  close_shared_env(&e);
}

/* ---- item: a deleted file ---- */

static void delete_ledger(void) {
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(unlink(path), 0);
  let_members_look();
}

Test(ledger_faults, a_deleted_ledger_is_made_anew_with_the_survivors_figures) {
  member m = spawn_member(
      (const char *[]){"part", "p", "256", "0", "alloc", "200", "ready", "wait", "check", "ready", "wait", NULL});
  await_ready(&m);
  delete_ledger();
  release_member(&m);
  await_ready(&m); /* its call found the file gone and made it anew */
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "p", 0, 0); /* joins the survivor's */
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &a), GPUPART_ELIMIT, "200 + 100 MiB exceed the 256 MiB limit");
  cr_expect_eq(part_stats(p).reserved, 200 * MiB);
  cr_expect_eq(part_stats(p).limit, 256 * MiB);
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0);
  gpupart_free(alloc_ok(p, 250 * MiB));
  close_shared_env(&e);
}

Test(ledger_faults, survivors_that_made_no_call_are_moved_by_the_first_that_did) {
  member idle = spawn_member((const char *[]){"part", "idle", "0", "0", "alloc", "300", "ready", "wait", "reserved",
                                              "300", "check", "ready", "wait", NULL});
  await_ready(&idle);
  member busy = spawn_member(
      (const char *[]){"part", "busy", "0", "0", "alloc", "100", "ready", "wait", "check", "ready", "wait", NULL});
  await_ready(&busy);
  delete_ledger();
  release_member(&busy);
  await_ready(&busy); /* it moved both into a new file, holding the idle one's place for it */
  shared_env e = open_shared_env();
  cr_expect_eq(dev_stats(e.dev).reserved, 400 * MiB, "both survivors' bytes");
  gpupart_partition *p = test_partition(e.dev, "mine", 0, 0);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 700 * MiB, 0, &a), GPUPART_ELIMIT);
  release_member(&idle);
  await_ready(&idle); /* it took its own place */
  release_member(&busy);
  cr_expect_eq(reap_member(&busy), 0);
  cr_expect_eq(dev_stats(e.dev).reserved, 300 * MiB, "the idle one is alive and counted, as itself");
  release_member(&idle);
  cr_expect_eq(reap_member(&idle), 0);
  gpupart_free(alloc_ok(p, 1 * GiB));
  close_shared_env(&e);
}

Test(ledger_faults, a_newcomer_that_made_the_file_anew_gets_the_survivors_figures_merged) {
  member m = spawn_member((const char *[]){"part", "p", "256", "0", "alloc", "200", "ready", "wait", "reserved", "300",
                                           "ready", "wait", NULL});
  await_ready(&m);
  delete_ledger();
  shared_env e = open_shared_env(); /* before the survivor noticed: a new file, which cannot know */
  gpupart_partition *p = test_partition(e.dev, "p", 256 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 100 * MiB), *b = NULL;
  release_member(&m);
  await_ready(&m); /* it merged its 200 MiB into this file's partition of its name */
  cr_expect_eq(part_stats(p).reserved, 300 * MiB);
  cr_expect_eq(gpupart_alloc(p, 10 * MiB, 0, &b), GPUPART_ELIMIT, "the limit holds again");
  cr_expect_eq(dev_stats(e.dev).reserved, 300 * MiB);
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0);
  gpupart_free(a);
  close_shared_env(&e);
}

/* ---- issue 21: the outside view after a crash ---- */

Test(ledger_faults, readers_leave_out_the_bytes_of_members_all_killed) {
  child c[3];
  for (int i = 0; i < 3; i++) c[i] = spawn_holder((const char *[]){"t0", "t1", "t2"}[i], 100 * MiB);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(kill(c[i].pid, SIGKILL), 0);
    wait_child(&c[i]);
  }
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(chmod(path, 0400), 0); /* a reader that cannot write */
  for (int read = 0; read < 2; read++) {
    gpupart__ledger_snapshot *s = scan_one();
    cr_assert_eq(s->status, GPUPART_OK, "%s", s->why);
    cr_expect(s->consistent, "%s", s->why);
    cr_expect_eq(s->reserved, 0, "read %d: nobody's bytes", read);
    cr_expect_eq(s->entries, 0);
    cr_expect_eq(s->shares, 0);
    cr_expect_eq(s->dead_members, 3);
    cr_expect_eq(s->dead_reserved, 300 * MiB);
    cr_assert_eq(s->members, 3);
    for (uint32_t i = 0; i < 3; i++) cr_expect(!s->member[i].alive && !s->member[i].reserved && !s->member[i].entries);
    free(s);
  }
}

/* ---- messages ---- */

Test(ledger_faults, a_limit_refusal_in_a_joined_partition_names_the_members_holding_its_bytes) {
  member m = spawn_member((const char *[]){"part", "team", "256", "0", "alloc", "200", "ready", "wait", NULL});
  await_ready(&m);
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "team", 0, 0);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &a), GPUPART_ELIMIT);
  char want[64];
  snprintf(want, sizeof want, "pid %d (shm_member) %llu bytes", (int)m.pid, 200ull * MiB);
  cr_expect(has("other members of the shared partition hold") && has(want) && !has("fragmentation"), "%s",
            gpupart_last_error());
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0);
  close_shared_env(&e);
}

/* A guarantee that bytes in use elsewhere keep from being had is refused at creation
 * (never accepted and then unusable), naming who holds them, in-process and shared
 * alike; and a budget refusal names who holds the budget. */
static void budget_refusal_names_the_holder(gpupart_device *dev, int shared) {
  gpupart_partition *bigp = test_partition(dev, "big", 0, 0);
  gpupart_allocation *big = alloc_ok(bigp, 1000 * MiB), *a = NULL;
  gpupart_partition *floor = NULL;
  gpupart_partition_desc fd = {.name = "floor", .guarantee = 500 * MiB};
  cr_expect_eq(gpupart_partition_create(dev, &fd, &floor), GPUPART_EBUSY);
  cr_expect_null(floor);
  char pid[32];
  snprintf(pid, sizeof pid, "pid %d", (int)getpid());
  cr_expect(has("partition 'big' holds 1048576000 bytes") && (!shared || has(pid)) && has("guarantee of 524288000"),
            "%s", gpupart_last_error());
  cr_expect(has(shared ? "give-back was asked" : "gave back"), "%s", gpupart_last_error());
  floor = test_partition(dev, "floor", 0, 0);
  cr_expect_eq(gpupart_alloc(floor, 100 * MiB, 0, &a), GPUPART_ELIMIT);
  cr_expect(has("partition 'big' holds 1048576000 bytes") && (!shared || has(pid)), "%s", gpupart_last_error());
  test_check(dev);
  gpupart_free(big);
}

Test(ledger_faults, a_budget_refusal_names_the_partitions_that_hold_the_budget) {
  sim_env local = open_env(&(gpupart_sim_desc){.total_bytes = 1 * GiB}, NULL);
  budget_refusal_names_the_holder(local.dev, 0);
  close_env(&local);
  shared_env e = open_shared_env();
  budget_refusal_names_the_holder(e.dev, 1);
  close_shared_env(&e);
}

Test(ledger_faults, a_full_share_table_says_so_naming_who_holds_the_shares, .timeout = 120) {
  shared_env e = open_shared_env();
  gpupart_device *second = NULL, *third = NULL;
  cr_assert_eq(open_shared(e.ctx, &second), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(open_shared(e.ctx, &third), GPUPART_OK, "%s", gpupart_last_error());
  for (int i = 0; i < 256; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    test_partition(e.dev, name, 0, 0);
    test_partition(second, name, 0, 0); /* joins: 512 shares */
  }
  gpupart_partition_desc d = {.name = "p0"};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(third, &d, &p), GPUPART_ENOMEM);
  char want[64];
  snprintf(want, sizeof want, "256 of them by pid %d", (int)getpid());
  cr_expect(has("share table is full") && has("512 shares") && has(want), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_close(third), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(second), GPUPART_OK);
  close_shared_env(&e);
}

Test(ledger_faults, a_budget_of_0_is_called_damage_not_another_devices_ledger) {
  shared_env e = open_shared_env();
  uint64_t zero = 0;
  patch_at(gpupart__ledger_shm_field("budget"), &zero, sizeof zero);
  gpupart_context *other = shared_context(); /* another attachment, as another process has */
  gpupart_device *dev = (gpupart_device *)&dev;
  cr_expect_eq(open_shared(other, &dev), GPUPART_ECORRUPT);
  char want[64];
  snprintf(want, sizeof want, "pid %d", (int)getpid());
  cr_expect(has("budget of 0 bytes") && has(want) && !has("not the ledger of"), "%s", gpupart_last_error());
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->status == GPUPART_ECORRUPT && strstr(s->why, "budget of 0 bytes"), "%s", s->why);
  free(s);
  gpupart_context_destroy(other);
  uint64_t budget = 1 * GiB;
  patch_at(gpupart__ledger_shm_field("budget"), &budget, sizeof budget);
  close_shared_env(&e);
}
