/* The rate limiter of the library's events (events.c, and a ledger's own): at most a few
 * lines a second of each kind, the next line allowed saying how many were left out, so
 * that a loop of refusals cannot flood a log. Its lock is a spinlock held for a few
 * instructions; nothing runs under it. */
#ifndef GPUPART_CORE_RATELIMIT_H
#define GPUPART_CORE_RATELIMIT_H

#include <stdint.h>

#include "lock.h"

#define GPUPART__EVENTS_PER_WINDOW 5u          /* events logged per window at most */
#define GPUPART__EVENT_WINDOW_NS 1000000000ull /* one second */

/* A rate limiter; all zero is a fresh one. */
typedef struct gpupart__ratelimit {
  gpupart__lock lock;
  uint64_t window_start_ns;
  uint32_t in_window;  /* events logged in the current window */
  uint64_t suppressed; /* events dropped since the last one logged */
} gpupart__ratelimit;

/* Whether an event at now_ns (a monotonic clock) may be logged: at most
 * GPUPART__EVENTS_PER_WINDOW in each window of GPUPART__EVENT_WINDOW_NS. When it may,
 * *dropped is the number of events refused since the last one allowed (0 when none). */
int gpupart__ratelimit_allow(gpupart__ratelimit *r, uint64_t now_ns, uint64_t *dropped);

#endif
