/* The arena: the driver blocks one partition holds and the growth policy that decides
 * how big the next one is. Blocks grow geometrically from initial_block by the growth
 * factor up to max_block, so driver calls stay logarithmic in the memory held; a new
 * block is also at most 1/16 of what the partition already holds, so the unused tail at
 * the peak stays near 6%; and a request that would not fit twice in the chosen block gets
 * a block of its own size. Every function here runs with the partition lock held. */
#include <stdio.h>

#include "internal.h"

#define HELD_FRACTION_SHIFT 4 /* a growth block is at most held / 16 */

static uint64_t round_up(uint64_t v, uint64_t pow2, int *overflow) {
  uint64_t r;
  if (__builtin_add_overflow(v, pow2 - 1, &r)) return *overflow = 1, 0;
  return r & ~(pow2 - 1);
}

int gpupart__arena_init(gpupart__arena *a, const gpupart_device *dev) {
  *a = (gpupart__arena){0};
  a->tlsf = gpupart__tlsf_create(dev->alignment, &dev->ctx->mem);
  return a->tlsf ? GPUPART_OK : GPUPART_ENOMEM;
}

void gpupart__arena_fini(gpupart__arena *a, gpupart_partition *p) {
  while (a->blocks) gpupart__arena_release_block(p, a->blocks);
  gpupart__tlsf_destroy(a->tlsf);
  a->tlsf = NULL;
}

void gpupart__arena_on_alloc(gpupart_partition *p, gpupart__range *r) {
  gpupart__block *b = gpupart__range_block(r);
  if (b->live++ == 0) p->arena.empty_bytes -= b->size;
}

gpupart__range *gpupart__arena_try(gpupart_partition *p, uint64_t size, uint64_t align) {
  gpupart__range *r = gpupart__tlsf_alloc(p->arena.tlsf, size, align);
  if (r) gpupart__arena_on_alloc(p, r);
  return r;
}

/* Bytes a new block must have so that size fits at the given alignment: block bases are
 * aligned to the device's alignment, so only a stricter alignment needs slack. */
static uint64_t block_need(const gpupart_device *dev, uint64_t size, uint64_t align, int *overflow) {
  uint64_t need = round_up(size, dev->alignment, overflow);
  if (align > dev->alignment && __builtin_add_overflow(need, align - dev->alignment, &need))
    *overflow = 1;
  return need;
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
  b->next = a->blocks;
  if (a->blocks) a->blocks->prev = b;
  a->blocks = b;
}

static void unlink_block(gpupart__arena *a, gpupart__block *b) {
  if (b->prev) b->prev->next = b->next;
  else a->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
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
           dev->ledger->ops->reserve(dev->ledger, p->account, drv->size - prepaid) != GPUPART__GRANTED)
    rc = gpupart__fail(GPUPART_ELIMIT, "partition '%s': the driver allocated %llu bytes for %llu and the budget "
                       "cannot grant the %llu more", p->name, (unsigned long long)drv->size,
                       (unsigned long long)asked, (unsigned long long)(drv->size - prepaid));
  if (rc) dev->ops->block_free(dev->bdev, drv);
  return rc;
}

/* Undoes account_actual for a block the sub-allocator could not take. */
static void give_back(gpupart_partition *p, uint64_t prepaid, gpupart_block *drv) {
  gpupart_device *dev = p->dev;
  if (drv->size > prepaid) dev->ledger->ops->release(dev->ledger, p->account, drv->size - prepaid);
  dev->ops->block_free(dev->bdev, drv);
}

/* Takes a block of at least size bytes from the driver and hands it to the
 * sub-allocator. prepaid (>= size): bytes already reserved in the ledger that the block
 * may use; the block's bytes beyond them are reserved here. */
