/* Giving driver memory back beyond one partition (trim.c). */
#ifndef GPUPART_CORE_TRIM_H
#define GPUPART_CORE_TRIM_H

#include "gpupart.h"

/* Calls the backend's optional trim (its driver-side caches); OK where the backend has
 * none. Device slow lock held, no partition lock (partition_trim, the OOM sequence). */
int gpupart__device_trim_locked(gpupart_device *dev);
/* Shared ledger: honours the other processes' trim requests (slow lock held), and asks
 * them for one (the OOM sequence, when the budget refused). No-ops in-process. */
void gpupart__device_honour_trim_locked(gpupart_device *dev);
void gpupart__device_ask_trim(gpupart_device *dev);

#endif
