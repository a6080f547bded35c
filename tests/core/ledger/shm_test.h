/* What the shared-ledger suites (test_ledger_shm.c, test_ledger_faults.c) share: each
 * test's own ledger folder (a scratch folder under /tmp, never /dev/shm), contexts and
 * devices on it, children forked (reporting through their exit status and a pipe) or
 * exec'd (tests/core/ledger/shm_member.c, scripted by its arguments), and snapshots read as gpupart
 * top reads them. */
#ifndef GPUPART_TESTS_SHM_TEST_H
#define GPUPART_TESTS_SHM_TEST_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "identity.h"
#include "shm.h"
#include "shm_impl.h"
#include "snapshot.h"
#include "policy.h"

/* A member looks at its file's size and links at most every SHM_LOOK_MS: a test that
 * truncates or deletes the file waits longer than that before the member's next call. */
static inline void let_members_look(void) { usleep((SHM_LOOK_MS + 20) * 1000); }

static char dir[64];

static inline void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/gpupart-shm-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static inline void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

static inline gpupart_context *shared_context(void) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir};
  gpupart_context *ctx = NULL;
  if (gpupart_context_create(&d, &ctx)) return NULL;
  return ctx;
}

static inline gpupart_result open_shared(gpupart_context *ctx, gpupart_device **dev) {
  static gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  return gpupart_device_open(ctx, &d, dev);
}

static inline void ledger_path(char *out, size_t n) {
  gpupart_device_info info = {.backend = GPUPART_BACKEND_SIM, .total_bytes = 1 * GiB};
  gpupart__identity id;
  gpupart__identity_of(&info, &id);
  shm_folder f;
  cr_assert_eq(gpupart__shm_folder(dir, &f), GPUPART_OK);
  gpupart__ledger_shm_path(dir, &f, &id, out, n);
}

/* In a child: opens the shared device, allocates bytes in partition name, writes one byte
 * to ready, and waits for a byte on go (or to be killed). Exit 0 when all went well. */
/* A forked child goes with the test's process, even stopped, so that a failed assertion
 * leaves no child running (or holding the lock) after it. */
static inline void die_with_parent(void) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1) _exit(4);
}

static inline void child_holds(const char *name, uint64_t bytes, int ready, int go) {
  die_with_parent();
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL;
  gpupart_partition_desc pd = {.name = name};
  if (!ctx || open_shared(ctx, &dev) || gpupart_partition_create(dev, &pd, &p) || gpupart_alloc(p, bytes, 0, &a))
    _exit(2);
  char c = 1;
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) _exit(3);
  gpupart_free(a);
  _exit(gpupart_device_close(dev) || gpupart_context_destroy(ctx) ? 4 : 0);
}

typedef struct child {
  pid_t pid;
  int ready, go;
} child;

static inline child spawn_holder(const char *name, uint64_t bytes) {
  int r[2], g[2];
  cr_assert_eq(pipe(r), 0);
  cr_assert_eq(pipe(g), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) child_holds(name, bytes, r[1], g[0]);
  close(r[1]), close(g[0]);
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the child holds its bytes");
  return (child){pid, r[0], g[1]};
}

static inline int wait_child(child *c) {
  int status = 0;
  cr_assert_eq(waitpid(c->pid, &status, 0), c->pid);
  close(c->ready), close(c->go);
  return status;
}

static inline void write_file(const char *path, mode_t mode, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  cr_assert_geq(fd, 0);
  cr_assert_eq(fchmod(fd, mode), 0);
  cr_assert_eq(write(fd, bytes, n), (ssize_t)n);
  close(fd);
}

typedef struct member {
  pid_t pid;
  int to, from; /* its stdin, its stdout */
} member;

/* Runs shm_member with this test's ledger folder and the steps, NULL-terminated. */
static inline member spawn_member(const char *const *steps) {
  const char *exe = getenv("GPUPART_TEST_SHM_MEMBER");
  cr_assert_not_null(exe, "meson sets GPUPART_TEST_SHM_MEMBER");
  char *argv[32] = {(char *)exe, dir};
  for (int i = 0; steps[i]; i++) argv[i + 2] = (char *)steps[i];
  int in[2], out[2]; /* close-on-exec: a member holds no other member's pipes (dup2 clears it on 0 and 1) */
  cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(in[0], 0), dup2(out[1], 1);
    execv(exe, argv);
    _exit(127);
  }
  close(in[0]), close(out[1]);
  return (member){pid, in[1], out[0]};
}

static inline void await_ready(member *m) {
  char line[16] = "";
  cr_assert_gt(read(m->from, line, sizeof line - 1), 0, "the member reached its ready step");
  cr_assert_str_eq(line, "ready\n");
}

static inline void release_member(member *m) { cr_assert_eq(write(m->to, "go\n", 3), 3); }

/* Its exit code (128 + signal when killed). */
static inline int reap_member(member *m) {
  int status = 0;
  cr_assert_eq(waitpid(m->pid, &status, 0), m->pid);
  close(m->to), close(m->from);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static inline int run_member(const char *const *steps) {
  member m = spawn_member(steps);
  return reap_member(&m);
}

static inline gpupart_stats part_stats(const gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s;
}

typedef struct shared_env {
  gpupart_context *ctx;
  gpupart_device *dev;
} shared_env;

static inline shared_env open_shared_env(void) {
  shared_env e = {shared_context(), NULL};
  cr_assert_not_null(e.ctx);
  cr_assert_eq(open_shared(e.ctx, &e.dev), GPUPART_OK, "%s", gpupart_last_error());
  return e;
}

static inline void close_shared_env(shared_env *e) {
  test_check(e->dev);
  cr_expect_eq(gpupart_device_close(e->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(e->ctx), GPUPART_OK);
}

/* The one ledger of the test's folder, read as gpupart top reads it. */
static inline gpupart__ledger_snapshot *scan_one(void) {
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  cr_assert_eq(gpupart__ledger_shm_scan(dir, 200, &s, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(n, 1, "one ledger in %s", dir);
  return s;
}

static inline const gpupart__ledger_snapshot_member *member_of(const gpupart__ledger_snapshot *s, int64_t pid) {
  for (uint32_t i = 0; i < s->members; i++)
    if (s->member[i].pid == pid) return &s->member[i];
  return NULL;
}

static inline size_t ledger_size_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* In a child: takes the ledger's lock from outside as a member does, says so on ready,
 * and sleeps. */
static inline void child_holds_the_lock(const char *path, int ready) {
  die_with_parent();
  if (gpupart__ledger_shm_hold(path, 5000, "holder") < 0) _exit(2);
  char c = 1;
  if (write(ready, &c, 1) != 1) _exit(3);
  for (;;) pause();
}

#endif
