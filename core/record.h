/* Allocation records: what a gpupart_allocation handle points to. Records come from a
 * per-partition pool and carry a state, so a handle freed twice is recognised and
 * reported rather than freeing whatever reuses its memory: a freed record is handed out
 * again only after at least QUARANTINE (128) later frees of the same partition. The
 * pool never returns memory before the partition is destroyed, so a stale handle stays
 * readable. Not thread-safe: the partition lock guards the pool. */
#ifndef GPUPART_CORE_RECORD_H
#define GPUPART_CORE_RECORD_H

#include <stdint.h>

#include "hostmem.h"
#include "tlsf.h"

enum { GPUPART__RECORD_FREED = 0, GPUPART__RECORD_LIVE = 1 };

typedef struct gpupart__record gpupart__record;
struct gpupart__record {
  gpupart__range *range;   /* while LIVE: its range in the sub-allocator */
  gpupart__record *next;   /* while FREED: the next record of the pool */
  void *owner;             /* the partition; set when the slab is made, never changes */
  uint64_t size, tag;      /* as the caller asked */
  void *view;              /* the backend's per-allocation view (interop.h), or NULL */
  uint32_t state;          /* GPUPART__RECORD_* */
};

typedef struct gpupart__record_pool {
  const gpupart__hostmem *mem;
  void *owner;
  gpupart__record *head, *tail; /* the quarantine: the most recently freed, oldest first */
  uint64_t quarantined;
  gpupart__record *stack;       /* FREED records past the quarantine, and new ones */
  void *slabs;
} gpupart__record_pool;

void gpupart__record_pool_init(gpupart__record_pool *pool, const gpupart__hostmem *mem, void *owner);
void gpupart__record_pool_fini(gpupart__record_pool *pool);
/* A record in state LIVE with its other fields zeroed, or NULL when out of host memory. */
gpupart__record *gpupart__record_take(gpupart__record_pool *pool);
void gpupart__record_put(gpupart__record_pool *pool, gpupart__record *r);

#endif
