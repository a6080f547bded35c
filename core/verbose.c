/* What a device open says besides its result: with GPUPART_VERBOSE=1, the effective
 * settings one line per option with its source, the configured partitions and the other
 * frameworks' variables seen; and always (to the log function, or stderr when verbose)
 * the warnings and notes of the open: variables changed after the context read them,
 * orchestrator values ignored, configuration that does not do what it may seem to, and
 * configuration that can never apply on this machine. */
#include <stdio.h>
#include <string.h>

#include "verbose.h"
#include "events.h"
#include "internal.h"
#include "reach.h"

static void emit(gpupart_context *ctx, const char *line) { gpupart__log(ctx, GPUPART_LOG_INFO, 1, line); }

static void warn_shares(gpupart_device *dev) {
  const gpupart__config *c = dev->ctx->cfg;
  for (uint32_t i = 0; i < c->nshare_warnings; i++)
    gpupart__log(dev->ctx, GPUPART_LOG_WARN, (int)dev->settings.v[GPUPART__OPT_VERBOSE].u, c->share_warnings[i]);
}

void gpupart__verbose_warn_env(gpupart_device *dev) {
  char names[512], line[768];
  warn_shares(dev);
  int n = gpupart__config_env_changed(dev->ctx->cfg, names, sizeof names);
  if (!n) return;
  snprintf(line, sizeof line,
           "%s changed after gpupart_context_create read %s; this context keeps the value%s it "
           "read (create a new context to apply the change)",
           names, n == 1 ? "it" : "them", n == 1 ? "" : "s");
  gpupart__log(dev->ctx, GPUPART_LOG_WARN, (int)dev->settings.v[GPUPART__OPT_VERBOSE].u, line);
}

/* Configuration that does not do what it may seem to: an initial block above the largest
 * (partitions start at max_block), and allow_growth = false with no partition declared
 * (nothing is taken until the program creates one). */
void gpupart__verbose_notes(gpupart_device *dev) {
  const gpupart__settings *s = &dev->settings;
  int verbose = (int)s->v[GPUPART__OPT_VERBOSE].u;
  char line[3 * GPUPART__PATH_MAX], a[GPUPART__PATH_MAX + 16], b[GPUPART__PATH_MAX + 16];
  const gpupart__value *ib = &s->v[GPUPART__OPT_INITIAL_BLOCK], *mb = &s->v[GPUPART__OPT_MAX_BLOCK];
  gpupart__source_format(ib->src, a, sizeof a);
  gpupart__source_format(mb->src, b, sizeof b);
  if (ib->u > mb->u) {
    snprintf(line, sizeof line, "initial_block %llu (%s) is above max_block %llu (%s): partitions start at max_block",
             (unsigned long long)ib->u, a, (unsigned long long)mb->u, b);
    gpupart__log(dev->ctx, GPUPART_LOG_WARN, verbose, line);
  }
  const gpupart__value *g = &s->v[GPUPART__OPT_ALLOW_GROWTH];
  if (g->u || !gpupart__value_from_user(g) || s->nparts) return;
  gpupart__source_format(g->src, a, sizeof a);
  snprintf(line, sizeof line,
           "allow_growth = false (%s) and no partition is configured for %s:%u: nothing is "
           "preallocated until the program creates a partition, which then takes its whole limit; to take the budget "
           "when the device opens, declare one (GPUPART_PARTITIONS=\"name:100%%\")",
           a, gpupart_backend_name(dev->info.backend), dev->info.index);
  gpupart__log(dev->ctx, GPUPART_LOG_INFO, verbose, line);
}

static void print_foreign(gpupart_device *dev) {
  const gpupart__config *c = dev->ctx->cfg;
  char line[3 * GPUPART__ECHO_MAX];
  for (uint32_t i = 0; i < c->nforeign; i++) {
    const gpupart__foreign *f = &c->foreign[i];
    snprintf(line, sizeof line, "  %s=%s is not read by gpupart (not applied); the equivalent: %s", f->name, f->value,
             f->hint);
    emit(dev->ctx, line);
  }
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

void gpupart__verbose_print(gpupart_device *dev) {
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

/* Appends one unreachable device to the line (a buffer of UNREACHABLE_LINE bytes). */
#define UNREACHABLE_LINE 2048
static void append_unreachable(const gpupart__unreachable *u, void *user) {
  char *line = user, where[GPUPART__PATH_MAX + 16];
  size_t used = strlen(line);
  gpupart__source_format(u->src, where, sizeof where);
  if (used < UNREACHABLE_LINE)
    snprintf(line + used, UNREACHABLE_LINE - used, "%s%s (%s): %s", line[used - 1] == ':' ? " " : "; ", u->what, where,
             u->why);
}

void gpupart__verbose_unreachable(gpupart_device *dev) {
  gpupart_context *ctx = dev->ctx;
  char line[UNREACHABLE_LINE] = "configuration that can never apply on this machine:";
  if ((!ctx->log && !(int)dev->settings.v[GPUPART__OPT_VERBOSE].u) || atomic_exchange(&ctx->unreachable_said, 1))
    return;
  if (!gpupart__config_unreachable(ctx, 1, append_unreachable, line)) return;
  gpupart__log(ctx, GPUPART_LOG_WARN, (int)dev->settings.v[GPUPART__OPT_VERBOSE].u, line);
}
