/* The library's log (gpupart__log: the context's log callback or, without one, stderr
 * under GPUPART_VERBOSE=1) and its events (events.h), told as they happen: a refused
 * allocation (with the message its caller gets), the OOM sequence's steps that freed
 * bytes, reclaim callback calls, dead members whose bytes a shared ledger took back, and
 * a budget asked for that differs from the ledger's. Each kind has a limiter (per device,
 * or per ledger): at most GPUPART__EVENTS_PER_WINDOW a second, the next one logged saying
 * how many were left out. No gpupart lock is held while an event is logged but the
 * limiter's own, which is released before the callback runs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "events.h"
#include "internal.h"
#include "shm.h"

/* The library's one way to say something: the context's log function, else stderr when
 * verbose (GPUPART_VERBOSE) is set. */
void gpupart__log(gpupart_context *ctx, gpupart_log_level level, int verbose, const char *line) {
  if (ctx->log) ctx->log(level, line, ctx->log_user);
  else if (verbose) fprintf(stderr, "gpupart: %s\n", line);
}

static uint64_t monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Whether an event may be logged now through ctx: someone listens and r allows it; more
 * then says how many of what were left out before it ("" when none). */
static int may_log(gpupart_context *ctx, int verbose, gpupart__ratelimit *r, const char *what, char *more, size_t n) {
  uint64_t dropped;
  more[0] = '\0';
  if ((!ctx->log && !verbose) || !gpupart__ratelimit_allow(r, monotonic_ns(), &dropped)) return 0;
  if (dropped) snprintf(more, n, " (%" PRIu64 " more %s not logged)", dropped, what);
  return 1;
}

static int dev_verbose(const gpupart_device *dev) { return (int)dev->settings.v[GPUPART__OPT_VERBOSE].u; }

gpupart_result gpupart__event_refused(gpupart_device *dev, gpupart_result code) {
  char line[1200], more[96];
  if (!may_log(dev->ctx, dev_verbose(dev), &dev->refusals, "refusals on this device", more, sizeof more)) return code;
  snprintf(line, sizeof line, "allocation refused (%s): %s%s", gpupart_result_name(code), gpupart_last_error(), more);
  gpupart__log(dev->ctx, GPUPART_LOG_INFO, dev_verbose(dev), line);
  return code;
}

static const char *const step_what[] = {"", "its own empty blocks released", "other partitions' empty blocks released"};

void gpupart__event_oom_step(gpupart_device *dev, const char *partition, uint64_t size, int step, uint64_t bytes) {
  char line[512], more[128];
  if (step < 1 || step > 2) return;
  if (!may_log(dev->ctx, dev_verbose(dev), &dev->oom_events, "OOM steps or reclaim calls on this device", more,
               sizeof more))
    return;
  snprintf(line, sizeof line, "OOM sequence for %" PRIu64 " bytes of partition '%s': step %d, %s: %" PRIu64 " bytes%s",
           size, partition, step, step_what[step], bytes, more);
  gpupart__log(dev->ctx, GPUPART_LOG_INFO, dev_verbose(dev), line);
}

void gpupart__event_reclaim(gpupart_device *dev, const char *partition, const char *requester, uint64_t asked,
                            uint64_t returned) {
  char line[512], more[128];
  if (!may_log(dev->ctx, dev_verbose(dev), &dev->oom_events, "OOM steps or reclaim calls on this device", more,
               sizeof more))
    return;
  snprintf(line, sizeof line,
           "OOM sequence, step 3: reclaim callback of partition '%s' (for '%s') asked for %" PRIu64
           " bytes, returned %" PRIu64 "%s",
           partition, requester, asked, returned, more);
  gpupart__log(dev->ctx, GPUPART_LOG_INFO, dev_verbose(dev), line);
}

void gpupart__event_reaped(gpupart__ledger *l, uint32_t members, uint64_t bytes) {
  char line[512], more[128];
  gpupart_context *ctx = l->event_user;
  if (!ctx || !may_log(ctx, l->verbose, &l->events, "ledger events", more, sizeof more)) return;
  snprintf(line, sizeof line,
           "shared ledger of %s: %" PRIu32 " dead member%s found (its process is gone); %" PRIu64
           " bytes they held returned to the budget%s",
           l->id.key, members, members == 1 ? "" : "s", bytes, more);
  gpupart__log(ctx, GPUPART_LOG_WARN, l->verbose, line);
}

void gpupart__event_budget(gpupart_device *dev, uint64_t asked, uint64_t applies) {
  char line[4800], more[128], path[4096];
  gpupart__ledger *l = dev->ledger;
  int operator= gpupart__ledger_shm_operator_of(l, NULL, path, sizeof path); /* said by default */
  if (!may_log(dev->ctx, dev_verbose(dev) || operator, & l->events, "ledger events", more, sizeof more)) return;
  if (operator)
    snprintf(line, sizeof line,
             "device_open: budget mismatch on %s: this process asked for %" PRIu64 " bytes; the "
             "operator's ledger %s says %" PRIu64 ", which applies%s",
             dev->id.key, asked, path, applies, more);
  else if (l->shared)
    snprintf(line, sizeof line,
             "device_open: budget mismatch on %s: this process asked for %" PRIu64 " bytes; the "
             "shared ledger's budget of %" PRIu64 " (set by the process that made it) applies%s",
             dev->id.key, asked, applies, more);
  else
    snprintf(line, sizeof line,
             "device_open: %s is already open in this context with a budget of %" PRIu64
             " bytes; this open asked for %" PRIu64 " and shares the first one's %" PRIu64 "%s",
             dev->id.key, applies, asked, applies, more);
  gpupart__log(dev->ctx, GPUPART_LOG_WARN, dev_verbose(dev) || operator, line);
}
