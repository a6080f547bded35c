/* The settings of one device open (settings.h), computed by one pure function from the
 * context's configuration, the program's descriptors and what the device is: the
 * descriptor's non-zero fields override the configuration (descriptor > environment >
 * file > an orchestrator's share, for memory_limit > default), then the operator's
 * ceilings lower memory_fraction and memory_limit whoever set them, the granularity is
 * raised to the driver's block granularity and the budget worked out. Nothing here keeps
 * state, opens anything or parses text: the configuration was validated when the context
 * loaded it. */
#include <stdio.h>
#include <string.h>

#include "settings.h"

static const gpupart__source descriptor = {"descriptor", 0};

/* Program index i of a device_open is the i-th visible device (GPUPART_DEVICE="1,0"),
 * so two program indexes never reach one device; with no list, i itself. exact: the
 * descriptor's index is a physical index (the gpupart command's --device). */
int gpupart__settings_target(const gpupart__config *c, const gpupart__settings_in *in, gpupart__settings *s) {
  const gpupart_device_desc *d = in->desc;
  *s = (gpupart__settings){0};
  gpupart__value *dv = &s->v[GPUPART__OPT_DEVICE];
  gpupart__config_get(c, GPUPART__OPT_DEVICE, GPUPART_BACKEND_AUTO, 0, dv);
  gpupart__config_get(c, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &s->v[GPUPART__OPT_BACKEND]);
  if (d->backend != GPUPART_BACKEND_AUTO)
    s->v[GPUPART__OPT_BACKEND] =
        (gpupart__value){.set = 1, .src = descriptor, .nbackends = 1, .backends = {(uint8_t)d->backend}};
  if (in->exact || !dv->nvisible) {
    if (in->exact || d->index) /* the one device named, as it is shown ("1"; an empty list is "all") */
      *dv = (gpupart__value){.set = 1, .src = descriptor, .u = d->index, .visible = {d->index}, .nvisible = 1};
    s->index = d->index;
    return GPUPART_OK;
  }
  char list[GPUPART__ERR_MAX], where[GPUPART__PATH_MAX + 16], shown[GPUPART__PATH_MAX + GPUPART__ERR_MAX + 32];
  gpupart__option_format(GPUPART__OPT_DEVICE, dv, list, sizeof list);
  gpupart__source_format(dv->src, where, sizeof where);
  if (dv->src.line) snprintf(shown, sizeof shown, "device = %s at %s", list, GPUPART__ECHO(where));
  else snprintf(shown, sizeof shown, "%s=%s", where, list);
  if (d->index >= dv->nvisible)
    return gpupart__fail(GPUPART_ENODEV, "device_open: index %u: only %u device%s visible (%s)", d->index, dv->nvisible,
                         dv->nvisible == 1 ? "" : "s", shown);
  s->index = dv->visible[d->index];
  return GPUPART_OK;
}

static void from_descriptor(gpupart__value *v, uint64_t u) {
  *v = (gpupart__value){.set = 1, .src = descriptor, .u = u};
}

static void apply_descriptor(const gpupart__settings_in *in, gpupart__settings *s) {
  const gpupart_device_desc *d = in->desc;
  gpupart__value *v = s->v;
  if (d->memory_fraction > 0)
    v[GPUPART__OPT_MEMORY_FRACTION] = (gpupart__value){.set = 1, .src = descriptor, .share = d->memory_fraction};
  if (d->memory_limit) from_descriptor(&v[GPUPART__OPT_MEMORY_LIMIT], d->memory_limit);
  if (d->headroom) from_descriptor(&v[GPUPART__OPT_HEADROOM], d->headroom);
  if (d->granularity) from_descriptor(&v[GPUPART__OPT_GRANULARITY], d->granularity);
  if (d->growth) from_descriptor(&v[GPUPART__OPT_ALLOW_GROWTH], d->growth == GPUPART_GROWTH_ON);
  if (d->flags & GPUPART_DEVICE_SHARED) from_descriptor(&v[GPUPART__OPT_SHARED], 1);
  if (in->config_path && !in->ignore_env)
    v[GPUPART__OPT_CONFIG] = (gpupart__value){.set = 1, .src = descriptor, .str = in->config_path};
  if (in->ledger_dir) v[GPUPART__OPT_LEDGER_DIR] = (gpupart__value){.set = 1, .src = descriptor, .str = in->ledger_dir};
}

/* Every other option for the chosen backend, the descriptor's non-zero fields first. */
static void resolve(const gpupart__config *c, const gpupart__settings_in *in, gpupart__settings *s) {
  s->backend = in->backend;
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (o != GPUPART__OPT_DEVICE && o != GPUPART__OPT_BACKEND)
      gpupart__config_get(c, (gpupart__opt)o, in->backend, s->index, &s->v[o]);
  apply_descriptor(in, s);
  s->nparts = gpupart__config_partitions(c, in->backend, s->index, s->parts, GPUPART__MAX_PARTS);
}

const char *gpupart__settings_ledger_dir(const gpupart__settings *s) {
  const char *dir = s->v[GPUPART__OPT_LEDGER_DIR].str;
  return dir && *dir ? dir : gpupart__options[GPUPART__OPT_LEDGER_DIR].def;
}

/* ---- what the operator says: orchestrator shares and ceilings -------------------- */

static int is_default(const gpupart__value *v) { return !v->src.name || !strcmp(v->src.name, "default"); }

/* An orchestrator's share is the memory_limit of a device that nothing else limits. */
static void apply_share(const gpupart__config *c, const gpupart_device_info *info, gpupart__settings *s) {
  gpupart__value *lim = &s->v[GPUPART__OPT_MEMORY_LIMIT];
  if (!is_default(lim)) return;
  s->share = gpupart__config_share_for(c, s->index, info->pci_bus_id, info->uuid, info->total_bytes);
  if (s->share)
    *lim = (gpupart__value){
        .set = 1, .src = {s->share->source, 0}, .u = gpupart__share_bytes(s->share, info->total_bytes)};
}

