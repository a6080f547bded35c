/* The in-process ledger: one mutex-guarded table of partition accounts per device, shared
 * by every handle of the device in a context (each handle is a member). It keeps the sum
 * of unused guarantees (guarantee minus reserved, where positive) up to date, so that a
 * reservation is checked in O(1): a partition may take what the budget leaves after
 * everything reserved and every other partition's unused guarantee. Names and members are
 * kept for lookup, listing and the check; they are never on the reservation path. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gpupart.h"
#include "ledger.h"

struct gpupart__ledger_entry {
  gpupart__ledger_entry *prev, *next;
  char *name;
  gpupart__ledger_member member;
  uint64_t limit, guarantee, reserved, peak_reserved;
  gpupart__ledger_counters pub; /* the owner's counters: nothing in-process reads them */
};

typedef struct local_member {
  struct local_member *next;
  gpupart__ledger_member id;
} local_member;

typedef struct local_ledger {
  gpupart__ledger base; /* first, so the interface pointer is the ledger */
  const gpupart__hostmem *mem;
  pthread_mutex_t lock;
  uint64_t budget;
  uint64_t guarantees; /* sum of guarantees */
  uint64_t reserved;   /* sum of reserved */
  uint64_t peak_reserved;
  uint64_t unused; /* sum over entries of max(0, guarantee - reserved) */
  gpupart__ledger_entry *entries;
  local_member *members;
  gpupart__ledger_member last_member; /* ids are never reused */
} local_ledger;

static local_ledger *local(gpupart__ledger *l) { return (local_ledger *)l; }

static uint64_t unused_of(const gpupart__ledger_entry *e) {
  return e->guarantee > e->reserved ? e->guarantee - e->reserved : 0;
}

static void free_entry(local_ledger *L, gpupart__ledger_entry *e) {
  gpupart__host_free(L->mem, e->name);
  gpupart__host_free(L->mem, e);
}

static void local_destroy(gpupart__ledger *l) {
  local_ledger *L = local(l);
  while (L->entries) {
    gpupart__ledger_entry *e = L->entries;
    L->entries = e->next;
    free_entry(L, e);
  }
  while (L->members) {
    local_member *m = L->members;
    L->members = m->next;
    gpupart__host_free(L->mem, m);
  }
  pthread_mutex_destroy(&L->lock);
  gpupart__host_free(L->mem, L);
}

static int local_join(gpupart__ledger *l, gpupart__ledger_member *out) {
  local_ledger *L = local(l);
  local_member *m = gpupart__host_calloc(L->mem, 1, sizeof *m);
  if (!m) return GPUPART_ENOMEM;
  pthread_mutex_lock(&L->lock);
  m->id = ++L->last_member;
  m->next = L->members;
  L->members = m;
  pthread_mutex_unlock(&L->lock);
  *out = m->id;
  return GPUPART_OK;
}

/* Lock held. */
static int is_member_locked(const local_ledger *L, gpupart__ledger_member id) {
  for (const local_member *m = L->members; m; m = m->next)
    if (m->id == id) return 1;
  return 0;
}

/* Lock held: unlinks e and takes its figures out of the sums. */
static void unlink_locked(local_ledger *L, gpupart__ledger_entry *e) {
  if (e->prev) e->prev->next = e->next;
  else L->entries = e->next;
  if (e->next) e->next->prev = e->prev;
  L->guarantees -= e->guarantee;
  L->unused -= unused_of(e);
  L->reserved -= e->reserved;
}

static void local_leave(gpupart__ledger *l, gpupart__ledger_member id) {
  local_ledger *L = local(l);
  local_member *gone = NULL;
  gpupart__ledger_entry *left = NULL;
  pthread_mutex_lock(&L->lock);
  for (local_member **m = &L->members; *m; m = &(*m)->next)
    if ((*m)->id == id) {
      gone = *m;
      *m = gone->next;
      break;
    }
  for (gpupart__ledger_entry *e = L->entries, *next; e; e = next) {
    next = e->next;
    if (e->member != id) continue;
    unlink_locked(L, e);
    e->next = left;
    left = e;
  }
  pthread_mutex_unlock(&L->lock);
  gpupart__host_free(L->mem, gone);
  for (gpupart__ledger_entry *next; left; left = next) {
    next = left->next;
    free_entry(L, left);
  }
}

