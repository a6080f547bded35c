/* The layers' map from a driver handle or pointer to its accounting, for the calls that
 * name only the handle (clSVMFree, vkFreeMemory). Thread-safe. */
#ifndef GPUPART_INTERPOSE_HANDLE_MAP_H
#define GPUPART_INTERPOSE_HANDLE_MAP_H

#include "gpupart.h"

/* Records ptr -> a: 0, or -1 out of host memory (then nothing is recorded). */
int gpupart__ip_map_put(const void *ptr, gpupart_allocation *a);
/* Records ptr -> a, replacing a record ptr already has (one the driver has freed without
 * this library seeing it, e.g. with its context, since a driver never hands out a live
 * pointer twice): 0 with that record's allocation in *stale (NULL: none), or -1 out of
 * host memory (then nothing changed). For handles unique in the process (CUDA's unified
 * addresses), not for handles unique per device only. */
int gpupart__ip_map_set(const void *ptr, gpupart_allocation *a, gpupart_allocation **stale);
/* Removes ptr and returns its allocation; NULL for a pointer never recorded. */
gpupart_allocation *gpupart__ip_map_take(const void *ptr);

/* In a forked child: forgets every record (the parent's pointers), freeing nothing. */
void gpupart__ip_map_forget(void);

#endif
