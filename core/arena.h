/* The arena of a partition (arena.c): its driver blocks and the growth policy. Partition
 * lock held: try, on_free, emptied, check. Device slow lock held and partition lock NOT
 * held (they call the driver): fini, grow (returns GPUPART_OK with the partition lock held
 * and a block in place that fits the request), reserve_exact, release_empty,
 * release_detached. */
#ifndef GPUPART_CORE_ARENA_H
#define GPUPART_CORE_ARENA_H

#include "internal.h"

/* The block-size rule, in one place for the request's check (alloc.c) and the growth
 * (arena.c). need: the bytes a fresh block needs to hold size bytes at align (at least
 * the device's alignment): block bases are aligned to the device, so only a stricter
 * alignment needs slack; nonzero on overflow. largest: the driver's largest allocation in
 * whole driver granules (backends take only those). */
static inline int gpupart__block_need(const gpupart_device *dev, uint64_t size, uint64_t align, uint64_t *need) {
  uint64_t a = dev->alignment;
  if (__builtin_add_overflow(size, a - 1, need)) return -1;
  *need &= ~(a - 1);
  return align > a && __builtin_add_overflow(*need, align - a, need) ? -1 : 0;
}
static inline uint64_t gpupart__largest_block(const gpupart_device *dev) {
  return dev->info.max_block_bytes & ~(dev->alignment - 1);
}

/* Partition lock held, after reserved or charged rose: the peak of the two together. */
static inline void gpupart__arena_raise_peak(gpupart__arena *a) {
  if (a->reserved + a->charged > a->peak_reserved) a->peak_reserved = a->reserved + a->charged;
}

int gpupart__arena_init(gpupart__arena *a, const gpupart_device *dev);
/* Makes the arena expandable (partition private, after init): one reserved range sized
 * from limit. ENOTSUP (the message says why) where the backend or device has no virtual
 * memory: the arena then keeps growth blocks. */
int gpupart__arena_expandable(gpupart_partition *p, uint64_t limit);
void gpupart__arena_fini(gpupart__arena *a, gpupart_partition *p);
/* Partition lock held: a range of the held blocks, or NULL. The arena counts nothing
 * per allocation: a block's emptiness is the sub-allocator's (one FREE range). */
static inline gpupart__range *gpupart__arena_try(gpupart_partition *p, uint64_t size, uint64_t align) {
  return gpupart__tlsf_alloc(p->arena.tlsf, size, align);
}
int gpupart__arena_grow(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why);
int gpupart__arena_reserve_exact(gpupart_partition *p, uint64_t bytes, int prealloc);
uint64_t gpupart__arena_release_empty(gpupart_partition *p);
/* Partition lock held: whether a block a free empties may go back to the driver at all
 * (a release threshold is set); when not, gpupart__arena_emptied does nothing, so the
 * fast path need not ask. */
static inline int gpupart__arena_may_release(const gpupart_partition *p) { return p->growth.release_threshold != 0; }
/* Device slow lock held, partition lock not: the size of p's largest empty block that may
 * go (never a preallocated one; 0: none; an expandable partition's mapped tail is no
 * block), and the release of that one block (the bytes released). A give-back request
 * (trim.c) releases blocks largest first and stops when it is met. */
uint64_t gpupart__arena_largest_empty(gpupart_partition *p);
uint64_t gpupart__arena_release_largest(gpupart_partition *p);
/* Partition lock held, whole the FREE range that covers a block a free just emptied: the
 * block when it is due back to the driver (the cached empty bytes pass the release
 * threshold), detached for the caller to release with gpupart__arena_release_detached once
 * the partition lock is dropped; NULL when nothing is due. */
gpupart__block *gpupart__arena_emptied(gpupart_partition *p, const gpupart__range *whole);
/* Partition lock held, after a free whose resulting FREE range is fr (gpupart__tlsf_free):
 * only a free that left its block one FREE range leaves the fast path. */
static inline gpupart__block *gpupart__arena_on_free(gpupart_partition *p, const gpupart__range *fr) {
  if (__builtin_expect(!gpupart__tlsf_block_is_empty(fr), 1)) return NULL;
  return gpupart__arena_emptied(p, fr);
}
void gpupart__arena_release_detached(gpupart_partition *p, gpupart__block *b);
int gpupart__arena_check(const gpupart_partition *p, char *why, uint64_t n);

#endif
