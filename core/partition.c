/* Partitions: named shares of a device's budget. Creation turns a descriptor (fractions
 * or bytes, defaults applied in one place) into a ledger account and an arena, for a
 * program or for the configuration's declared partitions at device open (which a
 * program's creation of the same name then gets); resize, trim and destroy change them. All of it runs under the
 * device's slow lock, so the partition list and the ledger's view of limits change one partition at a time. */
#include "partition.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "arena.h"
#include "error.h"
#include "events.h"
#include "extstruct.h"
#include "internal.h"
#include "shm.h"
#include "peak.h"
#include "trim.h"

/* The limits and policy of a descriptor, resolved against the device. */
typedef struct resolved {
  uint64_t limit, guarantee;
  double limit_fraction, guarantee_fraction; /* what a shared ledger keeps: 0 = bytes */
  gpupart__growth growth;
} resolved;

static int bad_share(double f) { return isnan(f) || f < 0 || f > 1; }

uint64_t gpupart__partition_share_of(const gpupart_device *dev, double fraction, uint64_t bytes) {
  if (fraction > 0) return gpupart__ledger_fraction_of(gpupart__budget_now(dev), fraction, dev->granularity);
  return bytes & ~(dev->granularity - 1);
}

static uint64_t round_block(const gpupart_device *dev, uint64_t v, uint64_t def) {
  uint64_t g = dev->granularity, max = dev->info.max_block_bytes & ~(g - 1);
  if (!v) v = def;
  v = v > max ? max : (v + g - 1) & ~(g - 1);
  return v ? v : g;
}

static int resolve_growth(const gpupart_device *dev, const gpupart_partition_desc *d, gpupart__growth *g) {
  if (isnan(d->growth_factor) || (d->growth_factor != 0 && d->growth_factor < 1.0))
    return gpupart__fail(GPUPART_EINVAL, "partition_create: growth_factor %g is below 1", d->growth_factor);
  if (d->growth < GPUPART_GROWTH_DEFAULT || d->growth > GPUPART_GROWTH_OFF)
    return gpupart__fail(GPUPART_EINVAL, "partition_create: growth %d is not a GPUPART_GROWTH_*", d->growth);
  int growth = d->growth ? d->growth : dev->growth;
  g->prealloc = growth == GPUPART_GROWTH_OFF;
  /* 0 fields take the device's options (initial_block, max_block, growth_factor:
   * configuration, else the defaults of the options table, core/config/options.c). */
  g->max_block = round_block(dev, d->max_block, dev->max_block);
  g->initial_block = round_block(dev, d->initial_block, dev->initial_block);
  if (g->initial_block > g->max_block) g->initial_block = g->max_block;
  /* Preallocation: the descriptor's max_block, else GPUPART_PREALLOC_BLOCK, else one
   * block as large as the driver allows, so that one request can be as large as the
   * reservation wherever the driver lets a block be. */
  uint64_t largest = dev->info.max_block_bytes & ~(dev->granularity - 1);
  g->prealloc_block = d->max_block ? g->max_block : round_block(dev, dev->prealloc_block, largest);
  g->factor = d->growth_factor ? d->growth_factor : dev->growth_factor;
  g->release_threshold = d->release_threshold ? d->release_threshold : dev->release_threshold;
  g->expandable = (d->flags & GPUPART_PARTITION_EXPANDABLE) || dev->expandable;
  if (d->flags & GPUPART_PARTITION_EXPANDABLE_REQUIRED) g->expandable = 2;
  return GPUPART_OK;
}

