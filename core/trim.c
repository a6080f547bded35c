/* Giving driver memory back beyond one partition: the backend's own caches (its optional
 * trim); with a shared ledger, the requests processes make of each other (a new floor, a
 * growth the budget refused): each names the bytes it needs and its priority
 * (core/ledger/shm_request.c), and every other process gives back its partitions' empty
 * blocks, largest first and only from partitions above their guarantee, until what the
 * live requests lack together is met, then runs the reclaim callbacks of partitions
 * above their guarantee for what is still lacking; the responder, one thread per shared
 * device handle that answers those requests when they come (woken through the ledger's
 * wake word) rather than at the handle's next slow-path call; and the wait of a new
 * floor for its bytes, bounded (GPUPART__REQUEST_WAIT_MS), then a refusal that says it
 * timed out and names who holds them. The old unsized request (a resize from outside that
 * shrinks a partition) still gives every empty block back.
 *
 * Threads and locks: the responder takes the device's slow lock to release empty blocks
 * (as a growth would) and runs reclaim callbacks with no gpupart lock held, each
 * partition's at most once at a time (its busy flag, as in the OOM sequence), with the
 * device's and the partition's allocating counts raised so that neither can go while it
 * runs. It never touches a partition lock's fast path other than to read in_use. */
#include "trim.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "error.h"
#include "events.h"
#include "internal.h"

int gpupart__device_trim_locked(gpupart_device *dev) {
  int (*trim)(void *) = GPUPART__BACKEND_OP(dev->ops, trim);
  return trim ? trim(dev->bdev) : GPUPART_OK; /* none: the backend keeps no driver-side caches */
}

/* Device slow lock held: every partition's empty blocks go, and the backend's caches. */
static uint64_t release_all_locked(gpupart_device *dev) {
  uint64_t released = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) released += gpupart__arena_release_empty(dev->parts[i]);
  if (released) gpupart__device_trim_locked(dev);
  return released;
}

static int64_t shortfall(gpupart_device *dev) {
  return dev->ledger->ops->shortfall ? dev->ledger->ops->shortfall(dev->ledger) : 0;
}

/* What the live requests lack together (in-process: the floors' shortfall). */
static int64_t lack_all(gpupart_device *dev) {
  gpupart__ledger *l = dev->ledger;
  return l->ops->lack_all ? l->ops->lack_all(l) : shortfall(dev);
}

static int above_guarantee(gpupart_device *dev, gpupart_partition *c) {
  gpupart__ledger_figures f;
  dev->ledger->ops->get(dev->ledger, c->account, &f);
  return f.reserved > f.guarantee;
}

/* Device slow lock held: the partition above its guarantee with the largest empty block
 * (a block of one at or below its guarantee frees nothing: its unused guarantee grows by
 * as much), or NULL. */
static gpupart_partition *largest_holder(gpupart_device *dev) {
  gpupart_partition *best = NULL;
  uint64_t size = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) {
    gpupart_partition *c = dev->parts[i];
    uint64_t s = gpupart__arena_largest_empty(c);
    if (s > size && above_guarantee(dev, c)) {
      best = c;
      size = s;
    }
  }
  return best;
}

/* Device slow lock held: empty blocks go, largest first, until the requests lack
 * nothing; then, if they still lack, expandable partitions' mapped empty tails. */
static void give_back_blocks_locked(gpupart_device *dev) {
  uint64_t released = 0;
  int64_t lack = lack_all(dev);
  for (gpupart_partition *c; lack > 0 && (c = largest_holder(dev)); lack = lack_all(dev))
    released += gpupart__arena_release_largest(c);
  for (uint32_t i = 0; lack > 0 && i < dev->nparts; i++) {
    if (!dev->parts[i]->arena.vm || !above_guarantee(dev, dev->parts[i])) continue;
    released += gpupart__arena_release_empty(dev->parts[i]);
    lack = lack_all(dev);
  }
  if (released) gpupart__device_trim_locked(dev);
}

/* Shared ledger: when another process asked for a trim (a resize shrinking a partition)
 * since this handle last looked, every partition of the handle releases its empty
 * blocks; when one posted a sized request, the blocks it lacks go. One atomic load each
 * when nobody asked. Device slow lock held. */
void gpupart__device_honour_trim_locked(gpupart_device *dev) {
  gpupart__ledger *l = dev->ledger;
  if (l->ops->trim_asked && l->ops->trim_asked(l, &dev->trim_seen)) release_all_locked(dev);
  if (l->ops->posted && l->ops->posted(l, &dev->posted_seen)) give_back_blocks_locked(dev);
}

/* Shared ledger: asks the other processes of the device for everything cached, and
 * wakes their responders. */
void gpupart__device_ask_trim(gpupart_device *dev) {
  if (dev->ledger->ops->ask_trim) dev->ledger->ops->ask_trim(dev->ledger);
}

