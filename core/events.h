/* Events: what the library tells the log callback (gpupart_context_desc.log, else stderr
 * under GPUPART_VERBOSE=1) as it happens: refusals, OOM-sequence steps, reclaim calls,
 * dead members reaped and budget mismatches, rate-limited (per device, or per ledger) so
 * that a loop cannot flood the log. No gpupart lock may be held when one is logged. */
#ifndef GPUPART_CORE_EVENTS_H
#define GPUPART_CORE_EVENTS_H

#include <stdint.h>

#include "gpupart.h"
#include "ratelimit.h"

/* One line of the library's log: to the context's log function, else to stderr when
 * verbose is set. No gpupart lock may be held. */
void gpupart__log(gpupart_context *ctx, gpupart_log_level level, int verbose, const char *line);

/* Logs that an allocation on dev was refused with code (ELIMIT, EDEVMEM), with the
 * message gpupart_last_error() now holds, at GPUPART_LOG_INFO; returns code, so a
 * failure path can end in `return gpupart__event_refused(dev, gpupart__fail(...))`. */
gpupart_result gpupart__event_refused(gpupart_device *dev, gpupart_result code);

/* GPUPART_LOG_INFO: step (1: the partition's own empty blocks, 2: the other partitions')
 * of the OOM sequence for size bytes of partition released bytes. */
void gpupart__event_oom_step(gpupart_device *dev, const char *partition, uint64_t size, int step, uint64_t bytes);
/* GPUPART_LOG_INFO: partition's reclaim callback ran for requester's allocation, asked
 * for asked bytes; its partition's bytes in use fell by returned. */
void gpupart__event_reclaim(gpupart_device *dev, const char *partition, const char *requester, uint64_t asked,
                            uint64_t returned);
struct gpupart__ledger;
/* GPUPART_LOG_WARN: a shared ledger found members dead and took back the bytes they held
 * (its on_reaped; l->event_user is the context). */
void gpupart__event_reaped(struct gpupart__ledger *l, uint32_t members, uint64_t bytes);
/* GPUPART_LOG_WARN: dev was opened asking for a budget of asked bytes, and its ledger's
 * (another handle's, or the shared ledger's) of applies bytes applies. */
void gpupart__event_budget(gpupart_device *dev, uint64_t asked, uint64_t applies);

#endif
