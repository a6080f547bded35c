/* The partition lock: a biased lock. The allocation fast path holds it for a few dozen
 * nanoseconds, where one locked read-modify-write instruction (about 5 ns) is a large
 * share of the cost, so the first thread that allocates through a lock owns its bias and from then on
 * enters with two plain stores and a load: no locked instruction while no other thread
 * comes. The first other thread revokes the bias once, for good, with a process-wide
 * barrier (membarrier, lock.c); from then on every thread takes the lock through a
 * test-and-test-and-set spinlock that yields the processor when it spins for long. Where
 * membarrier is unavailable no lock is ever biased. No driver call runs under it (they run
 * under the device's sleeping slow lock).
 *
 * Why the owner's path is enough (a store-buffer, or Dekker, argument): the owner stores
 * biased_in = 1, then loads revoked; the revoker stores revoked = 1, then runs a barrier
 * on every CPU that runs a thread of the process (membarrier), then loads biased_in.
 * Either the owner's load ran after that barrier on its CPU, and sees revoked (the
 * revoker's store preceded the barrier), or its store preceded the barrier and the
 * revoker sees biased_in = 1 and waits for the owner's release; a thread that was not
 * running had its stores made visible by the context switch. Only the thread holding the
 * spinlock revokes or claims a bias, so claims and revocations never race. Tokens name
 * threads and are never reused, so a thread that exits leaves a bias no other thread can
 * take for its own; the next other thread revokes it.
 *
 * Only the allocation paths claim a bias (gpupart__lock_acquire_bias): a thread that
 * creates or inspects a partition does not take it from the thread that allocates.
 *
 * A reader of statistics on another thread visits (gpupart__lock_acquire_visit): it
 * takes the spinlock and revokes the bias as above, so what it reads is exact (the
 * owner is out and stays out), but only for its visit: its release lifts the
 * revocation, and the owner's next entry is by its bias again. The cost is the
 * visitor's: one process-wide barrier per visit, none on the owner's path. The owner,
 * should it come during a visit, waits on the spinlock. A visit never lifts a
 * revocation it did not make (a lock already revoked for good, or never biased).
 *
 * An unsynchronized lock (GPUPART_PARTITION_UNSYNCHRONIZED) does nothing: its caller
 * serialises every call on the partition. Builds without NDEBUG catch two threads inside
 * at once and abort with a message. */
#ifndef GPUPART_CORE_LOCK_H
#define GPUPART_CORE_LOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define GPUPART__LOCK_NO_OWNER UINT64_MAX /* biased_to before any thread took the lock */

typedef struct gpupart__lock {
  atomic_int held;            /* the spinlock: 1 while a thread holds the lock through it */
  _Atomic uint64_t biased_to; /* the owning thread's token; set once, under the spinlock */
  atomic_int biased_in;       /* written by the owner only: 1 while it holds the lock by bias */
  atomic_int revoked;         /* set under the spinlock: the bias is off, for good or during a visit */
  int visiting;               /* under the spinlock: a visitor revoked the bias and lifts it at release */
  int unsynchronized;         /* set at init: the caller serialises (no lock at all) */
  atomic_int unsync_inside;   /* without NDEBUG: 1 while a thread is inside an unsynchronized lock */
} gpupart__lock;

/* This thread's token (nonzero once assigned by lock.c; 0 before its first slow path).
 * initial-exec: read at a fixed offset from the thread pointer, where the default model
 * would call __tls_get_addr twice per operation in the shared library; 8 bytes of the
 * static TLS that the C library keeps for libraries loaded with dlopen. */
extern _Thread_local uint64_t gpupart__lock_self __attribute__((tls_model("initial-exec")));

void gpupart__lock_init(gpupart__lock *l, int unsynchronized);
/* Before the process's first lock only: no lock will be biased, as where membarrier is
 * refused (the tests of that case). */
