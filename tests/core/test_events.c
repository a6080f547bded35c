/* Events (core/events.c): a refused allocation reaches the log callback with the message
 * its caller gets, an OOM-sequence step that freed bytes says which step and how many, a
 * reclaim callback call says what it was asked and what it gave, and loops of refusals
 * or reclaim calls are rate-limited (the limiter is also tested alone, on a clock the
 * test sets). Dead members and budget mismatches: tests/core/ledger/test_ledger_shm.c. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "events.h"

TestSuite(events, .timeout = 60);

Test(events, the_limiter_allows_a_burst_per_window_then_counts_what_it_dropped) {
  gpupart__ratelimit r = {0};
  uint64_t dropped = 99, t0 = 5 * GPUPART__EVENT_WINDOW_NS;
  for (uint32_t i = 0; i < GPUPART__EVENTS_PER_WINDOW; i++) {
    cr_expect(gpupart__ratelimit_allow(&r, t0 + i, &dropped), "event %u of the window", i);
    cr_expect_eq(dropped, 0);
  }
  for (int i = 0; i < 7; i++) cr_expect_not(gpupart__ratelimit_allow(&r, t0 + 100 + (uint64_t)i, &dropped));
  cr_expect_not(gpupart__ratelimit_allow(&r, t0 + GPUPART__EVENT_WINDOW_NS - 1, &dropped), "still the same window");
  cr_expect(gpupart__ratelimit_allow(&r, t0 + GPUPART__EVENT_WINDOW_NS, &dropped), "a new window");
  cr_expect_eq(dropped, 8, "the first event of the new window tells how many were dropped");
  cr_expect(gpupart__ratelimit_allow(&r, t0 + GPUPART__EVENT_WINDOW_NS + 1, &dropped));
  cr_expect_eq(dropped, 0);
  cr_expect(gpupart__ratelimit_allow(&r, 1, &dropped), "a clock that went back starts a window");
}

typedef struct heard {
  int lines, refusals;
  gpupart_log_level level;
  char first[1200], last[1200];
} heard;

static void listen_log(gpupart_log_level level, const char *message, void *user) {
  heard *h = user;
  if (strncmp(message, "allocation refused", 18) != 0) return;
  if (!h->refusals++) snprintf(h->first, sizeof h->first, "%s", message), h->level = level;
  snprintf(h->last, sizeof h->last, "%s", message);
}

static gpupart_context *listening_context(heard *h) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .log = listen_log, .log_user = h};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

Test(events, a_refused_allocation_reaches_the_log_with_its_message) {
  heard h = {0};
  gpupart_context *ctx = listening_context(&h);
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(dev, "small", 4 * MiB, 0);
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 8 * MiB, 0, &a), GPUPART_ELIMIT);
  cr_assert_eq(h.refusals, 1);
  cr_expect_eq(h.level, GPUPART_LOG_INFO);
  char want[1300];
  snprintf(want, sizeof want, "allocation refused (%s): %s", gpupart_result_name(GPUPART_ELIMIT), gpupart_last_error());
  cr_expect_str_eq(h.first, want, "the log has the caller's message");
  cr_expect(strstr(h.first, "partition 'small'") && strstr(h.first, "limit"), "%s", h.first);
  cr_expect_eq(gpupart_alloc(p, 1 * MiB, 0, &a), GPUPART_OK, "a granted allocation is not an event");
  cr_expect_eq(h.refusals, 1);
  gpupart_free(a);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

Test(events, a_loop_of_refusals_cannot_flood_the_log) {
  heard h = {0};
  gpupart_context *ctx = listening_context(&h);
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(dev, "small", 4 * MiB, 0);
  double start = seconds();
  for (int i = 0; i < 2000; i++) {
    gpupart_allocation *a = NULL;
    cr_assert_eq(gpupart_alloc(p, 8 * MiB, 0, &a), GPUPART_ELIMIT);
  }
  double windows = (seconds() - start) + 2; /* windows the loop can have touched, at most */
  cr_expect_geq(h.refusals, 1);
  cr_expect_leq(h.refusals, GPUPART__EVENTS_PER_WINDOW * windows, "%d lines for 2000 refusals", h.refusals);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- OOM-sequence steps and reclaim calls ---- */

/* Every line that starts with prefix, as heard. */
typedef struct lines {
  const char *prefix;
  int n, info;
  char line[8][512];
} lines;

static void listen_prefix(gpupart_log_level level, const char *message, void *user) {
  lines *l = user;
  if (strncmp(message, l->prefix, strlen(l->prefix)) != 0) return;
  l->info += level == GPUPART_LOG_INFO;
  if (l->n < 8) snprintf(l->line[l->n], sizeof l->line[0], "%s", message);
  l->n++;
}

static gpupart_context *context_hearing(lines *l) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .log = listen_prefix, .log_user = l};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

