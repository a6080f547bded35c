/* Allocations (alloc.c): a public handle is the sub-allocator's handle of the
 * allocation's range (tlsf.h), so these map one to the other with no table. */
#ifndef GPUPART_CORE_ALLOC_H
#define GPUPART_CORE_ALLOC_H

#include "internal.h"

/* The range a handle names. */
static inline gpupart__range *gpupart__range_of(const gpupart_allocation *a) {
  return gpupart__tlsf_node((uintptr_t)a);
}
/* The partition a handle was allocated from, even when the handle is stale. */
static inline gpupart_partition *gpupart__partition_of(const gpupart_allocation *a) {
  return gpupart__tlsf_user(gpupart__range_owner(gpupart__range_of(a)));
}
/* Nonzero while a names a live allocation (partition lock held). */
static inline int gpupart__handle_live(const gpupart_allocation *a) { return gpupart__tlsf_live((uintptr_t)a); }

/* Describes a live allocation's range (partition lock held). */
void gpupart__range_info(const gpupart_partition *p, const gpupart__range *r, gpupart_allocation_info *out);

#endif