/* The one place where a partition descriptor's defaults are applied. */
static int resolve(const gpupart_device *dev, const gpupart_partition_desc *d, resolved *out) {
  if (d->flags &
      ~(GPUPART_PARTITION_UNSYNCHRONIZED | GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED))
    return gpupart__fail(GPUPART_EINVAL, "partition_create: unknown flags 0x%x", d->flags);
  if (bad_share(d->fraction) || bad_share(d->guarantee_fraction))
    return gpupart__fail(GPUPART_EINVAL, "partition_create: a fraction is outside (0, 1]");
  uint64_t budget = gpupart__budget_now(dev); /* a shared ledger's, as it is now */
  uint64_t limit = gpupart__partition_share_of(dev, d->fraction, d->limit ? d->limit : budget);
  if (!d->fraction && !d->limit) limit = budget & ~(dev->granularity - 1); /* a shared budget may be finer */
  if (!limit)
    return gpupart__fail(GPUPART_EINVAL, "partition_create: the limit rounds down to 0 at granularity %llu",
                         (unsigned long long)dev->granularity);
  if (limit > budget)
    return gpupart__fail(GPUPART_ELIMIT, "partition_create: limit %llu exceeds the budget %llu",
                         (unsigned long long)limit, (unsigned long long)budget);
  uint64_t guarantee = gpupart__partition_share_of(dev, d->guarantee_fraction, d->guarantee);
  if (guarantee > limit)
    return gpupart__fail(GPUPART_EINVAL, "partition_create: guarantee %llu exceeds the limit %llu",
                         (unsigned long long)guarantee, (unsigned long long)limit);
  out->limit = limit;
  out->guarantee = guarantee;
  /* the whole budget, when no size is given, follows it as a fraction of 1 */
  out->limit_fraction = d->fraction ? d->fraction : d->limit ? 0 : 1;
  out->guarantee_fraction = d->guarantee_fraction;
  return resolve_growth(dev, d, &out->growth);
}

static gpupart_partition *find_locked(gpupart_device *dev, const char *name) {
  for (uint32_t i = 0; i < dev->nparts; i++)
    if (strcmp(dev->parts[i]->name, name) == 0) return dev->parts[i];
  return NULL;
}

/* p<N>, N the position in creation order; should that name be taken on the device
 * (by this handle or another handle of the same device), the next free N, so that a
 * partition left unnamed never clashes. */
static void default_name(gpupart_device *dev, char *out, size_t n) {
  uint32_t i = dev->created;
  do snprintf(out, n, "p%u", i++);
  while (find_locked(dev, out) || dev->ledger->ops->find(dev->ledger, out));
}

static int name_partition(gpupart_partition *p, const gpupart_partition_desc *d) {
  gpupart_device *dev = p->dev;
  char fallback[24];
  if (!d->name) default_name(dev, fallback, sizeof fallback);
  const char *name = d->name ? d->name : fallback;
  if (!*name) return gpupart__fail(GPUPART_EINVAL, "partition_create: name is empty");
  if (find_locked(dev, name))
    return gpupart__fail(GPUPART_EEXIST, "partition_create: '%s' exists on this device", GPUPART__ECHO(name));
  p->name = gpupart__strdup(&dev->ctx->mem, name);
  return p->name ? GPUPART_OK : gpupart__fail(GPUPART_ENOMEM, "partition_create: out of host memory");
}

static int append_locked(gpupart_device *dev, gpupart_partition *p) {
  if (dev->nparts == dev->cap) {
    uint32_t cap = dev->cap ? dev->cap * 2 : 8;
    gpupart_partition **parts = gpupart__host_calloc(&dev->ctx->mem, cap, sizeof *parts);
    if (!parts) return gpupart__fail(GPUPART_ENOMEM, "partition_create: out of host memory");
    if (dev->nparts) memcpy(parts, dev->parts, dev->nparts * sizeof *parts);
    gpupart__host_free(&dev->ctx->mem, dev->parts);
    dev->parts = parts;
    dev->cap = cap;
  }
  gpupart__peak_regroup_begin(dev);
  dev->parts[dev->nparts++] = p;
  gpupart__peak_regroup_end(dev);
  dev->created++;
  return GPUPART_OK;
}

void gpupart__partition_free(gpupart_partition *p) {
  gpupart_device *dev = p->dev;
  if (p->arena.tlsf) gpupart__arena_fini(&p->arena, p);
  gpupart__ledger_publisher_remove(&p->pub); /* before its share goes */
  if (p->account) dev->ledger->ops->remove(dev->ledger, p->account);
  gpupart__peak_leave(p);
  gpupart__slots_fini(&p->charges);
  gpupart__host_free(&dev->ctx->mem, p->name);
  gpupart__host_free(&dev->ctx->mem, p);
}

/* A guarantee is honoured by asking borrowers to give bytes back (their reclaim
 * callbacks, then their empty blocks: alloc.c), but a preallocated partition never
 * gives its blocks back: a guarantee that only its bytes could cover is refused now,
 * rather than accepted and never usable. Device slow lock held. */
