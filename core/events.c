/* Events (events.h): a refused allocation is logged with the message its caller gets,
 * through the context's log callback or, without one, on stderr under GPUPART_VERBOSE=1;
 * at most GPUPART__EVENTS_PER_WINDOW a second per device, the next one logged saying how
 * many were left out. It runs on the allocating thread with no gpupart lock held but the
 * limiter's own, which is released before the callback runs. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "events.h"
#include "internal.h"

int gpupart__ratelimit_allow(gpupart__ratelimit *r, uint64_t now_ns, uint64_t *dropped) {
  gpupart__lock_acquire(&r->lock);
  if (now_ns - r->window_start_ns >= GPUPART__EVENT_WINDOW_NS || now_ns < r->window_start_ns)
    r->window_start_ns = now_ns, r->in_window = 0;
  int allow = r->in_window < GPUPART__EVENTS_PER_WINDOW;
  *dropped = 0;
  if (allow) r->in_window++, *dropped = r->suppressed, r->suppressed = 0;
  else r->suppressed++;
  gpupart__lock_release(&r->lock);
  return allow;
}

static uint64_t monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

gpupart_result gpupart__event_refused(gpupart_device *dev, gpupart_result code) {
  gpupart_context *ctx = dev->ctx;
  int verbose = (int)dev->settings.v[GPUPART__OPT_VERBOSE].u;
  uint64_t dropped;
  if ((!ctx->log && !verbose) || !gpupart__ratelimit_allow(&dev->refusals, monotonic_ns(), &dropped)) return code;
  char line[1200], more[96] = "";
  if (dropped) snprintf(more, sizeof more, " (%" PRIu64 " more refusals on this device not logged)", dropped);
  snprintf(line, sizeof line, "allocation refused (%s): %s%s", gpupart_result_name(code), gpupart_last_error(), more);
  gpupart__settings_log(ctx, GPUPART_LOG_INFO, verbose, line);
  return code;
}