/* Lowers option o to its ceiling max_o when it asks for more, whoever set it. */
static void clip(gpupart__settings *s, gpupart__opt o, gpupart__opt max_o, int which) {
  gpupart__value *v = &s->v[o];
  const gpupart__value *m = &s->v[max_o];
  int over = o == GPUPART__OPT_MEMORY_FRACTION ? m->share > 0 && m->share < v->share : m->u && (!v->u || m->u < v->u);
  if (!over) return;
  if (!is_default(v)) {
    s->asked[which] = *v;
    s->clipped[which] = 1;
  }
  if (o == GPUPART__OPT_MEMORY_FRACTION) v->share = m->share;
  else v->u = m->u;
  v->src = m->src;
}

static void apply_operator(const gpupart__config *c, const gpupart_device_info *info, gpupart__settings *s) {
  apply_share(c, info, s);
  clip(s, GPUPART__OPT_MEMORY_FRACTION, GPUPART__OPT_MEMORY_FRACTION_MAX, GPUPART__CLIP_FRACTION);
  clip(s, GPUPART__OPT_MEMORY_LIMIT, GPUPART__OPT_MEMORY_LIMIT_MAX, GPUPART__CLIP_LIMIT);
}

/* ---- the budget ----------------------------------------------------------------- */

/* A named input of the budget: its value, where it came from. */
typedef struct input {
  const char *what;
  uint64_t bytes;
  const gpupart__value *v; /* NULL: the driver */
} input;

/* EINVAL when the blamed input is a descriptor field, ECONFIG when a variable or the file
 * set it; an input left at its default passes the blame to the granularity's source. */
static int blame_code(const gpupart__value *in, const gpupart__value *gran) {
  const gpupart__value *who = in && in->src.name && strcmp(in->src.name, "default") ? in : gran;
  return gpupart__value_from_user(who) ? GPUPART_ECONFIG : GPUPART_EINVAL;
}

static int below_granularity(const gpupart__settings *s, const input *in) {
  const gpupart__value *gran = &s->v[GPUPART__OPT_GRANULARITY];
  char where[GPUPART__PATH_MAX + 16], gwhere[GPUPART__PATH_MAX + 16];
  if (in->v) gpupart__source_format(in->v->src, where, sizeof where);
  else snprintf(where, sizeof where, "the driver");
  gpupart__source_format(gran->src, gwhere, sizeof gwhere);
  return gpupart__fail(blame_code(in->v, gran),
                       "device_open: %s leaves %llu bytes (%s), below the granularity %llu (%s): the budget would be 0",
                       in->what, (unsigned long long)in->bytes, GPUPART__ECHO(where),
                       (unsigned long long)s->granularity, GPUPART__ECHO(gwhere));
}

/* min(total * fraction, limit) - headroom, rounded down to the granularity. */
static int budget(const gpupart_device_info *info, gpupart__settings *s) {
  const gpupart__value *v = s->v;
  const gpupart__value *sim = info->backend == GPUPART_BACKEND_SIM ? &v[GPUPART__OPT_SIM_TOTAL] : NULL;
  double fraction = v[GPUPART__OPT_MEMORY_FRACTION].share;
  uint64_t total = info->total_bytes, limit = v[GPUPART__OPT_MEMORY_LIMIT].u, g = s->granularity;
  uint64_t headroom = v[GPUPART__OPT_HEADROOM].u;
  uint64_t b = fraction >= 1.0 ? total : (uint64_t)((long double)total * fraction);
  if (total < g) return below_granularity(s, &(input){"the device's total", total, sim});
  if (b < g) return below_granularity(s, &(input){"memory_fraction", b, &v[GPUPART__OPT_MEMORY_FRACTION]});
  if (limit && limit < g) return below_granularity(s, &(input){"memory_limit", limit, &v[GPUPART__OPT_MEMORY_LIMIT]});
  if (limit && limit < b) b = limit;
  char where[GPUPART__PATH_MAX + 16];
  gpupart__source_format(v[GPUPART__OPT_HEADROOM].src, where, sizeof where);
  if (headroom >= b)
    return gpupart__fail(blame_code(&v[GPUPART__OPT_HEADROOM], NULL),
                         "device_open: headroom %llu (%s) leaves no budget of %llu bytes", (unsigned long long)headroom,
                         GPUPART__ECHO(where), (unsigned long long)b);
  if (b - headroom < g) return below_granularity(s, &(input){"headroom", b - headroom, &v[GPUPART__OPT_HEADROOM]});
  s->budget = (b - headroom) & ~(g - 1);
  return GPUPART_OK;
}

/* Blocks and limits are whole multiples of the granularity, and the driver hands out only
 * whole multiples of its block granularity (at least its alignment): a finer granularity
 * is raised to it. The sub-allocator's granule stays the alignment. */
static uint64_t granularity(const gpupart__settings *s, const gpupart_device_info *info) {
  uint64_t g = s->v[GPUPART__OPT_GRANULARITY].u;
  return g < info->block_granularity ? info->block_granularity : g;
}

int gpupart__settings_compute(const gpupart__config *c, const gpupart__settings_in *in, gpupart__settings *s) {
  int rc = gpupart__settings_target(c, in, s);
  if (rc) return rc;
  resolve(c, in, s);
  if (!in->info) return GPUPART_OK;
  s->granularity = granularity(s, in->info);
  apply_operator(c, in->info, s);
  return budget(in->info, s);
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
