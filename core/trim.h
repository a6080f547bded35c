/* Giving driver memory back beyond one partition (trim.c): backend trims, requests across
 * processes and the responder thread that answers them, and a new floor's wait. */
#ifndef GPUPART_CORE_TRIM_H
#define GPUPART_CORE_TRIM_H

#include "gpupart.h"

/* How long the responder sleeps on the wake word before it looks at its stop flag
 * (a stop wakes it at once; this only bounds a wake that was missed). */
#define GPUPART__RESPONDER_WAIT_MS 1000
/* A give-back request's bound: how long a new floor waits for the other processes to give
 * its bytes back before its creation is refused (EBUSY, saying it timed out), and how
 * long a growth's request is served after the growth was refused. */
#define GPUPART__REQUEST_WAIT_MS 2000

/* Calls the backend's optional trim (its driver-side caches); OK where the backend has
 * none. Device slow lock held, no partition lock (partition_trim, the OOM sequence). */
int gpupart__device_trim_locked(gpupart_device *dev);
/* Shared ledger: honours the other processes' trim requests (slow lock held), and asks
 * them for one, waking their responders (the OOM sequence, when the budget refused).
 * No-ops in-process. */
void gpupart__device_honour_trim_locked(gpupart_device *dev);
void gpupart__device_ask_trim(gpupart_device *dev);
/* Shared ledger: posts a request for need bytes at priority (GPUPART__PRIORITY_*), served
 * for GPUPART__REQUEST_WAIT_MS, and wakes the responders; the caller does not wait (a
 * growth refused by the budget: its retry finds the bytes). A no-op in-process. */
void gpupart__device_ask_bytes(gpupart_device *dev, uint64_t need, uint32_t priority);
/* Device slow lock held: the handle's growth request (ask_bytes) ends, its growth having
 * fitted (else the bytes the responders gave back, once taken, would be asked again);
 * a no-op when there is none. */
void gpupart__device_asked_enough(gpupart_device *dev);
/* The next partition of dev whose reclaim callback may run: p itself (own), or one above
 * its guarantee other than p (p may be NULL); its busy flag is taken. *i walks the
 * partitions from 0. Device slow lock held. */
gpupart_partition *gpupart__device_claim_reclaimer(gpupart_device *dev, const gpupart_partition *p, int own,
                                                   uint32_t *i);
/* Shared ledger: starts the responder thread of dev (unless the responder option is off;
 * OK at once in-process), and stops it (waits for it: never from a reclaim callback it
 * runs, which on_responder tells). Stop is a no-op when none runs, and in a forked
 * child. */
int gpupart__device_responder_start(gpupart_device *dev);
void gpupart__device_responder_stop(gpupart_device *dev);
int gpupart__device_on_responder(const gpupart_device *dev);
/* No gpupart lock held: p (not yet listed on dev) was added to the ledger with guarantee
 * bytes; makes them available: this process's empty blocks and reclaim callbacks, then,
 * shared, the other processes' through their responders, waiting at most
 * GPUPART__REQUEST_WAIT_MS. OK, EBUSY naming who holds the bytes, or the ledger's code. */
int gpupart__device_make_room(gpupart_device *dev, const gpupart_partition *p, uint64_t guarantee);

/* Device slow lock held: a preallocated partition whose limit in the ledger grew from
 * outside (`gpupart resize`, or another handle's resize) past what it holds reserves the
 * difference, as its own resize would; tried once per new limit (a refusal, by the budget
 * or the driver, leaves the partition as it was, growing no further). A no-op for a
 * partition that grows on demand. Called by the responder when a resize wakes it and by
 * the partition's allocation slow path. */
void gpupart__partition_take_grown_locked(gpupart_partition *p);

#endif
