/* The device's peak in-use figure, kept without a device-wide write on the fast path
 * and without walking the partitions.
 *
 * A shared counter updated by every allocation makes two threads on two partitions
 * fight over one cache line (measured: 24 ns/op alone, 46 ns/op each with two threads),
 * and summing every partition's figure at each new high costs O(partitions) and, read
 * while other threads allocate, is not a snapshot (it overshot the true peak by half).
 * Instead each partition holds a charge: its in-use bytes rounded up to the device's
 * granularity, with hysteresis. The device keeps the sum of the charges (one atomic)
 * and its highest value. An allocation that takes its partition's in-use bytes above the
 * charge raises the charge to the next granule and adds the difference to the sum (one
 * fetch_add and a compare-and-swap on the peak: O(1), whatever the number of
 * partitions); a free lowers the charge only once it is two granules or more above the
 * in-use bytes, so an allocation and a free that straddle a granule boundary do not
 * write the shared line each time.
 *
 * Every change of a charge happens under its partition's lock, and a charge is raised
 * before the bytes it covers are handed out and lowered after they were freed, so at
 * every moment the sum of the charges is at least the sum of the in-use bytes: the
 * device's peak is never below the true peak. It is above it by the charges' slack at
 * the moment of the peak: under one granule for a partition whose last change was an
 * allocation, under two for one that has freed since (and 0 for a partition that never
 * allocated or holds granule multiples). gpupart_device_reset_peak first lowers every
 * charge to its in-use bytes rounded up (slack under one granule each). The charges and
 * the sum are figures of this file alone; every other figure stays exact.
 *
 * A device handle with a single partition (the common case: one program, one partition)
 * needs no charge at all: the device's in-use bytes are that partition's, so its exact
 * peak is the device's. While it is the solo partition its charge is UINT64_MAX, which
 * the fast path's one comparison never passes, so an allocation touches no device
 * figure; the device's peak reads as the larger of its own and the partition's. That
 * holds only while the partition's peak started after the device's did (peak_fresh: a
 * partition made, or whose peak was reset, since the device's last reset). The moment a
 * second partition comes, or the device's peak is reset, the partition's peak is folded
 * into the device's and it is charged again (solo_off); it is solo again when it is left
 * alone with a fresh peak. Solo changes run under the device's slow lock and the
 * partition's lock. */
#include "peak.h"

#include "internal.h"

#define SLACK_GRANULES 2 /* a free lowers the charge once it is this many granules above in-use */

static uint64_t charge_for(const gpupart_partition *p, uint64_t in_use) {
  uint64_t g = p->dev->granularity;
  return (in_use + g - 1) & ~(g - 1);
}

static void raise_peak(gpupart_device *dev, uint64_t total) {
  uint64_t seen = atomic_load_explicit(&dev->peak_in_use, memory_order_relaxed);
  while (total > seen && !atomic_compare_exchange_weak(&dev->peak_in_use, &seen, total)) {}
}

/* Partition lock held; p->c.in_use is above p->charge (so p is not solo). */
void gpupart__peak_crossed(gpupart_partition *p) {
  gpupart_device *dev = p->dev;
  uint64_t charge = charge_for(p, p->c.in_use), delta = charge - p->charge;
  p->charge = charge;
  raise_peak(dev, atomic_fetch_add(&dev->charged, delta) + delta);
  p->peak_crossings++;
  p->peak_visits++; /* p itself, no other */
}

/* Slow lock held: the solo partition (if any) is charged again, its peak folded in. */
static void solo_off(gpupart_device *dev) {
  gpupart_partition *p = dev->solo;
  if (!p) return;
  gpupart__lock_acquire(&p->lock);
  raise_peak(dev, p->c.peak_in_use);
  p->charge = charge_for(p, p->c.in_use);
  raise_peak(dev, atomic_fetch_add(&dev->charged, p->charge) + p->charge);
  dev->solo = NULL;
  gpupart__lock_release(&p->lock);
}

