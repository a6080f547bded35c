/* The arena: the driver blocks one partition holds and the growth policy that decides
 * how big the next one is. Blocks grow geometrically from initial_block by the growth
 * factor up to max_block, so driver calls stay logarithmic in the memory held; a new
 * block is also at most 1/16 of what the partition already holds, so the unused tail at
 * the peak stays near 6%; and a request that would not fit twice in the chosen block gets
 * a block of its own size. Driver calls never run under the partition lock: growth and
 * release run under the device's slow (sleeping) lock, drop the partition lock for the
 * driver call, and take it again to insert a block or after detaching one. Each
 * function says which locks it expects. */
#include "arena.h"

#include <stdio.h>

#include "error.h"
#include "internal.h"
#include "partition.h"
#include "vmspace.h"

#define HELD_FRACTION_SHIFT 4 /* a growth block is at most held / 16 */

static uint64_t round_up(uint64_t v, uint64_t pow2, int *overflow) {
  uint64_t r;
  if (__builtin_add_overflow(v, pow2 - 1, &r)) {
    *overflow = 1;
    return 0;
  }
  return r & ~(pow2 - 1);
}

int gpupart__arena_init(gpupart__arena *a, const gpupart_device *dev) {
  *a = (gpupart__arena){0};
  a->tlsf = gpupart__tlsf_create(dev->alignment, &dev->ctx->mem);
  return a->tlsf ? GPUPART_OK : GPUPART_ENOMEM;
}

/* Partition lock held. A block is empty when the sub-allocator holds it as one FREE
 * range: no count per block is kept on the fast path, its emptiness is read here, on the
 * slow paths (growth, release, trim, a free that emptied a block). */
static int block_empty(const gpupart__block *b) {
  return gpupart__tlsf_block_is_empty(gpupart__tlsf_block_first(b->home));
}

/* Partition lock held: the bytes of the empty blocks held (preallocated ones included),
 * counted until they pass bound (then some sum above it). O(blocks). */
static uint64_t empty_bytes_past(const gpupart_partition *p, uint64_t bound) {
  uint64_t empty = 0;
  for (const gpupart__block *b = p->arena.blocks; b && empty <= bound; b = b->next)
    if (block_empty(b)) empty += b->size;
  return empty;
}

/* The geometric, held-bounded growth size (before caps). */
static uint64_t growth_size(const gpupart_partition *p) {
  const gpupart__growth *g = &p->growth;
  uint64_t next = g->initial_block;
  if (p->arena.last_block) {
    long double scaled = (long double)p->arena.last_block * g->factor;
    next = scaled >= (long double)g->max_block ? g->max_block : (uint64_t)scaled;
  }
  uint64_t bound = p->arena.reserved >> HELD_FRACTION_SHIFT;
  if (bound < g->initial_block) bound = g->initial_block;
  if (next > bound) next = bound;
  return next < g->max_block ? next : g->max_block;
}

/* exact: the bytes the request needs; need: exact rounded up to the granularity. The
 * own-size test looks at exact: rounded, every request below one granule would look as
 * big as a granule-sized first block, and the geometric sequence would never start. */
static uint64_t choose_block(const gpupart_partition *p, uint64_t exact, uint64_t need, int *own_size) {
  uint64_t g = growth_size(p);
  *own_size = exact > g / 2;
  return *own_size ? need : g;
}

static void link_block(gpupart__arena *a, gpupart__block *b) {
  b->prev = NULL;
  b->next = a->blocks;
  if (a->blocks) a->blocks->prev = b;
  a->blocks = b;
}

static void unlink_block(gpupart__arena *a, gpupart__block *b) {
  if (b->prev) b->prev->next = b->next;
  else a->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
  b->prev = b->next = NULL;
}

/* The driver may allocate more than asked (block.size): every byte it allocated is
 * accounted, so what exceeds the prepaid bytes (already reserved in the ledger for this
 * block) is reserved now. A size below the request or off the alignment breaks the
 * contract (EBACKEND); an extra the ledger cannot grant is ELIMIT. Either way the block
 * goes back to the driver. */