static int check_floor_locked(gpupart_device *dev, uint64_t guarantee) {
  uint64_t floors = 0, pinned = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) {
    gpupart__ledger_figures f;
    dev->ledger->ops->get(dev->ledger, dev->parts[i]->account, &f);
    uint64_t held = dev->parts[i]->growth.prealloc ? f.reserved : 0;
    floors += held > f.guarantee ? held : f.guarantee;
    pinned += held;
  }
  if (!guarantee || floors + guarantee <= dev->budget) return GPUPART_OK;
  return gpupart__fail(GPUPART_ELIMIT,
                       "partition_create: guarantee %llu cannot be honoured: preallocated partitions hold %llu "
                       "bytes that are never given back, and guarantees and those leave %llu of the budget %llu",
                       (unsigned long long)guarantee, (unsigned long long)pinned,
                       (unsigned long long)(dev->budget > floors ? dev->budget - floors : 0),
                       (unsigned long long)dev->budget);
}

/* A descriptor that leaves limit and guarantee unset joins a shared partition as it is. */
static int leaves_figures(const gpupart_partition_desc *d) {
  return !d->limit && !d->fraction && !d->guarantee && !d->guarantee_fraction;
}

/* A shared ledger's refusal other than EEXIST and ELIMIT, with the ledger's own words
 * (a full table, its lock held by a stopped process, a forked child, a name too long). */
static int ledger_refused(const gpupart_partition *p, int rc, const char *what) {
  char why[768];
  if (!p->dev->ledger->shared) return gpupart__fail(rc, "partition_create: %s '%s': out of host memory", what, p->name);
  snprintf(why, sizeof why, "%s", gpupart_last_error());
  return gpupart__fail(rc, "partition_create: %s '%s': %s", what, p->name, why);
}

/* Shared ledger: joins the partition of that name another process made, when the
 * descriptor leaves its figures to it (or join_only). *joined tells whether it did. */
static int join_shared(gpupart_partition *p, const gpupart_partition_desc *d, int join_only, int *joined) {
  gpupart__ledger *l = p->dev->ledger;
  *joined = 0;
  if (!l->ops->join_named || !(join_only || leaves_figures(d))) return GPUPART_OK;
  int rc = l->ops->join_named(l, p->dev->member, p->name, &p->account);
  if (rc) return ledger_refused(p, rc, "cannot join the shared partition");
  if (!p->account && join_only) return gpupart__fail(GPUPART_EINVAL, "partition_find: '%s' is gone", p->name);
  *joined = p->account != NULL;
  return GPUPART_OK;
}

static int eexist(const gpupart_partition *p) {
  if (p->dev->ledger->shared)
    return gpupart__fail(GPUPART_EEXIST,
                         "partition_create: the shared partition '%s' has another limit or guarantee "
                         "(another process or handle made it): pass the same ones, or leave limit and guarantee 0, "
                         "to join it",
                         p->name);
  /* names are unique per physical device, across its handles */
  return gpupart__fail(GPUPART_EEXIST,
                       "partition_create: '%s' exists on this device (made through another handle "
                       "of it)",
                       p->name);
}

/* Once p has its account: where its counters go for gpupart top (ledger.h), when its
 * ledger has a place for them. */
static void publish_to(gpupart_partition *p) {
  gpupart__ledger *l = p->dev->ledger;
  if (l->ops->counters) gpupart__ledger_publisher_add(&p->pub, l->ops->counters(l, p->account));
}

/* An expandable partition where the backend and device offer virtual memory; elsewhere
 * it keeps growth blocks (gpupart config says so). */
static int make_expandable(gpupart_partition *p, uint64_t limit) {
  int rc = gpupart__arena_expandable(p, limit);
  if (rc != GPUPART_ENOTSUP || p->growth.expandable == 2) return rc;
  p->growth.expandable = 0;
  return GPUPART_OK;
}

/* Whether add joined a shared partition whose figures were changed since its creation
 * (gpupart resize, another member's resize, a DRA generation): its figures are the
 * ledger's, not the descriptor's, and it is never preallocated again. */
static int resized_join(gpupart_partition *p, const resolved *r) {
  gpupart__ledger_figures f;
  if (!p->dev->ledger->shared) return 0;
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  return f.limit != r->limit || f.guarantee != r->guarantee;
}

