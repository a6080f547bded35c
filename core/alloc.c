/* Allocation and free: the fast path (one partition lock, one sub-allocator call), the
 * growth path, and the OOM sequence (docs/design.md), in its order:
 *   1. release this partition's empty cached blocks and retry;
 *   2. if the budget or the driver refused: release other partitions' empty blocks, retry;
 *   3. the reclaim callbacks, the requester's first, then (budget or driver refusals)
 *      those of partitions above their guarantee, with no gpupart lock held, each asked
 *      for the shortfall and followed by a retry, until the request fits;
 *   4. fail with ELIMIT or EDEVMEM and a message that says why.
 * A charge (gpupart_partition_charge) is a request that reserves its bytes in the ledger
 * with no block behind them: it takes the same sequence (charge_attempt in place of the
 * arena), under the device's slow lock, which also guards its record (slots.h). */
#include "alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "arena.h"
#include "error.h"
#include "events.h"
#include "extstruct.h"
#include "internal.h"
#include "configured.h"
#include "partition.h"
#include "peak.h"
#include "tlsf_inline.h"
#include "trim.h"

/* Why an attempt failed: one of these, or a negative gpupart_result (EBACKEND, ...) that
 * no step of the OOM sequence can help and that is passed on as it is. */
typedef int refusal;
enum {
  REFUSED_NONE = 0,
  REFUSED_LIMIT,   /* the partition's limit: ELIMIT */
  REFUSED_BUDGET,  /* the device budget: ELIMIT */
  REFUSED_CEILING, /* this process's ceiling on a shared device: ELIMIT */
  REFUSED_DRIVER,  /* the driver: EDEVMEM */
  REFUSED_HOST,    /* host memory: ENOMEM */
};

static int is_final(refusal why) { return why == REFUSED_HOST || why < 0; }

typedef struct request {
  uint64_t size, align, tag;
  uint32_t flags;
  gpupart__slot **charge; /* a charge: where its record goes; NULL for an allocation */
} request;

/* Nonzero while this thread runs a reclaim callback: allocations made inside skip them. */
static _Thread_local int in_reclaim;

/* Partition lock held: counts an allocation of size bytes for the stats, the peaks and
 * gpupart top; one that takes in_use above the partition's charge of the device peak
 * crosses it (O(1), rare: peak.c). Inline: the fast path runs it on every allocation. */
static inline __attribute__((always_inline)) void count_alloc(gpupart_partition *p, uint64_t size) {
  gpupart__counters *c = &p->c;
  c->in_use += size;
  if (c->in_use > c->peak_in_use) c->peak_in_use = c->in_use;
  c->live_allocations++;
  c->total_allocations++;
  gpupart__ledger_publish(&gpupart__published(p)->in_use, c->in_use); /* one relaxed store, for gpupart top */
  if (__builtin_expect(c->in_use > p->charge, 0)) gpupart__peak_crossed(p);
}

/* Partition lock held. Counts the range r handed out for q; r is the handle. */
static gpupart__range *account_alloc(gpupart_partition *p, gpupart__range *r, const request *q) {
  if (r) r->user_tag = q->tag; /* NULL: a charge */
  count_alloc(p, q->size);
  return r;
}

/* What the growth path's result means for the OOM sequence. */
static refusal refusal_of(int rc, gpupart__refusal bound) {
  if (rc == GPUPART_EDEVMEM) return REFUSED_DRIVER;
  if (rc == GPUPART_ENOMEM) return REFUSED_HOST;
  if (rc == GPUPART_ELIMIT && bound == GPUPART__REFUSED_CEILING) return REFUSED_CEILING;
  if (rc == GPUPART_ELIMIT) return bound == GPUPART__REFUSED_BUDGET ? REFUSED_BUDGET : REFUSED_LIMIT;
  return rc; /* another failure (EBACKEND, ...): passed on as it is */
}

/* A charge's attempt, device slow lock held: a record, then the bytes from the ledger,
 * counted under the partition lock as an allocation's are (and in arena.charged). */
static refusal charge_attempt(gpupart_partition *p, const request *q) {
  gpupart__slot *slot = gpupart__slots_take(&p->charges, q->size);
  if (!slot) return refusal_of(gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name), 0);
  gpupart__ledger *l = p->dev->ledger;
  gpupart__refusal bound = l->ops->reserve(l, p->account, q->size);
  if (bound != GPUPART__GRANTED) {
    gpupart__slots_put(&p->charges, slot);
    return bound < 0 ? bound : refusal_of(GPUPART_ELIMIT, bound); /* < 0: the ledger's own code */
  }
  gpupart__lock_acquire(&p->lock);
  p->arena.charged += q->size;
  p->arena.charged_count++;
  account_alloc(p, NULL, q);
  gpupart__arena_raise_peak(&p->arena);
  gpupart__lock_release(&p->lock);
  *q->charge = slot;
  return REFUSED_NONE;
}

