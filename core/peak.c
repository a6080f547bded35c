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
 * the sum are figures of this file alone; every other figure stays exact. */
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

/* Partition lock held; p->c.in_use is above p->charge. */
void gpupart__peak_crossed(gpupart_partition *p) {
  gpupart_device *dev = p->dev;
  uint64_t charge = charge_for(p, p->c.in_use), delta = charge - p->charge;
  p->charge = charge;
  raise_peak(dev, atomic_fetch_add(&dev->charged, delta) + delta);
  atomic_fetch_add_explicit(&dev->peak_crossings, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&dev->peak_visits, 1, memory_order_relaxed); /* p itself, no other */
}

/* Partition lock held: lowers the charge to in-use rounded up when at least min_slack
 * above it. */
static void lower_charge(gpupart_partition *p, uint64_t min_slack) {
  uint64_t charge = charge_for(p, p->c.in_use);
  if (p->charge < charge + min_slack || p->charge == charge) return;
  atomic_fetch_sub(&p->dev->charged, p->charge - charge);
  p->charge = charge;
}

void gpupart__peak_freed(gpupart_partition *p) { lower_charge(p, SLACK_GRANULES * p->dev->granularity); }

/* A partition that goes away returns its charge (no lock: nothing else can reach it). */
void gpupart__peak_leave(gpupart_partition *p) {
  atomic_fetch_sub(&p->dev->charged, p->charge);
  p->charge = 0;
}

uint64_t gpupart__peak_in_use(gpupart_device *dev) {
  return atomic_load_explicit(&dev->peak_in_use, memory_order_relaxed);
}

/* Device slow lock held. Every partition lock is taken, so no crossing runs meanwhile:
 * the charges are tightened and the peak set to their sum. */
void gpupart__peak_reset(gpupart_device *dev) {
  for (uint32_t i = 0; i < dev->nparts; i++) gpupart__lock_acquire(&dev->parts[i]->lock);
  for (uint32_t i = 0; i < dev->nparts; i++) lower_charge(dev->parts[i], 0);
  atomic_store(&dev->peak_in_use, atomic_load(&dev->charged));
  for (uint32_t i = dev->nparts; i > 0; i--) gpupart__lock_release(&dev->parts[i - 1]->lock);
}