static int account_actual(gpupart_partition *p, uint64_t asked, uint64_t prepaid, gpupart_block *drv) {
  gpupart_device *dev = p->dev;
  int rc = GPUPART_OK;
  if (drv->size < asked || (drv->size & (dev->alignment - 1)))
    rc = gpupart__fail(GPUPART_EBACKEND, "partition '%s': backend '%s' returned a block of %llu bytes for %llu",
                       p->name, dev->ops->name, (unsigned long long)drv->size, (unsigned long long)asked);
  else if (drv->size > prepaid &&
           (rc = dev->ledger->ops->reserve(dev->ledger, p->account, drv->size - prepaid)) != GPUPART__GRANTED)
    rc = rc < 0 ? rc
                : gpupart__fail(GPUPART_ELIMIT,
                                "partition '%s': the driver allocated %llu bytes for %llu and the budget "
                                "cannot grant the %llu more",
                                p->name, (unsigned long long)drv->size, (unsigned long long)asked,
                                (unsigned long long)(drv->size - prepaid));
  if (rc) dev->ops->block_free(dev->bdev, drv);
  return rc;
}

/* No partition lock: a host record and a driver block of at least size bytes, not yet
 * visible to the sub-allocator. prepaid (>= size): bytes already reserved in the ledger
 * that the block may use; its bytes beyond them are reserved here (account_actual), so
 * the ledger holds b->size for it on GPUPART_OK. */
static int new_block(gpupart_partition *p, uint64_t size, uint64_t prepaid, gpupart__block **out) {
  gpupart_device *dev = p->dev;
  gpupart__block *b = gpupart__host_calloc(&dev->ctx->mem, 1, sizeof *b);
  if (!b) return gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
  int rc = dev->ops->block_alloc(dev->bdev, size, &b->drv);
  if (rc == GPUPART_OK) rc = account_actual(p, size, prepaid, &b->drv);
  if (rc) {
    gpupart__host_free(&dev->ctx->mem, b);
    return rc;
  }
  b->size = b->drv.size;
  *out = b;
  return GPUPART_OK;
}

/* No partition lock: returns a block that was never inserted to the driver; both driver
 * calls stay in the counts. */
static void drop_block(gpupart_partition *p, gpupart__block *b) {
  p->dev->ops->block_free(p->dev->bdev, &b->drv);
  gpupart__lock_acquire(&p->lock);
  p->c.driver_allocs++;
  p->c.driver_frees++;
  gpupart__ledger_publish(&gpupart__published(p)->driver_allocs, p->c.driver_allocs);
  gpupart__ledger_publish(&gpupart__published(p)->driver_frees, p->c.driver_frees);
  gpupart__lock_release(&p->lock);
  gpupart__host_free(&p->dev->ctx->mem, b);
}

/* Partition lock held: hands a new block to the sub-allocator. ENOMEM (nothing changed)
 * when the sub-allocator is out of host memory. */
static int insert_block(gpupart_partition *p, gpupart__block *b, int prealloc) {
  gpupart__range *first = gpupart__tlsf_add_block(p->arena.tlsf, b, b->drv.device_address, b->size);
  if (!first) return gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
  b->home = first->home;
  b->prealloc = prealloc;
  link_block(&p->arena, b);
  p->arena.reserved += b->size;
  gpupart__arena_raise_peak(&p->arena);
  p->c.driver_allocs++;
  gpupart__ledger_publish(&gpupart__published(p)->driver_allocs, p->c.driver_allocs);
  return GPUPART_OK;
}

/* Partition lock held: takes an empty block out of the sub-allocator and the list; its
 * bytes stay reserved in the ledger (as "releasing") until the driver has them back. */
static void detach_block(gpupart_partition *p, gpupart__block *b) {
  gpupart__tlsf_remove_block(p->arena.tlsf, gpupart__tlsf_block_first(b->home));
  unlink_block(&p->arena, b);
  p->arena.reserved -= b->size;
  p->arena.releasing += b->size;
}

/* Device slow lock held (or the partition private), partition lock not held: the driver
 * call, then the ledger and the counts under the partition lock. */
