/* The offset sub-allocator: a two-level segregated fit over ranges of driver blocks. Free
 * ranges sit on one of FL_COUNT x SL_COUNT lists chosen by their size in granules (first
 * level: log2; second level: SL_COUNT equal slices of that power of two), with one bitmap
 * per level so finding a non-empty list is a couple of bit scans. Every range is a host
 * node from slabs that live until the allocator is destroyed, so a stale handle can
 * always be read safely. An allocation takes a fresh node at the bottom of a free range,
 * which keeps the rest; a freed node merges into a free neighbour (which then changes
 * lists only if its size class changed) or becomes the FREE range itself. Either way
 * no node is copied, and the freed node's generation advances, so its old handles no
 * longer match it. Each block's record keeps its offset-0 node (first) up to date. */
#include "tlsf_inline.h"

#include <stdio.h>
#include <string.h>

#define SL_COUNT GPUPART__TLSF_SL_COUNT
#define FL_COUNT GPUPART__TLSF_FL_COUNT
#define SLAB_NODES GPUPART__TLSF_SLAB_NODES
#define SLAB_SPACE GPUPART__TLSF_SLAB_SPACE
#define SLAB_BYTES (SLAB_NODES * sizeof(gpupart__range))
#define SLAB_AUX_BYTES (SLAB_NODES * sizeof(uint64_t)) /* gpupart__tlsf_aux, after the nodes */

_Static_assert(sizeof(gpupart__range) == 64, "handles count nodes in 64-byte steps");
_Static_assert(SLAB_SPACE >= SLAB_BYTES + SLAB_AUX_BYTES, "a slab's handles cover its nodes and their words");
_Static_assert(GPUPART__TLSF_SLAB_BYTES == SLAB_BYTES, "gpupart__tlsf_aux finds the words after the nodes");

/* The start of a slab (its slot 0, where node 0 would be): nodes 1 .. SLAB_NODES - 1
 * follow. owner comes first: gpupart__range_owner reads it. */
typedef struct gpupart__tlsf_slab slab;
struct gpupart__tlsf_slab {
  gpupart__tlsf *owner;
  void *raw; /* what the host allocator returned (the slab is aligned within it) */
  slab *next;
};

_Static_assert(sizeof(slab) <= sizeof(gpupart__range), "a slab's header fits its slot 0");

typedef gpupart__tlsf_request request;

/* ---- node pool ---- */

/* A slab aligned to SLAB_SPACE inside a larger host allocation; slot 0 is its header. */
static int grow_pool(gpupart__tlsf *t) {
  void *raw = t->mem.alloc(SLAB_BYTES + SLAB_AUX_BYTES + SLAB_SPACE, t->mem.user);
  if (!raw) return 0;
  slab *s = (slab *)(((uintptr_t)raw + SLAB_SPACE - 1u) & ~(SLAB_SPACE - 1u));
  memset(s, 0, SLAB_BYTES + SLAB_AUX_BYTES);
  *s = (slab){t, raw, t->slabs};
  t->slabs = s;
  gpupart__range *nodes = (gpupart__range *)(void *)s;
  for (uint32_t i = 1; i < SLAB_NODES; i++) { /* state is DEAD (0) from memset */
    nodes[i].next_free = t->pool;
    t->pool = &nodes[i];
  }
  t->pool_count += SLAB_NODES - 1u;
  return 1;
}

/* Makes sure n nodes can be taken, so that a call fails before it changes anything. */
static int reserve_nodes(gpupart__tlsf *t, uint64_t n) {
  while (t->pool_count < n)
    if (!grow_pool(t)) return 0;
  return 1;
}

/* ---- physical chain ---- */

/* Splits r at byte at (0 < at < r->size); returns the new upper node, state DEAD. */
static gpupart__range *split(gpupart__tlsf *t, gpupart__range *r, uint64_t at) {
  gpupart__range *n = gpupart__tlsf_take_node(t);
  n->offset = r->offset + at;
  n->size = r->size - at;
  n->home = r->home;
  n->prev_phys = r;
  n->next_phys = r->next_phys;
  if (n->next_phys) n->next_phys->prev_phys = n;
  r->next_phys = n;
  r->size = at;
  return n;
}

