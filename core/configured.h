/* The configured partitions and the DRA claim at run time (configured.c), for the device's
 * open and the growth path. */
#ifndef GPUPART_CORE_CONFIGURED_H
#define GPUPART_CORE_CONFIGURED_H

#include "internal.h"

/* Creates the partitions configuration declares for dev (its settings), in order, but
 * those another handle of the device made already. ECONFIG (or the driver's EDEVMEM, or
 * ENOMEM) naming the source; the caller closes the device on failure. */
int gpupart__partition_create_configured(gpupart_device *dev);

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

#endif