void gpupart__arena_release_detached(gpupart_partition *p, gpupart__block *b) {
  gpupart_device *dev = p->dev;
  dev->ops->block_free(dev->bdev, &b->drv);
  gpupart__lock_acquire(&p->lock);
  dev->ledger->ops->release(dev->ledger, p->account, b->size);
  p->arena.releasing -= b->size;
  p->c.driver_frees++;
  gpupart__ledger_publish(&gpupart__published(p)->driver_frees, p->c.driver_frees);
  gpupart__lock_release(&p->lock);
  gpupart__host_free(&dev->ctx->mem, b);
}

/* Reserves size bytes in the ledger and backs them with one block, calling the driver
 * with no partition lock held. On GPUPART_OK the block is in the sub-allocator and the
 * partition lock is HELD, so that the caller's request takes its bytes before another
 * thread can. */
static int reserve_block(gpupart_partition *p, uint64_t size, int prealloc, gpupart__refusal *why) {
  gpupart__ledger *l = p->dev->ledger;
  *why = l->ops->reserve(l, p->account, size);
  if (*why != GPUPART__GRANTED) return *why < 0 ? *why : GPUPART_ELIMIT; /* < 0: the ledger's own code */
  gpupart__block *b = NULL;
  int rc = new_block(p, size, size, &b);
  if (rc) {
    l->ops->release(l, p->account, size);
    return rc;
  }
  gpupart__lock_acquire(&p->lock);
  rc = insert_block(p, b, prealloc);
  if (rc == GPUPART_OK) return rc;
  gpupart__lock_release(&p->lock);
  l->ops->release(l, p->account, b->size); /* the request's bytes and any extra */
  drop_block(p, b);
  return rc;
}

/* Caps a chosen block by what the ledger can grant and the backend's largest block. */
static uint64_t cap_block(const gpupart_partition *p, uint64_t block, uint64_t need, gpupart__refusal *bound) {
  gpupart__ledger *l = p->dev->ledger;
  uint64_t grant = l->ops->grantable(l, p->account, bound) & ~(p->dev->granularity - 1);
  uint64_t max = gpupart__largest_block(p->dev);
  if (block > max) block = max;
  if (block > grant) block = grant;
  return block < need ? 0 : block;
}

/* What one growth would take: the request's own bytes (exact), rounded to the
 * granularity (need), the geometric step and the block chosen, uncapped. */
typedef struct growth_plan {
  uint64_t exact, need, step, block;
  int own;
} growth_plan;

/* Partition lock held. Nonzero on overflow. */
static int plan_growth(const gpupart_partition *p, uint64_t size, uint64_t align, growth_plan *g) {
  int overflow = 0;
  uint64_t gran = p->dev->granularity, max = gpupart__largest_block(p->dev);
  if (gpupart__block_need(p->dev, size, align, &g->exact)) overflow = 1;
  g->need = round_up(g->exact, gran, &overflow);
  if (g->need > max) g->need = max; /* rounding never asks past the driver's largest (exact <= max) */
  g->step = round_up(growth_size(p), gran, &overflow);
  g->block = round_up(choose_block(p, g->exact, g->need, &g->own), gran, &overflow);
  return overflow;
}

/* Partition lock held. Before growing would set a new reserved peak, the cached empty
 * blocks go: they could not hold this request, and a new block may fit where several
 * small empty ones did not. */
static int should_release_first(const gpupart_partition *p, uint64_t block) {
  return p->arena.reserved + p->arena.charged + block > p->arena.peak_reserved && empty_bytes_past(p, 0);
}

/* Partition lock taken here: the plan, after releasing empty blocks where it says so. */
static int plan_locked(gpupart_partition *p, uint64_t size, uint64_t align, growth_plan *g) {
  gpupart__lock_acquire(&p->lock);
  int bad = plan_growth(p, size, align, g), release = !bad && should_release_first(p, g->block);
  gpupart__lock_release(&p->lock);
  if (!release) return bad;
  gpupart__arena_release_empty(p);
  gpupart__lock_acquire(&p->lock);
  bad = plan_growth(p, size, align, g);
  gpupart__lock_release(&p->lock);
  return bad;
}

static int grow_expandable(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why);
static int reserve_expandable(gpupart_partition *p, uint64_t bytes);
static uint64_t shrink_expandable(gpupart_partition *p);
static void fini_expandable(gpupart_partition *p);

