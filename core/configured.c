/* The partitions a device's configuration declares, made at its open, and its DRA claim
 * at run time: the claim found once at open, its newest figures for the claim's partition
 * (a process started after a bump), a newer generation of the metadata file applied as a
 * live resize of the partitions that held the whole claim (gpupart__partition_resize_locked,
 * the rule `gpupart resize` applies in a shared ledger). The reader of the metadata files
 * themselves is the config room's (core/config/dra.c). */
#include "configured.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "events.h"
#include "internal.h"
#include "partition.h"
#include "shm.h"

void gpupart__device_dra_find(gpupart_device *dev) {
  const gpupart__config *c = dev->ctx->cfg;
  for (uint32_t i = 0; i < c->ndra && !dev->dra; i++) {
    if (!gpupart__dra_names(&c->dra[i], dev->info.uuid, dev->info.pci_bus_id)) continue;
    dev->dra = i + 1;
    dev->dra_generation = c->dra[i].generation;
    dev->dra_memory = c->dra[i].has_memory ? c->dra[i].memory : 0;
  }
}

/* Each partition of this handle that held the whole claim (its limit was the claim's
 * memory) takes the new memory and, when given, floor (gpupart__partition_resize_locked:
 * in a shared ledger, gpupart resize's rule). Slow lock held. */
static int dra_apply_locked(gpupart_device *dev, uint64_t old_bytes, uint64_t new_bytes, uint64_t guarantee) {
  uint64_t was = old_bytes & ~(dev->granularity - 1), g = guarantee ? guarantee : GPUPART__LEDGER_KEEP;
  int rc = GPUPART_OK;
  for (uint32_t i = 0; i < dev->nparts && rc == GPUPART_OK; i++) {
    gpupart__ledger_figures f;
    dev->ledger->ops->get(dev->ledger, dev->parts[i]->account, &f);
    if (was && f.limit == was) rc = gpupart__partition_resize_locked(dev->parts[i], new_bytes, g);
  }
  return rc;
}

/* What one look at the file found, logged once the lock is dropped. */
typedef struct dra_news {
  int level; /* 0: nothing to say */
  char line[GPUPART__MSG_MAX + 256];
} dra_news;

static void dra_update_locked(gpupart_device *dev, const gpupart__dra_device *now, dra_news *out) {
  const gpupart__dra_device *was = &dev->ctx->cfg->dra[dev->dra - 1];
  uint64_t from = dev->dra_memory, to = now->has_memory ? now->memory : from;
  int rc = to != from || now->guarantee ? dra_apply_locked(dev, from, to, now->guarantee) : GPUPART_OK;
  char floor[48] = "";
  if (now->guarantee) snprintf(floor, sizeof floor, ", guarantee %llu", (unsigned long long)now->guarantee);
  out->level = rc ? GPUPART_LOG_WARN : GPUPART_LOG_INFO;
  if (rc) {
    snprintf(out->line, sizeof out->line, "DRA claim %s/%s generation %llu: memory %llu -> %llu%s not applied: %s",
             was->namespace, was->claim, (unsigned long long)now->generation, (unsigned long long)from,
             (unsigned long long)to, floor, gpupart_last_error());
    return; /* tried again at the next look */
  }
  snprintf(out->line, sizeof out->line, "DRA claim %s/%s generation %llu: memory %llu -> %llu%s", was->namespace,
           was->claim, (unsigned long long)now->generation, (unsigned long long)from, (unsigned long long)to, floor);
  dev->dra_generation = now->generation;
  dev->dra_memory = to;
}

static void dra_look_locked(gpupart_device *dev, dra_news *out) {
  const gpupart__dra_device *was = &dev->ctx->cfg->dra[dev->dra - 1];
  gpupart__dra_device now[GPUPART__MAX_DRA];
  char why[GPUPART__MSG_MAX];
  int n = gpupart__dra_read(&dev->ctx->mem, was->path, now, GPUPART__MAX_DRA, why, sizeof why);
  for (int i = 0; i < n; i++)
    if (now[i].by_uuid == was->by_uuid && !strcmp(now[i].key, was->key) && !strcmp(now[i].request, was->request) &&
        now[i].generation > dev->dra_generation)
      dra_update_locked(dev, &now[i], out);
}

static uint64_t coarse_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void gpupart__device_dra_poll(gpupart_device *dev, int force) {
  if (!dev->dra) return;
  uint64_t now = coarse_ns();
  if (!force && now < atomic_load_explicit(&dev->dra_next_ns, memory_order_relaxed)) return;
  dra_news news = {0};
  pthread_mutex_lock(&dev->slow);
  atomic_store_explicit(&dev->dra_next_ns, now + GPUPART__DRA_POLL_NS, memory_order_relaxed);
  dra_look_locked(dev, &news);
  pthread_mutex_unlock(&dev->slow);
  if (news.level)
    gpupart__log(dev->ctx, (gpupart_log_level)news.level, dev->settings.v[GPUPART__OPT_VERBOSE].u != 0, news.line);
}

