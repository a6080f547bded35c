/* What guards a process from its shared ledgers' files (shm_impl.h):
 *  - A file truncated under a live member (by another process, or by hand) would kill it
 *    with SIGBUS at its next touch of a page past the new end, and the counters are
 *    written without the lock, so no check at locking can prevent that. While a shared
 *    ledger is mapped, a SIGBUS handler looks at the faulting address: inside one of the
 *    library's ledger mappings, it replaces that mapping with anonymous memory of the same
 *    size (MAP_FIXED, so every pointer into it stays valid), marks the ledger lost and
 *    returns, and the access runs on; the next ledger call fails with a clear ECORRUPT.
 *    Any other SIGBUS goes to the handler that was there before (or, when that was the
 *    default, to the default action). The handler is installed with the first guarded
 *    mapping and removed with the last, unless the program installed its own since.
 *  - A child forked after a ledger was attached shares its open file description, so its
 *    lock and its members' liveness bytes: a pthread_atfork child handler closes the
 *    child's references (the parent's member then dies with the parent, not with the
 *    child) and marks the attachment inherited, so that the child, who is no member,
 *    never changes the parent's shares. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "shm_impl.h"

#define GUARDS 256u /* ledger mappings one process may have at once */

typedef struct guard {
  uintptr_t start; /* atomic; 0 = free */
  shm_ledger *L;
} guard;

static guard guards[GUARDS];
static pthread_mutex_t guards_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous;
static int installed; /* guarded by guards_lock */

static void replace(uintptr_t start) {
  mmap((void *)start, sizeof(shm_header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* A SIGBUS the library has no part in: the previous handler's, as if it were alone. */
static void pass_on(int sig, siginfo_t *si, void *context) {
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, si, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigaction(sig, &dfl, NULL); /* a fault runs again into the default action; a sent signal is raised anew */
  raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *context) {
  uintptr_t at = (uintptr_t)si->si_addr;
  for (uint32_t i = 0; i < GUARDS; i++) {
    uintptr_t start = __atomic_load_n(&guards[i].start, __ATOMIC_ACQUIRE);
    if (!start || at < start || at - start >= sizeof(shm_header)) continue;
    replace(start);
    shm_ledger *L = __atomic_load_n(&guards[i].L, __ATOMIC_RELAXED);
    if (L) __atomic_store_n(&L->lost, 1, __ATOMIC_RELAXED);
    return;
  }
  pass_on(sig, si, context);
}

/* guards_lock held. */
static void install_locked(void) {
  if (installed) return;
  struct sigaction ours = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK};
  sigemptyset(&ours.sa_mask);
  installed = sigaction(SIGBUS, &ours, &previous) == 0;
}

/* guards_lock held: the handler goes with the last guard, unless another replaced it. */
static void uninstall_locked(void) {
  for (uint32_t i = 0; i < GUARDS; i++)
    if (guards[i].start) return;
  struct sigaction now;
  if (installed && sigaction(SIGBUS, NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus)
    sigaction(SIGBUS, &previous, NULL);
  installed = 0;
}

/* ---- forks ---- */

static void before_fork(void) { pthread_mutex_lock(&guards_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&guards_lock); }

/* In the child, alone: it drops its references to every attached file. */
static void after_fork_child(void) {
  for (uint32_t i = 0; i < GUARDS; i++) {
    shm_ledger *L = guards[i].L;
    if (!guards[i].start || !L || L->inherited) continue;
    L->inherited = 1;
    for (uint32_t k = 0; k < SHM_MEMBERS; k++) {
      if (L->proxy[k].fd >= 0) close(L->proxy[k].fd);
      L->proxy[k].fd = -1;
    }
    if (L->fd >= 0) close(L->fd);
    L->fd = -1;
  }
  pthread_mutex_unlock(&guards_lock);
}

static void watch_forks(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

int gpupart__shm_guard(shm_ledger *L, void *h) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, watch_forks);
  pthread_mutex_lock(&guards_lock);
  uint32_t i = 0;
  while (i < GUARDS && guards[i].start) i++;
  if (i < GUARDS) {
    __atomic_store_n(&guards[i].L, L, __ATOMIC_RELAXED);
    __atomic_store_n(&guards[i].start, (uintptr_t)h, __ATOMIC_RELEASE);
    install_locked();
  }
  pthread_mutex_unlock(&guards_lock);
  if (i == GUARDS)
    return gpupart__fail(GPUPART_ENOMEM, "ledger %s: this process maps %u shared ledgers already", L->path, GUARDS);
  return GPUPART_OK;
}

void gpupart__shm_unguard(shm_ledger *L, const void *h) {
  pthread_mutex_lock(&guards_lock);
  for (uint32_t i = 0; i < GUARDS; i++)
    if (guards[i].L == L && (!h || guards[i].start == (uintptr_t)h)) {
      __atomic_store_n(&guards[i].start, 0, __ATOMIC_RELEASE);
      __atomic_store_n(&guards[i].L, NULL, __ATOMIC_RELAXED);
    }
  uninstall_locked();
  pthread_mutex_unlock(&guards_lock);
}

void gpupart__shm_bury(shm_ledger *L) {
  replace((uintptr_t)L->h);
  __atomic_store_n(&L->lost, 1, __ATOMIC_RELAXED);
}

int gpupart__shm_map(int fd, const char *path, shm_header **out) {
  *out = mmap(NULL, sizeof **out, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*out != MAP_FAILED) return GPUPART_OK;
  *out = NULL;
  return gpupart__fail(GPUPART_ECONFIG, "ledger %s: mmap: %s", path, strerror(errno));
}
