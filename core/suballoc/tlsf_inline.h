/* The sub-allocator's hot operations, inline (tlsf.c has the rest and the whole story):
 * the allocator's layout, the size classes, the free lists, the node pool and the two
 * operations every allocation and free runs, so that the allocation fast path
 * (core/alloc.c) is one function per operation with no call on a hit. Each is the one
 * copy of its rule: tlsf.c's out-of-line entry points are built from the same functions.
 * What is rare stays out of line in tlsf.c: an alignment pad, a list walk when no size
 * class above the request's holds a range, growing the node pool, a move between lists.
 *
 * Not thread-safe, like the rest of the allocator. Nothing here is for callers outside
 * the suballoc room but the allocation fast path. */
#ifndef GPUPART_CORE_TLSF_INLINE_H
#define GPUPART_CORE_TLSF_INLINE_H

#include <stdint.h>

#include "hostmem.h"
#include "tlsf.h"

#define GPUPART__TLSF_SL_LOG2 5u
#define GPUPART__TLSF_SL_COUNT (1u << GPUPART__TLSF_SL_LOG2)
#define GPUPART__TLSF_FL_COUNT (64u - GPUPART__TLSF_SL_LOG2 + 1u) /* sizes up to 2^64 - 1 granules */
#define GPUPART__TLSF_LIST_COUNT (GPUPART__TLSF_FL_COUNT * GPUPART__TLSF_SL_COUNT)

typedef struct gpupart__tlsf_slab gpupart__tlsf_slab; /* tlsf.c */

struct gpupart__tlsf {
  gpupart__tlsf_head head; /* first: gpupart__tlsf_user reads it */
  gpupart__hostmem mem;
  uint64_t granule;
  uint32_t shift; /* log2(granule) */
  uint32_t sl_map[GPUPART__TLSF_FL_COUNT];
  uint64_t fl_map;
  gpupart__range *heads[GPUPART__TLSF_LIST_COUNT];
  gpupart__range *pool; /* DEAD nodes ready for reuse (a stack), linked through next_free */
  uint64_t pool_count;
  gpupart__tlsf_slab *slabs;
  gpupart__tlsf_block *blocks;
  gpupart__tlsf_totals totals;
  gpupart__range sink; /* takes the writes meant for a missing list neighbour */
};

/* A request after validation: sizes in bytes, all multiples of the granule. */
typedef struct gpupart__tlsf_request {
  uint64_t size;  /* rounded up to the granule */
  uint64_t align; /* > granule, or 0 when the granule is enough */
  uint64_t need;  /* size plus the worst-case alignment pad */
  uint64_t asked; /* size as asked, before rounding */
} gpupart__tlsf_request;

/* ---- size classes ---- */

/* The list that holds free ranges of g granules (g >= 1). Below 2^SL_LOG2 granules each
 * size has its own list; from there on each power of two is cut in SL_COUNT slices.
 * OR-ing in SL_COUNT clamps the level so one formula covers both, with no branch to
 * mispredict (sizes are random, so that branch would be). */
static inline uint32_t gpupart__tlsf_list_of(uint64_t g) {
  uint32_t f = 63u - (uint32_t)__builtin_clzll(g | GPUPART__TLSF_SL_COUNT) - GPUPART__TLSF_SL_LOG2;
  return f * GPUPART__TLSF_SL_COUNT + (uint32_t)(g >> f);
}

/* The first list whose every range holds g granules; 0 on overflow (no such list). */
static inline int gpupart__tlsf_good_fit_list(uint64_t g, uint32_t *list) {
  uint32_t f = 63u - (uint32_t)__builtin_clzll(g | GPUPART__TLSF_SL_COUNT) - GPUPART__TLSF_SL_LOG2;
  if (__builtin_add_overflow(g, (1ull << f) - 1u, &g)) return 0;
  *list = gpupart__tlsf_list_of(g);
  return 1;
}

/* Head of the first non-empty list at or above list, or NULL. */
static inline gpupart__range *gpupart__tlsf_search_from(const gpupart__tlsf *t, uint32_t list) {
  uint32_t fl = list / GPUPART__TLSF_SL_COUNT;
  uint32_t sm = t->sl_map[fl] & (~0u << (list % GPUPART__TLSF_SL_COUNT));
  if (!sm) {
    uint64_t fm = fl + 1u < GPUPART__TLSF_FL_COUNT ? t->fl_map & (~0ull << (fl + 1u)) : 0;
    if (!fm) return NULL;
    fl = (uint32_t)__builtin_ctzll(fm);
    sm = t->sl_map[fl];
  }
  return t->heads[fl * GPUPART__TLSF_SL_COUNT + (uint32_t)__builtin_ctz(sm)];
}

