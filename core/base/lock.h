/* The partition lock: a test-and-test-and-set spinlock that yields the processor when it
 * spins for long. The allocation fast path holds it for a few dozen nanoseconds, where a
 * pthread mutex's second atomic operation on unlock would be a measurable share of the
 * cost. No driver call runs under it (they run under the device's sleeping slow lock);
 * waiters still back off with sched_yield after a while. */
#ifndef GPUPART_CORE_LOCK_H
#define GPUPART_CORE_LOCK_H

#include <sched.h>
#include <stdatomic.h>

typedef struct gpupart__lock {
  atomic_int held;
} gpupart__lock;

static inline void gpupart__lock_init(gpupart__lock *l) { atomic_init(&l->held, 0); }

static inline int gpupart__lock_try(gpupart__lock *l) {
  return !atomic_load_explicit(&l->held, memory_order_relaxed) &&
         !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}

static inline void gpupart__lock_acquire(gpupart__lock *l) {
  for (unsigned spins = 0; !gpupart__lock_try(l); spins++)
    if (spins >= 64) sched_yield();
}

static inline void gpupart__lock_release(gpupart__lock *l) { atomic_store_explicit(&l->held, 0, memory_order_release); }

#endif