int gpupart__arena_grow(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why) {
  if (p->arena.vm) return grow_expandable(p, size, align, why);
  growth_plan g;
  if (plan_locked(p, size, align, &g))
    return gpupart__fail(GPUPART_EINVAL, "size %llu overflows", (unsigned long long)size);
  uint64_t block = cap_block(p, g.block, g.need, why);
  if (!block) return *why < 0 ? *why : GPUPART_ELIMIT;
  int rc = reserve_block(p, block, 0, why);
  if (rc == GPUPART_EDEVMEM && block > g.need) rc = reserve_block(p, block = g.need, 0, why);
  /* An own-size block counts as one step of the sequence (the step it replaced), so a
   * stream of large requests reaches shared blocks instead of costing one block each. */
  if (rc == GPUPART_OK) p->arena.last_block = g.own ? g.step : block;
  return rc;
}

/* Returns the blocks of a failed reservation, chained by b->chain: the first inserted
 * ones (detached already) through the ledger with their counts, the others straight. */
static void undo_reserve(gpupart_partition *p, gpupart__block *list, uint32_t inserted) {
  for (gpupart__block *b = list, *next; b; b = next) {
    next = b->chain;
    if (inserted) {
      inserted--;
      gpupart__arena_release_detached(p, b);
    } else {
      p->dev->ledger->ops->release(p->dev->ledger, p->account, b->size);
      drop_block(p, b);
    }
  }
}

/* Partition lock not held: inserts the chained blocks under one hold of the lock, so no
 * allocation can land in them before all are in. All or nothing. */
static int insert_all(gpupart_partition *p, gpupart__block *list, int prealloc) {
  uint32_t inserted = 0;
  int rc = GPUPART_OK;
  gpupart__lock_acquire(&p->lock);
  for (gpupart__block *b = list; b && rc == GPUPART_OK; b = b->chain)
    if ((rc = insert_block(p, b, prealloc)) == GPUPART_OK) inserted++;
  if (rc) {
    gpupart__block *b = list;
    for (uint32_t i = 0; i < inserted; i++, b = b->chain) detach_block(p, b);
  }
  gpupart__lock_release(&p->lock);
  if (rc) undo_reserve(p, list, inserted);
  return rc;
}

/* Reserves bytes in blocks of at most chunk bytes (preallocation and its resize). The
 * ledger grants the whole amount before the driver is called, so a refusal (ELIMIT)
 * makes no driver call. The driver calls run with no partition lock held. All or
 * nothing: on failure every block taken here is returned. Device slow lock held (or the
 * partition not yet published). */
int gpupart__arena_reserve_exact(gpupart_partition *p, uint64_t bytes, int prealloc) {
  if (p->arena.vm) return reserve_expandable(p, bytes);
  gpupart__ledger *l = p->dev->ledger;
  gpupart__refusal why = l->ops->reserve(l, p->account, bytes);
  if (why < 0) return why; /* the ledger could not be used: its message says why */
  if (why != GPUPART__GRANTED)
    return gpupart__fail(GPUPART_ELIMIT, "partition '%s': the budget cannot grant %llu bytes", p->name,
                         (unsigned long long)bytes);
  uint64_t max = p->growth.prealloc_block, left = bytes;
  gpupart__block *list = NULL, **tail = &list, *b = NULL;
  int rc = GPUPART_OK;
  while (left && rc == GPUPART_OK) {
    uint64_t chunk = left < max ? left : max;
    rc = new_block(p, chunk, left, &b); /* all of left is reserved already */
    if (rc) break;
    *tail = b;
    tail = &b->chain;
    left -= b->size < left ? b->size : left; /* a block larger than asked covers more */
  }
  if (rc == GPUPART_OK) return insert_all(p, list, prealloc);
  l->ops->release(l, p->account, left); /* the blocks taken release their own bytes */
  undo_reserve(p, list, 0);
  return rc;
}

