/* The device's peak of bytes in use (peak.c), kept from each partition's charge (a
 * multiple of the granularity at or above its in_use) so that the allocation fast path
 * touches the device's counter only when a partition crosses a granule. crossed and
 * freed: partition lock held (after in_use rose above the charge, or fell). reset:
 * device slow lock held. leave: the partition is unreachable. */
#ifndef GPUPART_CORE_PEAK_H
#define GPUPART_CORE_PEAK_H

#include "internal.h"

void gpupart__peak_crossed(gpupart_partition *p);
void gpupart__peak_freed(gpupart_partition *p);
void gpupart__peak_leave(gpupart_partition *p);
uint64_t gpupart__peak_in_use(gpupart_device *dev);
void gpupart__peak_reset(gpupart_device *dev);

#endif