/* ---- allocation ---- */

static int make_request(const gpupart__tlsf *t, uint64_t size, uint64_t align, request *q) {
  uint64_t g = t->granule;
  if (size == 0 || (align & (align - 1u))) return 0;
  if (__builtin_add_overflow(size, g - 1u, &q->size)) return 0;
  q->size &= ~(g - 1u);
  q->align = align > g ? align : 0;
  q->need = q->size;
  q->asked = size;
  return !q->align || !__builtin_add_overflow(q->size, q->align - g, &q->need);
}

/* Bytes to skip at the start of r so that base + offset meets q's alignment. */
static uint64_t align_pad(const gpupart__range *r, const request *q) {
  if (!q->align) return 0;
  return (0u - (r->home->base + r->offset)) & (q->align - 1u);
}

static int fits(const gpupart__range *r, const request *q) {
  uint64_t pad = align_pad(r, q);
  return pad <= r->size && q->size <= r->size - pad;
}

/* Good fit: any range on the first list at or above the rounded-up need fits whatever its
 * alignment. If there is none, the need's own list may still hold a range that fits; that
 * list is only walked when nothing larger is free, so the fast path stays O(1). */
static gpupart__range *find_fit(const gpupart__tlsf *t, const request *q) {
  uint64_t g = q->need >> t->shift;
  uint32_t list;
  if (gpupart__tlsf_good_fit_list(g, &list)) {
    gpupart__range *r = gpupart__tlsf_search_from(t, list);
    if (r) return r;
  }
  for (gpupart__range *r = t->heads[gpupart__tlsf_list_of(g)]; r; r = r->next_free)
    if (fits(r, q)) return r;
  return NULL;
}

/* Cuts q out of the free range r. Without an alignment pad, see carve_bottom (or r is
 * used whole); with one, the pad stays FREE in r (the lower node), the allocation and
 * any trailing remainder get new nodes. */
static gpupart__range *carve(gpupart__tlsf *t, gpupart__range *r, const request *q) {
  uint64_t pad = align_pad(r, q);
  if (!pad && r->size > q->size) return gpupart__tlsf_carve_bottom(t, r, q);
  gpupart__range *u = r;
  gpupart__tlsf_remove_free(t, r);
  if (pad) {
    u = split(t, r, pad);
    gpupart__tlsf_insert_free(t, r);
  }
  if (u->size > q->size) gpupart__tlsf_insert_free(t, split(t, u, q->size));
  gpupart__tlsf_mark_used(t, u, q);
  return u;
}

gpupart__range *gpupart__tlsf_alloc(gpupart__tlsf *t, uint64_t size, uint64_t align) {
  request q;
  if (!make_request(t, size, align, &q)) return NULL;
  gpupart__range *r = find_fit(t, &q);
  if (!r || !reserve_nodes(t, 2)) return NULL;
  return carve(t, r, &q);
}

int gpupart__tlsf_can_alloc(const gpupart__tlsf *t, uint64_t size, uint64_t align) {
  request q;
  return make_request(t, size, align, &q) && find_fit(t, &q) != NULL;
}

gpupart__range *gpupart__tlsf_free(gpupart__tlsf *t, gpupart__range *r) {
  if (!r || gpupart__range_owner(r) != t || r->state != GPUPART__RANGE_USED) return NULL;
  return gpupart__tlsf_free_used(t, r);
}

/* Raising r's floor: [r->offset, at) goes to the FREE range below, or to a new FREE
 * node where there is none (a node reserved first, so failure changes nothing). */
static int raise_floor(gpupart__tlsf *t, gpupart__range *r, uint64_t at) {
  uint64_t delta = at - r->offset;
  gpupart__range *p = r->prev_phys;
  if (p && p->state == GPUPART__RANGE_FREE) {
    p->size += delta;
    gpupart__tlsf_relist(t, p);
  } else {
    if (!reserve_nodes(t, 1)) return -1;
    gpupart__range *n = gpupart__tlsf_take_node(t);
    n->offset = r->offset;
    n->size = delta;
    gpupart__tlsf_link_below(n, r);
    gpupart__tlsf_insert_free(t, n);
  }
  r->offset = at;
  r->size -= delta;
  t->totals.used -= delta;
  return 0;
}