/* Device slow lock held (or the partition private): the partition's last blocks. */
void gpupart__arena_fini(gpupart__arena *a, gpupart_partition *p) {
  if (a->vm) fini_expandable(p);
  while (a->blocks) {
    gpupart__block *b = a->blocks;
    gpupart__lock_acquire(&p->lock);
    detach_block(p, b);
    gpupart__lock_release(&p->lock);
    gpupart__arena_release_detached(p, b);
  }
  gpupart__tlsf_destroy(a->tlsf);
  a->tlsf = NULL;
}

/* Device slow lock held, partition lock not held: the empty blocks are detached under
 * the partition lock, then given back to the driver outside it. */
uint64_t gpupart__arena_release_empty(gpupart_partition *p) {
  uint64_t released = p->arena.vm ? shrink_expandable(p) : 0;
  gpupart__block *list = NULL;
  gpupart__lock_acquire(&p->lock);
  for (gpupart__block *b = p->arena.blocks, *next; b; b = next) {
    next = b->next;
    if (b->prealloc || !block_empty(b)) continue;
    detach_block(p, b);
    b->chain = list;
    list = b;
    released += b->size;
  }
  gpupart__lock_release(&p->lock);
  for (gpupart__block *next; list; list = next) {
    next = list->chain;
    gpupart__arena_release_detached(p, list);
  }
  return released;
}

uint64_t gpupart__arena_largest_empty(gpupart_partition *p) {
  uint64_t best = 0;
  if (p->arena.vm) return 0; /* its one record stands for what is mapped: release_empty shrinks it */
  gpupart__lock_acquire(&p->lock);
  for (const gpupart__block *b = p->arena.blocks; b; b = b->next)
    if (!b->prealloc && b->size > best && block_empty(b)) best = b->size;
  gpupart__lock_release(&p->lock);
  return best;
}

uint64_t gpupart__arena_release_largest(gpupart_partition *p) {
  gpupart__block *pick = NULL;
  if (p->arena.vm) return 0;
  gpupart__lock_acquire(&p->lock);
  for (gpupart__block *b = p->arena.blocks; b; b = b->next)
    if (!b->prealloc && (!pick || b->size > pick->size) && block_empty(b)) pick = b;
  if (pick) detach_block(p, pick);
  gpupart__lock_release(&p->lock);
  if (!pick) return 0;
  uint64_t size = pick->size;
  gpupart__arena_release_detached(p, pick);
  return size;
}

gpupart__block *gpupart__arena_emptied(gpupart_partition *p, const gpupart__range *whole) {
  gpupart__block *b = gpupart__range_block(whole);
  uint64_t threshold = p->growth.release_threshold;
  if (!gpupart__arena_may_release(p) || b->prealloc || empty_bytes_past(p, threshold) <= threshold) return NULL;
  detach_block(p, b);
  return b;
}

static int fail_check(char *why, uint64_t n, const gpupart_partition *p, const char *what) {
  return gpupart__say(why, n, "partition '%s': %s", p->name, what);
}

int gpupart__arena_check(const gpupart_partition *p, char *why, uint64_t n) {
  const gpupart__arena *a = &p->arena;
  if (gpupart__tlsf_check(a->tlsf, why, n)) return -1;
  uint64_t reserved = 0, blocks = 0;
  for (const gpupart__block *b = a->blocks; b; b = b->next, blocks++) {
    reserved += b->size;
    const gpupart__range *first = gpupart__tlsf_block_first(b->home);
    if (first->offset != 0 || gpupart__range_block(first) != b)
      return fail_check(why, n, p, "block lost its first range");
  }
  gpupart__tlsf_totals t;
  gpupart__tlsf_get_totals(a->tlsf, &t);
  uint64_t unmapped = a->tail ? a->tail->size : 0, tails = a->tail ? 1 : 0;
  if (a->tail && (a->tail->state != GPUPART__RANGE_USED || a->tail->offset != a->blocks->size))
    return fail_check(why, n, p, "the unmapped tail does not start where the mapped bytes end");
  if (reserved != a->reserved || t.managed != reserved + unmapped || t.blocks != blocks)
    return fail_check(why, n, p, "reserved bytes differ from the blocks held");
  if (t.used_ranges + a->charged_count != p->c.live_allocations + tails)
    return fail_check(why, n, p, "live allocations differ from the ranges in use and the charges");
  if (p->c.in_use - a->charged > t.used - unmapped) return fail_check(why, n, p, "in_use exceeds the bytes handed out");
  return 0;
}