/* ---- free lists ---- */

/* The list code writes through the sink instead of testing for NULL: whether a list
 * neighbour exists is a coin toss that the branch predictor cannot learn. */
static inline gpupart__range *gpupart__tlsf_or_sink(gpupart__tlsf *t, gpupart__range *r) { return r ? r : &t->sink; }

/* Puts r on list, the list of its size. */
static inline void gpupart__tlsf_insert_on(gpupart__tlsf *t, gpupart__range *r, uint32_t list) {
  uint32_t fl = list / GPUPART__TLSF_SL_COUNT;
  r->state = GPUPART__RANGE_FREE;
  r->list = (uint16_t)list;
  r->prev_free = NULL;
  r->next_free = t->heads[list];
  gpupart__tlsf_or_sink(t, r->next_free)->prev_free = r;
  t->heads[list] = r;
  t->sl_map[fl] |= 1u << (list % GPUPART__TLSF_SL_COUNT);
  t->fl_map |= 1ull << fl;
  t->totals.free_ranges++;
}

static inline void gpupart__tlsf_insert_free(gpupart__tlsf *t, gpupart__range *r) {
  gpupart__tlsf_insert_on(t, r, gpupart__tlsf_list_of(r->size >> t->shift));
}

/* Unlinks r from its list; the caller gives it its next state. */
static inline void gpupart__tlsf_remove_free(gpupart__tlsf *t, gpupart__range *r) {
  uint32_t list = r->list, fl = list / GPUPART__TLSF_SL_COUNT;
  *(r->prev_free ? &r->prev_free->next_free : &t->heads[list]) = r->next_free;
  gpupart__tlsf_or_sink(t, r->next_free)->prev_free = r->prev_free;
  t->sl_map[fl] &= ~((uint32_t)(t->heads[list] == NULL) << (list % GPUPART__TLSF_SL_COUNT));
  t->fl_map &= ~((uint64_t)(t->sl_map[fl] == 0) << fl);
  t->totals.free_ranges--;
}

/* A FREE range whose size changed moves to the list of its new size, if that differs:
 * most changes stay within one size class, and then no list is touched. Inline, move
 * included: on the replayed traces two operations in three move a range. */
static inline void gpupart__tlsf_relist(gpupart__tlsf *t, gpupart__range *r) {
  uint32_t list = gpupart__tlsf_list_of(r->size >> t->shift);
  if (list == r->list) return;
  gpupart__tlsf_remove_free(t, r);
  gpupart__tlsf_insert_on(t, r, list);
}

/* ---- node pool ---- */

/* The caller sets every field; state stays DEAD until it does. The pool holds one. */
static inline gpupart__range *gpupart__tlsf_take_node(gpupart__tlsf *t) {
  gpupart__range *n = t->pool;
  t->pool = n->next_free;
  t->pool_count--;
  return n;
}

static inline void gpupart__tlsf_put_node(gpupart__tlsf *t, gpupart__range *n) {
  n->state = GPUPART__RANGE_DEAD;
  n->next_free = t->pool;
  t->pool = n;
  t->pool_count++;
}

/* ---- physical chain ---- */

/* Folds hi, the physical successor of lo, into lo; hi goes back to the pool. */
static inline void gpupart__tlsf_absorb(gpupart__tlsf *t, gpupart__range *lo, gpupart__range *hi) {
  lo->size += hi->size;
  lo->next_phys = hi->next_phys;
  if (lo->next_phys) lo->next_phys->prev_phys = lo;
  gpupart__tlsf_put_node(t, hi);
}

/* Folds lo, the physical predecessor of hi, into hi (hi grows downwards); lo goes back
 * to the pool. */
static inline void gpupart__tlsf_absorb_below(gpupart__tlsf *t, gpupart__range *hi, gpupart__range *lo) {
  hi->offset = lo->offset;
  hi->size += lo->size;
  hi->prev_phys = lo->prev_phys;
  if (hi->prev_phys) hi->prev_phys->next_phys = hi;
  else hi->home->first = hi;
  gpupart__tlsf_put_node(t, lo);
}

