/* The changes to a shared ledger that may have to wait for its lock (shm_impl.h):
 * a release, an entry's removal and a member's leaving are made at once when the lock
 * can be taken, and otherwise queued on the attachment and made by the next call that
 * takes it (shm_lock.c applies the queue first thing). Both ways run the same
 * functions here, under the lock. */
#include <fcntl.h>
#include <string.h>

#include "shm_impl.h"

shm_share *gpupart__shm_share_of(shm_ledger *L, const gpupart__ledger_entry *e) {
  const shm_entry *x = (const shm_entry *)(uintptr_t)e;
  if (x->share >= SHM_SHARES) return NULL;
  shm_share *s = &L->h->share[x->share];
  return s->member == x->member && gpupart__shm_share_valid(L->h, s) ? s : NULL;
}

void gpupart__shm_set_reserved_locked(shm_header *h, shm_part *p, shm_share *s, uint64_t reserved) {
  h->unused = gpupart__shm_sub0(h->unused, gpupart__shm_unused(p));
  h->reserved = gpupart__shm_add(gpupart__shm_sub0(h->reserved, s->reserved), reserved);
  p->reserved = gpupart__shm_add(gpupart__shm_sub0(p->reserved, s->reserved), reserved);
  s->reserved = reserved;
  h->unused = gpupart__shm_add(h->unused, gpupart__shm_unused(p));
  if (p->reserved > p->peak_reserved) p->peak_reserved = p->reserved;
  if (h->reserved > h->peak_reserved) h->peak_reserved = h->reserved;
}

void gpupart__shm_release_locked(shm_ledger *L, const gpupart__ledger_entry *e, uint64_t bytes) {
  shm_share *s = gpupart__shm_share_of(L, e);
  if (s) gpupart__shm_set_reserved_locked(L->h, &L->h->part[s->part], s, gpupart__shm_sub0(s->reserved, bytes));
}

void gpupart__shm_remove_locked(shm_ledger *L, shm_entry *x) {
  shm_share *s = gpupart__shm_share_of(L, (gpupart__ledger_entry *)(void *)x);
  if (s) {
    memset(s, 0, sizeof *s);
    gpupart__shm_recompute(L->h);
  }
  for (shm_entry **p = &L->handles; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      break;
    }
  gpupart__host_free(L->mem, x);
}

void gpupart__shm_leave_slot_locked(shm_ledger *L, uint32_t i, uint64_t id) {
  if (L->h->member[i].id == id) {
    (void)gpupart__shm_drop_member(L->h, i);
    gpupart__shm_recompute(L->h);
  }
  L->mine[i] = 0;
  gpupart__shm_member_lock(L->fd, i, F_UNLCK);
}

void gpupart__shm_apply_queued(shm_ledger *L) {
  __atomic_store_n(&L->queued, 0, __ATOMIC_RELEASE);
  for (shm_entry **p = &L->handles; *p;) {
    shm_entry *x = *p;
    uint64_t bytes = __atomic_exchange_n(&x->queued, 0, __ATOMIC_ACQ_REL);
    if (bytes) gpupart__shm_release_locked(L, (gpupart__ledger_entry *)(void *)x, bytes);
    if (!__atomic_load_n(&x->removed, __ATOMIC_ACQUIRE)) {
      p = &x->next;
      continue;
    }
    gpupart__shm_remove_locked(L, x); /* unlinks *p: p now points at the next one */
  }
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    uint64_t id = __atomic_exchange_n(&L->left[i], 0, __ATOMIC_ACQ_REL);
    if (id && L->mine[i]) gpupart__shm_leave_slot_locked(L, i, id);
  }
}