static gpupart_partition *partition_with(gpupart_device *dev, const char *name, uint64_t limit, gpupart_reclaim_fn fn,
                                         void *user) {
  gpupart_partition_desc d = {.name = name, .limit = limit, .reclaim = fn, .reclaim_user = user};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

Test(events, an_oom_step_that_frees_bytes_is_logged_with_how_many) {
  lines l = {.prefix = "OOM sequence for"};
  gpupart_context *ctx = context_hearing(&l);
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition_desc ad = {.name = "a", .release_threshold = 10 * MiB}; /* keeps 10 MiB of empty blocks */
  gpupart_partition *a = NULL, *b = test_partition(dev, "b", 0, 0);
  cr_assert_eq(gpupart_partition_create(dev, &ad, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation *x = NULL;
  cr_assert_eq(gpupart_alloc(b, 40 * MiB, 0, &x), GPUPART_OK);
  gpupart_free(x); /* b keeps an empty 40 MiB block */
  cr_assert_eq(gpupart_alloc(a, 30 * MiB, 0, &x), GPUPART_OK, "step 2 gives b's block back");
  cr_assert_eq(l.n, 1, "one step freed bytes");
  cr_expect_eq(l.info, 1, "at GPUPART_LOG_INFO");
  char want[256];
  snprintf(want, sizeof want,
           "OOM sequence for %llu bytes of partition 'a': step 2, other partitions' empty blocks "
           "released: %llu bytes",
           30ull * MiB, 40ull * MiB);
  cr_expect_str_eq(l.line[0], want);
  gpupart_free(x); /* past a's threshold: its block goes at once */
  /* a's own empty block, below its reserved peak (so that growth does not release it first) */
  gpupart_allocation *big = NULL, *mid = NULL, *y = NULL, *other = NULL;
  cr_assert_eq(gpupart_alloc(a, 30 * MiB, 0, &big), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(a, 20 * MiB, 0, &mid), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(a, 10 * MiB, 0, &y), GPUPART_OK);
  gpupart_free(mid), gpupart_free(y); /* a: 30 MiB live, 10 MiB empty (the 20 went); peak 60 */
  cr_assert_eq(gpupart_alloc(b, 20 * MiB, 0, &other), GPUPART_OK);
  cr_assert_eq(l.n, 1);
  cr_assert_eq(gpupart_alloc(a, 12 * MiB, 0, &y), GPUPART_OK, "step 1 gives a's empty block back: %s",
               gpupart_last_error());
  cr_assert_eq(l.n, 2, "%d: %s / %s", l.n, l.line[0], l.line[1]);
  snprintf(want, sizeof want,
           "OOM sequence for %llu bytes of partition 'a': step 1, its own empty blocks released: "
           "%llu bytes",
           12ull * MiB, 10ull * MiB);
  cr_expect_str_eq(l.line[1], want);
  gpupart_free(y), gpupart_free(big), gpupart_free(other);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

typedef struct stash {
  gpupart_allocation *a;
  int calls;
} stash;

static int give_back(gpupart_partition *p, uint64_t wanted, void *user) {
  (void)p, (void)wanted;
  stash *s = user;
  s->calls++;
  if (s->a) gpupart_free(s->a), s->a = NULL;
  return 0;
}

Test(events, a_reclaim_call_is_logged_with_what_it_was_asked_and_gave) {
  lines l = {.prefix = "OOM sequence, step 3"};
  gpupart_context *ctx = context_hearing(&l);
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  stash s = {0};
  gpupart_partition *p = partition_with(dev, "cache", 8 * MiB, give_back, &s);
  cr_assert_eq(gpupart_alloc(p, 6 * MiB, 0, &s.a), GPUPART_OK);
  gpupart_allocation *x = NULL;
  cr_assert_eq(gpupart_alloc(p, 4 * MiB, 0, &x), GPUPART_OK, "the callback freed room");
  cr_assert_eq(s.calls, 1);
  cr_assert_eq(l.n, 1);
  cr_expect_eq(l.info, 1);
  char want[256];
  snprintf(want, sizeof want,
           "OOM sequence, step 3: reclaim callback of partition 'cache' (for 'cache') asked for "
           "%llu bytes, returned %llu",
           2ull * MiB, 6ull * MiB);
  cr_expect_str_eq(l.line[0], want);
  gpupart_free(x);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(events, a_loop_of_reclaim_calls_cannot_flood_the_log) {
  lines l = {.prefix = "OOM sequence"};
  gpupart_context *ctx = context_hearing(&l);
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  stash s = {0};
  gpupart_partition *p = partition_with(dev, "small", 4 * MiB, give_back, &s);
  double start = seconds();
  for (int i = 0; i < 2000; i++) {
    gpupart_allocation *a = NULL;
    cr_assert_eq(gpupart_alloc(p, 8 * MiB, 0, &a), GPUPART_ELIMIT);
  }
  double windows = (seconds() - start) + 2;
  cr_expect_eq(s.calls, 2000, "every refusal called the callback");
  cr_expect_geq(l.n, 1);
  cr_expect_leq(l.n, GPUPART__EVENTS_PER_WINDOW * windows, "%d lines for 2000 reclaim calls", l.n);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