void gpupart__device_dra_watch(gpupart_device *dev) {
  gpupart__device_dra_find(dev);
  gpupart__device_dra_poll(dev, 1);
}

int gpupart__device_dra_figures(gpupart_device *dev, gpupart_partition_desc *d) {
  const gpupart__dra_device *c = dev->dra ? &dev->ctx->cfg->dra[dev->dra - 1] : NULL;
  const char *named = dev->ctx->cfg->dra_partition; /* else the claim's is the only one configured */
  if (!c || !c->has_memory || (*named ? strcmp(d->name, named) != 0 : dev->settings.nparts != 1)) return 0;
  uint64_t g = c->guarantee ? c->guarantee : gpupart__partition_share_of(dev, d->guarantee_fraction, d->guarantee);
  d->fraction = d->guarantee_fraction = 0;
  d->limit = dev->dra_memory; /* the newest generation's, which the variables may predate */
  d->guarantee = g < d->limit ? g : d->limit;
  return 1;
}

int gpupart__device_dra_join(gpupart_device *dev, const gpupart_partition_desc *d, gpupart_partition **out) {
  gpupart_partition_desc j = *d;
  j.limit = j.guarantee = 0; /* the ledger's figures: another job made it with an older generation's */
  int rc = gpupart_partition_create(dev, &j, out);
  if (rc) return rc;
  pthread_mutex_lock(&dev->slow);
  rc = gpupart__partition_resize_locked(*out, d->limit, d->guarantee);
  pthread_mutex_unlock(&dev->slow);
  char line[GPUPART__MSG_MAX + 128];
  snprintf(line, sizeof line, "partition '%s' joined; the DRA claim's generation %llu figures %s%s", d->name,
           (unsigned long long)dev->dra_generation, rc ? "not applied: " : "applied", rc ? gpupart_last_error() : "");
  gpupart__log(dev->ctx, rc ? GPUPART_LOG_WARN : GPUPART_LOG_INFO, 1, line);
  return GPUPART_OK;
}

/* ---- the partitions configuration declares ------------------------------------ */

static gpupart_partition_desc partition_desc(const gpupart__pspec *p) {
  gpupart_partition_desc d = {.name = p->name, .growth = p->growth, .release_threshold = p->release_threshold};
  if (p->size.is_share) d.fraction = p->size.share;
  else d.limit = p->size.bytes;
  if (p->guarantee.is_share) d.guarantee_fraction = p->guarantee.share;
  else d.guarantee = p->guarantee.bytes;
  return d;
}

/* elsewhere: another handle or job made it (made_elsewhere): only a DRA claim's partition
 * of a shared ledger is joined now, to take the claim's newest figures. */
static int create_one(gpupart_device *dev, const gpupart__pspec *p, int elsewhere) {
  gpupart_partition_desc d = partition_desc(p);
  int claim = gpupart__device_dra_figures(dev, &d) && dev->ledger->shared;
  gpupart_partition *part;
  if (elsewhere && !claim) return GPUPART_OK;
  int rc = elsewhere ? GPUPART_EEXIST : gpupart_partition_create(dev, &d, &part);
  if (rc == GPUPART_EEXIST && claim) rc = gpupart__device_dra_join(dev, &d, &part);
  if (rc == GPUPART_OK) {
    pthread_mutex_lock(&dev->slow);
    part->configured = 1;
    pthread_mutex_unlock(&dev->slow);
    return rc;
  }
  char where[GPUPART__PATH_MAX + 16], why[GPUPART__MSG_MAX];
  gpupart__source_format(p->src, where, sizeof where);
  snprintf(why, sizeof why, "%s", gpupart_last_error());
  if (rc == GPUPART_EINVAL || rc == GPUPART_ELIMIT || rc == GPUPART_EEXIST) rc = GPUPART_ECONFIG;
  return gpupart__fail(rc, "%s: partition '%s' on %s:%u: %s", GPUPART__ECHO(where), p->name,
                       gpupart_backend_name(dev->info.backend), dev->info.index, why);
}

/* A configured partition that another handle of the same physical device already made
 * (its names are device-wide) is that handle's: a second open does not make it again.
 * In the operator's ledger (gpupart ledger create) every job joins it at open, with the
 * ledger's figures (a mismatch is a warning: ledger_figures). */
static int made_elsewhere(gpupart_device *dev, const char *name, int operator) {
  return !operator&& dev->ledger->ops->find(dev->ledger, name) && !gpupart_partition_find(dev, name);
}

int gpupart__partition_create_configured(gpupart_device *dev) {
  const gpupart__settings *s = &dev->settings;
  gpupart__device_dra_find(dev); /* its claim's figures and labels, for the partitions made now */
  char path[4096];
  int operator= s->nparts && gpupart__ledger_shm_operator_of(dev->ledger, NULL, path, sizeof path);
  for (uint32_t i = 0; i < s->nparts; i++) {
    int rc = create_one(dev, s->parts[i], made_elsewhere(dev, s->parts[i]->name, operator));
    if (rc) return rc;
  }
  return GPUPART_OK;
}