/* Lock held. */
static gpupart__ledger_entry *find_locked(const local_ledger *L, const char *name) {
  for (gpupart__ledger_entry *e = L->entries; e; e = e->next)
    if (strcmp(e->name, name) == 0) return e;
  return NULL;
}

/* Lock held: the code add returns for these figures. */
static int admit_locked(const local_ledger *L, gpupart__ledger_member m, const char *name, uint64_t limit,
                        uint64_t guarantee) {
  if (!is_member_locked(L, m)) return GPUPART_EINVAL;
  if (find_locked(L, name)) return GPUPART_EEXIST;
  return limit <= L->budget && guarantee <= L->budget - L->guarantees ? GPUPART_OK : GPUPART_ELIMIT;
}

static gpupart__ledger_entry *new_entry(local_ledger *L, const char *name) {
  size_t n = strlen(name) + 1;
  gpupart__ledger_entry *e = gpupart__host_calloc(L->mem, 1, sizeof *e);
  char *copy = gpupart__host_calloc(L->mem, 1, n);
  if (!e || !copy) {
    gpupart__host_free(L->mem, e);
    gpupart__host_free(L->mem, copy);
    return NULL;
  }
  memcpy(copy, name, n);
  e->name = copy;
  return e;
}

static int local_add(gpupart__ledger *l, gpupart__ledger_member m, const char *name, uint64_t limit, uint64_t guarantee,
                     gpupart__ledger_entry **out) {
  local_ledger *L = local(l);
  *out = NULL;
  gpupart__ledger_entry *e = new_entry(L, name);
  if (!e) return GPUPART_ENOMEM;
  pthread_mutex_lock(&L->lock);
  int rc = admit_locked(L, m, name, limit, guarantee);
  if (rc == GPUPART_OK) {
    e->next = L->entries;
    e->member = m;
    e->limit = limit;
    e->guarantee = guarantee;
    if (L->entries) L->entries->prev = e;
    L->entries = e;
    L->guarantees += guarantee;
    L->unused += guarantee;
  }
  pthread_mutex_unlock(&L->lock);
  if (rc) free_entry(L, e);
  else *out = e;
  return rc;
}

static void local_remove(gpupart__ledger *l, gpupart__ledger_entry *e) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  unlink_locked(L, e);
  pthread_mutex_unlock(&L->lock);
  free_entry(L, e);
}

static gpupart__ledger_entry *local_find(gpupart__ledger *l, const char *name) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  gpupart__ledger_entry *e = find_locked(L, name);
  pthread_mutex_unlock(&L->lock);
  return e;
}

static void describe(const gpupart__ledger_entry *e, gpupart__ledger_entry_info *out) {
  snprintf(out->name, sizeof out->name, "%s", e->name);
  out->member = e->member;
  out->figures = (gpupart__ledger_figures){e->limit, e->guarantee, e->reserved, e->peak_reserved, e->reserved};
}

static uint32_t local_list(gpupart__ledger *l, gpupart__ledger_member m, gpupart__ledger_entry_info *out,
                           uint32_t cap) {
  local_ledger *L = local(l);
  uint32_t n = 0;
  pthread_mutex_lock(&L->lock);
  for (const gpupart__ledger_entry *e = L->entries; e; e = e->next) {
    if (m && e->member != m) continue;
    if (n < cap) describe(e, &out[n]);
    n++;
  }
  pthread_mutex_unlock(&L->lock);
  return n;
}

/* What e may still take: its own headroom, and the budget left after everything
 * reserved and the other partitions' unused guarantees. Lock held. */
