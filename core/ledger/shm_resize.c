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
 * EEXIST. A budget change recomputes every figure its partition's maker gave as a
 * fraction of the budget (shm_format.h's shm_part) from the new budget, checked as a
 * whole (the guarantees' sum, each limit, each partition's bytes against its new limit)
 * before anything is written; it marks no partition, since a later job's fraction
 * resolves to the same bytes. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "resize.h"
#include "shm.h"
#include "shm_impl.h"

#define ABOVE GPUPART__SHM_ABOVE

static unsigned long long ull(uint64_t v) { return (unsigned long long)v; }

/* What a try found when the members hold too much, for the final message: what holds
 * held bytes above which new figure. */
typedef struct above {
  uint64_t held, figure;
  const char *word; /* "limit" or "budget" */
  char what[96];
  char who[1024];
} above;

static void name_part(char *out, size_t n, const shm_part *p) {
  snprintf(out, n, "partition '%.*s'", (int)strnlen(p->name, SHM_NAME), p->name);
}

static int part_locked(shm_ledger *L, const gpupart__ledger_change *c, above *a) {
  shm_header *h = L->h;
  int i = gpupart__shm_find_part(h, c->partition);
  if (i < 0)
    return gpupart__fail(GPUPART_EINVAL, "ledger %s has no partition '%s' (a partition lives while a process uses it)",
                         L->path, c->partition);
  gpupart__ledger_size size = {c->limit, c->guarantee, c->limit_fraction, c->guarantee_fraction, 0};
  int rc = gpupart__shm_set_figures_locked(h, (uint32_t)i, &size);
  if (rc == ABOVE) {
    a->held = h->part[i].reserved;
    a->figure = c->limit_fraction
                    ? gpupart__ledger_fraction_of(h->budget, c->limit_fraction, gpupart__shm_part_granule(&h->part[i]))
                    : c->limit;
    a->word = "limit";
    name_part(a->what, sizeof a->what, &h->part[i]);
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

/* What partition p's figures become under budget: each one given as a fraction of the
 * budget recomputed from it, as at the partition's creation; bytes stay bytes. */
typedef struct rescaled {
  uint64_t limit, guarantee;
} rescaled;

static rescaled rescale(const shm_part *p, uint64_t budget) {
  uint64_t granule = gpupart__shm_part_granule(p);
  double lf = gpupart__shm_part_fraction(p, 0), gf = gpupart__shm_part_fraction(p, 1);
  return (rescaled){lf ? gpupart__ledger_fraction_of(budget, lf, granule) : p->limit,
                    gf ? gpupart__ledger_fraction_of(budget, gf, granule) : p->guarantee};
}

/* Lock held: one partition's rescaled figures against the new budget (0, or the code). */
static int part_fits(const shm_part *p, rescaled r, uint64_t budget) {
  int len = (int)strnlen(p->name, SHM_NAME);
  if (!r.limit)
    return gpupart__fail(GPUPART_EINVAL, "resize --budget %llu: partition '%.*s' would have a limit of 0 bytes",
                         ull(budget), len, p->name);
  if (r.limit > budget)
    return gpupart__fail(GPUPART_EINVAL, "resize --budget %llu: partition '%.*s' has the limit %llu: shrink it first",
                         ull(budget), len, p->name, ull(r.limit));
  if (r.guarantee > r.limit)
    return gpupart__fail(GPUPART_EINVAL,
                         "resize --budget %llu: partition '%.*s' would have the guarantee %llu above its new limit "
                         "%llu: lower its guarantee first",
                         ull(budget), len, p->name, ull(r.guarantee), ull(r.limit));
  return GPUPART_OK;
}

/* Lock held: whether every partition's figures fit under budget: 0, or the code with the
 * message (the guarantees' sum, checked first, names the partitions that have one). */
static int budget_fits(const shm_header *h, uint64_t budget) {
  uint64_t floors = 0;
  char who[768] = "";
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    const shm_part *p = &h->part[i];
    uint64_t g = p->members ? rescale(p, budget).guarantee : 0;
    size_t len = strlen(who);
    floors = gpupart__shm_add(floors, g);
    if (g)
      snprintf(who + len, sizeof who - len, "%s'%.*s' %llu", len ? ", " : "", (int)strnlen(p->name, SHM_NAME), p->name,
               ull(g));
  }
  if (floors > budget)
    return gpupart__fail(GPUPART_ELIMIT,
                         "resize --budget %llu: the partitions' guarantees would sum to %llu bytes (%s): nothing "
                         "was changed",
                         ull(budget), ull(floors), who);
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    int rc = h->part[i].members ? part_fits(&h->part[i], rescale(&h->part[i], budget), budget) : GPUPART_OK;
    if (rc) return rc;
  }
  return GPUPART_OK;
}

/* Lock held: the first partition whose members hold more than its rescaled limit, or the
 * device more than budget: ABOVE with a filled; else OK. */
static int budget_above(const shm_header *h, uint64_t budget, above *a) {
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    const shm_part *p = &h->part[i];
    uint64_t limit = rescale(p, budget).limit;
    if (!p->members || p->reserved <= limit) continue;
    *a = (above){.held = p->reserved, .figure = limit, .word = "limit"};
    snprintf(a->what, sizeof a->what, "partition '%.*s' (%g%% of the new budget %llu)", (int)strnlen(p->name, SHM_NAME),
             p->name, 100 * gpupart__shm_part_fraction(p, 0), ull(budget));
    gpupart__shm_name_members(h, i, NULL, a->who, sizeof a->who);
    return ABOVE;
  }
  if (h->reserved <= budget) return GPUPART_OK;
  *a = (above){.held = h->reserved, .figure = budget, .word = "budget"};
  snprintf(a->what, sizeof a->what, "the device");
  name_all(h, a->who, sizeof a->who);
  return ABOVE;
}

