/* The rate limiter (ratelimit.h): a window of GPUPART__EVENT_WINDOW_NS on a monotonic clock
 * the caller reads, so that the rule is tested with chosen times. A clock that went back
 * starts a new window rather than silencing events until it catches up. */
#include "ratelimit.h"

int gpupart__ratelimit_allow(gpupart__ratelimit *r, uint64_t now_ns, uint64_t *dropped) {
  gpupart__lock_acquire(&r->lock);
  if (now_ns - r->window_start_ns >= GPUPART__EVENT_WINDOW_NS || now_ns < r->window_start_ns) {
    r->window_start_ns = now_ns;
    r->in_window = 0;
  }
  int allow = r->in_window < GPUPART__EVENTS_PER_WINDOW;
  *dropped = 0;
  if (allow) {
    r->in_window++;
    *dropped = r->suppressed;
    r->suppressed = 0;
  } else r->suppressed++;
  gpupart__lock_release(&r->lock);
  return allow;
}
