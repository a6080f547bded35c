/* Taking and dropping a shared ledger's lock for one attachment (shm_impl.h): the
 * attachment's own mutex (its threads), then the file's lock word (shm_format.c),
 * each waited on for a bounded time; neither costs a system call when nobody holds it.
 * Each taking first checks what may have happened to the file since the last one:
 * truncated or made anew (the file is lost: its mapping is replaced with anonymous memory
 * and the call fails), deleted (its members move to a file made anew: shm_move.c),
 * a holder that died mid-update (the sequence word is odd: dead members are reaped and
 * every sum recomputed from the shares); then it marks the file as being changed, naming
 * this process, and applies the work queued while the lock could not be taken. Dead
 * members found are reported after the lock is dropped. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "shm_impl.h"

/* Until a taking succeeds again after one timed out (SHM_LOCK_WAIT_MS), the next ones wait
 * this long only, so a program whose ledger is wedged gets its errors promptly. */
#define SHM_STALLED_WAIT_MS 100

static int busy(shm_ledger *L, int waited) {
  char who[160], command[16];
  for (int i = 0; i < 16; i++) command[i] = __atomic_load_n(&L->h->holder_command[i], __ATOMIC_RELAXED);
  gpupart__shm_describe_holder(__atomic_load_n(&L->h->holder_pid, __ATOMIC_RELAXED), command, who, sizeof who);
  __atomic_store_n(&L->stalled, 1, __ATOMIC_RELAXED);
  return gpupart__fail(GPUPART_EBUSY,
                       "ledger %s: its lock has been held for more than %d ms by %s, as the file names "
                       "it (a stopped process?): the call fails rather than wait; the ledger works again once the "
                       "holder runs on or dies",
                       L->path, waited, who);
}

int gpupart__shm_lost(const shm_ledger *L) {
  return gpupart__fail(GPUPART_ECORRUPT,
                       "ledger %s was truncated or made anew under this process (by another "
                       "process or by hand): the device's shared accounting is lost here; close the device and open "
                       "it again",
                       L->path);
}

static uint64_t coarse_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Local mutex held: a reader asking the members to make way gets it (looked for once a
 * tick of the coarse clock; waited on for SHM_WAY_MS at most). A reader still asking
 * after that is stopped or gone astray: it is not looked for again for a second, so it
 * can slow the members a little, never hold them up. */
static void make_way(shm_ledger *L, uint64_t now) {
  if (now == L->way_looked || now < L->way_ignored_until) return;
  L->way_looked = now;
  struct timespec pause = {0, 100000};
  int i = 0;
  while (i < SHM_WAY_MS * 10 && gpupart__shm_way_asked(L->fd)) {
    nanosleep(&pause, NULL);
    i++;
  }
  if (i == SHM_WAY_MS * 10) L->way_ignored_until = now + 1000000000u;
}

/* The file's size and links, at most every SHM_LOOK_MS: 1 when *st was filled. */
static int look(shm_ledger *L, uint64_t now, struct stat *st) {
  if (L->looked && now - L->looked < (uint64_t)SHM_LOOK_MS * 1000000u) return 0;
  L->looked = now;
  return fstat(L->fd, st) == 0;
}

/* Lock held: the file as it is now. A file of another size or epoch is not the one mapped:
 * the mapping goes (reads and the counters' stores land in anonymous memory from then on). */
static int settle(shm_ledger *L, uint64_t now) {
  struct stat st;
  int have = look(L, now, &st);
  if (!__atomic_load_n(&L->lost, __ATOMIC_RELAXED) && have && (uint64_t)st.st_size != sizeof *L->h)
    gpupart__shm_bury(L);
  if (!__atomic_load_n(&L->lost, __ATOMIC_RELAXED) && L->h->epoch != L->epoch) gpupart__shm_bury(L);
  if (__atomic_load_n(&L->lost, __ATOMIC_RELAXED)) return gpupart__shm_lost(L);
  if (__atomic_load_n(&L->h->seq, __ATOMIC_ACQUIRE) & 1) { /* its last holder died changing it */
    gpupart__shm_reap(L);
    gpupart__shm_recompute(L->h);
  }
  gpupart__shm_mark_held(L, L->h);
  if (have && st.st_nlink == 0) gpupart__shm_move(L);
  if (__atomic_load_n(&L->queued, __ATOMIC_ACQUIRE)) gpupart__shm_apply_queued(L);
  return GPUPART_OK;
}

#if defined(__SANITIZE_THREAD__)
#define SHM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHM_TSAN 1
#endif
#endif

/* The attachment's mutex, waited on for ms at most: 0 once held. A ThreadSanitizer build
 * waits with pthread_mutex_timedlock (a CLOCK_REALTIME deadline) instead: TSan runtimes
 * before LLVM 18 do not intercept pthread_mutex_clocklock (llvm/llvm-project issue 62623),
 * so a contended taking went unseen and TSan reported the data the mutex guards as raced
 * (tests/tsan/tsan_responder.c); timedlock is intercepted by every TSan runtime. Same
 * mutex, same bound; only the clock of the deadline differs in that build. */
static int lock_local(shm_ledger *L, int ms) {
  if (pthread_mutex_trylock(&L->local) == 0) return 0;
#ifdef SHM_TSAN
  struct timespec deadline = gpupart__shm_deadline_on(CLOCK_REALTIME, ms);
  return pthread_mutex_timedlock(&L->local, &deadline);
#else
  struct timespec deadline = gpupart__shm_deadline(ms);
  return pthread_mutex_clocklock(&L->local, CLOCK_MONOTONIC, &deadline);
#endif
}

int gpupart__shm_lock(shm_ledger *L) {
  if (L->inherited)
    return gpupart__fail(GPUPART_EINVAL,
                         "ledger %s: this process is a child forked from the one that opened the "
                         "device, and no member of its shared ledger: its parent's partitions are not its own to "
                         "grow or release (open the device in the child)",
                         L->path);
  int wait = __atomic_load_n(&L->stalled, __ATOMIC_RELAXED) ? SHM_STALLED_WAIT_MS : SHM_LOCK_WAIT_MS;
  if (lock_local(L, wait) != 0) return busy(L, wait);
  uint64_t now = coarse_ns();
  make_way(L, now);
  if (gpupart__shm_lock_word(L->h, L->fd, L->attach + 1, wait) != 0) {
    pthread_mutex_unlock(&L->local);
    return busy(L, wait);
  }
  __atomic_store_n(&L->stalled, 0, __ATOMIC_RELAXED);
  int rc = settle(L, now);
  if (rc) {
    gpupart__shm_unlock_word(L->h);
    pthread_mutex_unlock(&L->local);
  }
  return rc;
}

/* Unlocks, keeping the dead members this holding of the lock reaped for the report op: the
 * ledger never calls out, and its callers may hold the device's or the context's lock. */
void gpupart__shm_unlock(shm_ledger *L) {
  uint32_t members = L->reaped;
  uint64_t bytes = L->reaped_bytes;
  L->reaped = 0;
  L->reaped_bytes = 0;
  gpupart__shm_mark_released(L->h);
  gpupart__shm_unlock_word(L->h);
  pthread_mutex_unlock(&L->local);
  if (!members) return;
  gpupart__lock_acquire(&L->pending_lock);
  L->pending += members;
  L->pending_bytes = gpupart__shm_add(L->pending_bytes, bytes);
  gpupart__lock_release(&L->pending_lock);
}