/* One attempt, device slow lock held: the held blocks under the partition lock, then one
 * new block, whose driver call runs with the partition lock dropped (arena.c). */
static refusal attempt(gpupart_partition *p, const request *q, gpupart__range **out) {
  if (q->charge) return charge_attempt(p, q);
  gpupart__lock_acquire(&p->lock);
  gpupart__range *r = gpupart__arena_try(p, q->size, q->align);
  if (!r) {
    gpupart__lock_release(&p->lock);
    gpupart__refusal bound = GPUPART__GRANTED;
    int rc = gpupart__arena_grow(p, q->size, q->align, &bound); /* OK: the lock is held again */
    if (rc) {
      *out = NULL;
      return refusal_of(rc, bound);
    }
    if (!(r = gpupart__arena_try(p, q->size, q->align))) {
      gpupart__lock_release(&p->lock);
      *out = NULL;
      return refusal_of(gpupart__fail(GPUPART_ENOMEM, "partition '%s': out of host memory", p->name), bound);
    }
  }
  *out = account_alloc(p, r, q);
  gpupart__lock_release(&p->lock);
  return REFUSED_NONE;
}

/* Refusals that other partitions of this process can help with (step 2 and their
 * callbacks): the budget, the driver, and this process's ceiling (their bytes count in it). */
static int reaches_others(refusal why) {
  return why == REFUSED_BUDGET || why == REFUSED_DRIVER || why == REFUSED_CEILING;
}

static uint64_t release_own(gpupart_partition *p) { return gpupart__arena_release_empty(p); }

/* Bytes steps 1 and 2 released on this thread since the last report_steps: the events
 * are logged once the device's slow lock is dropped. */
static _Thread_local uint64_t step_freed[3];

/* No lock held: logs the steps that freed bytes (events.c), and forgets them. */
static void report_steps(gpupart_partition *p, const request *q) {
  for (int step = 1; step <= 2; step++) {
    if (step_freed[step]) gpupart__event_oom_step(p->dev, p->name, q->size, step, step_freed[step]);
    step_freed[step] = 0;
  }
  gpupart__ledger_report(p->dev->ledger); /* and the dead members growth reaped */
}

/* Steps 1 and 2. Device slow lock held. */
static refusal oom_release(gpupart_partition *p, const request *q, refusal why, gpupart__range **out) {
  if (is_final(why)) return why;
  uint64_t own = release_own(p);
  step_freed[1] += own;
  if (own) {
    gpupart__device_trim_locked(p->dev); /* the backend's own caches go too */
    if ((why = attempt(p, q, out)) == REFUSED_NONE) return why;
  }
  if (!reaches_others(why)) return why;
  uint64_t released = 0;
  gpupart_device *dev = p->dev;
  for (uint32_t i = 0; i < dev->nparts; i++)
    if (dev->parts[i] != p) released += release_own(dev->parts[i]);
  if (released) gpupart__device_trim_locked(dev);
  step_freed[2] += released;
  return released ? attempt(p, q, out) : why;
}

/* Retry after a callback: what it freed may fit at once, else the emptied blocks go. */
static refusal retry_after_reclaim(gpupart_partition *p, const request *q, refusal why, gpupart__range **out) {
  pthread_mutex_lock(&p->dev->slow);
  refusal again = attempt(p, q, out);
  if (again != REFUSED_NONE) again = oom_release(p, q, reaches_others(why) ? why : again, out);
  pthread_mutex_unlock(&p->dev->slow);
  report_steps(p, q);
  return again;
}

/* What the request lacks now (device slow lock held): the block it needs less what the
 * limit and budget can still grant; the whole block when the driver refused. */
static uint64_t block_need(const gpupart_device *dev, const request *q) {
  uint64_t need = q->size, g = dev->granularity;
  if (q->align > dev->alignment) need += q->align - dev->alignment;
  return (need + g - 1) & ~(g - 1);
}

static uint64_t shortfall(const gpupart_partition *p, const request *q, refusal why) {
  const gpupart_device *dev = p->dev;
  uint64_t need = block_need(dev, q), g = dev->granularity;
  if (why == REFUSED_DRIVER) return need;
  gpupart__refusal bound;
  uint64_t grant = dev->ledger->ops->grantable(dev->ledger, p->account, &bound) & ~(g - 1);
  return need > grant ? need - grant : g;
}

static uint64_t in_use_of(gpupart_partition *c) {
  gpupart__lock_acquire(&c->lock);
  uint64_t v = c->c.in_use;
  gpupart__lock_release(&c->lock);
  return v;
}

