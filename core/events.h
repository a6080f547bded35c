/* Events: what the library tells the log callback (gpupart_context_desc.log, else stderr
 * under GPUPART_VERBOSE=1) about refusals as they happen, rate-limited per device so that
 * a loop of refusals cannot flood the log. */
#ifndef GPUPART_CORE_EVENTS_H
#define GPUPART_CORE_EVENTS_H

#include <stdint.h>

#include "gpupart.h"
#include "lock.h"

#define GPUPART__EVENTS_PER_WINDOW 5u          /* events logged per window at most */
#define GPUPART__EVENT_WINDOW_NS 1000000000ull /* one second */

/* A rate limiter; all zero is a fresh one. */
typedef struct gpupart__ratelimit {
  gpupart__lock lock;
  uint64_t window_start_ns;
  uint32_t in_window;   /* events logged in the current window */
  uint64_t suppressed;  /* events dropped since the last one logged */
} gpupart__ratelimit;

/* Whether an event at now_ns (a monotonic clock) may be logged: at most
 * GPUPART__EVENTS_PER_WINDOW in each window of GPUPART__EVENT_WINDOW_NS. When it may,
 * *dropped is the number of events refused since the last one allowed (0 when none). */
int gpupart__ratelimit_allow(gpupart__ratelimit *r, uint64_t now_ns, uint64_t *dropped);

/* Logs that an allocation on dev was refused with code (ELIMIT, EDEVMEM), with the
 * message gpupart_last_error() now holds, at GPUPART_LOG_INFO; returns code, so a
 * failure path can end in `return gpupart__event_refused(dev, gpupart__fail(...))`. */
gpupart_result gpupart__event_refused(gpupart_device *dev, gpupart_result code);

#endif
