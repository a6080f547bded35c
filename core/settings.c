/* Applying configuration when a device opens: the descriptor's non-zero fields override
 * the configuration (descriptor > environment > file > an orchestrator's share, for
 * memory_limit > default), then the operator's ceilings lower memory_fraction and
 * memory_limit whoever set them; the declared partitions are created in order, and
 * GPUPART_VERBOSE=1 prints what came from where. Reads only the
 * context's already-validated configuration, so nothing here parses text. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const gpupart__source descriptor = {"descriptor", 0};

/* Program index i of a device_open is the i-th visible device (GPUPART_DEVICE="1,0"),
 * so two program indexes never reach one device; with no list, i itself. exact: the
 * descriptor's index is a physical index (the gpupart command's --device). */
int gpupart__settings_target(const gpupart_context *ctx, const gpupart_device_desc *d, int exact,
                             gpupart__settings *s) {
  *s = (gpupart__settings){0};
  gpupart__value *dv = &s->v[GPUPART__OPT_DEVICE];
  gpupart__config_get(ctx->cfg, GPUPART__OPT_DEVICE, GPUPART_BACKEND_AUTO, 0, dv);
  gpupart__config_get(ctx->cfg, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &s->v[GPUPART__OPT_BACKEND]);
  if (d->backend != GPUPART_BACKEND_AUTO)
    s->v[GPUPART__OPT_BACKEND] = (gpupart__value){.set = 1, .src = descriptor, .nbackends = 1,
                                                  .backends = {(uint8_t)d->backend}};
  if (exact || !dv->nvisible) {
    if (exact || d->index) *dv = (gpupart__value){.set = 1, .src = descriptor, .u = d->index};
    return s->index = d->index, GPUPART_OK;
  }
  char list[GPUPART__ERR_MAX], where[GPUPART__PATH_MAX + 16], shown[GPUPART__PATH_MAX + GPUPART__ERR_MAX + 32];
  gpupart__option_format(GPUPART__OPT_DEVICE, dv, list, sizeof list);
  gpupart__source_format(dv->src, where, sizeof where);
  if (dv->src.line) snprintf(shown, sizeof shown, "device = %s at %s", list, GPUPART__ECHO(where));
  else snprintf(shown, sizeof shown, "%s=%s", where, list);
  if (d->index >= dv->nvisible)
    return gpupart__fail(GPUPART_ENODEV, "device_open: index %u: only %u device%s visible (%s)", d->index,
                         dv->nvisible, dv->nvisible == 1 ? "" : "s", shown);
  s->index = dv->visible[d->index];
  return GPUPART_OK;
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

/* ---- the budget ----------------------------------------------------------------- */

/* A named input of the budget: its value, where it came from. */
typedef struct input {
  const char *what;
  uint64_t bytes;
  const gpupart__value *v; /* NULL: the driver */
} input;

static int from_user(const gpupart__value *v) {
  return v && v->src.name && strcmp(v->src.name, "descriptor") && strcmp(v->src.name, "default");
}

/* EINVAL when the blamed input is a descriptor field, ECONFIG when a variable or the file
 * set it; an input left at its default passes the blame to the granularity's source. */
static int blame_code(const gpupart__value *in, const gpupart__value *gran) {
  const gpupart__value *who = in && in->src.name && strcmp(in->src.name, "default") ? in : gran;
  return from_user(who) ? GPUPART_ECONFIG : GPUPART_EINVAL;
}

static int below_granularity(const gpupart_device *dev, const input *in) {
  const gpupart__value *gran = &dev->settings.v[GPUPART__OPT_GRANULARITY];
  char where[GPUPART__PATH_MAX + 16], gwhere[GPUPART__PATH_MAX + 16];
  if (in->v) gpupart__source_format(in->v->src, where, sizeof where);
  else snprintf(where, sizeof where, "the driver");
  gpupart__source_format(gran->src, gwhere, sizeof gwhere);
  return gpupart__fail(blame_code(in->v, gran),
                       "device_open: %s leaves %llu bytes (%s), below the granularity %llu (%s): the budget would be 0",
                       in->what, (unsigned long long)in->bytes, GPUPART__ECHO(where),
                       (unsigned long long)dev->granularity, GPUPART__ECHO(gwhere));
}

/* ---- what the operator says: orchestrator shares and ceilings -------------------- */

static int is_default(const gpupart__value *v) { return !v->src.name || !strcmp(v->src.name, "default"); }

/* An orchestrator's share is the memory_limit of a device that nothing else limits. */
static void apply_share(gpupart_device *dev) {
  gpupart__settings *s = &dev->settings;
  gpupart__value *lim = &s->v[GPUPART__OPT_MEMORY_LIMIT];
  if (!is_default(lim)) return;
  const gpupart_device_info *i = &dev->info;
  s->share = gpupart__config_share_for(dev->ctx->cfg, s->index, i->pci_bus_id, i->uuid, i->total_bytes);
  if (s->share)
    *lim = (gpupart__value){.set = 1, .src = {s->share->source, 0}, .u = gpupart__share_bytes(s->share, i->total_bytes)};
}

/* Lowers option o to its ceiling max_o when it asks for more, whoever set it. */
static void clip(gpupart__settings *s, gpupart__opt o, gpupart__opt max_o, int which) {
  gpupart__value *v = &s->v[o];
  const gpupart__value *m = &s->v[max_o];
  int over = o == GPUPART__OPT_MEMORY_FRACTION ? m->share > 0 && m->share < v->share : m->u && (!v->u || m->u < v->u);
  if (!over) return;
  if (!is_default(v)) s->asked[which] = *v, s->clipped[which] = 1;
  if (o == GPUPART__OPT_MEMORY_FRACTION) v->share = m->share;
  else v->u = m->u;
  v->src = m->src;
}

static void apply_operator(gpupart_device *dev) {
  apply_share(dev);
  clip(&dev->settings, GPUPART__OPT_MEMORY_FRACTION, GPUPART__OPT_MEMORY_FRACTION_MAX, GPUPART__CLIP_FRACTION);
  clip(&dev->settings, GPUPART__OPT_MEMORY_LIMIT, GPUPART__OPT_MEMORY_LIMIT_MAX, GPUPART__CLIP_LIMIT);
}

/* min(total * fraction, limit) - headroom, rounded down to the granularity. */
int gpupart__settings_budget(gpupart_device *dev) {
  apply_operator(dev);
  const gpupart__value *v = dev->settings.v;
  const gpupart__value *sim = dev->info.backend == GPUPART_BACKEND_SIM ? &v[GPUPART__OPT_SIM_TOTAL] : NULL;
  double fraction = v[GPUPART__OPT_MEMORY_FRACTION].share;
  uint64_t total = dev->info.total_bytes, limit = v[GPUPART__OPT_MEMORY_LIMIT].u, g = dev->granularity;
  uint64_t headroom = v[GPUPART__OPT_HEADROOM].u;
  uint64_t b = fraction >= 1.0 ? total : (uint64_t)((long double)total * fraction);
  if (total < g) return below_granularity(dev, &(input){"the device's total", total, sim});
  if (b < g) return below_granularity(dev, &(input){"memory_fraction", b, &v[GPUPART__OPT_MEMORY_FRACTION]});
  if (limit && limit < g) return below_granularity(dev, &(input){"memory_limit", limit, &v[GPUPART__OPT_MEMORY_LIMIT]});
  if (limit && limit < b) b = limit;
  char where[GPUPART__PATH_MAX + 16];
  gpupart__source_format(v[GPUPART__OPT_HEADROOM].src, where, sizeof where);
  if (headroom >= b)
    return gpupart__fail(blame_code(&v[GPUPART__OPT_HEADROOM], NULL),
                         "device_open: headroom %llu (%s) leaves no budget of %llu bytes", (unsigned long long)headroom,
                         GPUPART__ECHO(where), (unsigned long long)b);
  if (b - headroom < g) return below_granularity(dev, &(input){"headroom", b - headroom, &v[GPUPART__OPT_HEADROOM]});
  dev->budget = (b - headroom) & ~(g - 1);
  return GPUPART_OK;
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

/* The partition's source in configuration, for the message. */
static void configured_source(gpupart_partition *p, char *buf, size_t n) {
  const gpupart__settings *s = &p->dev->settings;
  snprintf(buf, n, "the configuration");
  for (uint32_t i = 0; i < s->nparts; i++)
    if (!strcmp(s->parts[i]->name, p->name)) gpupart__source_format(s->parts[i]->src, buf, n);
}

void gpupart__settings_adopted(gpupart_partition *p, const gpupart_partition_desc *d, uint64_t limit,
                               uint64_t guarantee) {
  gpupart_stats st = {0};
  char where[GPUPART__PATH_MAX + 16], line[GPUPART__PATH_MAX + 320];
  gpupart_partition_get_stats(p, &st);
  configured_source(p, where, sizeof where);
  int same_growth = d->growth == GPUPART_GROWTH_DEFAULT || (d->growth == GPUPART_GROWTH_OFF) == p->growth.prealloc;
  int same = st.limit == limit && st.guarantee == guarantee && same_growth;
  snprintf(line, sizeof line, "partition_create: '%s' is declared by the configuration (%s): the configured partition "
           "is returned, with its limit %llu and guarantee %llu bytes%s", p->name, GPUPART__ECHO(where),
           (unsigned long long)st.limit, (unsigned long long)st.guarantee,
           same ? "" : " (the descriptor's values are not used)");
  gpupart__settings_log(p->dev->ctx, same ? GPUPART_LOG_INFO : GPUPART_LOG_WARN,
                        (int)p->dev->settings.v[GPUPART__OPT_VERBOSE].u, line);
}

/* ---- verbose output ------------------------------------------------------------- */

void gpupart__settings_log(gpupart_context *ctx, gpupart_log_level level, int verbose, const char *line) {
  if (ctx->log) ctx->log(level, line, ctx->log_user);
  else if (verbose) fprintf(stderr, "gpupart: %s\n", line);
}

static void emit(gpupart_context *ctx, const char *line) { gpupart__settings_log(ctx, GPUPART_LOG_INFO, 1, line); }

static void warn_shares(gpupart_device *dev);

void gpupart__settings_warn_env(gpupart_device *dev) {
  char names[512], line[768];
  warn_shares(dev);
  int n = gpupart__config_env_changed(dev->ctx->cfg, names, sizeof names);
  if (!n) return;
  snprintf(line, sizeof line, "%s changed after gpupart_context_create read %s; this context keeps the value%s it "
           "read (create a new context to apply the change)", names, n == 1 ? "it" : "them", n == 1 ? "" : "s");
  gpupart__settings_log(dev->ctx, GPUPART_LOG_WARN, (int)dev->settings.v[GPUPART__OPT_VERBOSE].u, line);
}

/* Configuration that does not do what it may seem to: an initial block above the largest
 * (partitions start at max_block), and allow_growth = false with no partition declared
 * (nothing is taken until the program creates one). */
void gpupart__settings_notes(gpupart_device *dev) {
  const gpupart__settings *s = &dev->settings;
  int verbose = (int)s->v[GPUPART__OPT_VERBOSE].u;
  char line[3 * GPUPART__PATH_MAX], a[GPUPART__PATH_MAX + 16], b[GPUPART__PATH_MAX + 16];
  const gpupart__value *ib = &s->v[GPUPART__OPT_INITIAL_BLOCK], *mb = &s->v[GPUPART__OPT_MAX_BLOCK];
  gpupart__source_format(ib->src, a, sizeof a);
  gpupart__source_format(mb->src, b, sizeof b);
  if (ib->u > mb->u) {
    snprintf(line, sizeof line, "initial_block %llu (%s) is above max_block %llu (%s): partitions start at max_block",
             (unsigned long long)ib->u, a, (unsigned long long)mb->u, b);
    gpupart__settings_log(dev->ctx, GPUPART_LOG_WARN, verbose, line);
  }
  const gpupart__value *g = &s->v[GPUPART__OPT_ALLOW_GROWTH];
  if (g->u || !from_user(g) || s->nparts) return;
  gpupart__source_format(g->src, a, sizeof a);
  snprintf(line, sizeof line, "allow_growth = false (%s) and no partition is configured for %s:%u: nothing is "
           "preallocated until the program creates a partition, which then takes its whole limit; to take the budget "
           "when the device opens, declare one (GPUPART_PARTITIONS=\"name:100%%\")", a,
           gpupart_backend_name(dev->info.backend), dev->info.index);
  gpupart__settings_log(dev->ctx, GPUPART_LOG_INFO, verbose, line);
}

static void warn_shares(gpupart_device *dev) {
  const gpupart__config *c = dev->ctx->cfg;
  for (uint32_t i = 0; i < c->nshare_warnings; i++)
    gpupart__settings_log(dev->ctx, GPUPART_LOG_WARN, (int)dev->settings.v[GPUPART__OPT_VERBOSE].u,
                          c->share_warnings[i]);
}

static void print_foreign(gpupart_device *dev) {
  const gpupart__config *c = dev->ctx->cfg;
  char line[3 * GPUPART__ECHO_MAX];
  for (uint32_t i = 0; i < c->nforeign; i++) {
    const gpupart__foreign *f = &c->foreign[i];
    snprintf(line, sizeof line, "  %s=%s is not read by gpupart (not applied); the equivalent: %s", f->name,
             f->value, f->hint);
    emit(dev->ctx, line);
  }
}

void gpupart__settings_clip_note(const gpupart__settings *s, gpupart__opt o, char *buf, size_t n) {
  int which = o == GPUPART__OPT_MEMORY_FRACTION ? GPUPART__CLIP_FRACTION : GPUPART__CLIP_LIMIT;
  char value[64], where[GPUPART__PATH_MAX + 16];
  if (n) buf[0] = 0;
  if (n < sizeof where + sizeof value + 32) return;
  if ((o != GPUPART__OPT_MEMORY_FRACTION && o != GPUPART__OPT_MEMORY_LIMIT) || !s->clipped[which]) return;
  gpupart__option_format(o, &s->asked[which], value, sizeof value);
  gpupart__source_format(s->asked[which].src, where, sizeof where);
  snprintf(buf, n, "clipped by the ceiling: %s asked %s", where, value);
}

static void print_option(gpupart_device *dev, int o) {
  const gpupart__value *v = &dev->settings.v[o];
  char value[GPUPART__PATH_MAX], where[GPUPART__PATH_MAX + 16], note[GPUPART__PATH_MAX + 128];
  char line[3 * GPUPART__PATH_MAX + 64];
  gpupart__option_format((gpupart__opt)o, v, value, sizeof value);
  gpupart__source_format(v->src, where, sizeof where);
  gpupart__settings_clip_note(&dev->settings, (gpupart__opt)o, note, sizeof note);
  /* A line longer than line is cut at its end (the key and value come first). */
  if (snprintf(line, sizeof line, "  %-18s = %s (%s%s%s)", gpupart__options[o].key, value, where, *note ? "; " : "",
               note) >= (int)sizeof line)
    line[sizeof line - 1] = '\0';
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
  print_foreign(dev);
}