/* Lowering r's floor: [at, r->offset) comes out of the FREE range below, which must
 * reach down to at; a range taken whole goes back to the pool. */
static int lower_floor(gpupart__tlsf *t, gpupart__range *r, uint64_t at) {
  gpupart__range *p = r->prev_phys;
  if (!p || p->state != GPUPART__RANGE_FREE || p->offset > at) return -1;
  uint64_t delta = r->offset - at;
  t->totals.used += delta;
  if (p->offset == at) {
    gpupart__tlsf_remove_free(t, p);
    gpupart__tlsf_absorb_below(t, r, p);
    return 0;
  }
  p->size -= delta;
  gpupart__tlsf_relist(t, p);
  r->offset = at;
  r->size += delta;
  return 0;
}

int gpupart__tlsf_move_floor(gpupart__tlsf *t, gpupart__range *r, uint64_t at) {
  if (!r || gpupart__range_owner(r) != t || r->state != GPUPART__RANGE_USED || at & (t->granule - 1)) return -1;
  if (at == r->offset) return 0;
  if (at > r->offset) return at < r->offset + r->size ? raise_floor(t, r, at) : -1;
  return lower_floor(t, r, at);
}

/* ---- blocks ---- */

/* The one FREE range that covers a new block. */
static gpupart__range *whole_block(gpupart__tlsf *t, gpupart__tlsf_block *b) {
  gpupart__range *r = gpupart__tlsf_take_node(t);
  r->offset = 0;
  r->size = b->size;
  r->home = b;
  r->prev_phys = r->next_phys = NULL;
  gpupart__tlsf_insert_free(t, r);
  return r;
}

gpupart__range *gpupart__tlsf_add_block(gpupart__tlsf *t, void *block, uint64_t base, uint64_t size) {
  uint64_t managed;
  size &= ~(t->granule - 1u);
  if (size == 0 || (base & (t->granule - 1u))) return NULL;
  if (__builtin_add_overflow(t->totals.managed, size, &managed)) return NULL;
  if (!reserve_nodes(t, 1)) return NULL;
  gpupart__tlsf_block *b = gpupart__host_calloc(&t->mem, 1, sizeof *b);
  if (!b) return NULL;
  *b = (gpupart__tlsf_block){base, size, block, NULL, NULL, t->blocks};
  if (t->blocks) t->blocks->prev = b;
  t->blocks = b;
  b->first = whole_block(t, b);
  t->totals.managed = managed;
  t->totals.blocks++;
  return b->first;
}

int gpupart__tlsf_remove_block(gpupart__tlsf *t, gpupart__range *r) {
  if (!r || gpupart__range_owner(r) != t || !gpupart__tlsf_block_is_empty(r)) return -1;
  gpupart__tlsf_block *b = r->home;
  if (b->prev) b->prev->next = b->next;
  else t->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
  gpupart__tlsf_remove_free(t, r);
  gpupart__tlsf_put_node(t, r);
  t->totals.managed -= b->size;
  t->totals.blocks--;
  gpupart__host_free(&t->mem, b);
  return 0;
}

void gpupart__tlsf_foreach_block(gpupart__tlsf *t, void (*fn)(gpupart__range *first, void *ctx), void *ctx) {
  gpupart__tlsf_block *next;
  for (gpupart__tlsf_block *b = t->blocks; b; b = next) {
    next = b->next; /* fn may remove b */
    fn(b->first, ctx);
  }
}

/* ---- life cycle and queries ---- */

gpupart__tlsf *gpupart__tlsf_create(uint64_t granule, const gpupart__hostmem *mem) {
  if (!mem) mem = gpupart__hostmem_default();
  if (granule == 0 || (granule & (granule - 1u)) || granule > (1ull << 32)) return NULL;
  gpupart__tlsf *t = gpupart__host_calloc(mem, 1, sizeof *t);
  if (!t) return NULL;
  t->mem = *mem;
  t->granule = granule;
  t->shift = (uint32_t)__builtin_ctzll(granule);
  return t;
}