void gpupart__lock_forbid_bias(void);
/* The paths out of line (lock.c): the spinlock, the claim and the revocation. claim:
 * GPUPART__LOCK_CLAIM takes an unowned lock's bias, GPUPART__LOCK_VISIT revokes another
 * thread's only until the release, 0 neither. */
enum { GPUPART__LOCK_CLAIM = 1, GPUPART__LOCK_VISIT = 2 };
void gpupart__lock_acquire_slow(gpupart__lock *l, int claim);
void gpupart__lock_release_slow(gpupart__lock *l);

/* Enters by the bias, if this thread owns it and it stands (or, with NDEBUG, an
 * unsynchronized lock): nonzero when in, and then gpupart__lock_leave_bias drops it; 0
 * with nothing taken, so that the fused allocation paths choose their own way on a miss
 * (alloc.c). */
static inline int gpupart__lock_try_bias(gpupart__lock *l) {
#ifdef NDEBUG
  if (__builtin_expect(l->unsynchronized, 0)) return 1;
#endif
  if (__builtin_expect(atomic_load_explicit(&l->biased_to, memory_order_relaxed) == gpupart__lock_self, 1)) {
    atomic_store_explicit(&l->biased_in, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the store before the load; membarrier does the rest */
    if (__builtin_expect(!atomic_load_explicit(&l->revoked, memory_order_acquire), 1)) return 1;
    atomic_store_explicit(&l->biased_in, 0, memory_order_release);
  }
  return 0;
}

/* Drops a lock entered by its bias. An unsynchronized lock's biased_in is never 1, so
 * storing 0 over it changes nothing. */
static inline void gpupart__lock_leave_bias(gpupart__lock *l) {
  atomic_store_explicit(&l->biased_in, 0, memory_order_release);
}

/* Takes the lock; returns nonzero when it entered by its bias (gpupart__lock_try_bias),
 * when gpupart__lock_leave's release is one plain store. */
static inline int gpupart__lock_enter(gpupart__lock *l, int claim) {
  if (__builtin_expect(gpupart__lock_try_bias(l), 1)) return 1;
  gpupart__lock_acquire_slow(l, claim);
  return 0;
}

/* Drops a lock taken by gpupart__lock_enter in the same function, given its answer. */
static inline void gpupart__lock_leave(gpupart__lock *l, int by_bias) {
  if (__builtin_expect(by_bias, 1)) gpupart__lock_leave_bias(l);
  else gpupart__lock_release_slow(l);
}

/* The allocation paths: an unowned lock becomes this thread's (its bias). */
static inline void gpupart__lock_acquire_bias(gpupart__lock *l) { (void)gpupart__lock_enter(l, GPUPART__LOCK_CLAIM); }

/* Every other path (creation, stats, checks, the peak, growth): it takes the lock as the
 * owner does where it is the owner, and never claims an unowned lock, so a partition made
 * or inspected on one thread and used by another is biased to the one that allocates. */
static inline void gpupart__lock_acquire(gpupart__lock *l) { (void)gpupart__lock_enter(l, 0); }

/* A reader of statistics: as gpupart__lock_acquire, but another thread's bias is revoked
 * only until gpupart__lock_release (see above). */
static inline void gpupart__lock_acquire_visit(gpupart__lock *l) { (void)gpupart__lock_enter(l, GPUPART__LOCK_VISIT); }

static inline void gpupart__lock_release(gpupart__lock *l) {
#ifdef NDEBUG
  if (__builtin_expect(l->unsynchronized, 0)) return;
#endif
  if (__builtin_expect(atomic_load_explicit(&l->biased_to, memory_order_relaxed) == gpupart__lock_self, 1) &&
      atomic_load_explicit(&l->biased_in, memory_order_relaxed)) {
    atomic_store_explicit(&l->biased_in, 0, memory_order_release);
    return;
  }
  gpupart__lock_release_slow(l);
}

#endif
