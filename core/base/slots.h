/* Generation-checked slots (slots.c): a pool of small records, each named to callers by
 * an opaque handle that carries an 8-bit generation, so that a handle given back twice
 * (or after its slot was handed out again, up to 255 times) is told apart from a live one
 * in O(1) without reading freed memory. Slots live in slabs aligned to
 * GPUPART__SLOTS_SPACE: a handle is the slab's address + slot index * 256 + generation,
 * and slot 0 of each slab is its header, which names the pool's owner, so a handle alone
 * leads to its owner. The account-only charges (alloc.c, gpupart_partition_charge) are
 * its records. Not thread-safe: the owner's lock guards a pool; a handle may be decoded
 * (gpupart__slots_owner) without it while the pool lives. */
#ifndef GPUPART_CORE_SLOTS_H
#define GPUPART_CORE_SLOTS_H

#include <stdint.h>

#include "hostmem.h"

#define GPUPART__SLOTS_PER_SLAB 256u
#define GPUPART__SLOTS_GEN_BITS 8u
#define GPUPART__SLOTS_SPACE ((uintptr_t)GPUPART__SLOTS_PER_SLAB << GPUPART__SLOTS_GEN_BITS)

typedef struct gpupart__slot {
  uint64_t value;             /* the owner's: a charge's bytes */
  struct gpupart__slot *next; /* the free list, while free */
  uint64_t aux;               /* the owner's too: a charge's trace id */
  uint8_t gen;                /* advanced at every put */
  uint8_t live;
  uint8_t pad[6];
} gpupart__slot;

typedef struct gpupart__slots {
  gpupart__hostmem mem;
  void *owner;
  struct gpupart__slots_slab *slabs;
  gpupart__slot *free;
} gpupart__slots;

void gpupart__slots_init(gpupart__slots *s, const gpupart__hostmem *mem, void *owner);
/* Frees every slab (live slots too: their handles become invalid). */
void gpupart__slots_fini(gpupart__slots *s);
/* A free slot marked live, with value; NULL out of host memory. */
gpupart__slot *gpupart__slots_take(gpupart__slots *s, uint64_t value);
/* The slot back to the pool: its generation advances, its handles go stale. */
void gpupart__slots_put(gpupart__slots *s, gpupart__slot *slot);
/* The opaque nonzero handle of a live slot. */
uintptr_t gpupart__slots_handle(const gpupart__slot *slot);
/* The owner of the pool whose slab h points into (h from gpupart__slots_handle, of a pool
 * that still exists). */
void *gpupart__slots_owner(uintptr_t h);
/* The slot h names when it is live under h's generation, else NULL (given back). */
gpupart__slot *gpupart__slots_live(uintptr_t h);

#endif
