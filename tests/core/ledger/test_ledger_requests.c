/* Give-back requests of a shared ledger (docs/design.md, "Give-back and floors";
 * core/ledger/shm_request.c): a request names the bytes it needs and its priority; the
 * other processes' responders give back only what is asked (largest empty blocks first),
 * several requests are served highest priority first, a request ends with its poster
 * (killed) or its time, and the request slots of the file are hostile input. The
 * responders are real processes (shm_member, exec'd); requests are posted through an
 * attachment of this process (as gpupart resize attaches) or of a forked child. Every
 * wait is bounded; nothing is timed. */
#include <criterion/criterion.h>
#include <time.h>

#include "common.h"
#include "shm_test.h"

TestSuite(ledger_requests, .init = setup, .fini = teardown, .timeout = 120);

/* A member with two 300 MiB blocks of partition 'be' cached empty (freed, kept), waiting
 * on its stdin and making no gpupart call; its responder answers. */
static member cached_member(const char *first, const char *second) {
  member m = spawn_member((const char *[]){"cpart", "be", "0", "0", "alloc", first, "alloc", second, "freeall", "ready",
                                           "wait", "check", NULL});
  await_ready(&m);
  return m;
}

static gpupart__ledger *attach(void) {
  char path[256];
  ledger_path(path, sizeof path);
  gpupart__ledger *l = NULL;
  cr_assert_eq(gpupart__ledger_shm_attach_file(gpupart__hostmem_default(), path, &l), GPUPART_OK, "%s",
               gpupart_last_error());
  return l;
}

static uint64_t reserved_now(void) {
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent, "%s", s->why);
  uint64_t r = s->reserved;
  free(s);
  return r;
}

/* Free bytes of the 1 GiB budget with no guarantee anywhere. */
static uint64_t free_now(void) {
  gpupart__ledger_snapshot *s = scan_one();
  uint64_t f = s->budget - s->reserved;
  free(s);
  return f;
}

/* Polls (bounded: 10 s) until ticket lacks nothing; its last lack. */
static int64_t await_met(gpupart__ledger *l, uint64_t ticket) {
  int64_t lack = l->ops->lack(l, ticket);
  for (int i = 0; i < 1000 && lack > 0; i++) {
    usleep(10000);
    lack = l->ops->lack(l, ticket);
  }
  return lack;
}

static void finish(member *m) {
  release_member(m);
  cr_expect_eq(reap_member(m), 0);
}

Test(ledger_requests, a_responder_gives_back_only_what_is_asked_largest_block_first) {
  member m = cached_member("100", "500");
  uint64_t held = reserved_now();
  cr_assert_geq(held, 600 * MiB);
  gpupart__ledger *l = attach();
  uint64_t ticket = 0;
  cr_assert_eq(l->ops->post(l, free_now() + 1 * MiB, GPUPART__PRIORITY_GROWTH, 10000, &ticket), GPUPART_OK, "%s",
               gpupart_last_error());
  cr_expect_eq(await_met(l, ticket), 0, "the responder gave back what was asked");
  uint64_t left = reserved_now();
  cr_expect(left > 0 && left <= held / 4, "one block, the largest, went: %llu of %llu bytes are still held",
            (unsigned long long)left, (unsigned long long)held);
  l->ops->withdraw(l, ticket);
  l->ops->destroy(l);
  finish(&m);
}

Test(ledger_requests, a_higher_priority_is_served_first_and_a_lower_one_waits_for_it) {
  member m = cached_member("300", "300");
  gpupart__ledger *l = attach();
  uint64_t low = 0, high = 0, need = free_now() + 400 * MiB; /* the member's 600 MiB cover one of them */
  cr_assert_eq(l->ops->post(l, need, GPUPART__PRIORITY_GROWTH, 10000, &low), GPUPART_OK);
  cr_assert_eq(l->ops->post(l, need, GPUPART__PRIORITY_FLOOR, 10000, &high), GPUPART_OK);
  cr_expect_eq(await_met(l, high), 0, "the later request of the higher priority is met");
  cr_expect_eq(reserved_now(), 0, "the member gave back all it had");
  cr_expect_gt(l->ops->lack(l, low), 0, "the lower one still waits behind it");
  l->ops->withdraw(l, high); /* its poster took the bytes, or gave up */
  cr_expect_eq(l->ops->lack(l, low), 0, "the lower one is met once the higher one ends");
  l->ops->withdraw(l, low);
  l->ops->destroy(l);
  finish(&m);
}