/* No lock held: the log says which figures apply to a partition joined after a resize. */
static void log_resized_join(gpupart_partition *p, const resolved *r) {
  gpupart__ledger_figures f;
  char line[GPUPART__MSG_MAX];
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  snprintf(line, sizeof line,
           "partition_create: the shared partition '%s' was resized since it was made: it is joined, and the "
           "ledger's figures apply (limit %llu, guarantee %llu bytes; the descriptor asked for %llu and %llu)",
           p->name, (unsigned long long)f.limit, (unsigned long long)f.guarantee, (unsigned long long)r->limit,
           (unsigned long long)r->guarantee);
  gpupart__log(p->dev->ctx, GPUPART_LOG_WARN, (int)p->dev->settings.v[GPUPART__OPT_VERBOSE].u, line);
}

/* Names p and joins or adds its account; *added 1 when it is a new share of the ledger's
 * partition (then finish_locked lists it once its floor has its bytes), 2 when it joined
 * a partition resized from outside with other figures than r's (listed now, logged by
 * the caller). A joined one is listed now. */
static int setup_locked(gpupart_partition *p, const gpupart_partition_desc *d, const resolved *r, int join_only,
                        int *added) {
  gpupart_device *dev = p->dev;
  int joined = 0, rc = name_partition(p, d);
  if (rc) return rc;
  if (gpupart__arena_init(&p->arena, dev)) return gpupart__fail(GPUPART_ENOMEM, "partition_create: out of host memory");
  gpupart__tlsf_set_user(p->arena.tlsf, p);
  rc = join_shared(p, d, join_only, &joined);
  if (joined) publish_to(p);
  if (rc || joined) return rc ? rc : append_locked(dev, p); /* a joined partition is never preallocated again */
  if ((rc = check_floor_locked(dev, r->guarantee))) return rc;
  gpupart__ledger_size size = {r->limit, r->guarantee, r->limit_fraction, r->guarantee_fraction, dev->granularity};
  rc = dev->ledger->ops->add(dev->ledger, dev->member, p->name, &size, &p->account);
  if (rc == GPUPART_EEXIST) return eexist(p);
  if (rc == GPUPART_ELIMIT)
    return gpupart__fail(rc, "partition_create: guarantee %llu would take the device's guarantees past its budget %llu",
                         (unsigned long long)r->guarantee, (unsigned long long)dev->budget);
  if (rc) return ledger_refused(p, rc, "cannot add");
  publish_to(p);
  char path[8];
  if (resized_join(p, r) && !gpupart__ledger_shm_operator_of(dev->ledger, p->name, path, sizeof path)) {
    *added = 2; /* logged once the lock is dropped; the operator's partitions: ledger_figures */
    return append_locked(dev, p);
  }
  *added = 1;
  return GPUPART_OK;
}

/* A shared partition is preallocated by one member: a preallocation takes the whole
 * limit, so where other processes hold bytes of it already this one could take none and
 * then never allocate. Refused at creation, naming them and the fix. */
static int shared_prealloc_locked(gpupart_partition *p) {
  gpupart__ledger *l = p->dev->ledger;
  gpupart__ledger_figures f;
  char who[640];
  l->ops->get(l, p->account, &f);
  if (!l->shared || f.reserved <= f.own_reserved) return GPUPART_OK;
  l->ops->holders(l, p->account, GPUPART__REFUSED_LIMIT, who, sizeof who);
  return gpupart__fail(GPUPART_ECONFIG,
                       "partition_create: '%s' is preallocated (allow_growth = false) but other processes hold %llu "
                       "bytes of this shared partition already (%s), so it could take nothing: a preallocated shared "
                       "partition has one member; give each process a partition of its own name, or let this one "
                       "grow (allow_growth = true)",
                       p->name, (unsigned long long)(f.reserved - f.own_reserved), who);
}

static int finish_locked(gpupart_partition *p, const resolved *r) {
  if (r->growth.prealloc) {
    int rc = shared_prealloc_locked(p);
    if (rc) return rc;
  }
  int rc = r->growth.expandable ? make_expandable(p, r->limit) : GPUPART_OK;
  if (rc == GPUPART_OK && r->growth.prealloc) rc = gpupart__arena_reserve_exact(p, r->limit, 1);
  return rc ? rc : append_locked(p->dev, p);
}

static void retire_counters(gpupart__counters *into, const gpupart__counters *c) {
  into->total_allocations += c->total_allocations;
  into->driver_allocs += c->driver_allocs;
  into->driver_frees += c->driver_frees;
  into->failed_allocations += c->failed_allocations;
  into->double_frees += c->double_frees;
}