void gpupart__tlsf_destroy(gpupart__tlsf *t) {
  if (!t) return;
  gpupart__hostmem mem = t->mem;
  while (t->blocks) {
    gpupart__tlsf_block *b = t->blocks;
    t->blocks = b->next;
    gpupart__host_free(&mem, b);
  }
  while (t->slabs) {
    slab *s = t->slabs;
    t->slabs = s->next;
    gpupart__host_free(&mem, s->raw);
  }
  gpupart__host_free(&mem, t);
}

uint64_t gpupart__tlsf_largest_free(const gpupart__tlsf *t) {
  if (!t->fl_map) return 0;
  uint32_t fl = 63u - (uint32_t)__builtin_clzll(t->fl_map);
  uint32_t sl = 31u - (uint32_t)__builtin_clz(t->sl_map[fl]);
  uint64_t best = 0;
  for (const gpupart__range *r = t->heads[fl * SL_COUNT + sl]; r; r = r->next_free)
    if (r->size > best) best = r->size;
  return best;
}

uint64_t gpupart__tlsf_granule(const gpupart__tlsf *t) { return t->granule; }

void gpupart__tlsf_get_totals(const gpupart__tlsf *t, gpupart__tlsf_totals *out) { *out = t->totals; }

/* ---- consistency check ---- */

/* The check's running state: what the walk has seen so far and where to report. */
typedef struct walk {
  const gpupart__tlsf *t;
  char *why;
  uint64_t why_len;
  gpupart__tlsf_totals seen;
  uint64_t listed; /* nodes found on free lists */
} walk;

static int fail(walk *w, const char *what, uint64_t value) {
  if (w->why_len > 0) snprintf(w->why, (size_t)w->why_len, "%s (%llu)", what, (unsigned long long)value);
  return -1;
}

/* r is FREE: it must be on the list of its size and linked there both ways. */
static int check_free_links(walk *w, const gpupart__range *r) {
  if (r->list != gpupart__tlsf_list_of(r->size >> w->t->shift))
    return fail(w, "free range on the wrong list; offset", r->offset);
  if (r->prev_free ? r->prev_free->next_free != r : w->t->heads[r->list] != r)
    return fail(w, "free range not linked from its list; offset", r->offset);
  if (r->next_free && r->next_free->prev_free != r)
    return fail(w, "free range's successor does not link back; offset", r->offset);
  return 0;
}

static int check_range(walk *w, const gpupart__range *r, const gpupart__range *first, uint64_t at) {
  if (gpupart__range_owner(r) != w->t) return fail(w, "range of another allocator in a chain; offset", at);
  if (r->home != first->home) return fail(w, "range of another block in a chain; offset", at);
  if (r->offset != at) return fail(w, "gap or overlap in a chain at offset", at);
  if (r->size == 0 || (r->size & (w->t->granule - 1u))) return fail(w, "range size not a granule multiple; offset", at);
  if (r->state == GPUPART__RANGE_USED) {
    w->seen.used += r->size;
    w->seen.used_ranges++;
    return 0;
  }
  if (r->state != GPUPART__RANGE_FREE) return fail(w, "dead range in a chain at offset", at);
  if (r->prev_phys && r->prev_phys->state == GPUPART__RANGE_FREE)
    return fail(w, "two adjacent free ranges at offset", at);
  w->seen.free_ranges++;
  return check_free_links(w, r);
}

static int check_block(walk *w, const gpupart__tlsf_block *b) {
  const gpupart__range *r = b->first, *prev = NULL;
  uint64_t at = 0;
  if (!r || r->home != b || r->prev_phys) return fail(w, "block's first range is wrong; size", b->size);
  for (; r; prev = r, r = r->next_phys) {
    if (r->prev_phys != prev) return fail(w, "broken prev_phys link at offset", at);
    if (at >= b->size) return fail(w, "chain runs past the block's end; size", b->size);
    if (check_range(w, r, b->first, at)) return -1;
    at += r->size;
  }
  if (at != b->size) return fail(w, "chain does not cover its block; covered", at);
  w->seen.managed += b->size;
  w->seen.blocks++;
  return 0;
}