/* One round of callbacks (own, or others), each asked for the shortfall as it is then,
 * with no lock held; the request is retried after each and the round stops once it fits. */
static refusal reclaim_round(gpupart_partition *p, const request *q, int own, refusal why, gpupart__range **out) {
  gpupart_device *dev = p->dev;
  for (uint32_t i = 0;;) {
    pthread_mutex_lock(&dev->slow);
    gpupart_partition *c = gpupart__device_claim_reclaimer(dev, p, own, &i);
    uint64_t wanted = c ? shortfall(p, q, why) : 0;
    pthread_mutex_unlock(&dev->slow);
    if (!c) return why;
    uint64_t before = in_use_of(c);
    in_reclaim = 1;
    c->reclaim(c, wanted, c->reclaim_user);
    in_reclaim = 0;
    uint64_t after = in_use_of(c);
    gpupart__event_reclaim(dev, c->name, p->name, wanted, before > after ? before - after : 0); /* c cannot go yet */
    atomic_flag_clear(&c->reclaim_busy);
    refusal again = retry_after_reclaim(p, q, why, out);
    if (again == REFUSED_NONE || is_final(again)) return again;
    why = again;
  }
}

/* Step 3. No lock held. */
static refusal oom_reclaim(gpupart_partition *p, const request *q, refusal why, gpupart__range **out) {
  if (is_final(why) || in_reclaim || (q->flags & GPUPART_ALLOC_NO_RECLAIM)) return why;
  why = reclaim_round(p, q, 1, why, out);
  if (reaches_others(why)) why = reclaim_round(p, q, 0, why, out);
  return why;
}

/* Why a limit refusal happened: the limit itself only when the request does not fit in
 * what the limit leaves of this process's own bytes in use; in a shared partition, the
 * bytes its other members hold (named); otherwise the bytes are there but not in one
 * piece (the block size of a preallocated partition, or fragmentation of the held
 * blocks). */
static void limit_cause(const gpupart_partition *p, const request *q, const gpupart__ledger_figures *f, uint64_t in_use,
                        char *out, size_t n) {
  uint64_t pre = p->growth.prealloc_block, others = f->reserved > f->own_reserved ? f->reserved - f->own_reserved : 0;
  gpupart__ledger *l = p->dev->ledger;
  char who[640];
  if (in_use + q->size > f->limit) {
    snprintf(out, n, "the partition limit is reached");
  } else if (q->charge && !others) {
    snprintf(out, n,
             "the partition's blocks hold the rest of its limit (their free bytes serve allocations, not charges)");
  } else if (others && in_use + others + q->size > f->limit) {
    l->ops->holders(l, p->account, GPUPART__REFUSED_LIMIT, who, sizeof who);
    snprintf(out, n, "other members of the shared partition hold %" PRIu64 " bytes of its limit: %s", others, who);
  } else if (p->growth.prealloc && q->size > pre) {
    snprintf(out, n,
             "the request is larger than the preallocation block size %" PRIu64
             " (set GPUPART_PREALLOC_BLOCK / prealloc_block, or the partition's max_block)",
             pre);
  } else {
    snprintf(out, n,
             "the limit leaves room for the bytes but no held block has them in one piece "
             "(fragmentation) and no new block fits under the limit");
  }
}

/* A budget refusal names who holds the budget; a partition whose guarantee is not free yet
 * is told why: a guarantee keeps others from taking more, not from keeping what they hold. */
static void budget_cause(const gpupart_partition *p, const gpupart__ledger_figures *f, char *out, size_t n) {
  gpupart__ledger *l = p->dev->ledger;
  char who[640];
  l->ops->holders(l, p->account, GPUPART__REFUSED_BUDGET, who, sizeof who);
  int len = snprintf(out, n, "the device budget (less other partitions' guarantees) is reached: %s", who);
  if (f->guarantee > f->reserved && len > 0 && (size_t)len < n)
    snprintf(out + len, n - (size_t)len,
             "; this partition's guarantee of %" PRIu64 " bytes keeps others from taking "
             "more, but what they held before stays theirs until they free it",
             f->guarantee);
  len = (int)strlen(out);
  if (l->shared && (size_t)len < n)
    snprintf(out + len, n - (size_t)len,
             "; the other processes were asked to give back the bytes (a request served for %d ms, largest empty "
             "blocks first, at the %s priority): a retry may find them",
             GPUPART__REQUEST_WAIT_MS, f->reserved < f->guarantee ? "floor's" : "growth's");
}

