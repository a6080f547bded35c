/* The device's peak of bytes in use (peak.c), kept from each partition's charge (a
 * multiple of the granularity at or above its in_use) so that the allocation fast path
 * touches the device's counter only when a partition crosses a granule. crossed and
 * freed: partition lock held (after in_use rose above the charge, or fell). leave: the
 * partition is unreachable. */
#ifndef GPUPART_CORE_PEAK_H
#define GPUPART_CORE_PEAK_H

#include "internal.h"

void gpupart__peak_crossed(gpupart_partition *p);
void gpupart__peak_freed(gpupart_partition *p);
void gpupart__peak_leave(gpupart_partition *p);
/* Slow lock held (and, for _held, every partition lock). */
uint64_t gpupart__peak_in_use(gpupart_device *dev);
uint64_t gpupart__peak_in_use_held(gpupart_device *dev);
void gpupart__peak_reset(gpupart_device *dev);
/* Slow lock held: gpupart_partition_reset_peak's work (the device's peak keeps p's). */
void gpupart__peak_partition_reset(gpupart_partition *p);
/* Slow lock held, around a change of the device's partition list: a lone partition's
 * exact peak stands for the device's (solo, peak.c). */
void gpupart__peak_regroup_begin(gpupart_device *dev);
void gpupart__peak_regroup_end(gpupart_device *dev);

#endif