/* ---- the expandable arena ----
 * One address range reserved at creation (the limit and one granule more, so the
 * unmapped tail never vanishes), managed by the sub-allocator as one block whose top,
 * the part not mapped, is a USED range (a->tail) that no allocation can take. Growth maps
 * the granules a request lacks at the tail's floor and raises it (gpupart__tlsf_move_floor);
 * trim unmaps the top chunks that lie wholly in the free range below the tail and lowers
 * it. The partition's one block record stands for the mapped bytes (b->size), which the
 * ledger is charged for. Locks as for blocks: driver calls under the device's slow lock
 * with the partition lock dropped. */

int gpupart__arena_expandable(gpupart_partition *p, uint64_t limit) {
  gpupart_device *dev = p->dev;
  const gpupart__hostmem *mem = &dev->ctx->mem;
  uint64_t g = 0;
  int rc = gpupart__vm_granule(dev->ops, dev->bdev, &g);
  if (rc) return rc;
  if (g < dev->alignment || limit > UINT64_MAX / 2)
    return gpupart__fail(GPUPART_ENOTSUP, "partition '%s': the virtual memory granule %llu is below the alignment",
                         p->name, (unsigned long long)g);
  gpupart__vmspace *vs = gpupart__host_calloc(mem, 1, sizeof *vs);
  gpupart__block *b = gpupart__host_calloc(mem, 1, sizeof *b);
  rc = vs && b ? gpupart__vm_open(vs, dev->ops, dev->bdev, mem, ((limit + g - 1) & ~(g - 1)) + g) : GPUPART_ENOMEM;
  gpupart__range *first = NULL, *tail = NULL;
  if (rc == GPUPART_OK && (vs->range.device_address & (dev->alignment - 1)))
    rc = gpupart__fail(GPUPART_EBACKEND, "partition '%s': a reserved range off the alignment", p->name);
  if (rc == GPUPART_OK) first = gpupart__tlsf_add_block(p->arena.tlsf, b, vs->range.device_address, vs->range.size);
  if (first) tail = gpupart__tlsf_alloc(p->arena.tlsf, vs->range.size, 0);
  if (rc == GPUPART_OK && !tail) rc = gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
  if (rc) {
    if (first) gpupart__tlsf_remove_block(p->arena.tlsf, first);
    if (vs) gpupart__vm_close(vs);
    gpupart__host_free(mem, vs);
    gpupart__host_free(mem, b);
    return rc == GPUPART_ENOMEM ? gpupart__fail(rc, "partition '%s': out of host memory", p->name) : rc;
  }
  b->drv = vs->range;
  b->drv.size = 0;
  b->home = first->home;
  b->prealloc = 1; /* never detached by a free: trim unmaps what is free */
  link_block(&p->arena, b);
  p->arena.vm = vs;
  p->arena.tail = tail;
  return GPUPART_OK;
}

/* Each growth maps what the request lacks and a step ahead, so that the calls stay near
 * the growth policy's (a stream of small requests does not map one granule each) while
 * the unused top at the peak stays small (measured on the traces: docs/benchmarks.md).
 * The step ahead is 1/32 of what is mapped plus the partition's initial block, the
 * latter never more than 1/32 of what is mapped either (so at most 1/16 in all, and
 * nothing ahead while 1/32 is under a granule). Growth blocks start at the initial block
 * whatever the partition's size, and 1/32 alone made more calls than they do where the
 * peak is a few hundred MiB on a small granule (kineto on lavapipe: 38 chunks against 32
 * blocks; 31 with the initial block). And each growth maps at least the initial block
 * (rounded up to the granule; never past the range): with a small granule (lavapipe's
 * 4 KiB) 1/32 of a small mapped range is a granule or two, and every growth would be a
 * driver call. */
#define AHEAD_SHIFT 5

/* Partition lock held: the bytes mapped ahead of a request, a multiple of the granule. */
static uint64_t step_ahead(const gpupart_partition *p) {
  uint64_t g = p->arena.vm->granule, mapped = p->arena.reserved;
  uint64_t initial = (p->growth.initial_block + g - 1) & ~(g - 1), part = (mapped >> AHEAD_SHIFT) & ~(g - 1);
  return part + (initial < part ? initial : part);
}