/* The ceiling binds this process whatever the shared budget leaves: named with its source. */
static void ceiling_cause(const gpupart_partition *p, char *out, size_t n) {
  const gpupart__value *v = p->dev->settings.v;
  int by_limit = v[GPUPART__OPT_MEMORY_LIMIT_MAX].u && v[GPUPART__OPT_MEMORY_LIMIT_MAX].u == p->dev->ceiling;
  const gpupart__value *c = &v[by_limit ? GPUPART__OPT_MEMORY_LIMIT_MAX : GPUPART__OPT_MEMORY_FRACTION_MAX];
  char where[GPUPART__PATH_MAX + 16];
  gpupart__source_format(c->src, where, sizeof where);
  snprintf(out, n,
           "this process's ceiling on the device is reached: %s caps what it holds at %" PRIu64
           " bytes (%s), whatever the shared budget leaves",
           by_limit ? "memory_limit_max" : "memory_fraction_max", p->dev->ceiling, GPUPART__ECHO(where));
}

static void refusal_text(const gpupart_partition *p, const request *q, refusal why, const gpupart__ledger_figures *f,
                         uint64_t in_use, char *out, size_t n) {
  switch (why) {
  case REFUSED_LIMIT: limit_cause(p, q, f, in_use, out, n); break;
  case REFUSED_BUDGET: budget_cause(p, f, out, n); break;
  case REFUSED_CEILING: ceiling_cause(p, out, n); break;
  case REFUSED_DRIVER: snprintf(out, n, "the driver refused a block"); break;
  default: snprintf(out, n, "out of host memory");
  }
}

/* Step 4: count the failure and say why, naming every figure that explains it, and for a
 * driver refusal the backend's own message (with the driver's error code). */
static gpupart_result fail_alloc(gpupart_partition *p, const request *q, refusal why) {
  char driver[768] = "", cause[768];
  int64_t native = why == REFUSED_DRIVER || why < 0 ? gpupart_last_native_error() : 0; /* passed on */
  if (why == REFUSED_DRIVER || why < 0) snprintf(driver, sizeof driver, " (%s)", gpupart_last_error());
  if (why < 0)
    return gpupart__fail_native(why, native, "partition '%s': cannot %s %" PRIu64 " bytes (tag %" PRIu64 "): %s%s",
                                p->name, q->charge ? "charge" : "allocate", q->size, q->tag, gpupart_result_str(why),
                                driver);
  gpupart__ledger_figures f;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  gpupart__lock_acquire(&p->lock);
  if (why != REFUSED_HOST) p->c.failed_allocations++;
  gpupart__ledger_publish(&gpupart__published(p)->failures, p->c.failed_allocations);
  uint64_t in_use = p->c.in_use, largest = gpupart__tlsf_largest_free(p->arena.tlsf);
  gpupart__lock_release(&p->lock);
  refusal_text(p, q, why, &f, in_use, cause, sizeof cause);
  gpupart_result code = why == REFUSED_DRIVER ? GPUPART_EDEVMEM : why == REFUSED_HOST ? GPUPART_ENOMEM : GPUPART_ELIMIT;
  code = gpupart__fail_native(code, native,
                              "partition '%s': cannot %s %" PRIu64 " bytes (tag %" PRIu64 "): %s%s; limit %" PRIu64
                              ", in use %" PRIu64 ", reserved %" PRIu64 ", largest free %" PRIu64,
                              p->name, q->charge ? "charge" : "allocate", q->size, q->tag, cause, driver, f.limit,
                              in_use, f.reserved, largest);
  return why == REFUSED_HOST ? code : gpupart__event_refused(p->dev, code);
}

/* Shared ledger, device slow lock held, the budget refused: asks the other processes for
 * the block the request needs, at the floor's priority while the partition grows within
 * its guarantee, else at growth's. */
static void ask_others(gpupart_partition *p, const request *q) {
  gpupart_device *dev = p->dev;
  uint64_t need = block_need(dev, q);
  gpupart__ledger_figures f;
  dev->ledger->ops->get(dev->ledger, p->account, &f);
  int within = f.reserved <= f.guarantee && need <= f.guarantee - f.reserved;
  gpupart__device_ask_bytes(dev, need, within ? GPUPART__PRIORITY_FLOOR : GPUPART__PRIORITY_GROWTH);
}

/* A charge that can never fit, device slow lock held: larger than its partition's whole
 * limit (REFUSED_LIMIT), or than this process's ceiling on a shared device
 * (REFUSED_CEILING; a shared budget may be larger). Nothing the OOM sequence frees could
 * make room for it, so it is refused at once, with no cached block given back and no
 * reclaim callback asked (they would be asked for a shortfall that block_need cannot
 * even compute near UINT64_MAX). REFUSED_NONE when it might fit. */
static refusal never_fits(const gpupart_partition *p, const request *q) {
  if (!q->charge) return REFUSED_NONE;
  gpupart__ledger_figures f;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  if (q->size > f.limit) return REFUSED_LIMIT;
  return p->dev->ceiling && q->size > p->dev->ceiling ? REFUSED_CEILING : REFUSED_NONE;
}

