/* The members of a shared ledger as one attachment sees them (shm_impl.h): whether
 * each member's process lives (it holds its byte's lock, or this attachment holds it for
 * the member as its proxy since a move), the reaping of the dead ones, and the marks a
 * holder of the lock leaves in the file (the sequence word, its pid and command) for
 * readers and for the next holder. All of it runs with the ledger's lock held. */
#include <fcntl.h>
#include <unistd.h>

#include "shm_impl.h"

/* The sequence word goes odd before any change and even after, as a seqlock's does: a
 * reader whose copy began and ended on one even value saw no change. */
void gpupart__shm_mark_held(const shm_ledger *L, shm_header *h) {
  uint64_t seq = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&h->seq, seq & 1 ? seq + 2 : seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&h->holder_pid, L->pid, __ATOMIC_RELAXED);
  for (int i = 0; i < 16; i++) __atomic_store_n(&h->holder_command[i], L->command[i], __ATOMIC_RELAXED);
}

void gpupart__shm_mark_released(shm_header *h) {
  uint64_t seq = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&h->holder_pid, 0, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&h->seq, seq & 1 ? seq + 1 : seq + 2, __ATOMIC_RELAXED);
}

void gpupart__shm_end_proxy(shm_ledger *L, uint32_t i) {
  shm_proxy *p = &L->proxy[i];
  if (p->fd < 0) return;
  gpupart__shm_member_lock(L->fd, i, F_UNLCK);
  close(p->fd);
  *p = (shm_proxy){.fd = -1};
}

/* A slot this attachment holds for another process (shm_move.c): alive while its
 * owner holds its byte in the file it came from, and until the owner took its place. */
static int proxy_alive(shm_ledger *L, uint32_t i) {
  shm_proxy *p = &L->proxy[i];
  int owner_here = L->h->member[i].id == p->id;
  if (owner_here && gpupart__shm_held_elsewhere(p->fd, p->slot)) return 1;
  gpupart__shm_end_proxy(L, i);
  return owner_here ? 0 : gpupart__shm_held_elsewhere(L->fd, i);
}

int gpupart__shm_alive(shm_ledger *L, uint32_t i) {
  if (L->mine[i] || gpupart__shm_operator_alive(L->h, i)) return 1;
  if (L->proxy[i].fd >= 0) return proxy_alive(L, i);
  return gpupart__shm_held_elsewhere(L->fd, i);
}

/* Lock held: returns the bytes of members whose process is gone (counted in L->reaped and
 * reaped_bytes, which the unlock keeps for the report). */
int gpupart__shm_reap(shm_ledger *L) {
  int reaped = 0;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    if (!L->h->member[i].id) {
      gpupart__shm_end_proxy(L, i); /* its owner took another slot */
      continue;
    }
    if (gpupart__shm_alive(L, i)) continue;
    L->reaped_bytes = gpupart__shm_add(L->reaped_bytes, gpupart__shm_drop_member(L->h, i));
    L->reaped++;
    reaped = 1;
  }
  if (reaped) gpupart__shm_recompute(L->h);
  return reaped;
}
