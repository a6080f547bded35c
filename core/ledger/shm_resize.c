/* Changing a shared ledger from outside (resize.h): the operator's `gpupart resize`
 * attaches to the file without joining it as a member (no member slot, no share), takes
 * its lock as a member would (so a holder that died mid-update is repaired first), checks
 * the change against the same rules admission uses (limits within the budget, guarantees
 * summing within it: gpupart__shm_set_figures_locked, which a member's own set_figures,
 * a DRA claim's newer generation, uses too) and writes it. A shrink below the bytes the members hold is not
 * written: the members are asked to give back (the trim counter and the wake word their
 * responders sleep on, as for a floor), and the change is tried again every few
 * milliseconds until it fits or the wait is over; it is then refused, naming who holds
 * the bytes. A partition's changed figures are marked (SHM_PART_RESIZED), so that a job
 * started later with the partition's original figures joins it instead of meeting
 * EEXIST. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "resize.h"
#include "shm.h"
#include "shm_impl.h"

#define ABOVE GPUPART__SHM_ABOVE

static unsigned long long ull(uint64_t v) { return (unsigned long long)v; }

/* What a try found when the members hold too much, for the final message. */
typedef struct above {
  uint64_t held;
  char who[1024];
} above;

static int part_locked(shm_ledger *L, const gpupart__ledger_change *c, above *a) {
  shm_header *h = L->h;
  int i = gpupart__shm_find_part(h, c->partition);
  if (i < 0)
    return gpupart__fail(GPUPART_EINVAL, "ledger %s has no partition '%s' (a partition lives while a process uses it)",
                         L->path, c->partition);
  int rc = gpupart__shm_set_figures_locked(h, (uint32_t)i, c->limit, c->guarantee);
  if (rc == ABOVE) {
    a->held = h->part[i].reserved;
    gpupart__shm_name_members(h, (uint32_t)i, NULL, a->who, sizeof a->who);
  }
  return rc;
}

/* Lock held: every partition's members, for a budget below what they hold. */
static void name_all(const shm_header *h, char *out, size_t n) {
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    if (!h->part[i].members || !h->part[i].reserved) continue;
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s'%.*s': ", len ? "; " : "", (int)strnlen(h->part[i].name, SHM_NAME),
             h->part[i].name);
    gpupart__shm_name_members(h, i, NULL, out, n);
  }
}

static int budget_locked(shm_ledger *L, uint64_t budget, above *a) {
  shm_header *h = L->h;
  if (budget < h->guarantees)
    return gpupart__fail(GPUPART_ELIMIT, "resize --budget %llu: the partitions' guarantees sum to %llu", ull(budget),
                         ull(h->guarantees));
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (h->part[i].members && h->part[i].limit > budget)
      return gpupart__fail(GPUPART_EINVAL, "resize --budget %llu: partition '%.*s' has the limit %llu: shrink it first",
                           ull(budget), (int)strnlen(h->part[i].name, SHM_NAME), h->part[i].name,
                           ull(h->part[i].limit));
  if (h->reserved > budget) {
    a->held = h->reserved;
    name_all(h, a->who, sizeof a->who);
    return ABOVE;
  }
  h->budget = budget;
  /* The partitions keep their bytes; one a job sizes as a share of the budget now
   * resolves to other bytes, so each is marked as changed: that job joins it. */
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (h->part[i].members) h->part[i].flags |= SHM_PART_RESIZED;
  return GPUPART_OK;
}

/* One try under the lock: OK, ABOVE, or the code with the message set. */
static int try_once(shm_ledger *L, const gpupart__ledger_change *c, above *a) {
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  gpupart__shm_reap(L); /* the dead's bytes are nobody's */
  a->who[0] = '\0';
  rc = c->partition ? part_locked(L, c, a) : budget_locked(L, c->limit, a);
  gpupart__shm_unlock(L);
  return rc;
}

static int refuse(const shm_ledger *L, const gpupart__ledger_change *c, const above *a) {
  char what[96];
  if (c->partition) snprintf(what, sizeof what, "partition '%.60s'", c->partition);
  else snprintf(what, sizeof what, "the device");
  return gpupart__fail(GPUPART_EBUSY,
                       "ledger %s: %s still holds %llu bytes, above the new %s %llu, after its members were asked to "
                       "give back for %d ms: held by %s; nothing was changed",
                       L->path, what, ull(a->held), c->partition ? "limit" : "budget", ull(c->limit), c->wait_ms,
                       a->who[0] ? a->who : "no live member");
}

/* Tries until the change fits or the wait is over, asking the members to give back
 * (again every ASK_EVERY tries: every ask wakes every responder of the file). */
#define ASK_EVERY 50
static int apply(shm_ledger *L, const gpupart__ledger_change *c) {
  struct timespec deadline = gpupart__shm_deadline(c->wait_ms), pause = {0, 2000000};
  above a = {0};
  int rc = try_once(L, c, &a);
  for (unsigned tries = 0; rc == ABOVE && !gpupart__shm_past(&deadline); tries++) {
    if (tries % ASK_EVERY == 0) gpupart__shm_ask_trim(&L->base);
    nanosleep(&pause, NULL);
    rc = try_once(L, c, &a);
  }
  if (rc == ABOVE) return refuse(L, c, &a);
  if (rc != GPUPART_OK || !c->partition) return rc;
  if (gpupart__shm_shortfall(&L->base) > 0)
    gpupart__shm_ask_trim(&L->base); /* a raised floor over others' cached bytes */
  else gpupart__shm_wake_all(L);     /* a preallocated partition takes a grown limit (core/trim.c) */
  return rc;
}

static int check_change(const char *path, const gpupart__ledger_change *c) {
  if (!path || !c) return gpupart__fail(GPUPART_EINVAL, "resize: path or change is NULL");
  if (!c->limit) return gpupart__fail(GPUPART_EINVAL, "resize: a limit or budget of 0 bytes");
  if (c->wait_ms < 0 || c->wait_ms > 60000)
    return gpupart__fail(GPUPART_EINVAL, "resize: wait %d ms is outside 0 to 60000", c->wait_ms);
  if (c->partition && (!*c->partition || strlen(c->partition) >= SHM_NAME))
    return gpupart__fail(GPUPART_EINVAL, "resize: a partition name of 1 to %u bytes", SHM_NAME - 1);
  return GPUPART_OK;
}

int gpupart__ledger_change_file(const char *path, const gpupart__ledger_change *c) {
  int rc = check_change(path, c);
  if (rc) return rc;
  gpupart__ledger *l = NULL;
  rc = gpupart__ledger_shm_attach_file(gpupart__hostmem_default(), path, &l);
  if (rc) return rc;
  rc = apply((shm_ledger *)l, c);
  l->ops->destroy(l);
  return rc;
}
