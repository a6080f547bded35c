/* The CUDA preload library's arena mode (GPUPART_PRELOAD_ARENA=1): cuMemAlloc_v2 in a
 * device's primary context is served from a gpupart growth arena on that device (the
 * cuda backend, blocks taken with cuMemAlloc_v2 and kept while they hold allocations)
 * instead of one driver call per allocation; where the configuration makes the device
 * expandable (GPUPART_EXPANDABLE=1, cuda:0=1, INI expandable) the arena is one
 * expandable range growing by mapped granules instead of blocks. The arena's blocks (or
 * the range's mapped bytes), not the allocations, are what is charged on the mirror
 * partition (interpose/common/account.h), so the limit and the shared ledger see the
 * memory the process really holds.
 * docs/unmodified.md ("Serving from gpupart's arenas") says what it changes. */
#ifndef GPUPART_INTERPOSE_CU_ARENA_H
#define GPUPART_INTERPOSE_CU_ARENA_H

#include <cuda.h>

#include "gpupart.h"

/* Whether GPUPART_PRELOAD_ARENA asks for arena mode ("1", "true", "yes", "on"), read once. */
int gpupart__cu_arena_wanted(void);

typedef enum gpupart__cu_served {
  CU_NOT_SERVED, /* not the arena's to serve: the caller takes the driver's path */
  CU_SERVED,     /* *dptr is an allocation of the arena */
  CU_REFUSED     /* the partition or the budget refused the arena's new block */
} gpupart__cu_served;

/* Serves size bytes in device dev's arena when the current context is dev's primary
 * context, a new block accounted on mirror (the device's mirror partition). Called by a
 * hook with gpupart__cu_busy set. */
gpupart__cu_served gpupart__cu_arena_alloc(CUdevice dev, gpupart_partition *mirror, size_t size, CUdeviceptr *dptr);
/* Whether a (from the pointer map) is an arena allocation. */
int gpupart__cu_arena_owns(const gpupart_allocation *a);
/* Frees arena allocation a once its context's work is done (cuCtxSynchronize, as
 * cuMemFree waits), giving a block that empties back to the driver and to the mirror. */
CUresult gpupart__cu_arena_free(gpupart_allocation *a);
/* Whether p lies in a block of an arena (a pointer the arena served and that is freed
 * already, or one inside an allocation): never the driver's to free, as the block is the
 * arena's. */
int gpupart__cu_arena_holds(CUdeviceptr p);
/* Gives device dev's arena's empty cached blocks back to the driver and their records
 * back to the mirror: whether it gave any back (a refusal on the mirror, of the driver's
 * path, is then tried again). */
int gpupart__cu_arena_trim(CUdevice dev);
/* The bytes device dev's arena holds in blocks but not in allocations (what the program
 * can still be served without a new block). */
uint64_t gpupart__cu_arena_spare(CUdevice dev);
/* Resets device dev's primary context (reset: the driver's cuDevicePrimaryCtxReset_v2)
 * under the arena's lock and, where that succeeds, forgets dev's arena: the reset freed
 * its blocks, so their records are given back to the mirror, and the arena's gpupart
 * objects are left as they are (closing them would free the blocks' addresses, which the
 * driver may hand out again); the next served allocation opens a new arena. Called by
 * the hook with gpupart__cu_busy set. */
CUresult gpupart__cu_arena_reset(CUdevice dev, CUresult (*reset)(CUdevice));
/* In a forked child: forgets the parent's arenas without closing them. */
void gpupart__cu_arena_forget(void);

#endif