/* Partition lock held: the bytes to map for a request, multiples of the granule: what
 * it needs beyond the free range just below the tail (*exact), and with the step ahead
 * and the minimum step (returned, capped by the range). 0 when the range cannot hold the
 * request itself. */
static uint64_t expansion(const gpupart_partition *p, uint64_t size, uint64_t align, uint64_t *exact) {
  const gpupart__range *tail = p->arena.tail, *below = tail->prev_phys;
  uint64_t g = p->arena.vm->granule, need, have = below && below->state == GPUPART__RANGE_FREE ? below->size : 0;
  if (gpupart__block_need(p->dev, size, align, &need) || need > tail->size) return 0;
  *exact = ((need > have ? need - have : 1) + g - 1) & ~(g - 1);
  if (*exact > tail->size - g) return 0;
  uint64_t want = *exact + step_ahead(p), room = tail->size - g;
  uint64_t least = p->growth.initial_block > room ? room : (p->growth.initial_block + g - 1) & ~(g - 1);
  if (want < least) want = least;
  return want <= room ? want : *exact;
}

/* Partition lock held: the partition's record of bytes mapped (+) or unmapped (-). */
static void count_mapped(gpupart_partition *p, uint64_t bytes, int up) {
  gpupart__block *b = p->arena.blocks;
  b->size = up ? b->size + bytes : b->size - bytes;
  b->drv.size = b->size;
  p->arena.reserved = up ? p->arena.reserved + bytes : p->arena.reserved - bytes;
  gpupart__arena_raise_peak(&p->arena);
}

/* Maps bytes at the tail's floor, paid for in the ledger first. On GPUPART_OK the tail is
 * raised and the partition lock is HELD (as reserve_block leaves it). */
static int expand(gpupart_partition *p, uint64_t bytes, gpupart__refusal *why) {
  gpupart__ledger *l = p->dev->ledger;
  *why = l->ops->reserve(l, p->account, bytes);
  if (*why != GPUPART__GRANTED) return *why < 0 ? *why : GPUPART_ELIMIT;
  int rc = gpupart__vm_map(p->arena.vm, bytes);
  if (rc) {
    l->ops->release(l, p->account, bytes);
    return rc;
  }
  gpupart__lock_acquire(&p->lock);
  p->c.driver_allocs++;
  gpupart__ledger_publish(&gpupart__published(p)->driver_allocs, p->c.driver_allocs);
  if (gpupart__tlsf_move_floor(p->arena.tlsf, p->arena.tail, p->arena.vm->mapped) == 0) {
    count_mapped(p, bytes, 1);
    return GPUPART_OK;
  }
  gpupart__lock_release(&p->lock);
  gpupart__vm_unmap_top(p->arena.vm);
  l->ops->release(l, p->account, bytes);
  gpupart__lock_acquire(&p->lock);
  p->c.driver_frees++;
  gpupart__ledger_publish(&gpupart__published(p)->driver_frees, p->c.driver_frees);
  gpupart__lock_release(&p->lock);
  return gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
}

/* The step ahead is dropped when the ledger or the driver refuses it. */
static int grow_expandable(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why) {
  uint64_t exact = 0;
  gpupart__lock_acquire(&p->lock);
  uint64_t bytes = expansion(p, size, align, &exact);
  gpupart__lock_release(&p->lock);
  int rc = bytes ? expand(p, bytes, why) : GPUPART_ELIMIT;
  if ((rc == GPUPART_ELIMIT || rc == GPUPART_EDEVMEM) && bytes > exact) rc = expand(p, exact, why);
  if (bytes) return rc;
  *why = GPUPART__REFUSED_LIMIT;
  return GPUPART_ELIMIT; /* the reserved range (the limit at creation) cannot hold it */
}

/* Device slow lock held, partition lock not held: the top chunks from floor up are
 * unmapped, when what they cover is free (the tail's floor moves down first, under the
 * partition lock; it refuses when an allocation took some of it meanwhile). */