/* A creation that failed may have called the driver (a preallocation it could not
 * finish): those calls stay in the device's counts. Device slow lock held. */
static void discard_locked(gpupart_device *dev, gpupart_partition *p) {
  if (p->arena.tlsf) gpupart__arena_fini(&p->arena, p);
  retire_counters(&dev->retired, &p->c);
  gpupart__partition_free(p);
}

/* The partition configuration made under d's name, handed over once: configuration is
 * the operator's word, so a program creating a partition it declared gets that one (and
 * its reclaim callback, which configuration cannot give), not EEXIST. */
static gpupart_partition *take_configured(gpupart_device *dev, const gpupart_partition_desc *d) {
  pthread_mutex_lock(&dev->slow);
  gpupart_partition *p = d->name ? find_locked(dev, d->name) : NULL;
  if (p && !p->configured) p = NULL;
  if (p) {
    p->configured = 0;
    if (!p->reclaim) {
      p->reclaim = d->reclaim;
      p->reclaim_user = d->reclaim_user;
    }
  }
  pthread_mutex_unlock(&dev->slow);
  return p;
}

/* The partition's source in configuration, for the message. */
static void configured_source(gpupart_partition *p, char *buf, size_t n) {
  const gpupart__settings *s = &p->dev->settings;
  snprintf(buf, n, "the configuration");
  for (uint32_t i = 0; i < s->nparts; i++)
    if (!strcmp(s->parts[i]->name, p->name)) gpupart__source_format(s->parts[i]->src, buf, n);
}

/* A program's partition_create met partition p, which configuration made: the
 * configuration's values hold, and the log says so (a warning where the descriptor asked
 * for others). */
static void adopted(gpupart_partition *p, const gpupart_partition_desc *d, uint64_t limit, uint64_t guarantee) {
  gpupart_stats st = {0};
  char where[GPUPART__PATH_MAX + 16], line[GPUPART__PATH_MAX + 320];
  gpupart_partition_get_stats(p, &st);
  configured_source(p, where, sizeof where);
  int same_growth = d->growth == GPUPART_GROWTH_DEFAULT || (d->growth == GPUPART_GROWTH_OFF) == p->growth.prealloc;
  int same = st.limit == limit && st.guarantee == guarantee && same_growth;
  snprintf(line, sizeof line,
           "partition_create: '%s' is declared by the configuration (%s): the configured partition "
           "is returned, with its limit %llu and guarantee %llu bytes%s",
           p->name, GPUPART__ECHO(where), (unsigned long long)st.limit, (unsigned long long)st.guarantee,
           same ? "" : " (the descriptor's values are not used)");
  gpupart__log(p->dev->ctx, same ? GPUPART_LOG_INFO : GPUPART_LOG_WARN, (int)p->dev->settings.v[GPUPART__OPT_VERBOSE].u,
               line);
}

/* A partition new to the ledger: its guarantee's bytes made available (others' given
 * back, or EBUSY naming them: trim.c) before it is preallocated and listed, no lock held
 * meanwhile. A failure removes it. */
static int place(gpupart_partition *p, const resolved *r) {
  gpupart_device *dev = p->dev;
  int rc = r->guarantee ? gpupart__device_make_room(dev, p, r->guarantee) : GPUPART_OK;
  pthread_mutex_lock(&dev->slow);
  if (rc == GPUPART_OK) rc = finish_locked(p, r);
  if (rc) discard_locked(dev, p);
  pthread_mutex_unlock(&dev->slow);
  return rc;
}

/* A partition added to an operator's ledger (gpupart ledger create) takes the ledger's
 * limit and guarantee whatever this process asked: a mismatch is a warning naming both. */
static int ledger_figures(gpupart_partition *p, resolved *r) {
  gpupart__ledger_figures f;
  char line[512];
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &f);
  if (f.limit == r->limit && f.guarantee == r->guarantee) return GPUPART_OK;
  snprintf(line, sizeof line,
           "partition_create: '%s': the operator's ledger of %s says limit %llu and guarantee %llu bytes; this "
           "process asked for limit %llu and guarantee %llu: the ledger's figures apply",
           p->name, p->dev->id.key, (unsigned long long)f.limit, (unsigned long long)f.guarantee,
           (unsigned long long)r->limit, (unsigned long long)r->guarantee);
  gpupart__log(p->dev->ctx, GPUPART_LOG_WARN, 1, line); /* said by default: the operator's word overrides */
  r->limit = f.limit;
  r->guarantee = f.guarantee;
  return GPUPART_OK;
}