/* The counts keep a reclaim callback from destroying p or closing its device while this
 * allocation still needs them (partition.c, device.c refuse with EBUSY). */
static gpupart_result alloc_slow(gpupart_partition *p, const request *q, gpupart__range **out) {
  gpupart_device *dev = p->dev;
  atomic_fetch_add(&p->allocating, 1);
  atomic_fetch_add(&dev->allocating, 1);
  gpupart__device_dra_poll(dev, 0); /* a DRA claim's newer generation, at most every GPUPART__DRA_POLL_NS */
  pthread_mutex_lock(&dev->slow);
  gpupart__device_honour_trim_locked(dev); /* shared ledger: other processes' requests */
  gpupart__partition_take_grown_locked(p); /* a preallocated partition grown from outside */
  refusal why = attempt(p, q, out);
  refusal never = why != REFUSED_NONE && !is_final(why) ? never_fits(p, q) : REFUSED_NONE;
  int hopeless = never != REFUSED_NONE;
  if (hopeless) why = never;
  if (why != REFUSED_NONE && !hopeless) why = oom_release(p, q, why, out);
  if (why == REFUSED_BUDGET) ask_others(p, q); /* shared ledger: the others give back at once */
  else if (why == REFUSED_NONE) gpupart__device_asked_enough(dev);
  pthread_mutex_unlock(&dev->slow);
  report_steps(p, q);
  if (why != REFUSED_NONE && !hopeless) why = oom_reclaim(p, q, why, out);
  gpupart_result rc = why == REFUSED_NONE ? GPUPART_OK : fail_alloc(p, q, why);
  atomic_fetch_sub(&p->allocating, 1);
  atomic_fetch_sub(&dev->allocating, 1);
  return rc;
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static gpupart_result validate(const gpupart_partition *p, const gpupart_alloc_desc *d, request *q) {
  if (!p) return gpupart__fail(GPUPART_EINVAL, "alloc: the partition is NULL (did its gpupart_partition_create fail?)");
  if (!d) return gpupart__fail(GPUPART_EINVAL, "alloc: desc is NULL");
  if (d->flags & ~GPUPART_ALLOC_NO_RECLAIM) return gpupart__fail(GPUPART_EINVAL, "alloc: unknown flags 0x%x", d->flags);
  if (!d->size) return gpupart__fail(GPUPART_EINVAL, "alloc: size is 0");
  if (d->alignment && !is_pow2(d->alignment))
    return gpupart__fail(GPUPART_EINVAL, "alloc: alignment %" PRIu64 " is not a power of two", d->alignment);
  const gpupart_device *dev = p->dev;
  uint64_t align = d->alignment > dev->alignment ? d->alignment : dev->alignment;
  uint64_t max = gpupart__largest_block(dev), need;
  if (gpupart__block_need(dev, d->size, align, &need) || need > max)
    return gpupart__fail(GPUPART_EINVAL,
                         "alloc: %" PRIu64 " bytes at alignment %" PRIu64
                         " exceed the largest driver allocation of %" PRIu64,
                         d->size, align, max);
  *q = (request){.size = d->size, .align = align, .tag = d->tag, .flags = d->flags};
  return GPUPART_OK;
}

/* The fast path: one lock, one sub-allocator call; info (if any) filled under that lock. */
static gpupart__range *alloc_fast(gpupart_partition *p, const request *q, gpupart_allocation_info *info) {
  gpupart__lock_acquire_bias(&p->lock);
  gpupart__range *r = gpupart__arena_try(p, q->size, q->align);
  if (r) account_alloc(p, r, q);
  if (r && info) gpupart__range_info(p, r, info);
  gpupart__lock_release(&p->lock);
  return r;
}

/* The slow path, then the description of what it allocated (a second lock, off the
 * fast path). */
static gpupart_result alloc_slow_info(gpupart_partition *p, const request *q, gpupart__range **r,
                                      gpupart_allocation_info *info) {
  gpupart_result rc = alloc_slow(p, q, r);
  if (rc || !info) return rc;
  gpupart__lock_acquire(&p->lock);
  gpupart__range_info(p, *r, info);
  gpupart__lock_release(&p->lock);
  return GPUPART_OK;
}

static gpupart_result alloc_any(gpupart_partition *p, const gpupart_alloc_desc *desc, gpupart_allocation **out,
                                gpupart_allocation_info *info) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "alloc: out is NULL");
  *out = NULL;
  request q;
  gpupart_result rc = validate(p, desc, &q);
  if (rc) return rc;
  gpupart__range *r = alloc_fast(p, &q, info);
  if (!r && (rc = alloc_slow_info(p, &q, &r, info))) return rc;
  if (__builtin_expect(p->trace != NULL, 0)) gpupart__trace_alloc(p->trace, p, gpupart__tlsf_aux(r), q.size);
  *out = (gpupart_allocation *)gpupart__tlsf_handle(r);
  return GPUPART_OK;
}

