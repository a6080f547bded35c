/* Give-back requests across the processes of a shared ledger, answered without waiting
 * for the asked process's next call: asking bumps the header's trim counter (which a
 * process's next slow path compares, as before) and its wake word, a 32-bit futex word
 * of the shared mapping on which each process's responder thread (core/trim.c) sleeps;
 * FUTEX_WAKE then wakes every one of them, in every process that maps the file. The word
 * is only ever compared for a change, so any value written into it is legal; every wait
 * is bounded, and a responder that was not there (stopped, or a program without one)
 * simply answers at its next call. And the floors' shortfall: what the partitions'
 * guarantees lack because others hold the bytes, which the responders give back. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_impl.h"

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

void gpupart__shm_wake_all(shm_ledger *L) {
  __atomic_add_fetch(&L->h->wake, 1, __ATOMIC_RELEASE);
  futex(&L->h->wake, FUTEX_WAKE, INT_MAX, NULL); /* shared: keyed by the file, so every process's waiters */
}

void gpupart__shm_ask_trim(gpupart__ledger *l) {
  shm_ledger *L = (shm_ledger *)l;
  if (L->inherited) return;
  __atomic_add_fetch(&L->h->trim_asked, 1, __ATOMIC_RELEASE);
  gpupart__shm_wake_all(L);
}

uint32_t gpupart__shm_wake_seen(gpupart__ledger *l) {
  return __atomic_load_n(&((shm_ledger *)l)->h->wake, __ATOMIC_ACQUIRE);
}

void gpupart__shm_wake_local(gpupart__ledger *l) { futex(&((shm_ledger *)l)->h->wake, FUTEX_WAKE, INT_MAX, NULL); }

/* A wake without a change (wake_local, another process's stop, a spurious one) or a
 * time-out is 0: the caller looks at its own flags and waits again. */
int gpupart__shm_wait_asked(gpupart__ledger *l, uint32_t *seen, int timeout_ms) {
  shm_ledger *L = (shm_ledger *)l;
  uint32_t now = __atomic_load_n(&L->h->wake, __ATOMIC_ACQUIRE);
  if (now == *seen && !__atomic_load_n(&L->lost, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    futex(&L->h->wake, FUTEX_WAIT, *seen, &ts); /* EAGAIN: it moved already; ETIMEDOUT; EINTR */
    now = __atomic_load_n(&L->h->wake, __ATOMIC_ACQUIRE);
  }
  if (now == *seen) return 0;
  *seen = now;
  return 1;
}

int64_t gpupart__shm_shortfall(gpupart__ledger *l) {
  shm_ledger *L = (shm_ledger *)l;
  int rc = L->inherited ? 0 : gpupart__shm_lock(L);
  if (rc) return rc;
  if (!L->inherited) gpupart__shm_reap(L); /* the dead's bytes are back at once */
  uint64_t taken = gpupart__shm_add(L->h->reserved, L->h->unused);
  uint64_t lack = gpupart__shm_sub0(taken, L->h->budget);
  if (!L->inherited) gpupart__shm_unlock(L);
  return lack > INT64_MAX ? INT64_MAX : (int64_t)lack;
}