/* The budget and every partition's rescaled figures, all at once under the lock, or
 * nothing. A partition whose figures follow the budget is not marked resized: a job
 * started later with its maker's fractions resolves them against the new budget to the
 * same bytes, and joins. */
static int budget_locked(shm_ledger *L, uint64_t budget, above *a) {
  shm_header *h = L->h;
  int rc = budget_fits(h, budget);
  if (rc == GPUPART_OK) rc = budget_above(h, budget, a);
  if (rc) return rc;
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    if (!h->part[i].members) continue;
    rescaled r = rescale(&h->part[i], budget);
    h->part[i].limit = r.limit;
    h->part[i].guarantee = r.guarantee;
  }
  h->budget = budget;
  gpupart__shm_recompute(h);
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
  return gpupart__fail(GPUPART_EBUSY,
                       "ledger %s: %s still holds %llu bytes, above the new %s %llu, after its members were asked "
                       "to give back for %d ms: held by %s; nothing was changed",
                       L->path, a->what, ull(a->held), a->word, ull(a->figure), c->wait_ms,
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
  if (rc != GPUPART_OK) return rc;
  if (gpupart__shm_shortfall(&L->base) > 0)
    gpupart__shm_ask_trim(&L->base); /* a raised floor over others' cached bytes */
  else gpupart__shm_wake_all(L);     /* a preallocated partition takes a grown limit (core/trim.c) */
  return rc;
}

static int check_change(const char *path, const gpupart__ledger_change *c) {
  if (!path || !c) return gpupart__fail(GPUPART_EINVAL, "resize: path or change is NULL");
  if (!c->limit) return gpupart__fail(GPUPART_EINVAL, "resize: a limit or budget of 0 bytes");
  if ((c->limit_fraction && !gpupart__ledger_fraction_ok(c->limit_fraction)) ||
      (c->guarantee_fraction && !gpupart__ledger_fraction_ok(c->guarantee_fraction)))
    return gpupart__fail(GPUPART_EINVAL, "resize: a fraction outside (0, 1]");
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
