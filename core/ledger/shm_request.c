/* Give-back requests in a shared ledger's file: a process that needs bytes the other
 * processes hold (a new floor, a growth the budget refused) posts a request in one of the
 * header's slots, naming how many bytes it needs free (beyond every unused guarantee) and
 * its priority, then wakes every responder (shm_wake.c). A request is served ahead of
 * every request of a lower priority, and of the same priority with a higher ticket: what
 * one lacks counts the needs of those ahead of it, and what the responders give back is
 * what all of them lack together, so they stop when that is met. A request ends when its
 * poster withdraws it, when its time is over (expires_ms), or when its poster's
 * attachment is gone (a requester killed while waiting leaves nothing asked). Every field
 * of a slot is hostile input: a slot whose attachment does not live, or whose expiry is
 * past or further away than SHM_REQUEST_MAX_MS, is freed by the next locker; needs are
 * summed saturating; every priority is legal. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "shm_impl.h"

static uint64_t now_ms(void) { return gpupart__shm_now_ms(); }

/* Lock held: whether slot r is a request to serve now; one that is not is freed. */
static int live(shm_ledger *L, shm_request *r, uint64_t now) {
  if (!r->ticket) return 0;
  if (gpupart__shm_request_live(L->fd, r, now, r->attach == L->attach + 1)) return 1; /* mine: its byte looks free */
  memset(r, 0, sizeof *r);
  return 0;
}

/* Lock held: what the budget has free once every unused guarantee is counted (negative:
 * what the floors lack). */
static int64_t available(const shm_header *h) {
  uint64_t taken = gpupart__shm_add(h->reserved, h->unused);
  if (taken >= h->budget) return -(int64_t)(taken - h->budget > INT64_MAX ? INT64_MAX : taken - h->budget);
  return h->budget - taken > INT64_MAX ? INT64_MAX : (int64_t)(h->budget - taken);
}

/* Lock held: the needs of every live request served no later than mine (mine NULL:
 * all of them), mine included. */
static uint64_t needs_up_to(shm_ledger *L, const shm_request *mine) {
  uint64_t sum = 0, now = now_ms();
  for (uint32_t i = 0; i < SHM_REQUESTS; i++) {
    shm_request *r = &L->h->request[i];
    if (live(L, r, now) && (!mine || r == mine || gpupart__shm_request_ahead(r, mine)))
      sum = gpupart__shm_add(sum, r->need);
  }
  return sum;
}

static int64_t lack_of(const shm_header *h, uint64_t needs) {
  int64_t free_now = available(h);
  uint64_t lack =
      free_now < 0 ? gpupart__shm_add(needs, (uint64_t)-free_now) : gpupart__shm_sub0(needs, (uint64_t)free_now);
  return lack > INT64_MAX ? INT64_MAX : (int64_t)lack;
}

static shm_request *find(shm_ledger *L, uint64_t ticket) {
  for (uint32_t i = 0; ticket && i < SHM_REQUESTS; i++)
    if (L->h->request[i].ticket == ticket && L->h->request[i].attach == L->attach + 1) return &L->h->request[i];
  return NULL;
}

/* Lock held: a free slot (stale ones freed on the way), or NULL. */
static shm_request *free_slot(shm_ledger *L) {
  uint64_t now = now_ms();
  for (uint32_t i = 0; i < SHM_REQUESTS; i++)
    if (!live(L, &L->h->request[i], now)) return &L->h->request[i];
  return NULL;
}

int gpupart__shm_post(gpupart__ledger *l, uint64_t need, uint32_t priority, int ttl_ms, uint64_t *ticket) {
  shm_ledger *L = (shm_ledger *)l;
  *ticket = 0;
  if (L->inherited) return GPUPART_EINVAL;
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  shm_request *r = free_slot(L);
  if (r) {
    L->h->last_ticket = L->h->last_ticket + 1 ? L->h->last_ticket + 1 : 1;
    *r = (shm_request){.ticket = L->h->last_ticket, .need = need, .priority = priority, .attach = L->attach + 1};
    uint64_t ttl = ttl_ms > 0 && (uint64_t)ttl_ms <= SHM_REQUEST_MAX_MS ? (uint64_t)ttl_ms : SHM_REQUEST_MAX_MS;
    r->expires_ms = now_ms() + ttl;
    r->pid = L->pid;
    memcpy(r->command, L->command, sizeof r->command);
    *ticket = r->ticket;
  }
  gpupart__shm_unlock(L);
  __atomic_add_fetch(&L->h->posted, 1, __ATOMIC_RELEASE);
  if (!r) gpupart__shm_ask_trim(l); /* every slot taken: the old way, every empty block back */
  else gpupart__shm_wake_all(L);
  return r ? GPUPART_OK : GPUPART_EBUSY;
}

void gpupart__shm_withdraw(gpupart__ledger *l, uint64_t ticket) {
  shm_ledger *L = (shm_ledger *)l;
  if (L->inherited || !ticket || gpupart__shm_lock(L)) return;
  shm_request *r = find(L, ticket);
  if (r) memset(r, 0, sizeof *r);
  gpupart__shm_unlock(L);
}

/* What ticket still lacks; 0 or more, or a negative code. */
int64_t gpupart__shm_lack(gpupart__ledger *l, uint64_t ticket) {
  shm_ledger *L = (shm_ledger *)l;
  if (L->inherited) return 0;
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  gpupart__shm_reap(L); /* the dead's bytes are back at once */
  shm_request *r = find(L, ticket);
  int64_t lack = lack_of(L->h, r && live(L, r, now_ms()) ? needs_up_to(L, r) : 0);
  gpupart__shm_unlock(L);
  return lack;
}

int64_t gpupart__shm_lack_all(gpupart__ledger *l) {
  shm_ledger *L = (shm_ledger *)l;
  if (L->inherited) return 0;
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  gpupart__shm_reap(L);
  int64_t lack = lack_of(L->h, needs_up_to(L, NULL));
  gpupart__shm_unlock(L);
  return lack;
}

int gpupart__shm_posted(gpupart__ledger *l, uint64_t *seen) {
  uint64_t now = __atomic_load_n(&((shm_ledger *)l)->h->posted, __ATOMIC_ACQUIRE);
  if (now == *seen) return 0;
  *seen = now;
  return 1;
}
