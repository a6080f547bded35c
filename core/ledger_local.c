/* The in-process ledger: one mutex-guarded table of partition accounts per device. It
 * keeps the sum of unused guarantees (guarantee minus reserved, where positive) up to
 * date, so that a reservation is checked in O(1): a partition may take what the budget
 * leaves after everything reserved and every other partition's unused guarantee. */
#include <pthread.h>
#include <stdio.h>

#include "gpupart.h"
#include "ledger.h"

struct gpupart__ledger_entry {
  gpupart__ledger_entry *prev, *next;
  uint64_t limit, guarantee, reserved, peak_reserved;
};

typedef struct local_ledger {
  gpupart__ledger base; /* first, so the interface pointer is the ledger */
  const gpupart__hostmem *mem;
  pthread_mutex_t lock;
  uint64_t budget;
  uint64_t guarantees;    /* sum of guarantees */
  uint64_t reserved;      /* sum of reserved */
  uint64_t peak_reserved;
  uint64_t unused;        /* sum over entries of max(0, guarantee - reserved) */
  gpupart__ledger_entry *entries;
} local_ledger;

static local_ledger *local(gpupart__ledger *l) { return (local_ledger *)l; }

static uint64_t unused_of(const gpupart__ledger_entry *e) {
  return e->guarantee > e->reserved ? e->guarantee - e->reserved : 0;
}

static void local_destroy(gpupart__ledger *l) {
  local_ledger *L = local(l);
  while (L->entries) {
    gpupart__ledger_entry *e = L->entries;
    L->entries = e->next;
    gpupart__host_free(L->mem, e);
  }
  pthread_mutex_destroy(&L->lock);
  gpupart__host_free(L->mem, L);
}

static int local_add(gpupart__ledger *l, uint64_t limit, uint64_t guarantee,
                     gpupart__ledger_entry **out) {
  local_ledger *L = local(l);
  gpupart__ledger_entry *e = gpupart__host_calloc(L->mem, 1, sizeof *e);
  if (!e) return GPUPART_ENOMEM;
  pthread_mutex_lock(&L->lock);
  int ok = limit <= L->budget && guarantee <= L->budget - L->guarantees;
  if (ok) {
    *e = (gpupart__ledger_entry){.next = L->entries, .limit = limit, .guarantee = guarantee};
    if (L->entries) L->entries->prev = e;
    L->entries = e;
    L->guarantees += guarantee;
    L->unused += guarantee;
  }
  pthread_mutex_unlock(&L->lock);
  if (!ok) gpupart__host_free(L->mem, e);
  *out = ok ? e : NULL;
  return ok ? GPUPART_OK : GPUPART_ELIMIT;
}

static void local_remove(gpupart__ledger *l, gpupart__ledger_entry *e) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  if (e->prev) e->prev->next = e->next;
  else L->entries = e->next;
  if (e->next) e->next->prev = e->prev;
  L->guarantees -= e->guarantee;
  L->unused -= unused_of(e);
  L->reserved -= e->reserved;
  pthread_mutex_unlock(&L->lock);
  gpupart__host_free(L->mem, e);
}

/* What e may still take: its own headroom, and the budget left after everything
 * reserved and the other partitions' unused guarantees. Lock held. */
static uint64_t grantable_locked(const local_ledger *L, const gpupart__ledger_entry *e,
                                 gpupart__refusal *bound) {
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

static int local_set_limit(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t new_limit) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  int rc = new_limit > L->budget ? GPUPART_ELIMIT
           : e->reserved > new_limit ? GPUPART_EBUSY : GPUPART_OK;
  if (rc == GPUPART_OK) {
    e->limit = new_limit;
    if (e->guarantee > new_limit) {
      L->unused -= unused_of(e);
      L->guarantees -= e->guarantee - new_limit;
      e->guarantee = new_limit;
      L->unused += unused_of(e);
    }
  }
  pthread_mutex_unlock(&L->lock);
  return rc;
}

static void local_get(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  *out = (gpupart__ledger_figures){e->limit, e->guarantee, e->reserved, e->peak_reserved};
  pthread_mutex_unlock(&L->lock);
}

static void local_totals(gpupart__ledger *l, gpupart__ledger_figures *out) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  *out = (gpupart__ledger_figures){L->budget, L->guarantees, L->reserved, L->peak_reserved};
  pthread_mutex_unlock(&L->lock);
}

static void local_reset_peak(gpupart__ledger *l, gpupart__ledger_entry *e) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  e->peak_reserved = e->reserved;
  pthread_mutex_unlock(&L->lock);
}

static int check_locked(const local_ledger *L, char *why, uint64_t n) {
  uint64_t g = 0, r = 0, u = 0;
  for (const gpupart__ledger_entry *e = L->entries; e; e = e->next) {
    if (e->reserved > e->limit)
      return snprintf(why, n, "a partition holds %llu bytes above its limit %llu",
                      (unsigned long long)e->reserved, (unsigned long long)e->limit), -1;
    if (e->guarantee > e->limit) return snprintf(why, n, "a guarantee exceeds its limit"), -1;
    g += e->guarantee, r += e->reserved, u += unused_of(e);
  }
  if (g != L->guarantees || r != L->reserved || u != L->unused)
    return snprintf(why, n, "ledger sums differ from its entries"), -1;
  if (g > L->budget) return snprintf(why, n, "guarantees sum past the budget"), -1;
  if (r > L->budget) return snprintf(why, n, "reserved bytes exceed the budget"), -1;
  return 0;
}

static int local_check(gpupart__ledger *l, char *why, uint64_t why_len) {
  local_ledger *L = local(l);
  pthread_mutex_lock(&L->lock);
  int rc = check_locked(L, why, why_len);
  pthread_mutex_unlock(&L->lock);
  return rc;
}

static const gpupart__ledger_ops local_ops = {
    .destroy = local_destroy,
    .add = local_add,
    .remove = local_remove,
    .reserve = local_reserve,
    .release = local_release,
    .grantable = local_grantable,
    .set_limit = local_set_limit,
    .get = local_get,
    .totals = local_totals,
    .reset_peak = local_reset_peak,
    .check = local_check,
};

gpupart__ledger *gpupart__ledger_local_create(const gpupart__hostmem *mem, uint64_t budget) {
  local_ledger *L = gpupart__host_calloc(mem, 1, sizeof *L);
  if (!L) return NULL;
  L->base.ops = &local_ops;
  L->mem = mem;
  L->budget = budget;
  pthread_mutex_init(&L->lock, NULL);
  return &L->base;
}
