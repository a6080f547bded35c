/* Giving driver memory back beyond one partition: the backend's own caches (its optional
 * trim); with a shared ledger, the requests processes make of each other (the OOM
 * sequence and a new floor ask; every other process gives its partitions' empty blocks
 * back, then runs the reclaim callbacks of partitions above their guarantee while a floor
 * still lacks bytes); the responder, one thread per shared device handle that answers
 * those requests when they come (woken through the ledger's wake word) rather than at the
 * handle's next slow-path call; and the wait of a new floor for its bytes, bounded, then
 * a refusal that names who holds them.
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

/* Shared ledger: when another process asked for a trim (its OOM sequence) since this
 * handle last looked, every partition of the handle releases its empty blocks. One atomic
 * load when nobody asked. Device slow lock held. */
void gpupart__device_honour_trim_locked(gpupart_device *dev) {
  gpupart__ledger *l = dev->ledger;
  if (!l->ops->trim_asked || !l->ops->trim_asked(l, &dev->trim_seen)) return;
  release_all_locked(dev);
}

/* Shared ledger: asks the other processes of the device to trim, and wakes their
 * responders. */
void gpupart__device_ask_trim(gpupart_device *dev) {
  if (dev->ledger->ops->ask_trim) dev->ledger->ops->ask_trim(dev->ledger);
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

static int64_t shortfall(gpupart_device *dev) {
  return dev->ledger->ops->shortfall ? dev->ledger->ops->shortfall(dev->ledger) : 0;
}

static uint64_t in_use_of(gpupart_partition *c) {
  gpupart__lock_acquire(&c->lock);
  uint64_t v = c->c.in_use;
  gpupart__lock_release(&c->lock);
  return v;
}

/* Calls c's reclaim callback for what the floors lack (at most what c holds past its
 * guarantee), no gpupart lock held, then lets the blocks it emptied go. c's busy flag is
 * taken and the allocating counts raised by the caller. */
static void reclaim_one(gpupart_device *dev, gpupart_partition *c, uint64_t lack) {
  gpupart__ledger_figures f;
  dev->ledger->ops->get(dev->ledger, c->account, &f);
  uint64_t above = f.reserved > f.guarantee ? f.reserved - f.guarantee : 0;
  uint64_t wanted = lack < above ? lack : above, before = in_use_of(c);
  c->reclaim(c, wanted, c->reclaim_user);
  uint64_t after = in_use_of(c);
  gpupart__event_reclaim(dev, c->name, "a floor's give-back request", wanted, before > after ? before - after : 0);
  atomic_flag_clear(&c->reclaim_busy);
  pthread_mutex_lock(&dev->slow);
  if (gpupart__arena_release_empty(c)) gpupart__device_trim_locked(dev);
  pthread_mutex_unlock(&dev->slow);
}

/* No gpupart lock held: one round of the reclaim callbacks of this handle's partitions
 * above their guarantee while the ledger's floors lack bytes; whether it gave any back. */
static int reclaim_round(gpupart_device *dev, int64_t lack) {
  int64_t first = lack;
  for (uint32_t i = 0; lack > 0; lack = shortfall(dev)) {
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
static void reclaim_for_floors(gpupart_device *dev) {
  int64_t lack = shortfall(dev);
  while (lack > 0 && reclaim_round(dev, lack)) lack = shortfall(dev);
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
    pthread_mutex_unlock(&dev->slow);
    reclaim_for_floors(dev);
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

/* Waits, at most GPUPART__FLOOR_WAIT_MS, until nothing lacks (or the ledger fails):
 * the other processes' responders are at work. */
static int64_t wait_for_floor(gpupart_device *dev, uint64_t *waited) {
  uint64_t start = now_ms();
  int64_t lack = shortfall(dev);
  for (unsigned pause_us = 500; lack > 0 && now_ms() - start < GPUPART__FLOOR_WAIT_MS; lack = shortfall(dev)) {
    usleep(pause_us);
    if (pause_us < 16000) pause_us *= 2;
  }
  *waited = now_ms() - start;
  return lack;
}

static int refuse_floor(gpupart_device *dev, const gpupart_partition *p, uint64_t guarantee, int64_t lack,
                        uint64_t returned, uint64_t waited) {
  char who[1024], how[256];
  gpupart__ledger *l = dev->ledger;
  l->ops->holders(l, p->account, GPUPART__REFUSED_BUDGET, who, sizeof who);
  if (l->shared)
    snprintf(how, sizeof how,
             "give-back was asked of every process of the ledger: %" PRIu64 " bytes came back in %" PRIu64
             " ms, and a process that is stopped, or runs without its responder (GPUPART_RESPONDER=0) and makes "
             "no gpupart call, does not answer",
             returned, waited);
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
  release_all_locked(dev);
  pthread_mutex_unlock(&dev->slow);
  reclaim_for_floors(dev); /* this process's own, whatever the ledger */
  uint64_t waited = 0;
  if ((lack = shortfall(dev)) > 0 && dev->ledger->shared) {
    gpupart__device_ask_trim(dev);
    lack = wait_for_floor(dev, &waited);
  }
  gpupart__ledger_report(dev->ledger);
  if (lack <= 0) return (int)lack;
  return refuse_floor(dev, p, guarantee, lack, first > lack ? (uint64_t)(first - lack) : 0, waited);
}
