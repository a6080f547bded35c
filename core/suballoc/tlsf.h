/* The offset sub-allocator: a two-level segregated fit (TLSF) allocator over ranges of
 * driver blocks. It never touches the memory it manages: every range is described by a
 * host-side node (gpupart__range, one 64-byte cache line) taken from slabs that the
 * allocator owns. Allocation and free are O(1); freed ranges coalesce with their free
 * neighbours at once. One allocator manages any number of blocks; ranges never span two
 * blocks. A USED range is named to callers by a handle (gpupart__tlsf_handle): the node
 * plus an 8-bit generation that every free advances, so a stale handle is refused in O(1).
 *
 * Not thread-safe: the arena that owns an allocator serialises calls to it. */
#ifndef GPUPART_CORE_TLSF_H
#define GPUPART_CORE_TLSF_H

#include <stdint.h>

#include "hostmem.h"

enum {
  GPUPART__RANGE_DEAD = 0, /* back in the node pool (merged away or never used) */
  GPUPART__RANGE_FREE = 1, /* a free range, on a free list */
  GPUPART__RANGE_USED = 2, /* handed out by gpupart__tlsf_alloc */
};

typedef struct gpupart__tlsf gpupart__tlsf;
typedef struct gpupart__range gpupart__range;
typedef struct gpupart__tlsf_block gpupart__tlsf_block;

/* One added block: what its ranges share, kept out of the nodes. */
struct gpupart__tlsf_block {
  uint64_t base;         /* address of offset 0, for alignment */
  uint64_t size;         /* bytes, a multiple of the granule */
  void *cookie;          /* the caller's block cookie given to add_block */
  gpupart__range *first; /* the offset-0 node */
  gpupart__tlsf_block *prev, *next;
};

/* One cache line. The fields a FREE range needs for its list and those a USED range
 * carries for the allocator's user share storage; what all ranges of a block share
 * (base, cookie) lives in the block record (home), the owner in the node's slab. */
struct gpupart__range {
  uint64_t offset;                       /* within the block */
  uint64_t size;                         /* a multiple of the granule */
  gpupart__range *prev_phys, *next_phys; /* neighbours in the same block, by offset */
  gpupart__tlsf_block *home;             /* the block's record (base, cookie, first) */
  union {
    struct {
      gpupart__range *prev_free, *next_free; /* free-list links while FREE; next_free links the pool */
    };
    struct { /* USED: the allocator's user owns these; zeroed at hand-out */
      uint64_t user_tag;
      void *user_ext;
    };
  };
  uint8_t state;  /* GPUPART__RANGE_* */
  uint8_t gen;    /* advanced by every free of the node while USED */
  uint16_t list;  /* free-list index while FREE (internal) */
  uint32_t slack; /* USED: rounded size minus the size asked for (below the granule) */
};

_Static_assert(sizeof(gpupart__range) <= 64, "a range node fits one cache line");

/* The caller's block cookie of r's block. */
static inline void *gpupart__range_block(const gpupart__range *r) { return r->home->cookie; }
/* The bytes asked for when r (USED) was allocated. */
static inline uint64_t gpupart__range_user_size(const gpupart__range *r) { return r->size - r->slack; }
/* Handles: a slab of nodes starts at a multiple of GPUPART__TLSF_SLAB_SPACE, holds its
 * owner at its start and nodes 1 .. GPUPART__TLSF_SLAB_NODES - 1 after it. A handle is
 * the slab's address + node index * 256 + generation: it fits the slab's address space
 * (larger than the slab's memory), so decoding it is arithmetic and one load. */
#define GPUPART__TLSF_GEN_BITS 8u
#define GPUPART__TLSF_SLAB_NODES 256u
#define GPUPART__TLSF_SLAB_SPACE ((uintptr_t)GPUPART__TLSF_SLAB_NODES << GPUPART__TLSF_GEN_BITS)