/* desc in the caller's layout, copied into this library's by the ABI rule. */
static gpupart_result desc_in(const gpupart_alloc_desc *desc, size_t desc_size, gpupart_alloc_desc *d) {
  if (!desc) return gpupart__fail(GPUPART_EINVAL, "alloc: desc is NULL");
  return gpupart__copy_in(d, GPUPART__ALLOC_DESC_SIZE, desc, desc_size, GPUPART__ALLOC_DESC_SIZE_0_2,
                          "alloc: gpupart_alloc_desc");
}

gpupart_result gpupart_alloc_info_sized(gpupart_partition *p, const gpupart_alloc_desc *desc, size_t desc_size,
                                        gpupart_allocation **out, gpupart_allocation_info *info, size_t info_size) {
  if (out) *out = NULL;
  if (!info) return gpupart__fail(GPUPART_EINVAL, "alloc_info: info is NULL");
  if (info_size < GPUPART__ALLOCATION_INFO_SIZE_0_2)
    return gpupart__fail(GPUPART_EINVAL, "alloc_info: info has %zu bytes; the 0.2 layout has %zu", info_size,
                         (size_t)GPUPART__ALLOCATION_INFO_SIZE_0_2);
  gpupart_alloc_desc d;
  gpupart_allocation_info mine;
  gpupart_result rc = desc_in(desc, desc_size, &d);
  if (rc || (rc = alloc_any(p, &d, out, &mine))) return rc;
  return gpupart__copy_out(info, info_size, &mine, sizeof mine, GPUPART__ALLOCATION_INFO_SIZE_0_2,
                           "alloc_info: gpupart_allocation_info");
}

gpupart_result gpupart_alloc_ex_sized(gpupart_partition *p, const gpupart_alloc_desc *desc, size_t desc_size,
                                      gpupart_allocation **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "alloc: out is NULL");
  *out = NULL;
  gpupart_alloc_desc d;
  gpupart_result rc = desc_in(desc, desc_size, &d);
  return rc ? rc : alloc_any(p, &d, out, NULL);
}

/* Any request the fused path below does not take: the whole way (validate, the held
 * blocks, the growth path, trace recording, its messages). */
static __attribute__((noinline, cold)) gpupart_result alloc_whole_way(gpupart_partition *p, uint64_t size,
                                                                      uint64_t alignment, gpupart_allocation **out) {
  const gpupart_alloc_desc d = {.size = size, .alignment = alignment};
  return alloc_any(p, &d, out, NULL);
}

/* The fused path with the lock taken the usual way: an owner's first allocation (its
 * claim), and every allocation on a lock whose bias is another thread's or revoked. */
static __attribute__((noinline)) gpupart_result alloc_spin(gpupart_partition *p, uint64_t size, uint64_t alignment,
                                                           gpupart_allocation **out) {
  int by_bias = gpupart__lock_enter(&p->lock, GPUPART__LOCK_CLAIM);
  gpupart__range *r = gpupart__tlsf_alloc_small(p->arena.tlsf, size);
  if (r) count_alloc(p, size);
  gpupart__lock_leave(&p->lock, by_bias);
  if (!r) return alloc_whole_way(p, size, alignment, out);
  *out = (gpupart_allocation *)gpupart__tlsf_handle(r);
  return GPUPART_OK;
}

/* The fused fast path: one function, no call on a hit but the rare crossing of the
 * partition's charge of the device peak (peak.c; never on a solo partition). A request
 * it can take as it is (at most the device's alignment, which is the sub-allocator's
 * granule; a size that some block can hold; fast_size is 0 while a trace records) is
 * checked in one expression; the lock is entered by its bias, the sub-allocator's inline
 * allocation (tlsf_inline.h) places it and the counters count it. The rest is left, by
 * tail calls with the lock dropped, to the paths that may call: a lock not entered by
 * its bias (alloc_spin), a miss of the inline allocation and any other request (the
 * whole way). */
gpupart_result gpupart_alloc(gpupart_partition *p, uint64_t size, uint64_t alignment, gpupart_allocation **out) {
  if (__builtin_expect(
          p && out && size - 1 < p->fast_size && alignment <= p->fast_align && !(alignment & (alignment - 1)), 1)) {
    if (__builtin_expect(!gpupart__lock_try_bias(&p->lock), 0)) return alloc_spin(p, size, alignment, out);
    gpupart__range *r = gpupart__tlsf_alloc_small(p->arena.tlsf, size);
    if (__builtin_expect(r != NULL, 1)) count_alloc(p, size);
    gpupart__lock_leave_bias(&p->lock);
    if (__builtin_expect(r != NULL, 1)) {
      *out = (gpupart_allocation *)gpupart__tlsf_handle(r);
      return GPUPART_OK;
    }
  }
  return alloc_whole_way(p, size, alignment, out);
}

