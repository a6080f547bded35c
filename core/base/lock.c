/* The partition lock's paths out of line (lock.h): the spinlock, the first claim of a
 * bias, its revocation by the first other thread, and the thread tokens. The barrier that
 * makes a revocation safe is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED): the process
 * registers for it once, the first time a lock is made, and where the kernel refuses
 * (too old, or a seccomp filter) no lock is ever biased. The registration belongs to the
 * address space, so a forked child keeps it; should the expedited barrier fail later all
 * the same, the global one (MEMBARRIER_CMD_GLOBAL) stands in, and failing both the
 * process stops with a message rather than let two threads in. */
#include "lock.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

_Thread_local uint64_t gpupart__lock_self __attribute__((tls_model("initial-exec")));

static _Atomic uint64_t next_token = 1;
static int can_bias;    /* membarrier works in this process: set once by probe */
static int forbid_bias; /* gpupart__lock_forbid_bias: as where membarrier is refused */

static int membarrier(int cmd) { return (int)syscall(SYS_membarrier, cmd, 0, 0); }

static void probe(void) {
  if (forbid_bias) return;
  can_bias =
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

void gpupart__lock_forbid_bias(void) { forbid_bias = 1; }

void gpupart__lock_init(gpupart__lock *l, int unsynchronized) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, probe);
  atomic_init(&l->held, 0);
  atomic_init(&l->biased_to, GPUPART__LOCK_NO_OWNER);
  atomic_init(&l->biased_in, 0);
  atomic_init(&l->revoked, !can_bias);
  atomic_init(&l->unsync_inside, 0);
  l->unsynchronized = unsynchronized;
  l->visiting = 0;
}

static uint64_t self(void) {
  if (!gpupart__lock_self) gpupart__lock_self = atomic_fetch_add_explicit(&next_token, 1, memory_order_relaxed);
  return gpupart__lock_self;
}

/* Every CPU that runs a thread of this process executes a full barrier before it returns. */
static void process_barrier(void) {
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  if (membarrier(MEMBARRIER_CMD_GLOBAL) == 0) return;
  fputs("gpupart: membarrier failed after it worked: a biased partition lock cannot be revoked safely\n", stderr);
  abort();
}

/* Spinlock held, the bias another thread's: it is off for good once the owner is out. */
static void revoke_bias(gpupart__lock *l) {
  atomic_store(&l->revoked, 1);
  process_barrier();
  for (unsigned spins = 0; atomic_load_explicit(&l->biased_in, memory_order_acquire); spins++)
    if (spins >= 64) sched_yield();
}

static int spin_try(gpupart__lock *l) {
  return !atomic_load_explicit(&l->held, memory_order_relaxed) &&
         !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}

/* Without NDEBUG an unsynchronized lock checks its contract: one thread inside at a time. */
static void unsync_enter(gpupart__lock *l) {
#ifndef NDEBUG
  if (atomic_exchange(&l->unsync_inside, 1)) {
    fputs("gpupart: two threads used a GPUPART_PARTITION_UNSYNCHRONIZED partition at once\n", stderr);
    abort();
  }
#else
  (void)l;
#endif
}

void gpupart__lock_acquire_slow(gpupart__lock *l, int claim) {
  if (l->unsynchronized) {
    unsync_enter(l);
    return;
  }
  uint64_t me = self();
  for (unsigned spins = 0; !spin_try(l); spins++)
    if (spins >= 64) sched_yield();
  if (atomic_load_explicit(&l->revoked, memory_order_relaxed)) return;
  uint64_t owner = atomic_load_explicit(&l->biased_to, memory_order_relaxed);
  if (owner == GPUPART__LOCK_NO_OWNER) {
    if (claim == GPUPART__LOCK_CLAIM) atomic_store_explicit(&l->biased_to, me, memory_order_relaxed);
  } else if (owner != me) {
    revoke_bias(l);
    l->visiting = claim == GPUPART__LOCK_VISIT;
  }
}

void gpupart__lock_release_slow(gpupart__lock *l) {
  if (!l->unsynchronized) {
    if (l->visiting) { /* what the visitor read is read: the owner may enter by its bias again */
      l->visiting = 0;
      atomic_store_explicit(&l->revoked, 0, memory_order_release);
    }
    atomic_store_explicit(&l->held, 0, memory_order_release);
    return;
  }
#ifndef NDEBUG
  atomic_store(&l->unsync_inside, 0);
#endif
}