/* One 64-bit word per node for the allocator's user, kept outside the node so that the
 * node stays one cache line: an array after the slab's nodes, in the same allocation.
 * Trace recording (trace.c) keeps a USED range's trace id there; nothing else reads it,
 * and the allocator never writes it after the slab is made (zero). */
#define GPUPART__TLSF_SLAB_BYTES ((uintptr_t)GPUPART__TLSF_SLAB_NODES * 64u)
static inline uint64_t *gpupart__tlsf_aux(const gpupart__range *r) {
  uintptr_t base = (uintptr_t)r & ~(GPUPART__TLSF_SLAB_SPACE - 1u);
  return (uint64_t *)(base + GPUPART__TLSF_SLAB_BYTES) + ((uintptr_t)r - base) / 64u;
}

/* The allocator that owns r (any node, even a DEAD one, while its allocator lives). */
static inline gpupart__tlsf *gpupart__range_owner(const gpupart__range *r) {
  return *(gpupart__tlsf *const *)((uintptr_t)r & ~(GPUPART__TLSF_SLAB_SPACE - 1u));
}

/* The handle of a USED range: an opaque nonzero token naming its node and generation. */
static inline uintptr_t gpupart__tlsf_handle(const gpupart__range *r) {
  uintptr_t base = (uintptr_t)r & ~(GPUPART__TLSF_SLAB_SPACE - 1u);
  return base + (((uintptr_t)r - base) / sizeof *r << GPUPART__TLSF_GEN_BITS) + r->gen;
}

/* The node a handle names, whatever its state; h must have come from gpupart__tlsf_handle
 * of an allocator that still exists. */
static inline gpupart__range *gpupart__tlsf_node(uintptr_t h) {
  uintptr_t base = h & ~(GPUPART__TLSF_SLAB_SPACE - 1u);
  return (gpupart__range *)(base + ((h - base) >> GPUPART__TLSF_GEN_BITS) * sizeof(gpupart__range));
}

/* Nonzero when h names a range that is USED now under the same generation: zero for a
 * handle freed already, even after its node was handed out again (up to 255 times, so
 * at least 255 later frees of any handle). */
static inline int gpupart__tlsf_live(uintptr_t h) {
  const gpupart__range *r = gpupart__tlsf_node(h);
  return r->state == GPUPART__RANGE_USED && r->gen == (uint8_t)h;
}

/* Live figures, kept exactly at every call. */
typedef struct gpupart__tlsf_totals {
  uint64_t managed;     /* sum of the sizes of all blocks added */
  uint64_t used;        /* sum of sizes of USED ranges */
  uint64_t blocks;      /* blocks currently added */
  uint64_t used_ranges; /* USED ranges */
  uint64_t free_ranges; /* FREE ranges */
} gpupart__tlsf_totals;

/* Create an allocator. granule: a power of two from 1 to 2^32; every range size and
 * offset is a multiple of it. Returns NULL when out of host memory or granule is invalid. */
gpupart__tlsf *gpupart__tlsf_create(uint64_t granule, const gpupart__hostmem *mem);
/* Frees the allocator and every node; blocks are the caller's to free. NULL is a no-op. */
void gpupart__tlsf_destroy(gpupart__tlsf *t);

/* Adds a block of size bytes (rounded down to the granule; must be >= one granule).
 * base is the address that offset 0 of the block has (a device address), or 0: alignment
 * requests apply to base + offset; base must be a multiple of the granule. Returns the
 * block's single FREE range, or NULL (nothing changed) when out of host memory, when the
 * size is below one granule, or when base is not a multiple of the granule. */
gpupart__range *gpupart__tlsf_add_block(gpupart__tlsf *t, void *block, uint64_t base, uint64_t size);
/* Removes a block that is entirely free: r must be a FREE range with no neighbours
 * (gpupart__tlsf_block_is_empty(r)). Returns 0, or -1 (nothing changed) otherwise. */