/* Creates (or, in a shared ledger, joins) the partition of descriptor d; join_only: only
 * joins one another process made. */
static int create(gpupart_device *dev, const gpupart_partition_desc *d, int join_only, gpupart_partition **out) {
  resolved r = {0};
  int rc = resolve(dev, d, &r);
  if (rc) return rc;
  gpupart_partition *p = take_configured(dev, d);
  if (p) {
    adopted(p, d, r.limit, r.guarantee);
    *out = p;
    return GPUPART_OK;
  }
  p = gpupart__host_calloc(&dev->ctx->mem, 1, sizeof *p);
  if (!p) return gpupart__fail(GPUPART_ENOMEM, "partition_create: out of host memory");
  *p = (gpupart_partition){.dev = dev,
                           .growth = r.growth,
                           .reclaim = d->reclaim,
                           .reclaim_user = d->reclaim_user,
                           .trace = dev->ctx->trace,
                           .pub = {.to = &gpupart__unpublished},
                           .peak_fresh = 1,
                           .fast_size = dev->ctx->trace ? 0 : gpupart__largest_block(dev), /* alloc.c */
                           .fast_align = dev->alignment,
                           .limit_fraction = r.limit_fraction,
                           .guarantee_fraction = r.guarantee_fraction};
  gpupart__slots_init(&p->charges, &dev->ctx->mem, p);
  gpupart__lock_init(&p->lock, (d->flags & GPUPART_PARTITION_UNSYNCHRONIZED) != 0);
  atomic_flag_clear(&p->reclaim_busy);
  int added = 0;
  pthread_mutex_lock(&dev->slow);
  rc = setup_locked(p, d, &r, join_only, &added);
  if (rc) discard_locked(dev, p);
  pthread_mutex_unlock(&dev->slow);
  if (rc == GPUPART_OK && added == 2) log_resized_join(p, &r);
  if (rc == GPUPART_OK && added == 1) rc = ledger_figures(p, &r);
  if (rc == GPUPART_OK && added == 1) rc = place(p, &r);
  gpupart__ledger_report(dev->ledger); /* dead members a preallocation reaped */
  if (rc == GPUPART_OK) gpupart__device_dra_label(p);
  if (rc == GPUPART_OK) *out = p;
  return rc;
}

/* The claim's labels into p's partition in a shared ledger (partition.h). */
void gpupart__device_dra_label(gpupart_partition *p) {
  gpupart_device *dev = p->dev;
  gpupart__ledger *l = dev->ledger;
  if (!dev->dra || !l->ops->label) return;
  const gpupart__config *c = dev->ctx->cfg;
  const gpupart__dra_device *d = &c->dra[dev->dra - 1];
  gpupart__ledger_labels lab;
  snprintf(lab.claim, sizeof lab.claim, "%s", d->claim);
  snprintf(lab.namespace, sizeof lab.namespace, "%s", d->namespace);
  snprintf(lab.pod, sizeof lab.pod, "%s", c->dra_pod);
  if (l->ops->label(l, p->account, &lab) == GPUPART_OK) return;
  char line[GPUPART__MSG_MAX + 64];
  snprintf(line, sizeof line, "partition '%s': the DRA claim's labels are not written: %s", p->name,
           gpupart_last_error());
  gpupart__log(dev->ctx, GPUPART_LOG_WARN, 1, line);
}

gpupart_result gpupart_partition_create_sized(gpupart_device *dev, const gpupart_partition_desc *desc, size_t desc_size,
                                              gpupart_partition **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "partition_create: out is NULL");
  *out = NULL;
  if (!dev) return gpupart__fail(GPUPART_EINVAL, "partition_create: dev is NULL");
  gpupart_partition_desc d;
  int rc = gpupart__copy_in(&d, GPUPART__PARTITION_DESC_SIZE, desc, desc_size, GPUPART__PARTITION_DESC_SIZE_0_2,
                            "partition_create: gpupart_partition_desc");
  return rc ? rc : create(dev, &d, 0, out);
}

static int remove_locked(gpupart_device *dev, gpupart_partition *p) {
  uint32_t i = 0;
  while (i < dev->nparts && dev->parts[i] != p) i++;
  if (i == dev->nparts) return gpupart__fail(GPUPART_EINVAL, "partition_destroy: not a partition of its device");
  gpupart__peak_regroup_begin(dev);
  memmove(dev->parts + i, dev->parts + i + 1, (dev->nparts - i - 1) * sizeof *dev->parts);
  dev->nparts--;
  gpupart__peak_regroup_end(dev);
  return GPUPART_OK;
}

