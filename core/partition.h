/* Partitions (partition.c), for the device that owns them and the allocation paths. */
#ifndef GPUPART_CORE_PARTITION_H
#define GPUPART_CORE_PARTITION_H

#include "internal.h"

/* Frees p, its arena already gone or going with it (a failed open's, a closing device's). */
void gpupart__partition_free(gpupart_partition *p);
/* The in-process part of a live resize, the device's slow lock held: p's empty blocks go
 * (a shrink), the ledger's limit changes (with a shared ledger, the partition's in the
 * file: every member process sees it at its next reservation, and the partition is marked
 * resized so that a later job with its first figures joins it; growth is bounded by the
 * ledger's budget, not the one this process opened with), and a preallocated partition
 * that grew reserves the difference. gpupart_partition_resize and a DRA claim's newer
 * generation (gpupart__device_dra_poll) both come here; a change from outside (`gpupart
 * resize`, core/ledger/resize.h) writes the ledger alone, as members read it anyway.
 * guarantee: the new floor (through the ledger's set_figures, the rule `gpupart resize
 * --guarantee` applies in a shared ledger), or GPUPART__LEDGER_KEEP (clamped down to the
 * new limit). OK; EINVAL (rounds down to 0, a floor above the limit); ELIMIT (past the
 * budget, floors summing past it); EBUSY (the members hold more than new_limit). */
int gpupart__partition_resize_locked(gpupart_partition *p, uint64_t new_limit, uint64_t guarantee);

/* A fraction of dev's budget when fraction > 0, else bytes, rounded down to the device's
 * granularity: what a descriptor's share comes to. */
uint64_t gpupart__partition_share_of(const gpupart_device *dev, double fraction, uint64_t bytes);

/* The claim's labels (claim, namespace, the pod's name) into p's partition in a shared
 * ledger, when dev's share came from a DRA claim; a refusal is a warning. */
void gpupart__device_dra_label(gpupart_partition *p);

/* Partition lock held: where p publishes its counters now; in a child forked after p was
 * set up, the sink (its parent goes on publishing its own figures in the share). */
static inline gpupart__ledger_counters *gpupart__published(gpupart_partition *p) { return p->pub.to; }

#endif