/* One request per handle at a time: a newer one replaces it. */
void gpupart__device_ask_bytes(gpupart_device *dev, uint64_t need, uint32_t priority) {
  gpupart__ledger *l = dev->ledger;
  if (!l->ops->post) return;
  gpupart__device_asked_enough(dev);
  l->ops->post(l, need, priority, GPUPART__REQUEST_WAIT_MS, &dev->growth_ticket);
}

void gpupart__device_asked_enough(gpupart_device *dev) {
  if (!dev->growth_ticket) return;
  dev->ledger->ops->withdraw(dev->ledger, dev->growth_ticket);
  dev->growth_ticket = 0;
}

gpupart_partition *gpupart__device_claim_reclaimer(gpupart_device *dev, const gpupart_partition *p, int own,
                                                   uint32_t *i) {
  for (; *i < dev->nparts; (*i)++) {
    gpupart_partition *c = dev->parts[*i];
    if (!c->reclaim || (own ? c != p : c == p)) continue;
    gpupart__ledger_figures f;
    dev->ledger->ops->get(dev->ledger, c->account, &f);
    if (!own && f.reserved <= f.guarantee) continue;
    if (!atomic_flag_test_and_set(&c->reclaim_busy)) {
      (*i)++;
      return c;
    }
  }
  return NULL;
}

static uint64_t in_use_of(gpupart_partition *c) {
  gpupart__lock_acquire(&c->lock);
  uint64_t v = c->c.in_use;
  gpupart__lock_release(&c->lock);
  return v;
}

/* Calls c's reclaim callback for what the requests lack (at most what c holds past its
 * guarantee), no gpupart lock held, then lets the blocks it emptied go. c's busy flag is
 * taken and the allocating counts raised by the caller. */
static void reclaim_one(gpupart_device *dev, gpupart_partition *c, uint64_t lack) {
  gpupart__ledger_figures f;
  dev->ledger->ops->get(dev->ledger, c->account, &f);
  uint64_t above = f.reserved > f.guarantee ? f.reserved - f.guarantee : 0;
  uint64_t wanted = lack < above ? lack : above, before = in_use_of(c);
  c->reclaim(c, wanted, c->reclaim_user);
  uint64_t after = in_use_of(c);
  gpupart__event_reclaim(dev, c->name, "a give-back request", wanted, before > after ? before - after : 0);
  atomic_flag_clear(&c->reclaim_busy);
  pthread_mutex_lock(&dev->slow);
  if (gpupart__arena_release_empty(c)) gpupart__device_trim_locked(dev);
  pthread_mutex_unlock(&dev->slow);
}

/* No gpupart lock held: one round of the reclaim callbacks of this handle's partitions
 * above their guarantee while the ledger's requests lack bytes; whether it gave any
 * back. */
static int reclaim_round(gpupart_device *dev, int64_t lack) {
  int64_t first = lack;
  for (uint32_t i = 0; lack > 0; lack = lack_all(dev)) {
    pthread_mutex_lock(&dev->slow);
    gpupart_partition *c = gpupart__device_claim_reclaimer(dev, NULL, 0, &i);
    if (c) {
      atomic_fetch_add(&c->allocating, 1);
      atomic_fetch_add(&dev->allocating, 1);
    }
    pthread_mutex_unlock(&dev->slow);
    if (!c) break;
    reclaim_one(dev, c, (uint64_t)lack);
    atomic_fetch_sub(&c->allocating, 1);
    atomic_fetch_sub(&dev->allocating, 1);
  }
  return lack < first;
}

/* Rounds again while a round gives bytes back (a callback may return less than asked):
 * each round must bring the shortfall down, so this ends. */
static void reclaim_for_requests(gpupart_device *dev) {
  int64_t lack = lack_all(dev);
  while (lack > 0 && reclaim_round(dev, lack)) lack = lack_all(dev);
}

/* ---- a preallocated partition grown from outside ---- */

void gpupart__partition_take_grown_locked(gpupart_partition *p) {
  if (!p->growth.prealloc) return;
  gpupart__ledger_figures f;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  uint64_t gap = f.limit > f.reserved ? (f.limit - f.reserved) & ~(p->dev->granularity - 1) : 0;
  if (!gap || f.limit == p->prealloc_tried) return;
  p->prealloc_tried = f.limit;
  (void)gpupart__arena_reserve_exact(p, gap, 1); /* refused: it keeps what it has, as at a failed own resize */
}

/* ---- the responder ---- */

static void *respond(void *arg) {
  gpupart_device *dev = arg;
  gpupart__ledger *l = dev->ledger;
  uint32_t seen = dev->responder_seen;
  while (!atomic_load(&dev->responder_stop)) {
    if (!l->ops->wait_asked(l, &seen, GPUPART__RESPONDER_WAIT_MS)) continue;
    pthread_mutex_lock(&dev->slow);
    gpupart__device_honour_trim_locked(dev);
    give_back_blocks_locked(dev); /* also a floor raised from outside, which posts nothing */
    for (uint32_t i = 0; i < dev->nparts; i++) gpupart__partition_take_grown_locked(dev->parts[i]);
    pthread_mutex_unlock(&dev->slow);
    reclaim_for_requests(dev);
    gpupart__ledger_report(l);
  }
  return NULL;
}

