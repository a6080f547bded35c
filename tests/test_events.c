/* Events (core/events.c): a refused allocation reaches the log callback with the message
 * its caller gets, and a loop of refusals is rate-limited (the limiter is also tested
 * alone, on a clock the test sets). */
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