/* Links n, a fresh node, into r's chain just below r (offsets are the caller's). */
static inline void gpupart__tlsf_link_below(gpupart__range *n, gpupart__range *r) {
  n->home = r->home;
  n->prev_phys = r->prev_phys;
  n->next_phys = r;
  if (n->prev_phys) n->prev_phys->next_phys = n;
  else n->home->first = n;
  r->prev_phys = n;
}

/* ---- allocation and free ---- */

static inline void gpupart__tlsf_mark_used(gpupart__tlsf *t, gpupart__range *r, const gpupart__tlsf_request *q) {
  r->state = GPUPART__RANGE_USED;
  r->slack = (uint32_t)(q->size - q->asked);
  r->user_tag = 0;
  r->user_ext = NULL;
  t->totals.used += r->size;
  t->totals.used_ranges++;
}

/* The common cut (no alignment pad, r larger than the request, a node in the pool): the
 * allocation takes a fresh node at the bottom of the free range r, and r keeps the rest,
 * on its list unless its size class changed. */
static inline gpupart__range *gpupart__tlsf_carve_bottom(gpupart__tlsf *t, gpupart__range *r,
                                                         const gpupart__tlsf_request *q) {
  gpupart__range *u = gpupart__tlsf_take_node(t);
  u->offset = r->offset;
  u->size = q->size;
  gpupart__tlsf_link_below(u, r);
  r->offset += q->size;
  r->size -= q->size;
  gpupart__tlsf_relist(t, r);
  gpupart__tlsf_mark_used(t, u, q);
  return u;
}

/* gpupart__tlsf_alloc's common case, with no call: for size nonzero and at most what
 * rounds up to the granule without overflow, at the granule's alignment, a range from
 * the first list whose every range fits, cut at its bottom or taken whole. NULL, with
 * nothing changed, where gpupart__tlsf_alloc has more to do (no such list holds a range
 * and the request's own list may, the node pool is low) or nothing fits: the caller then
 * asks gpupart__tlsf_alloc, which gives the same range this would have. */
static inline gpupart__range *gpupart__tlsf_alloc_small(gpupart__tlsf *t, uint64_t size) {
  gpupart__tlsf_request q = {.asked = size};
  q.size = q.need = (size + t->granule - 1u) & ~(t->granule - 1u);
  uint32_t list;
  gpupart__range *r = NULL;
  if (__builtin_expect(gpupart__tlsf_good_fit_list(q.size >> t->shift, &list), 1))
    r = gpupart__tlsf_search_from(t, list);
  if (__builtin_expect(!r || t->pool_count < 2u, 0)) return NULL;
  if (__builtin_expect(r->size > q.size, 1)) return gpupart__tlsf_carve_bottom(t, r, &q);
  gpupart__tlsf_remove_free(t, r);
  gpupart__tlsf_mark_used(t, r, &q);
  return r;
}

/* Whether freeing r (USED) leaves its block one FREE range: each neighbour is missing,
 * or FREE and the block's end. Asked before the free, so a caller can leave the rare
 * case to a path that may release the block. */
static inline int gpupart__tlsf_free_empties(const gpupart__range *r) {
  const gpupart__range *p = r->prev_phys, *n = r->next_phys;
  return (!p || (p->state == GPUPART__RANGE_FREE && !p->prev_phys)) &&
         (!n || (n->state == GPUPART__RANGE_FREE && !n->next_phys));
}

/* gpupart__tlsf_free for a range known to be USED and t's (the caller checked its
 * handle): returns the resulting FREE range. */
static inline __attribute__((always_inline)) gpupart__range *gpupart__tlsf_free_used(gpupart__tlsf *t,
                                                                                     gpupart__range *r) {
  gpupart__range *p = r->prev_phys, *n = r->next_phys;
  r->gen++; /* every handle of r so far is stale */
  t->totals.used -= r->size;
  t->totals.used_ranges--;
  int p_free = p && p->state == GPUPART__RANGE_FREE, n_free = n && n->state == GPUPART__RANGE_FREE;
  if (p_free) {
    gpupart__tlsf_absorb(t, p, r);
    if (n_free) {
      gpupart__tlsf_remove_free(t, n);
      gpupart__tlsf_absorb(t, p, n);
    }
    gpupart__tlsf_relist(t, p);
    return p;
  }
  if (n_free) {
    gpupart__tlsf_absorb_below(t, n, r);
    gpupart__tlsf_relist(t, n);
    return n;
  }
  gpupart__tlsf_insert_free(t, r);
  return r;
}

#endif