/* Slow lock held: a lone partition with a fresh peak becomes solo. */
static void solo_on(gpupart_device *dev) {
  gpupart_partition *p = dev->nparts == 1 ? dev->parts[0] : NULL;
  if (!p || dev->solo == p || !p->peak_fresh) return;
  gpupart__lock_acquire(&p->lock);
  atomic_fetch_sub(&dev->charged, p->charge);
  p->charge = UINT64_MAX;
  dev->solo = p;
  gpupart__lock_release(&p->lock);
}

void gpupart__peak_regroup_begin(gpupart_device *dev) { solo_off(dev); }
void gpupart__peak_regroup_end(gpupart_device *dev) { solo_on(dev); }

/* Slow lock held. */
void gpupart__peak_partition_reset(gpupart_partition *p) {
  gpupart_device *dev = p->dev;
  gpupart__lock_acquire(&p->lock);
  if (dev->solo == p) raise_peak(dev, p->c.peak_in_use); /* the device's peak keeps it */
  p->c.peak_in_use = p->c.in_use;
  p->arena.peak_reserved = p->arena.reserved + p->arena.charged;
  dev->ledger->ops->reset_peak(dev->ledger, p->account);
  gpupart__lock_release(&p->lock);
  p->peak_fresh = 1;
  solo_on(dev);
}

/* Partition lock held: lowers the charge to in-use rounded up when at least min_slack
 * above it. */
static void lower_charge(gpupart_partition *p, uint64_t min_slack) {
  uint64_t charge = charge_for(p, p->c.in_use);
  if (p->charge == UINT64_MAX || p->charge < charge + min_slack || p->charge == charge) return;
  atomic_fetch_sub(&p->dev->charged, p->charge - charge);
  p->charge = charge;
}

void gpupart__peak_freed(gpupart_partition *p) { lower_charge(p, SLACK_GRANULES * p->dev->granularity); }

/* A partition that goes away returns its charge (no lock: nothing else can reach it; it
 * left the device's list, and so its solo place, before). */
void gpupart__peak_leave(gpupart_partition *p) {
  if (p->charge != UINT64_MAX) atomic_fetch_sub(&p->dev->charged, p->charge);
  p->charge = 0;
}

/* Slow lock and every partition lock held. */
uint64_t gpupart__peak_in_use_held(gpupart_device *dev) {
  uint64_t peak = atomic_load_explicit(&dev->peak_in_use, memory_order_relaxed);
  return dev->solo && dev->solo->c.peak_in_use > peak ? dev->solo->c.peak_in_use : peak;
}

/* Slow lock held. */
uint64_t gpupart__peak_in_use(gpupart_device *dev) {
  uint64_t peak = atomic_load_explicit(&dev->peak_in_use, memory_order_relaxed);
  gpupart_partition *p = dev->solo;
  if (!p) return peak;
  gpupart__lock_acquire_visit(&p->lock); /* a reader of statistics (lock.h) */
  uint64_t own = p->c.peak_in_use;
  gpupart__lock_release(&p->lock);
  return own > peak ? own : peak;
}

/* Device slow lock held. Every partition lock is taken, so no crossing runs meanwhile:
 * the charges are tightened and the peak set to their sum. No partition's peak is fresh
 * any more, so none is solo until its own peak is reset. */
void gpupart__peak_reset(gpupart_device *dev) {
  solo_off(dev);
  for (uint32_t i = 0; i < dev->nparts; i++) gpupart__lock_acquire(&dev->parts[i]->lock);
  for (uint32_t i = 0; i < dev->nparts; i++) lower_charge(dev->parts[i], 0);
  atomic_store(&dev->peak_in_use, atomic_load(&dev->charged));
  for (uint32_t i = dev->nparts; i > 0; i--) gpupart__lock_release(&dev->parts[i - 1]->lock);
  for (uint32_t i = 0; i < dev->nparts; i++) dev->parts[i]->peak_fresh = 0;
}