static int check_blocks(walk *w) {
  const gpupart__tlsf_block *prev = NULL;
  for (const gpupart__tlsf_block *b = w->t->blocks; b; prev = b, b = b->next) {
    if (b->prev != prev) return fail(w, "broken block list link after blocks", w->seen.blocks);
    if (w->seen.blocks >= w->t->totals.blocks) return fail(w, "more blocks than counted", w->seen.blocks);
    if (check_block(w, b)) return -1;
  }
  return 0;
}

static int check_list(walk *w, uint32_t list) {
  const gpupart__range *prev = NULL;
  for (const gpupart__range *r = w->t->heads[list]; r; prev = r, r = r->next_free) {
    if (w->listed++ >= w->t->totals.free_ranges) return fail(w, "free lists longer than counted; list", list);
    if (gpupart__range_owner(r) != w->t || r->state != GPUPART__RANGE_FREE)
      return fail(w, "non-free node on list", list);
    if (r->list != list || gpupart__tlsf_list_of(r->size >> w->t->shift) != list)
      return fail(w, "range of another size class on list", list);
    if (r->prev_free != prev) return fail(w, "broken prev_free link on list", list);
  }
  return 0;
}

static int check_lists(walk *w) {
  const gpupart__tlsf *t = w->t;
  for (uint32_t fl = 0; fl < FL_COUNT; fl++) {
    if (((t->fl_map >> fl) & 1u) != (t->sl_map[fl] != 0)) return fail(w, "first-level bit wrong; level", fl);
    for (uint32_t sl = 0; sl < SL_COUNT; sl++) {
      uint32_t list = fl * SL_COUNT + sl;
      if (((t->sl_map[fl] >> sl) & 1u) != (t->heads[list] != NULL))
        return fail(w, "second-level bit wrong; list", list);
      if (check_list(w, list)) return -1;
    }
  }
  if (t->fl_map >> FL_COUNT) return fail(w, "first-level bits beyond the last level", t->fl_map);
  return 0;
}

/* Walks one list of DEAD nodes that should hold count of them. */
static int check_dead_list(walk *w, const gpupart__range *head, uint64_t count, const char *what) {
  uint64_t seen = 0;
  for (const gpupart__range *n = head; n; n = n->next_free) {
    if (seen++ >= count) return fail(w, what, count);
    if (gpupart__range_owner(n) != w->t || n->state != GPUPART__RANGE_DEAD)
      return fail(w, "live node in the pool", seen);
  }
  return seen == count ? 0 : fail(w, what, seen);
}

/* Every node of every slab is in a chain or the stack: none has leaked. */
static int check_pool(walk *w) {
  const gpupart__tlsf *t = w->t;
  uint64_t slabs = 0;
  if (check_dead_list(w, t->pool, t->pool_count, "pool length differs from its count")) return -1;
  for (const slab *s = t->slabs; s; s = s->next) slabs++;
  if (slabs * (SLAB_NODES - 1u) != t->pool_count + t->totals.used_ranges + t->totals.free_ranges)
    return fail(w, "nodes leaked or counted twice; slabs", slabs);
  return 0;
}

static int check_totals(walk *w) {
  const gpupart__tlsf_totals *a = &w->t->totals, *b = &w->seen;
  if (a->managed != b->managed) return fail(w, "managed total differs from the walk", b->managed);
  if (a->used != b->used) return fail(w, "used total differs from the walk", b->used);
  if (a->blocks != b->blocks) return fail(w, "block count differs from the walk", b->blocks);
  if (a->used_ranges != b->used_ranges) return fail(w, "used ranges differ from the walk", b->used_ranges);
  if (a->free_ranges != b->free_ranges) return fail(w, "free ranges differ from the walk", b->free_ranges);
  if (w->listed != b->free_ranges) return fail(w, "listed ranges differ from free ranges in chains", w->listed);
  return check_pool(w);
}

int gpupart__tlsf_check(const gpupart__tlsf *t, char *why, uint64_t why_len) {
  walk w = {.t = t, .why = why, .why_len = why_len};
  if (check_lists(&w) || check_blocks(&w) || check_totals(&w)) return -1;
  if (why_len > 0) why[0] = '\0';
  return 0;
}

gpupart__range *gpupart__tlsf_block_first(const gpupart__tlsf_block *home) { return home->first; }

void gpupart__tlsf_set_user(gpupart__tlsf *t, void *user) { t->head.user = user; }
