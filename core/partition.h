/* Partitions (partition.c), for the device that owns them and the allocation paths. */
#ifndef GPUPART_CORE_PARTITION_H
#define GPUPART_CORE_PARTITION_H

#include "internal.h"

/* Frees p, its arena already gone or going with it (a failed open's, a closing device's). */
void gpupart__partition_free(gpupart_partition *p);
/* Creates the partitions configuration declares for dev (its settings), in order, but
 * those another handle of the device made already. ECONFIG (or the driver's EDEVMEM, or
 * ENOMEM) naming the source; the caller closes the device on failure. */
int gpupart__partition_create_configured(gpupart_device *dev);

/* The in-process part of a live resize, the device's slow lock held: p's empty blocks go
 * (a shrink), the ledger's limit changes (with a shared ledger, the partition's in the
 * file: every member process sees it at its next reservation, and the partition is marked
 * resized so that a later job with its first figures joins it; growth is bounded by the
 * ledger's budget, not the one this process opened with), and a preallocated partition
 * that grew reserves the difference. gpupart_partition_resize and a DRA claim's newer
 * generation (gpupart__device_dra_poll) both come here; a change from outside (`gpupart
 * resize`, core/ledger/resize.h) writes the ledger alone, as members read it anyway.
 * OK; EINVAL (rounds down to 0); ELIMIT (past the budget); EBUSY (the members hold more
 * than new_limit). */
int gpupart__partition_resize_locked(gpupart_partition *p, uint64_t new_limit);

/* Reads the DRA metadata file of the claim that names dev again, at most once per
 * GPUPART__DRA_POLL_NS unless force (the device's open), and applies a newer generation's gpupart.io/memory as a live
 * resize of the partitions that held the whole claim; logs what it did. Takes dev's slow lock: call it with no gpupart
 * lock held, on a slow path (an allocation that needs a block), never on the allocation fast path. */
#define GPUPART__DRA_POLL_NS 250000000ull
void gpupart__device_dra_poll(gpupart_device *dev, int force);
/* At device open: finds the configuration's DRA device that names dev, and looks at its
 * file once (gpupart__device_dra_poll, forced). */
void gpupart__device_dra_watch(gpupart_device *dev);

/* Partition lock held: where p publishes its counters now; in a child forked after p was
 * set up, the sink (its parent goes on publishing its own figures in the share). */
static inline gpupart__ledger_counters *gpupart__published(gpupart_partition *p) { return p->pub.to; }

#endif
