/* Applying configuration when a device opens: the descriptor's non-zero fields override
 * the configuration (descriptor > environment > file > default), the declared partitions
 * are created in order, and GPUPART_VERBOSE=1 prints what came from where. Reads only the
 * context's already-validated configuration, so nothing here parses text. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const gpupart__source descriptor = {"descriptor", 0};

void gpupart__settings_target(const gpupart_context *ctx, const gpupart_device_desc *d, int exact,
                              gpupart__settings *s) {
  *s = (gpupart__settings){0};
  gpupart__config_get(ctx->cfg, GPUPART__OPT_DEVICE, GPUPART_BACKEND_AUTO, 0, &s->v[GPUPART__OPT_DEVICE]);
  gpupart__config_get(ctx->cfg, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &s->v[GPUPART__OPT_BACKEND]);
  if (d->index || exact) s->v[GPUPART__OPT_DEVICE] = (gpupart__value){.set = 1, .src = descriptor, .u = d->index};
  if (d->backend != GPUPART_BACKEND_AUTO)
    s->v[GPUPART__OPT_BACKEND] = (gpupart__value){.set = 1, .src = descriptor, .nbackends = 1,
                                                  .backends = {(uint8_t)d->backend}};
  s->index = (uint32_t)s->v[GPUPART__OPT_DEVICE].u;
}

static void from_descriptor(gpupart__value *v, uint64_t u) {
  *v = (gpupart__value){.set = 1, .src = descriptor, .u = u};
}

static void apply_descriptor(const gpupart_context *ctx, const gpupart_device_desc *d, gpupart__settings *s) {
  gpupart__value *v = s->v;
  if (d->memory_fraction > 0)
    v[GPUPART__OPT_MEMORY_FRACTION] = (gpupart__value){.set = 1, .src = descriptor, .share = d->memory_fraction};
  if (d->memory_limit) from_descriptor(&v[GPUPART__OPT_MEMORY_LIMIT], d->memory_limit);
  if (d->headroom) from_descriptor(&v[GPUPART__OPT_HEADROOM], d->headroom);
  if (d->granularity) from_descriptor(&v[GPUPART__OPT_GRANULARITY], d->granularity);
  if (d->growth) from_descriptor(&v[GPUPART__OPT_ALLOW_GROWTH], d->growth == GPUPART_GROWTH_ON);
  if (d->flags & GPUPART_DEVICE_SHARED) from_descriptor(&v[GPUPART__OPT_SHARED], 1);
  const gpupart_sim_desc *sim = d->backend_desc;
  if (s->backend == GPUPART_BACKEND_SIM && sim && sim->total_bytes)
    from_descriptor(&v[GPUPART__OPT_SIM_TOTAL], sim->total_bytes);
  if (ctx->config_path && !(ctx->flags & GPUPART_CONTEXT_IGNORE_ENV))
    v[GPUPART__OPT_CONFIG] = (gpupart__value){.set = 1, .src = descriptor, .str = ctx->config_path};
  if (ctx->ledger_dir)
    v[GPUPART__OPT_LEDGER_DIR] = (gpupart__value){.set = 1, .src = descriptor, .str = ctx->ledger_dir};
}

void gpupart__settings_resolve(const gpupart_context *ctx, const gpupart_device_desc *d, gpupart_backend b,
                               gpupart__settings *s) {
  s->backend = b;
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (o != GPUPART__OPT_DEVICE && o != GPUPART__OPT_BACKEND)
      gpupart__config_get(ctx->cfg, (gpupart__opt)o, b, s->index, &s->v[o]);
  apply_descriptor(ctx, d, s);
  s->nparts = gpupart__config_partitions(ctx->cfg, b, s->index, s->parts, GPUPART__MAX_PARTS);
}

/* ---- partitions ----------------------------------------------------------------- */