static int destroy_locked(gpupart_device *dev, gpupart_partition *p) {
  gpupart__lock_acquire(&p->lock);
  uint64_t live = p->c.live_allocations, charges = p->arena.charged_count;
  gpupart__lock_release(&p->lock);
  if (live)
    return gpupart__fail(GPUPART_EBUSY,
                         "partition_destroy: '%s' has %llu live allocation(s), %llu of them charge(s) "
                         "(gpupart_charge_release)",
                         p->name, (unsigned long long)live, (unsigned long long)charges);
  if (atomic_load(&p->allocating))
    return gpupart__fail(GPUPART_EBUSY,
                         "partition_destroy: '%s' has an allocation in progress (a reclaim callback may not "
                         "destroy the partition whose allocation called it)",
                         p->name);
  if (atomic_flag_test_and_set(&p->reclaim_busy))
    return gpupart__fail(GPUPART_EBUSY, "partition_destroy: '%s' is running its reclaim callback", p->name);
  int rc = remove_locked(dev, p);
  if (rc) {
    atomic_flag_clear(&p->reclaim_busy);
    return rc;
  }
  gpupart__arena_fini(&p->arena, p); /* counts the final driver frees */
  retire_counters(&dev->retired, &p->c);
  gpupart__partition_free(p);
  return GPUPART_OK;
}

gpupart_result gpupart_partition_destroy(gpupart_partition *p) {
  if (!p) return GPUPART_OK;
  gpupart_device *dev = p->dev;
  pthread_mutex_lock(&dev->slow);
  int rc = destroy_locked(dev, p);
  pthread_mutex_unlock(&dev->slow);
  return rc;
}

gpupart_partition *gpupart_partition_find(gpupart_device *dev, const char *name) {
  if (!dev || !name) return NULL;
  pthread_mutex_lock(&dev->slow);
  gpupart_partition *p = find_locked(dev, name);
  int joins = !p && dev->find_joins;
  pthread_mutex_unlock(&dev->slow);
  if (!joins || !dev->ledger->ops->find(dev->ledger, name)) return p;
  gpupart_partition_desc d = {.name = name}; /* another process's: this one joins it */
  return create(dev, &d, 1, &p) == GPUPART_OK ? p : NULL;
}

/* Shared ledger: the partitions of the ledger this handle has none of, their names in
 * names (cap of them; NULL when cap is 0); returns how many there are. Slow lock held. */
static uint32_t others_locked(gpupart_device *dev, char (*names)[GPUPART__LEDGER_NAME_MAX], uint32_t cap) {
  gpupart__ledger *l = dev->ledger;
  uint32_t n = l->ops->list(l, 0, NULL, 0), k = 0;
  gpupart__ledger_entry_info *all = n ? gpupart__host_calloc(&dev->ctx->mem, n, sizeof *all) : NULL;
  if (!all) return 0;
  uint32_t got = l->ops->list(l, 0, all, n);
  if (got < n) n = got; /* some went meanwhile */
  for (uint32_t i = 0; i < n; i++) {
    if (find_locked(dev, all[i].name)) continue;
    if (k < cap) memcpy(names[k], all[i].name, sizeof names[k]);
    k++;
  }
  gpupart__host_free(&dev->ctx->mem, all);
  return k;
}

uint32_t gpupart_partition_count(const gpupart_device *dev) {
  if (!dev) return 0;
  gpupart_device *d = (gpupart_device *)dev;
  pthread_mutex_lock(&d->slow);
  uint32_t n = d->nparts + (d->find_joins ? others_locked(d, NULL, 0) : 0);
  pthread_mutex_unlock(&d->slow);
  gpupart__ledger_report(d->ledger);
  return n;
}

/* The i-th partition; past this handle's own, in a shared ledger, the partitions of other
 * processes, joined in the ledger's order until the i-th is this handle's. */