int gpupart__tlsf_remove_block(gpupart__tlsf *t, gpupart__range *r);
/* Nonzero when r is the only range of its block and is FREE: the block is empty. Inline,
 * as the arena asks it after every free. */
static inline int gpupart__tlsf_block_is_empty(const gpupart__range *r) {
  return r && r->state == GPUPART__RANGE_FREE && !r->prev_phys && !r->next_phys;
}

/* A USED range of at least size bytes (rounded up to the granule) whose base + offset is
 * a multiple of align (a power of two; 0 or anything below the granule = the granule).
 * NULL when no free range fits (or size is 0 or overflows when rounded; or align is
 * not a power of two), with nothing changed, or when out of host memory for a node.
 * Never NULL for want of a fit while some FREE range holds size + align - granule bytes:
 * when no size class above the request's own has a range, that one list is walked. */
gpupart__range *gpupart__tlsf_alloc(gpupart__tlsf *t, uint64_t size, uint64_t align);
/* Whether a request would fit without allocating anything (same rules as alloc). */
int gpupart__tlsf_can_alloc(const gpupart__tlsf *t, uint64_t size, uint64_t align);
/* Frees a USED range and advances its generation (its handles go stale); coalesces with
 * free neighbours, so r merges into a free neighbour or becomes the FREE range. Returns
 * the resulting FREE range, or NULL (nothing changed) if r is not USED or belongs to
 * another allocator. */
gpupart__range *gpupart__tlsf_free(gpupart__tlsf *t, gpupart__range *r);

/* Moves the floor (lowest offset) of the USED range r to at, a multiple of the granule,
 * keeping its top: above r->offset (and below its top) the bytes between go to the FREE
 * range below r, or become one; below it they come out of the FREE range just below r,
 * which must reach down to at. r keeps its node and handle. The expandable arena keeps
 * its unmapped tail as such a range. Returns 0, or -1 with nothing changed (r not USED,
 * at outside those bounds or off the granule, or out of host memory for a node). */
int gpupart__tlsf_move_floor(gpupart__tlsf *t, gpupart__range *r, uint64_t at);

/* Size of the largest FREE range (0 if none). O(lists + length of the top list). */
uint64_t gpupart__tlsf_largest_free(const gpupart__tlsf *t);
uint64_t gpupart__tlsf_granule(const gpupart__tlsf *t);
void gpupart__tlsf_get_totals(const gpupart__tlsf *t, gpupart__tlsf_totals *out);

/* Calls fn for each block's first range (offset 0) in an unspecified order; fn may
 * remove the block it is given. */
void gpupart__tlsf_foreach_block(gpupart__tlsf *t, void (*fn)(gpupart__range *first, void *ctx), void *ctx);

/* Full walk of every invariant: physical chains cover each block exactly, no two
 * adjacent FREE ranges, every FREE range on the right list and bitmap bits set exactly
 * for non-empty lists, totals equal to the walk. Returns 0, or -1 and writes a short
 * description of the first broken invariant to why (if why_len > 0). */
int gpupart__tlsf_check(const gpupart__tlsf *t, char *why, uint64_t why_len);

/* The range at offset 0 of the block that home describes (r->home of any of its ranges):
 * the node that remove_block takes once the block is empty. It changes as ranges are
 * allocated and freed, so callers keep home, not the node. */
gpupart__range *gpupart__tlsf_block_first(const gpupart__tlsf_block *home);

/* A cookie for the allocator's owner, so that a range (through its owner field) leads
 * back to whoever owns the allocator, even after the range was freed. */
void gpupart__tlsf_set_user(gpupart__tlsf *t, void *user);

/* Every allocator starts with this, so that reading the cookie inlines. */
typedef struct gpupart__tlsf_head {
  void *user;
} gpupart__tlsf_head;

static inline void *gpupart__tlsf_user(const gpupart__tlsf *t) {
  return ((const gpupart__tlsf_head *)(const void *)t)->user;
}

#endif