/* The thread takes no asynchronous signal: they stay the program's threads' to handle. A
 * fault it raises itself stays deliverable (the ledger's SIGBUS handler must see a
 * truncated file's: a blocked synchronous fault kills the process). */
int gpupart__device_responder_start(gpupart_device *dev) {
  gpupart__ledger *l = dev->ledger;
  if (!l->ops->wait_asked || !dev->settings.v[GPUPART__OPT_RESPONDER].u) return GPUPART_OK;
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, SIGBUS);
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGFPE);
  sigdelset(&all, SIGILL);
  dev->responder_seen = l->ops->wake_seen(l);
  atomic_store(&dev->responder_stop, 0);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&dev->responder, NULL, respond, dev);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc)
    return gpupart__fail(GPUPART_ENOMEM,
                         "device_open: cannot start the responder thread (error %d); "
                         "set GPUPART_RESPONDER=0 to do without it",
                         rc);
  dev->responder_pid = getpid();
  return GPUPART_OK;
}

/* In a child forked from the process that started it, the thread is not there: nothing
 * to stop (the child is no member of the ledger and answers nothing). */
void gpupart__device_responder_stop(gpupart_device *dev) {
  if (!dev->responder_pid) return;
  if (dev->responder_pid == getpid()) {
    atomic_store(&dev->responder_stop, 1);
    dev->ledger->ops->wake_local(dev->ledger);
    pthread_join(dev->responder, NULL);
  }
  dev->responder_pid = 0;
}

int gpupart__device_on_responder(const gpupart_device *dev) {
  return dev->responder_pid == getpid() && pthread_equal(pthread_self(), dev->responder);
}

/* ---- a new floor ---- */

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Posts the floor's request and waits, at most GPUPART__REQUEST_WAIT_MS, until it lacks
 * nothing (or the ledger fails): the other processes' responders are at work. A request
 * that found no free slot asked the unsized way; its lack is then the floors'. */
static int64_t wait_for_floor(gpupart_device *dev, uint64_t *waited) {
  gpupart__ledger *l = dev->ledger;
  uint64_t start = now_ms(), ticket = 0;
  l->ops->post(l, 0, GPUPART__PRIORITY_FLOOR, GPUPART__REQUEST_WAIT_MS, &ticket);
  int64_t lack = l->ops->lack(l, ticket);
  for (unsigned pause_us = 500; lack > 0 && now_ms() - start < GPUPART__REQUEST_WAIT_MS;
       lack = l->ops->lack(l, ticket)) {
    usleep(pause_us);
    if (pause_us < 16000) pause_us *= 2;
  }
  l->ops->withdraw(l, ticket);
  *waited = now_ms() - start;
  return lack;
}

static int refuse_floor(gpupart_device *dev, const gpupart_partition *p, uint64_t guarantee, int64_t lack,
                        uint64_t returned, uint64_t waited) {
  char who[1024], how[384];
  gpupart__ledger *l = dev->ledger;
  l->ops->holders(l, p->account, GPUPART__REFUSED_BUDGET, who, sizeof who);
  if (l->shared)
    snprintf(how, sizeof how,
             "give-back was asked of every process of the ledger (a request of the floor's priority) and timed out "
             "after %" PRIu64 " ms (the bound is %d ms): %" PRIu64
             " bytes came back, and a process that is stopped, or runs without its responder (GPUPART_RESPONDER=0) "
             "and makes no gpupart call, does not answer",
             waited, GPUPART__REQUEST_WAIT_MS, returned);
  else
    snprintf(how, sizeof how,
             "this process's other partitions gave back %" PRIu64 " bytes (empty blocks and reclaim callbacks)",
             returned);
  return gpupart__fail(GPUPART_EBUSY,
                       "partition_create: the guarantee of %" PRIu64 " bytes of '%s' cannot be honoured now: %" PRId64
                       " bytes of it are held by others (budget %" PRIu64 "): %s; %s",
                       guarantee, p->name, lack, gpupart__budget_now(dev), who, how);
}

int gpupart__device_make_room(gpupart_device *dev, const gpupart_partition *p, uint64_t guarantee) {
  int64_t first = shortfall(dev), lack = first;
  if (lack <= 0) return (int)lack;
  pthread_mutex_lock(&dev->slow);
  give_back_blocks_locked(dev);
  pthread_mutex_unlock(&dev->slow);
  reclaim_for_requests(dev); /* this process's own, whatever the ledger */
  uint64_t waited = 0;
  if ((lack = shortfall(dev)) > 0 && dev->ledger->shared) lack = wait_for_floor(dev, &waited);
  gpupart__ledger_report(dev->ledger);
  if (lack <= 0) return (int)lack;
  return refuse_floor(dev, p, guarantee, lack, first > lack ? (uint64_t)(first - lack) : 0, waited);
}
