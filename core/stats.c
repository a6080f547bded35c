/* Statistics and the consistency check. Partition figures are read under the partition
 * lock, so each snapshot is consistent; device figures sum the partitions under the
 * device's slow lock. The check walks every invariant the allocator promises, so tests
 * can call it after every random step. */
#include <stdio.h>

#include "arena.h"
#include "error.h"
#include "extstruct.h"
#include "internal.h"
#include "peak.h"

static void add_counters(gpupart_stats *s, const gpupart__counters *c) {
  s->in_use += c->in_use;
  s->live_allocations += c->live_allocations;
  s->total_allocations += c->total_allocations;
  s->total_frees += c->total_allocations - c->live_allocations; /* a retired partition's live are 0 */
  s->driver_allocs += c->driver_allocs;
  s->driver_frees += c->driver_frees;
  s->failed_allocations += c->failed_allocations;
  s->double_frees += c->double_frees;
}

/* Partition lock held. */
static void partition_stats_locked(const gpupart_partition *p, gpupart_stats *s) {
  gpupart__ledger_figures f;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  *s = (gpupart_stats){.limit = f.limit,
                       .guarantee = f.guarantee,
                       .peak_in_use = p->c.peak_in_use,
                       .reserved = p->arena.reserved + p->arena.charged,
                       .peak_reserved = p->arena.peak_reserved,
                       .largest_free = gpupart__tlsf_largest_free(p->arena.tlsf)};
  if (p->dev->ledger->shared) { /* partition-wide */
    s->reserved = f.reserved;
    s->peak_reserved = f.peak_reserved;
  }
  add_counters(s, &p->c);
}

static void partition_stats(const gpupart_partition *p, gpupart_stats *out) {
  gpupart_partition *m = (gpupart_partition *)p;
  gpupart__lock_acquire_visit(&m->lock); /* exact, and the allocating thread keeps its bias (lock.h) */
  partition_stats_locked(p, out);
  gpupart__lock_release(&m->lock);
}

gpupart_result gpupart_partition_get_stats_sized(const gpupart_partition *p, gpupart_stats *out, size_t out_size) {
  if (!p || !out) return gpupart__fail(GPUPART_EINVAL, "partition_get_stats: p or out is NULL");
  if (out_size < GPUPART__STATS_SIZE_0_2) /* before taking the lock, so the message is set once */
    return gpupart__copy_out(out, out_size, NULL, 0, GPUPART__STATS_SIZE_0_2, "partition_get_stats: gpupart_stats");
  gpupart_stats s;
  partition_stats(p, &s);
  return gpupart__copy_out(out, out_size, &s, sizeof s, GPUPART__STATS_SIZE_0_2, "partition_get_stats: gpupart_stats");
}

gpupart_result gpupart_partition_available(const gpupart_partition *p, uint64_t *out) {
  if (!p || !out) return gpupart__fail(GPUPART_EINVAL, "partition_available: p or out is NULL");
  gpupart_partition *m = (gpupart_partition *)p;
  gpupart__ledger *l = p->dev->ledger;
  gpupart__refusal bound;
  gpupart__lock_acquire_visit(&m->lock);                /* the ledger's lock is taken inside, innermost */
  uint64_t held = p->arena.reserved + p->arena.charged; /* charges are in use and in the ledger */
  uint64_t spare = held > p->c.in_use ? held - p->c.in_use : 0;
  uint64_t grant = l->ops->grantable(l, p->account, &bound) & ~(p->dev->granularity - 1);
  gpupart__lock_release(&m->lock);
  gpupart__ledger_report(l);   /* dead members the grant reaped, no lock held */
  if (bound < 0) return bound; /* the ledger could not be used: its message says why */
  *out = spare + grant < spare ? UINT64_MAX : spare + grant;
  return GPUPART_OK;
}

gpupart_result gpupart_partition_chargeable(const gpupart_partition *p, uint64_t *out) {
  if (!p || !out) return gpupart__fail(GPUPART_EINVAL, "partition_chargeable: p or out is NULL");
  gpupart__ledger *l = p->dev->ledger;
  gpupart__refusal bound;
  uint64_t grant = l->ops->grantable(l, p->account, &bound); /* the ledger's lock alone */
  gpupart__ledger_report(l);
  if (bound < 0) return bound;
  *out = grant;
  return GPUPART_OK;
}

void gpupart_partition_reset_peak(gpupart_partition *p) {
  if (!p) return;
  pthread_mutex_lock(&p->dev->slow);
  gpupart__peak_partition_reset(p);
  pthread_mutex_unlock(&p->dev->slow);
}

gpupart_result gpupart_device_reset_peak(gpupart_device *dev) {
  if (!dev) return gpupart__fail(GPUPART_EINVAL, "device_reset_peak: dev is NULL");
  pthread_mutex_lock(&dev->slow);
  gpupart__peak_reset(dev);
  pthread_mutex_unlock(&dev->slow);
  return GPUPART_OK;
}

/* Adds a partition's current figures and counts into device figures. */
static void add_stats(gpupart_stats *s, const gpupart_stats *ps) {
  s->in_use += ps->in_use;
  s->reserved += ps->reserved;
  s->live_allocations += ps->live_allocations;
  s->total_allocations += ps->total_allocations;
  s->total_frees += ps->total_frees;
  s->driver_allocs += ps->driver_allocs;
  s->driver_frees += ps->driver_frees;
  s->failed_allocations += ps->failed_allocations;
  s->double_frees += ps->double_frees;
  if (ps->largest_free > s->largest_free) s->largest_free = ps->largest_free;
}