static gpupart_partition_desc partition_desc(const gpupart__pspec *p) {
  gpupart_partition_desc d = {.name = p->name, .growth = p->growth, .release_threshold = p->release_threshold};
  if (p->size.is_share) d.fraction = p->size.share;
  else d.limit = p->size.bytes;
  if (p->guarantee.is_share) d.guarantee_fraction = p->guarantee.share;
  else d.guarantee = p->guarantee.bytes;
  return d;
}

static int create_one(gpupart_device *dev, const gpupart__pspec *p) {
  gpupart_partition_desc d = partition_desc(p);
  gpupart_partition *part;
  int rc = gpupart_partition_create(dev, &d, &part);
  if (rc == GPUPART_OK) return rc;
  char where[GPUPART__PATH_MAX + 16], why[GPUPART__MSG_MAX];
  gpupart__source_format(p->src, where, sizeof where);
  snprintf(why, sizeof why, "%s", gpupart_last_error());
  if (rc == GPUPART_EINVAL || rc == GPUPART_ELIMIT || rc == GPUPART_EEXIST) rc = GPUPART_ECONFIG;
  return gpupart__fail(rc, "%s: partition '%s' on %s:%u: %s", where, p->name, gpupart_backend_name(dev->info.backend),
                       dev->info.index, why);
}

/* A configured partition that another handle of the same physical device already made
 * (its names are device-wide) is that handle's: a second open does not make it again. */
static int made_elsewhere(gpupart_device *dev, const char *name) {
  return dev->ledger->ops->find(dev->ledger, name) && !gpupart_partition_find(dev, name);
}

int gpupart__settings_create_partitions(gpupart_device *dev) {
  const gpupart__settings *s = &dev->settings;
  for (uint32_t i = 0; i < s->nparts; i++) {
    if (made_elsewhere(dev, s->parts[i]->name)) continue;
    int rc = create_one(dev, s->parts[i]);
    if (rc) return rc;
  }
  return GPUPART_OK;
}

/* ---- verbose output ------------------------------------------------------------- */

static void emit(gpupart_context *ctx, const char *line) {
  if (ctx->log) ctx->log(GPUPART_LOG_INFO, line, ctx->log_user);
  else fprintf(stderr, "gpupart: %s\n", line);
}

static void print_option(gpupart_device *dev, int o) {
  const gpupart__value *v = &dev->settings.v[o];
  char value[GPUPART__PATH_MAX], where[GPUPART__PATH_MAX + 16], line[2 * GPUPART__PATH_MAX + 64];
  gpupart__option_format((gpupart__opt)o, v, value, sizeof value);
  gpupart__source_format(v->src, where, sizeof where);
  snprintf(line, sizeof line, "  %-18s = %s (%s)", gpupart__options[o].key, value, where);
  emit(dev->ctx, line);
}

static void print_partition(gpupart_device *dev, uint32_t i) {
  gpupart_partition *p = gpupart_partition_find(dev, dev->settings.parts[i]->name);
  gpupart_stats st;
  char where[GPUPART__PATH_MAX + 16], line[GPUPART__PATH_MAX + 160];
  if (!p || gpupart_partition_get_stats(p, &st)) return; /* another handle of the device made it */
  gpupart__source_format(dev->settings.parts[i]->src, where, sizeof where);
  snprintf(line, sizeof line, "  partition %s: limit %llu, guarantee %llu bytes (%s)", gpupart_partition_name(p),
           (unsigned long long)st.limit, (unsigned long long)st.guarantee, where);
  emit(dev->ctx, line);
}

void gpupart__settings_print(gpupart_device *dev) {
  char line[512];
  snprintf(line, sizeof line, "device %s:%u (%s): total %llu, budget %llu bytes",
           gpupart_backend_name(dev->info.backend), dev->info.index, dev->info.name,
           (unsigned long long)dev->info.total_bytes, (unsigned long long)dev->budget);
  emit(dev->ctx, line);
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (o != GPUPART__OPT_PARTITIONS) print_option(dev, o);
  for (uint32_t i = 0; i < dev->settings.nparts; i++) print_partition(dev, i);
}