static uint64_t unmap_down_to(gpupart_partition *p, uint64_t floor) {
  gpupart__vmspace *vs = p->arena.vm;
  uint64_t to = vs->mapped, calls = 0;
  for (uint32_t i = vs->count; i && vs->chunks[i - 1].offset >= floor; i--) to = vs->chunks[i - 1].offset;
  uint64_t bytes = vs->mapped - to;
  gpupart__lock_acquire(&p->lock);
  if (bytes && gpupart__tlsf_move_floor(p->arena.tlsf, p->arena.tail, to) == 0) {
    count_mapped(p, bytes, 0);
    p->arena.releasing += bytes;
  } else {
    bytes = 0;
  }
  gpupart__lock_release(&p->lock);
  for (uint64_t end = vs->mapped - bytes; vs->mapped > end; calls++) gpupart__vm_unmap_top(vs);
  if (!bytes) return 0;
  gpupart__lock_acquire(&p->lock);
  p->dev->ledger->ops->release(p->dev->ledger, p->account, bytes);
  p->arena.releasing -= bytes;
  p->c.driver_frees += calls;
  gpupart__ledger_publish(&gpupart__published(p)->driver_frees, p->c.driver_frees);
  gpupart__lock_release(&p->lock);
  return bytes;
}

/* Trim: what lies wholly in the free range below the tail; a preallocated partition
 * keeps its bytes. */
static uint64_t shrink_expandable(gpupart_partition *p) {
  if (p->growth.prealloc) return 0;
  gpupart__lock_acquire(&p->lock);
  const gpupart__range *tail = p->arena.tail, *below = tail->prev_phys;
  uint64_t floor = below && below->state == GPUPART__RANGE_FREE ? below->offset : tail->offset;
  gpupart__lock_release(&p->lock);
  return unmap_down_to(p, floor);
}

/* Preallocation (and its resize): bytes mapped now, in chunks of the preallocation block
 * size at most (whole granules); all or nothing. */
static int reserve_expandable(gpupart_partition *p, uint64_t bytes) {
  gpupart__vmspace *vs = p->arena.vm;
  uint64_t g = vs->granule, max = p->growth.prealloc_block < g ? g : p->growth.prealloc_block & ~(g - 1);
  uint64_t left = (bytes + g - 1) & ~(g - 1), before = vs->mapped;
  int rc = left > vs->range.size - g - before
               ? gpupart__fail(GPUPART_ELIMIT, "partition '%s': %llu bytes more exceed its reserved range", p->name,
                               (unsigned long long)bytes)
               : GPUPART_OK;
  while (left && rc == GPUPART_OK) {
    uint64_t chunk = left < max ? left : max;
    gpupart__refusal why = GPUPART__GRANTED;
    rc = expand(p, chunk, &why);
    if (rc == GPUPART_OK) gpupart__lock_release(&p->lock);
    if (rc == GPUPART_OK) left -= chunk;
  }
  if (rc == GPUPART_OK) return rc;
  unmap_down_to(p, before);
  if (rc != GPUPART_ELIMIT) return rc;
  return gpupart__fail(GPUPART_ELIMIT, "partition '%s': the budget cannot grant %llu bytes", p->name,
                       (unsigned long long)bytes);
}

/* Device slow lock held (or the partition private): every chunk unmapped, the range
 * given back, the ledger's bytes released. */
static void fini_expandable(gpupart_partition *p) {
  gpupart__vmspace *vs = p->arena.vm;
  gpupart__block *b = p->arena.blocks;
  uint64_t calls = vs->count, bytes = vs->mapped;
  gpupart__vm_close(vs);
  gpupart__lock_acquire(&p->lock);
  if (bytes) p->dev->ledger->ops->release(p->dev->ledger, p->account, bytes);
  p->c.driver_frees += calls;
  gpupart__ledger_publish(&gpupart__published(p)->driver_frees, p->c.driver_frees);
  unlink_block(&p->arena, b);
  p->arena.reserved = 0;
  p->arena.vm = NULL;
  p->arena.tail = NULL;
  gpupart__lock_release(&p->lock);
  gpupart__host_free(&p->dev->ctx->mem, vs);
  gpupart__host_free(&p->dev->ctx->mem, b);
}
