/* One reserved address range and the physical memory mapped into it (vmspace.c): the
 * driver's side of an expandable partition. The mapped bytes are always a prefix of the
 * range, in chunks kept as a stack, so that growth maps at the top and trim unmaps from
 * it. Not thread-safe: the arena calls it under the device's slow lock, and never under
 * a partition spinlock (every call but the figures reaches the driver). */
#ifndef GPUPART_CORE_VMSPACE_H
#define GPUPART_CORE_VMSPACE_H

#include <stdint.h>

#include "backend.h"
#include "hostmem.h"

typedef struct gpupart__vm_chunk {
  uint64_t offset, size;
  void *handle; /* the backend's (vm_map) */
} gpupart__vm_chunk;

typedef struct gpupart__vmspace {
  const gpupart_backend_ops *ops;
  void *bdev;
  const gpupart__hostmem *mem;
  gpupart_block range; /* what vm_reserve made; range.size is the bytes reserved */
  uint64_t granule;
  uint64_t mapped; /* bytes mapped: [0, mapped) of the range */
  gpupart__vm_chunk *chunks;
  uint32_t count, cap;
  uint64_t maps, unmaps; /* calls made, for the counters */
} gpupart__vmspace;

/* Whether the backend offers virtual memory on bdev: its granule, or ENOTSUP (the
 * thread's message says why not). */
int gpupart__vm_granule(const gpupart_backend_ops *ops, void *bdev, uint64_t *granule);
/* Reserves a range of at least size bytes (rounded up to the granule). EDEVMEM,
 * ENOTSUP, ENOMEM (host memory). */
int gpupart__vm_open(gpupart__vmspace *vs, const gpupart_backend_ops *ops, void *bdev, const gpupart__hostmem *mem,
                     uint64_t size);
/* Maps bytes (a multiple of the granule, within the range) at the top of what is mapped,
 * as one chunk. On failure nothing changed. */
int gpupart__vm_map(gpupart__vmspace *vs, uint64_t bytes);
/* The top chunk, or NULL when nothing is mapped. */
const gpupart__vm_chunk *gpupart__vm_top(const gpupart__vmspace *vs);
/* Unmaps the top chunk (after the device's work, through the backend). */
void gpupart__vm_unmap_top(gpupart__vmspace *vs);
/* Unmaps everything and gives the range back; the space can be opened again. */
void gpupart__vm_close(gpupart__vmspace *vs);

#endif