static uint64_t grantable_locked(const local_ledger *L, const gpupart__ledger_entry *e, gpupart__refusal *bound) {
  uint64_t own = e->limit > e->reserved ? e->limit - e->reserved : 0;
  uint64_t others_unused = L->unused - unused_of(e);
  uint64_t taken = L->reserved + others_unused;
  uint64_t device = L->budget > taken ? L->budget - taken : 0;
  *bound = own <= device ? GPUPART__REFUSED_LIMIT : GPUPART__REFUSED_BUDGET;
  return own <= device ? own : device;
}

static void set_reserved_locked(local_ledger *L, gpupart__ledger_entry *e, uint64_t reserved) {
  L->unused -= unused_of(e);
  L->reserved = L->reserved - e->reserved + reserved;
  e->reserved = reserved;
  L->unused += unused_of(e);
  if (e->reserved > e->peak_reserved) e->peak_reserved = e->reserved;
  if (L->reserved > L->peak_reserved) L->peak_reserved = L->reserved;
}

static gpupart__refusal local_reserve(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  local_ledger *L = local(l);
  gpupart__refusal bound;
  pthread_mutex_lock(&L->lock);
  uint64_t can = grantable_locked(L, e, &bound);
  int ok = bytes <= can;
  if (ok) set_reserved_locked(L, e, e->reserved + bytes);
  pthread_mutex_unlock(&L->lock);
  return ok ? GPUPART__GRANTED : bound;
}

static void local_release(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  set_reserved_locked(L, e, e->reserved - bytes);
  pthread_mutex_unlock(&L->lock);
}

static uint64_t local_grantable(gpupart__ledger *l, gpupart__ledger_entry *e, gpupart__refusal *bound) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  uint64_t can = grantable_locked(L, e, bound);
  pthread_mutex_unlock(&L->lock);
  return can;
}

/* Lock held: the code of e taking limit and guarantee g (ledger.h's set_figures). */
static int figures_refused_locked(const local_ledger *L, const gpupart__ledger_entry *e, uint64_t limit, uint64_t g) {
  uint64_t others = L->guarantees - e->guarantee;
  if (g > limit) return GPUPART_EINVAL;
  if (limit > L->budget || g > (L->budget > others ? L->budget - others : 0)) return GPUPART_ELIMIT;
  return e->reserved > limit ? GPUPART_EBUSY : GPUPART_OK;
}

static int local_set_figures(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t limit, uint64_t guarantee) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  uint64_t g = guarantee != GPUPART__LEDGER_KEEP ? guarantee : e->guarantee < limit ? e->guarantee : limit;
  int rc = figures_refused_locked(L, e, limit, g);
  if (rc == GPUPART_OK) {
    L->unused -= unused_of(e);
    L->guarantees = L->guarantees - e->guarantee + g;
    e->guarantee = g;
    e->limit = limit;
    L->unused += unused_of(e);
  }
  pthread_mutex_unlock(&L->lock);
  return rc;
}

static void local_get(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  *out = (gpupart__ledger_figures){e->limit, e->guarantee, e->reserved, e->peak_reserved, e->reserved};
  pthread_mutex_unlock(&L->lock);
}

static void local_totals(gpupart__ledger *l, gpupart__ledger_figures *out) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  *out = (gpupart__ledger_figures){L->budget, L->guarantees, L->reserved, L->peak_reserved, 0};
  pthread_mutex_unlock(&L->lock);
}

static void local_reset_peak(gpupart__ledger *l, gpupart__ledger_entry *e) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  e->peak_reserved = e->reserved;
  pthread_mutex_unlock(&L->lock);
}

/* Lock held: one entry's own invariants. */
static int check_entry_locked(const local_ledger *L, const gpupart__ledger_entry *e, char *why, uint64_t n) {
  if (e->reserved > e->limit)
    return gpupart__say(why, n, "partition '%s' holds %llu bytes above its limit %llu", e->name,
                        (unsigned long long)e->reserved, (unsigned long long)e->limit);
  if (e->guarantee > e->limit) return gpupart__say(why, n, "the guarantee of '%s' exceeds its limit", e->name);
  if (e->peak_reserved < e->reserved) return gpupart__say(why, n, "'%s' holds more than its peak", e->name);
  if (!is_member_locked(L, e->member))
    return gpupart__say(why, n, "'%s' belongs to member %llu, which left the ledger", e->name,
                        (unsigned long long)e->member);
  return 0;
}