gpupart_result gpupart_device_get_stats_sized(const gpupart_device *dev, gpupart_stats *out, size_t out_size) {
  if (!dev || !out) return gpupart__fail(GPUPART_EINVAL, "device_get_stats: dev or out is NULL");
  if (out_size < GPUPART__STATS_SIZE_0_2)
    return gpupart__copy_out(out, out_size, NULL, 0, GPUPART__STATS_SIZE_0_2, "device_get_stats: gpupart_stats");
  gpupart_device *d = (gpupart_device *)dev;
  gpupart_stats s = {0}, ps;
  gpupart__ledger_figures t;
  pthread_mutex_lock(&d->slow);
  for (uint32_t i = 0; i < d->nparts; i++) {
    partition_stats(d->parts[i], &ps);
    add_stats(&s, &ps);
  }
  add_counters(&s, &d->retired);
  d->ledger->ops->totals(d->ledger, &t);
  uint64_t peak_in_use = gpupart__peak_in_use(d);
  pthread_mutex_unlock(&d->slow);
  gpupart__ledger_report(d->ledger); /* the dead members totals reaped, now that no lock is held */
  s.limit = t.limit;
  s.guarantee = t.guarantee;
  s.peak_reserved = t.peak_reserved;
  if (d->ledger->shared) s.reserved = t.reserved; /* device-wide, across processes */
  s.peak_in_use = peak_in_use;
  return gpupart__copy_out(out, out_size, &s, sizeof s, GPUPART__STATS_SIZE_0_2, "device_get_stats: gpupart_stats");
}

/* Partition lock held: the arena against its counters and its ledger account. */
static int check_partition(const gpupart_partition *p, char *why, uint64_t n) {
  if (gpupart__arena_check(p, why, n)) return -1;
  gpupart__ledger_figures f;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  uint64_t held = p->arena.reserved + p->arena.releasing + p->arena.charged;
  if (f.own_reserved != held)
    return gpupart__say(why, n, "partition '%s': ledger reserved %llu, arena and charges hold %llu", p->name,
                        (unsigned long long)f.own_reserved, (unsigned long long)held);
  if (p->arena.charged > p->c.in_use)
    return gpupart__say(why, n, "partition '%s': charges exceed the bytes in use", p->name);
  if (p->c.in_use > p->c.peak_in_use || p->arena.reserved + p->arena.charged > p->arena.peak_reserved)
    return gpupart__say(why, n, "partition '%s': a figure exceeds its peak", p->name);
  if (p->charge < p->c.in_use) /* a solo partition's is UINT64_MAX */
    return gpupart__say(why, n, "partition '%s': in_use exceeds its charge in the device's peak", p->name);
  if (p->c.live_allocations > p->c.total_allocations)
    return gpupart__say(why, n, "partition '%s': more live allocations than allocations", p->name);
  return 0;
}

/* Whether p's account is the ledger's entry of its name. In a shared ledger two handles
 * of this process may both have joined the partition (find names one of them): there,
 * p's own share must be live. */
static int is_ledger_entry(gpupart_device *d, const gpupart_partition *p) {
  if (!d->ledger->shared) return d->ledger->ops->find(d->ledger, p->name) == p->account;
  gpupart__ledger_figures f;
  d->ledger->ops->get(d->ledger, p->account, &f);
  return f.limit != 0 && d->ledger->ops->find(d->ledger, p->name) != NULL;
}

/* Slow lock held: this handle's ledger entries are its partitions, one for one (the
 * ledger may hold other handles' entries of the same physical device). */
static int members_entries(gpupart_device *d, char *why, uint64_t n) {
  uint32_t entries = d->ledger->ops->list(d->ledger, d->member, NULL, 0);
  if (entries != d->nparts)
    return gpupart__say(why, n, "the ledger has %u entries of this device handle, which has %u partitions", entries,
                        d->nparts);
  for (uint32_t i = 0; i < d->nparts; i++)
    if (!is_ledger_entry(d, d->parts[i]))
      return gpupart__say(why, n, "partition '%s' is not the ledger's entry of that name", d->parts[i]->name);
  return 0;
}

static int check_locked(gpupart_device *d, char *why, uint64_t n) {
  uint64_t in_use = 0, charged = 0;
  int rc = 0;
  uint32_t locked = 0;
  for (; locked < d->nparts; locked++) gpupart__lock_acquire(&d->parts[locked]->lock);
  for (uint32_t i = 0; i < d->nparts && !rc; i++) {
    rc = check_partition(d->parts[i], why, n);
    in_use += d->parts[i]->c.in_use;
    if (d->parts[i] != d->solo) charged += d->parts[i]->charge;
  }
  if (!rc && charged != atomic_load(&d->charged))
    rc = gpupart__say(why, n, "the partitions' charges differ from the device's sum of them");
  if (!rc && d->solo && (d->nparts != 1 || d->parts[0] != d->solo || d->solo->charge != UINT64_MAX))
    rc = gpupart__say(why, n, "the solo partition is not the device's one partition, or is charged");
  if (!rc && in_use > gpupart__peak_in_use_held(d))
    rc = gpupart__say(why, n, "the partitions' in-use bytes exceed the device's peak");
  while (locked) gpupart__lock_release(&d->parts[--locked]->lock);
  if (!rc) rc = members_entries(d, why, n);
  return rc ? rc : d->ledger->ops->check(d->ledger, why, n);
}

gpupart_result gpupart_device_check(const gpupart_device *dev) {
  if (!dev) return gpupart__fail(GPUPART_EINVAL, "device_check: dev is NULL");
  gpupart_device *d = (gpupart_device *)dev;
  char why[256] = "";
  pthread_mutex_lock(&d->slow);
  int rc = check_locked(d, why, sizeof why);
  pthread_mutex_unlock(&d->slow);
  gpupart__ledger_report(d->ledger);
  return rc ? gpupart__fail(GPUPART_ECORRUPT, "device_check: %s", why) : GPUPART_OK;
}