static int add_block(gpupart_partition *p, uint64_t size, uint64_t prepaid, int prealloc) {
  gpupart_device *dev = p->dev;
  gpupart__block *b = gpupart__host_calloc(&dev->ctx->mem, 1, sizeof *b);
  if (!b) return gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
  int rc = dev->ops->block_alloc(dev->bdev, size, &b->drv);
  if (rc == GPUPART_OK) rc = account_actual(p, size, prepaid, &b->drv);
  if (rc == GPUPART_OK) {
    gpupart__range *first = gpupart__tlsf_add_block(p->arena.tlsf, b, b->drv.device_address, b->drv.size);
    if (first) b->home = first->home;
    else give_back(p, prepaid, &b->drv);
    rc = first ? GPUPART_OK : gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name);
  }
  if (rc) return gpupart__host_free(&dev->ctx->mem, b), rc;
  size = b->drv.size;
  b->size = size;
  b->prealloc = prealloc;
  link_block(&p->arena, b);
  p->arena.reserved += size;
  p->arena.empty_bytes += size;
  if (p->arena.reserved > p->arena.peak_reserved) p->arena.peak_reserved = p->arena.reserved;
  p->c.driver_allocs++;
  return GPUPART_OK;
}

/* Reserves size bytes in the ledger and backs them with one block. */
static int reserve_block(gpupart_partition *p, uint64_t size, int prealloc, gpupart__refusal *why) {
  gpupart__ledger *l = p->dev->ledger;
  *why = l->ops->reserve(l, p->account, size);
  if (*why != GPUPART__GRANTED) return GPUPART_ELIMIT;
  int rc = add_block(p, size, size, prealloc);
  if (rc) l->ops->release(l, p->account, size);
  return rc;
}

/* The driver's largest allocation in whole driver granules (backends take only those). */
static uint64_t largest_block(const gpupart_device *dev) {
  return dev->info.max_block_bytes & ~(dev->alignment - 1);
}

/* Caps a chosen block by what the ledger can grant and the backend's largest block. */
static uint64_t cap_block(const gpupart_partition *p, uint64_t block, uint64_t need,
                          gpupart__refusal *bound) {
  gpupart__ledger *l = p->dev->ledger;
  uint64_t grant = l->ops->grantable(l, p->account, bound) & ~(p->dev->granularity - 1);
  uint64_t max = largest_block(p->dev);
  if (block > max) block = max;
  if (block > grant) block = grant;
  return block < need ? 0 : block;
}

/* Before growing would set a new reserved peak, the cached empty blocks go: they could
 * not hold this request, and a new block may fit where several small empty ones did not. */
static void release_before_peak(gpupart_partition *p, uint64_t block) {
  if (p->arena.empty_bytes && p->arena.reserved + block > p->arena.peak_reserved)
    gpupart__arena_release_empty(p);
}

int gpupart__arena_grow(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why) {
  int overflow = 0, own;
  uint64_t gran = p->dev->granularity, max = largest_block(p->dev);
  uint64_t exact = block_need(p->dev, size, align, &overflow);
  uint64_t need = round_up(exact, gran, &overflow);
  if (overflow) return gpupart__fail(GPUPART_EINVAL, "size %llu overflows", (unsigned long long)size);
  if (need > max) need = max; /* rounding never asks past the driver's largest (exact <= max) */
  release_before_peak(p, round_up(choose_block(p, exact, need, &own), gran, &overflow));
  uint64_t step = round_up(growth_size(p), gran, &overflow);
  uint64_t block = round_up(choose_block(p, exact, need, &own), gran, &overflow);
  block = cap_block(p, block, need, why);
  if (!block) return GPUPART_ELIMIT;
  int rc = reserve_block(p, block, 0, why);
  if (rc == GPUPART_EDEVMEM && block > need) rc = reserve_block(p, block = need, 0, why);
  /* An own-size block counts as one step of the sequence (the step it replaced), so a
   * stream of large requests reaches shared blocks instead of costing one block each. */
  if (rc == GPUPART_OK) p->arena.last_block = own ? step : block;
  return rc;
}

/* Reserves bytes in blocks no larger than max_block (preallocation and its resize).
 * The ledger grants the whole amount before the driver is called, so a refusal (ELIMIT)
 * makes no driver call. All or nothing: on failure every block taken here is returned. */