static int check_locked(const local_ledger *L, char *why, uint64_t n) {
  uint64_t g = 0, r = 0, u = 0;
  for (const gpupart__ledger_entry *e = L->entries; e; e = e->next) {
    if (check_entry_locked(L, e, why, n)) return -1;
    g += e->guarantee;
    r += e->reserved;
    u += unused_of(e);
  }
  if (g != L->guarantees || r != L->reserved || u != L->unused)
    return gpupart__say(why, n, "ledger sums differ from its entries");
  if (g > L->budget) return gpupart__say(why, n, "guarantees sum past the budget");
  if (r > L->budget) return gpupart__say(why, n, "reserved bytes exceed the budget");
  if (L->peak_reserved < r) return gpupart__say(why, n, "the ledger holds more than its peak");
  return 0;
}

static int local_check(gpupart__ledger *l, char *why, uint64_t why_len) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  int rc = check_locked(L, why, why_len);
  pthread_mutex_unlock(&L->lock);
  return rc;
}

/* In-process the stats read the partitions themselves: the entry only gives the owner a
 * place to publish to. */
static gpupart__ledger_counters *local_counters(gpupart__ledger *l, gpupart__ledger_entry *e) {
  (void)l;
  return &e->pub;
}

/* Budget refusals: the other partitions that hold bytes or keep an unused guarantee (a
 * limit is bound by the partition's own bytes alone in-process). */
static void local_holders(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__refusal bound, char *out,
                          size_t n) {
  local_ledger *L = local(l);
  uint32_t named = 0, more = 0;
  out[0] = '\0';
  if (bound != GPUPART__REFUSED_BUDGET) return;
  pthread_mutex_lock(&L->lock);
  for (const gpupart__ledger_entry *x = L->entries; x; x = x->next) {
    if (x == e || (!x->reserved && !unused_of(x))) continue;
    size_t len = strlen(out);
    if (named == 6 || len + 1 >= n) {
      more++;
      continue;
    }
    snprintf(out + len, n - len, "%spartition '%s' holds %llu bytes and keeps %llu more as its guarantee",
             named++ ? "; " : "", x->name, (unsigned long long)x->reserved, (unsigned long long)unused_of(x));
  }
  pthread_mutex_unlock(&L->lock);
  size_t len = strlen(out);
  if (more) snprintf(out + len, n - len, "; and %u more", more);
  if (!named) snprintf(out, n, "no other partition holds bytes");
}

/* What the floors lack (ledger.h): in-process, a guarantee added over bytes other
 * partitions already hold. */
static int64_t local_shortfall(gpupart__ledger *l) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  uint64_t taken = L->reserved + L->unused;
  uint64_t lack = taken > L->budget ? taken - L->budget : 0;
  pthread_mutex_unlock(&L->lock);
  return lack > INT64_MAX ? INT64_MAX : (int64_t)lack;
}

static const gpupart__ledger_ops local_ops = {
    .destroy = local_destroy,
    .join = local_join,
    .leave = local_leave,
    .add = local_add,
    .remove = local_remove,
    .find = local_find,
    .list = local_list,
    .reserve = local_reserve,
    .release = local_release,
    .grantable = local_grantable,
    .set_figures = local_set_figures,
    .get = local_get,
    .totals = local_totals,
    .reset_peak = local_reset_peak,
    .counters = local_counters,
    .holders = local_holders,
    .check = local_check,
    .shortfall = local_shortfall,
};

gpupart__ledger *gpupart__ledger_local_create(const gpupart__hostmem *mem, const gpupart__identity *id,
                                              uint64_t budget) {
  local_ledger *L = gpupart__host_calloc(mem, 1, sizeof *L);
  if (!L) return NULL;
  L->base.ops = &local_ops;
  L->base.id = *id;
  L->mem = mem;
  L->budget = budget;
  pthread_mutex_init(&L->lock, NULL);
  return &L->base;
}
