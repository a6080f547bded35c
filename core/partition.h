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

/* Partition lock held: where p publishes its counters now; in a child forked after p was
 * set up, the sink (its parent goes on publishing its own figures in the share). */
static inline gpupart__ledger_counters *gpupart__published(gpupart_partition *p) { return p->pub.to; }

#endif