int gpupart__arena_reserve_exact(gpupart_partition *p, uint64_t bytes, int prealloc) {
  gpupart__ledger *l = p->dev->ledger;
  if (l->ops->reserve(l, p->account, bytes) != GPUPART__GRANTED)
    return gpupart__fail(GPUPART_ELIMIT, "partition '%s': the budget cannot grant %llu bytes", p->name,
                         (unsigned long long)bytes);
  uint64_t max = p->growth.max_block, left = bytes;
  gpupart__block *mark = p->arena.blocks;
  int rc = GPUPART_OK;
  while (left && rc == GPUPART_OK) {
    uint64_t chunk = left < max ? left : max;
    rc = add_block(p, chunk, left, prealloc); /* all of left is reserved already */
    if (rc) break;
    uint64_t got = p->arena.blocks->size; /* a block larger than asked covers more */
    left -= got < left ? got : left;
  }
  if (rc == GPUPART_OK) return rc;
  l->ops->release(l, p->account, left); /* each block releases its own bytes below */
  while (p->arena.blocks != mark) gpupart__arena_release_block(p, p->arena.blocks);
  return rc;
}

void gpupart__arena_release_block(gpupart_partition *p, gpupart__block *b) {
  gpupart_device *dev = p->dev;
  gpupart__tlsf_remove_block(p->arena.tlsf, gpupart__tlsf_block_first(b->home));
  unlink_block(&p->arena, b);
  dev->ops->block_free(dev->bdev, &b->drv);
  dev->ledger->ops->release(dev->ledger, p->account, b->size);
  p->arena.reserved -= b->size;
  if (b->live == 0) p->arena.empty_bytes -= b->size;
  p->c.driver_frees++;
  gpupart__host_free(&dev->ctx->mem, b);
}

uint64_t gpupart__arena_release_empty(gpupart_partition *p) {
  uint64_t released = 0;
  for (gpupart__block *b = p->arena.blocks, *next; b; b = next) {
    next = b->next;
    if (b->live || b->prealloc) continue;
    released += b->size;
    gpupart__arena_release_block(p, b);
  }
  return released;
}

/* Called after a range of b was freed: an emptied block goes back to the driver when
 * the cached empty bytes pass the release threshold. Returns b, or NULL if released. */
gpupart__block *gpupart__arena_on_free(gpupart_partition *p, gpupart__block *b) {
  if (--b->live) return b;
  p->arena.empty_bytes += b->size;
  uint64_t threshold = p->growth.release_threshold;
  if (!threshold || b->prealloc || p->arena.empty_bytes <= threshold) return b;
  gpupart__arena_release_block(p, b);
  return NULL;
}

static int fail_check(char *why, uint64_t n, const gpupart_partition *p, const char *what) {
  snprintf(why, n, "partition '%s': %s", p->name, what);
  return -1;
}

int gpupart__arena_check(const gpupart_partition *p, char *why, uint64_t n) {
  const gpupart__arena *a = &p->arena;
  if (gpupart__tlsf_check(a->tlsf, why, n)) return -1;
  uint64_t reserved = 0, empty = 0, live = 0, blocks = 0;
  for (const gpupart__block *b = a->blocks; b; b = b->next, blocks++) {
    reserved += b->size, live += b->live;
    if (!b->live) empty += b->size;
    const gpupart__range *first = gpupart__tlsf_block_first(b->home);
    if (first->offset != 0 || gpupart__range_block(first) != b) return fail_check(why, n, p, "block lost its first range");
  }
  gpupart__tlsf_totals t;
  gpupart__tlsf_get_totals(a->tlsf, &t);
  if (reserved != a->reserved || t.managed != reserved || t.blocks != blocks)
    return fail_check(why, n, p, "reserved bytes differ from the blocks held");
  if (empty != a->empty_bytes) return fail_check(why, n, p, "empty bytes differ from the empty blocks");
  if (live != p->c.live_allocations || t.used_ranges != live)
    return fail_check(why, n, p, "live allocations differ from the ranges in use");
  if (p->c.in_use > t.used) return fail_check(why, n, p, "in_use exceeds the bytes handed out");
  return 0;
}