/* Partition lock held: counts a free of size bytes. Inline: the fast path runs it on
 * every free. */
static inline __attribute__((always_inline)) void account_free(gpupart_partition *p, uint64_t size) {
  p->c.in_use -= size;
  gpupart__ledger_publish(&gpupart__published(p)->in_use, p->c.in_use);
  p->c.live_allocations--;
  if (p->charge != UINT64_MAX) gpupart__peak_freed(p); /* not solo (peak.c) */
}

/* After the partition lock: the view's release, and a detached block's return to the
 * driver under the device's slow lock. The caller counted this as an allocation in
 * progress, so p cannot be destroyed, nor its device closed, meanwhile. */
static __attribute__((noinline, cold)) void free_outside(gpupart_partition *p, void *view, gpupart__block *gone) {
  gpupart_device *dev = p->dev;
  if (view) dev->ops->view_release(dev->bdev, view);
  if (gone) {
    pthread_mutex_lock(&dev->slow);
    gpupart__arena_release_detached(p, gone);
    pthread_mutex_unlock(&dev->slow);
  }
  atomic_fetch_sub(&p->allocating, 1);
  atomic_fetch_sub(&dev->allocating, 1);
}

/* A free of a handle that is not live: counted (partition lock held by the caller, who
 * drops it) and refused with the message. */
static __attribute__((noinline, cold)) gpupart_result double_free(gpupart_partition *p, gpupart_allocation *a) {
  return gpupart__fail(GPUPART_EINVAL, "free: allocation %p of partition '%s' was already freed", (void *)a, p->name);
}

/* Partition lock held, before it is dropped: a free with work left outside the lock
 * counts as an allocation in progress (free_outside). */
static __attribute__((noinline, cold)) void hold_for_outside(gpupart_partition *p) {
  atomic_fetch_add(&p->allocating, 1);
  atomic_fetch_add(&p->dev->allocating, 1);
}

/* The whole free, the lock taken the usual way: the handle's check, the sub-allocator's
 * free and the counters under the partition lock; the view's release and a block's
 * return to the driver after it is dropped (free_outside). The handle names its range
 * and, through the slab's owner, the partition, so a stale handle is refused without
 * touching anything else. */
static __attribute__((noinline)) gpupart_result free_spin(gpupart_allocation *a) {
  gpupart__range *r = gpupart__range_of(a);
  gpupart__tlsf *t = gpupart__range_owner(r);
  gpupart_partition *p = gpupart__tlsf_user(t);
  int by_bias = gpupart__lock_enter(&p->lock, GPUPART__LOCK_CLAIM);
  if (__builtin_expect(!gpupart__handle_live(a), 0)) {
    p->c.double_frees++;
    gpupart__lock_leave(&p->lock, by_bias);
    return double_free(p, a);
  }
  uint64_t size = gpupart__range_user_size(r);
  void *view = r->user_ext; /* the free below reuses the field */
  uint64_t trace_id = __builtin_expect(p->trace != NULL, 0) ? *gpupart__tlsf_aux(r) : 0; /* before the node's reuse */
  gpupart__range *fr = gpupart__tlsf_free_used(t, r);
  account_free(p, size);
  gpupart__block *gone = gpupart__arena_on_free(p, fr);
  int outside = view || gone;
  if (__builtin_expect(outside, 0)) hold_for_outside(p);
  gpupart__lock_leave(&p->lock, by_bias);
  if (__builtin_expect(trace_id != 0, 0)) gpupart__trace_free(p->trace, trace_id);
  if (__builtin_expect(outside, 0)) free_outside(p, view, gone);
  return GPUPART_OK;
}

/* The fused fast path of a free: one function, no call in the common case (a partition
 * that is not its device's solo one tells the device peak, peak.c). Entered by the lock's
 * bias, a live handle whose free has nothing more to do (no trace, no view, a block that
 * stays in use or no release threshold to apply to one that empties) is freed by the
 * sub-allocator's inline free (tlsf_inline.h) and counted. Anything else is free_spin's,
 * by a tail call, with the lock dropped first. */