gpupart_partition *gpupart_partition_at(gpupart_device *dev, uint32_t i) {
  if (!dev) return NULL;
  for (;;) {
    char name[1][GPUPART__LEDGER_NAME_MAX];
    pthread_mutex_lock(&dev->slow);
    gpupart_partition *p = i < dev->nparts ? dev->parts[i] : NULL;
    uint32_t others = !p && dev->find_joins ? others_locked(dev, name, 1) : 0;
    pthread_mutex_unlock(&dev->slow);
    gpupart__ledger_report(dev->ledger);
    if (p || !others || !gpupart_partition_find(dev, name[0])) return p;
  }
}

const char *gpupart_partition_name(const gpupart_partition *p) { return p ? p->name : NULL; }

gpupart_result gpupart_partition_trim(gpupart_partition *p) {
  if (!p) return gpupart__fail(GPUPART_EINVAL, "partition_trim: p is NULL");
  pthread_mutex_lock(&p->dev->slow);
  gpupart__arena_release_empty(p);
  int rc = gpupart__device_trim_locked(p->dev);
  pthread_mutex_unlock(&p->dev->slow);
  return rc;
}

static int grow_locked(gpupart_partition *p, const gpupart__ledger_figures *was, uint64_t new_limit, uint64_t g) {
  gpupart__ledger *l = p->dev->ledger;
  int rc = l->ops->set_figures(l, p->account, new_limit, g);
  if (rc)
    return gpupart__fail(rc, "partition_resize: '%s' cannot grow to %llu bytes: the budget is %llu", p->name,
                         (unsigned long long)new_limit, (unsigned long long)gpupart__budget_now(p->dev));
  if (!p->growth.prealloc) return GPUPART_OK;
  rc = gpupart__arena_reserve_exact(p, new_limit - was->limit, 1);
  if (rc) l->ops->set_figures(l, p->account, was->limit, was->guarantee);
  return rc;
}

static int shrink_locked(gpupart_partition *p, uint64_t new_limit, uint64_t g) {
  gpupart__ledger *l = p->dev->ledger;
  gpupart__arena_release_empty(p);
  int rc = l->ops->set_figures(l, p->account, new_limit, g);
  if (rc == GPUPART_EBUSY) {
    gpupart__ledger_figures f;
    l->ops->get(l, p->account, &f);
    return gpupart__fail(rc, "partition_resize: '%s' still holds %llu bytes, above the new limit %llu", p->name,
                         (unsigned long long)f.reserved, (unsigned long long)new_limit);
  }
  return rc;
}

/* The floor alone: refused past the budget less the others' floors, or above the limit,
 * with the ledger's reason (in a shared ledger, the one gpupart resize gives). */
static int floor_locked(gpupart_partition *p, uint64_t limit, uint64_t g) {
  gpupart__ledger *l = p->dev->ledger;
  int rc = l->ops->set_figures(l, p->account, limit, g);
  if (rc == GPUPART_OK) return rc;
  char why[GPUPART__MSG_MAX];
  snprintf(why, sizeof why, "%s", l->shared ? gpupart_last_error() : "");
  return gpupart__fail(rc, "partition_resize: '%s' cannot take the guarantee %llu: %s", p->name, (unsigned long long)g,
                       *why        ? why
                       : g > limit ? "above its limit"
                                   : "the guarantees would sum past the budget");
}

int gpupart__partition_resize_locked(gpupart_partition *p, uint64_t new_limit, uint64_t guarantee) {
  gpupart_device *dev = p->dev;
  uint64_t limit = new_limit & ~(dev->granularity - 1);
  if (!limit)
    return gpupart__fail(GPUPART_EINVAL, "partition_resize: %llu rounds down to 0 at granularity %llu",
                         (unsigned long long)new_limit, (unsigned long long)dev->granularity);
  gpupart__ledger_figures f;
  dev->ledger->ops->get(dev->ledger, p->account, &f);
  if (limit > f.limit) return grow_locked(p, &f, limit, guarantee);
  if (limit < f.limit) return shrink_locked(p, limit, guarantee);
  return guarantee == GPUPART__LEDGER_KEEP || guarantee == f.guarantee ? GPUPART_OK : floor_locked(p, limit, guarantee);
}

gpupart_result gpupart_partition_resize(gpupart_partition *p, uint64_t new_limit) {
  if (!p) return gpupart__fail(GPUPART_EINVAL, "partition_resize: p is NULL");
  pthread_mutex_lock(&p->dev->slow);
  int rc = gpupart__partition_resize_locked(p, new_limit, GPUPART__LEDGER_KEEP);
  pthread_mutex_unlock(&p->dev->slow);
  return rc;
}
