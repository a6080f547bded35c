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
 * guarantee: the new floor (through the ledger's set_figures, the rule `gpupart resize
 * --guarantee` applies in a shared ledger), or GPUPART__LEDGER_KEEP (clamped down to the
 * new limit). OK; EINVAL (rounds down to 0, a floor above the limit); ELIMIT (past the
 * budget, floors summing past it); EBUSY (the members hold more than new_limit). */
int gpupart__partition_resize_locked(gpupart_partition *p, uint64_t new_limit, uint64_t guarantee);

/* Reads the DRA metadata file of the claim that names dev again, at most once per
 * GPUPART__DRA_POLL_NS unless force (the device's open), and applies a newer generation's gpupart.io/memory as a live
 * resize of the partitions that held the whole claim; logs what it did. Takes dev's slow lock: call it with no gpupart
 * lock held, on a slow path (an allocation that needs a block), never on the allocation fast path. */
#define GPUPART__DRA_POLL_NS 250000000ull
void gpupart__device_dra_poll(gpupart_device *dev, int force);
/* At device open: finds the configuration's DRA device that names dev, and looks at its
 * file once (gpupart__device_dra_poll, forced). */
void gpupart__device_dra_watch(gpupart_device *dev);
/* Finds the configuration's DRA device that names dev (its claim), once: dev->dra,
 * dev->dra_generation and dev->dra_memory. Before the configured partitions are made. */
void gpupart__device_dra_find(gpupart_device *dev);
/* A configured partition that is the claim's (GPUPART_PARTITION names it, or it is the
 * only one configured) takes the claim's newest figures, read when the process started
 * (gpupart.io/memory as its limit, gpupart.io/guarantee as its floor), over the
 * variables the container was started with (gpupart cdi's, of the claim's first
 * generation): a process started after the claim changed makes or joins the partition
 * with the claim's figures of now. 1 when d took them; 0 (d unchanged) when dev has no
 * claim with memory, or d is not the claim's partition. */
int gpupart__device_dra_figures(gpupart_device *dev, gpupart_partition_desc *d);
/* The claim's partition that another job of a shared ledger made with an older
 * generation's figures (its creation was EEXIST): joined with the ledger's figures, then
 * resized, ledger-wide, to d's (the claim's newest); a resize refused now is a warning,
 * the partition joined all the same. OK, or the join's code. */
int gpupart__device_dra_join(gpupart_device *dev, const gpupart_partition_desc *d, gpupart_partition **out);
/* The claim's labels (claim, namespace, the pod's name) into p's partition in a shared
 * ledger, when dev's share came from a DRA claim; a refusal is a warning. */
void gpupart__device_dra_label(gpupart_partition *p);

/* Partition lock held: where p publishes its counters now; in a child forked after p was
 * set up, the sink (its parent goes on publishing its own figures in the share). */
static inline gpupart__ledger_counters *gpupart__published(gpupart_partition *p) { return p->pub.to; }

#endif