/* A forked child posts a request for twice the budget, then says so and waits. */
static pid_t child_posting(int *ready) {
  int r[2];
  cr_assert_eq(pipe(r), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    die_with_parent();
    close(r[0]);
    char path[256];
    ledger_path(path, sizeof path);
    gpupart__ledger *l = NULL;
    uint64_t ticket = 0;
    if (gpupart__ledger_shm_attach_file(gpupart__hostmem_default(), path, &l) ||
        l->ops->post(l, 2 * GiB, GPUPART__PRIORITY_FLOOR, 60000, &ticket))
      _exit(2);
    char c = 1;
    if (write(r[1], &c, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  close(r[1]);
  *ready = r[0];
  char c;
  cr_assert_eq(read(r[0], &c, 1), 1, "the child posted its request");
  return pid;
}

Test(ledger_requests, a_stopped_requester_s_request_stands_and_a_killed_one_s_ends) {
  shared_env e = open_shared_env(); /* the ledger lives across the child's death */
  int ready = -1;
  pid_t pid = child_posting(&ready);
  gpupart__ledger *l = attach();
  uint64_t mine = 0;
  cr_assert_eq(l->ops->post(l, 0, GPUPART__PRIORITY_GROWTH, 10000, &mine), GPUPART_OK);
  cr_expect_geq(l->ops->lack(l, mine), (int64_t)(1 * GiB), "the child's request is ahead of this one");
  cr_assert_eq(kill(pid, SIGSTOP), 0);
  cr_expect_geq(l->ops->lack(l, mine), (int64_t)(1 * GiB), "a stopped poster's request stands");
  cr_assert_eq(kill(pid, SIGKILL), 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  close(ready);
  cr_expect_eq(l->ops->lack(l, mine), 0, "a killed poster's request ended with it");
  cr_expect_eq(l->ops->lack_all(l), 0);
  l->ops->withdraw(l, mine);
  l->ops->destroy(l);
  close_shared_env(&e);
}

static void scribble(size_t slot, const shm_request *r) {
  char path[256];
  ledger_path(path, sizeof path);
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  off_t at = (off_t)(gpupart__ledger_shm_field("request") + slot * sizeof *r);
  cr_assert_eq(pwrite(fd, r, sizeof *r, at), (ssize_t)sizeof *r);
  close(fd);
}

static uint64_t ms_from_now(uint64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u + ms;
}

Test(ledger_requests, scribbled_request_slots_are_not_served) {
  shared_env e = open_shared_env();
  gpupart__ledger *l = attach();
  shm_ledger *L = (shm_ledger *)l;
  uint64_t big = UINT64_MAX, soon = ms_from_now(5000);
  scribble(0, &(shm_request){.ticket = 7, .need = big, .expires_ms = soon, .attach = 1000, .priority = UINT32_MAX});
  scribble(1, &(shm_request){.ticket = 8, .need = big, .expires_ms = soon, .attach = UINT32_MAX});
  scribble(2, &(shm_request){.ticket = 9, .need = big, .expires_ms = soon, .attach = 0});
  scribble(3,
           &(shm_request){.ticket = 10, .need = big, .expires_ms = ms_from_now(3600 * 1000), .attach = L->attach + 1});
  scribble(4, &(shm_request){.ticket = 11, .need = big, .expires_ms = 1, .attach = L->attach + 1});
  cr_expect_eq(l->ops->lack_all(l), 0, "no scribbled slot is a live request");
  /* a live one of this attachment is, and its need saturates */
  scribble(5, &(shm_request){.ticket = 12, .need = big, .expires_ms = soon, .attach = L->attach + 1, .priority = 9});
  cr_expect_eq(l->ops->lack_all(l), INT64_MAX);
  uint64_t t = 0;
  cr_assert_eq(l->ops->post(l, 0, GPUPART__PRIORITY_FLOOR, 1000, &t), GPUPART_OK);
  cr_expect_eq(l->ops->lack(l, t), INT64_MAX, "served behind it");
  l->ops->withdraw(l, 12);
  cr_expect_eq(l->ops->lack(l, t), 0);
  l->ops->withdraw(l, t);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent, "%s", s->why);
  free(s);
  l->ops->destroy(l);
  close_shared_env(&e);
}

/* The outside reader (gpupart top, metrics) lists the requests the library would serve,
 * in the order it serves them, and nothing of a slot it would not: a real requester
 * process (stopped, then killed) while a stopped member keeps its cache, this process's
 * own request, and scribbled slots around them. */
Test(ledger_requests, the_snapshot_lists_only_the_requests_the_library_serves) {
  member m = cached_member("300", "300");
  cr_assert_eq(kill(m.pid, SIGSTOP), 0); /* it cannot answer: the requests stand */
  shared_env e = open_shared_env();
  int ready = -1;
  pid_t pid = child_posting(&ready);
  gpupart__ledger *l = attach();
  uint64_t mine = 0, soon = ms_from_now(5000);
  cr_assert_eq(l->ops->post(l, 64 * MiB, GPUPART__PRIORITY_GROWTH, 10000, &mine), GPUPART_OK);
  scribble(20, &(shm_request){.ticket = 70, .need = 1, .expires_ms = soon, .attach = 1000, .priority = UINT32_MAX});
  scribble(21, &(shm_request){.ticket = 71, .need = 1, .expires_ms = ms_from_now(3600 * 1000), .attach = 1});
  scribble(22, &(shm_request){.ticket = 72, .need = 1, .expires_ms = 1, .attach = 1, .priority = 9});
  scribble(23, &(shm_request){.ticket = 0, .need = 1, .expires_ms = soon, .attach = 1, .priority = 9});
  cr_assert_eq(kill(pid, SIGSTOP), 0);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->requests, 2, "the child's and this process's, no scribbled slot");
  cr_expect_eq(s->request[0].pid, pid, "the floor's first");
  cr_expect_eq(s->request[0].need, 2 * GiB);
  cr_expect_eq(s->request[0].priority, GPUPART__PRIORITY_FLOOR);
  cr_expect(s->request[0].ms_left > 0 && s->request[0].ms_left <= 60000, "%llu",
            (unsigned long long)s->request[0].ms_left);
  cr_expect_eq(s->request[1].ticket, mine);
  cr_expect_eq(s->request[1].pid, getpid());
  cr_expect_eq(s->request[1].need, 64 * MiB);
  cr_expect_eq(s->requested, 2 * GiB + 64 * MiB);
  free(s);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  close(ready);
  s = scan_one();
  cr_expect_eq(s->requests, 1, "a killed requester's request is not listed");
  cr_expect_eq(s->request[0].ticket, mine);
  free(s);
  l->ops->withdraw(l, mine);
  s = scan_one();
  cr_expect_eq(s->requests, 0);
  cr_expect_eq(s->requested, 0);
  free(s);
  l->ops->destroy(l);
  close_shared_env(&e);
  cr_assert_eq(kill(m.pid, SIGCONT), 0);
  finish(&m);
}

Test(ledger_requests, every_slot_taken_asks_the_old_way) {
  shared_env e = open_shared_env();
  gpupart__ledger *l = attach();
  uint64_t t[SHM_REQUESTS + 1];
  for (uint32_t i = 0; i < SHM_REQUESTS; i++) cr_assert_eq(l->ops->post(l, 0, 1, 10000, &t[i]), GPUPART_OK);
  cr_expect_eq(l->ops->post(l, 0, 1, 10000, &t[SHM_REQUESTS]), GPUPART_EBUSY);
  cr_expect_eq(t[SHM_REQUESTS], 0);
  for (uint32_t i = 0; i < SHM_REQUESTS; i++) l->ops->withdraw(l, t[i]);
  cr_expect_eq(l->ops->post(l, 0, 1, 10000, &t[0]), GPUPART_OK, "withdrawn slots are free again");
  l->ops->withdraw(l, t[0]);
  l->ops->destroy(l);
  close_shared_env(&e);
}

Test(ledger_requests, a_growth_the_budget_refuses_posts_a_request_and_says_so) {
  member m = cached_member("300", "300");
  cr_assert_eq(kill(m.pid, SIGSTOP), 0); /* it cannot answer: the request stands */
  shared_env e = open_shared_env();
  gpupart_partition_desc d = {.name = "mine"};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(e.dev, &d, &p), GPUPART_OK);
  gpupart_allocation *a = NULL;
  cr_expect_eq(gpupart_alloc(p, 700 * MiB, 0, &a), GPUPART_ELIMIT);
  cr_expect(strstr(gpupart_last_error(), "were asked to give back the bytes") &&
                strstr(gpupart_last_error(), "growth's priority"),
            "%s", gpupart_last_error());
  gpupart__ledger *l = attach();
  cr_expect_gt(l->ops->lack_all(l), 0, "its request stands while the holder is stopped");
  cr_assert_eq(kill(m.pid, SIGCONT), 0);
  int64_t lack = l->ops->lack_all(l);
  for (int i = 0; i < 1000 && lack > 0; i++) {
    usleep(10000);
    lack = l->ops->lack_all(l);
  }
  cr_expect_eq(lack, 0, "the holder answered once it ran");
  cr_expect_eq(gpupart_alloc(p, 700 * MiB, 0, &a), GPUPART_OK, "the retry found the bytes: %s", gpupart_last_error());
  cr_expect_eq(l->ops->lack_all(l), 0, "the fitting growth withdrew its request");
  gpupart_free(a);
  l->ops->destroy(l);
  close_shared_env(&e);
  finish(&m);
}