gpupart_result gpupart_free(gpupart_allocation *a) {
  if (!a) return GPUPART_OK;
  gpupart__range *r = gpupart__range_of(a);
  gpupart__tlsf *t = gpupart__range_owner(r);
  gpupart_partition *p = gpupart__tlsf_user(t);
  if (__builtin_expect(!gpupart__lock_try_bias(&p->lock), 0)) return free_spin(a);
  if (__builtin_expect(!gpupart__handle_live(a) || p->trace || r->user_ext ||
                           (gpupart__arena_may_release(p) && gpupart__tlsf_free_empties(r)),
                       0)) {
    gpupart__lock_leave_bias(&p->lock);
    return free_spin(a);
  }
  uint64_t size = gpupart__range_user_size(r);
  gpupart__tlsf_free_used(t, r);
  account_free(p, size);
  gpupart__lock_leave_bias(&p->lock);
  return GPUPART_OK;
}

void gpupart__range_info(const gpupart_partition *p, const gpupart__range *r, gpupart_allocation_info *out) {
  const gpupart__block *b = gpupart__range_block(r);
  *out = (gpupart_allocation_info){(gpupart_partition *)p,
                                   gpupart__range_user_size(r),
                                   r->offset,
                                   b->size,
                                   b->drv.device_address ? b->drv.device_address + r->offset : 0,
                                   b->drv.native};
}

gpupart_result gpupart_allocation_get_info_sized(const gpupart_allocation *a, gpupart_allocation_info *out,
                                                 size_t out_size) {
  if (!a || !out) return gpupart__fail(GPUPART_EINVAL, "allocation_get_info: a or out is NULL");
  const gpupart__range *r = gpupart__range_of(a);
  gpupart_partition *p = gpupart__partition_of(a);
  gpupart__lock_acquire(&p->lock);
  int live = gpupart__handle_live(a);
  gpupart_allocation_info info = {0};
  if (live) gpupart__range_info(p, r, &info);
  gpupart__lock_release(&p->lock);
  if (!live) return gpupart__fail(GPUPART_EINVAL, "allocation_get_info: %p was freed", (const void *)a);
  return gpupart__copy_out(out, out_size, &info, sizeof info, GPUPART__ALLOCATION_INFO_SIZE_0_2,
                           "allocation_get_info: gpupart_allocation_info");
}

/* ---- charges ----------------------------------------------------------------------- */

gpupart_result gpupart_partition_charge(gpupart_partition *p, uint64_t bytes, gpupart_charge **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "partition_charge: out is NULL");
  *out = NULL;
  if (!p)
    return gpupart__fail(GPUPART_EINVAL,
                         "partition_charge: the partition is NULL (did its gpupart_partition_create fail?)");
  if (!bytes) return gpupart__fail(GPUPART_EINVAL, "partition_charge: bytes is 0");
  gpupart__slot *slot = NULL;
  gpupart__range *none = NULL;
  const request q = {.size = bytes, .charge = &slot};
  gpupart_result rc = alloc_slow(p, &q, &none);
  if (rc) return rc;
  if (__builtin_expect(p->trace != NULL, 0))
    gpupart__trace_alloc(p->trace, p, &slot->aux, bytes); /* before it is out */
  *out = (gpupart_charge *)gpupart__slots_handle(slot);
  return GPUPART_OK;
}

gpupart_result gpupart_charge_release(gpupart_charge *c) {
  if (!c) return GPUPART_OK;
  gpupart_partition *p = gpupart__slots_owner((uintptr_t)c);
  gpupart_device *dev = p->dev;
  pthread_mutex_lock(&dev->slow);
  gpupart__slot *slot = gpupart__slots_live((uintptr_t)c);
  uint64_t bytes = slot ? slot->value : 0, trace_id = slot ? slot->aux : 0;
  if (slot) gpupart__slots_put(&p->charges, slot);
  gpupart__lock_acquire(&p->lock);
  if (slot) {
    p->arena.charged -= bytes;
    p->arena.charged_count--;
    account_free(p, bytes);
  } else {
    p->c.double_frees++;
  }
  gpupart__lock_release(&p->lock);
  if (slot) dev->ledger->ops->release(dev->ledger, p->account, bytes);
  pthread_mutex_unlock(&dev->slow);
  if (__builtin_expect(trace_id != 0, 0)) gpupart__trace_free(p->trace, trace_id);
  if (!slot)
    return gpupart__fail(GPUPART_EINVAL, "charge_release: charge %p of partition '%s' was already released", (void *)c,
                         p->name);
  return GPUPART_OK;
}

uint64_t gpupart_charge_size(const gpupart_charge *c) {
  if (!c) return 0;
  gpupart_partition *p = gpupart__slots_owner((uintptr_t)c);
  pthread_mutex_lock(&p->dev->slow);
  const gpupart__slot *slot = gpupart__slots_live((uintptr_t)c);
  uint64_t bytes = slot ? slot->value : 0;
  pthread_mutex_unlock(&p->dev->slow);
  return bytes;
}
