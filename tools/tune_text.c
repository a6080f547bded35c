/* gpupart tune's configurations as text: the INI section a replay reads (gpupart tune
 * replays each configuration from exactly the text it would print, so what it prints is
 * what it measured), the GPUPART_* lines that say the same through the environment, and a
 * short description for the table. Values are written in the configuration's own syntax
 * (docs/configuration.md): sizes in whole GiB, MiB or KiB where exact, factors as plain
 * decimals, "none" for no release threshold. */
#include <stdarg.h>
#include <string.h>

#include "tune.h"

typedef struct text {
  char *out;
  size_t n, used;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...) {
  if (t->used >= t->n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(t->out + t->used, t->n - t->used, fmt, ap);
  va_end(ap);
  if (k > 0) t->used += (size_t)k < t->n - t->used ? (size_t)k : t->n - t->used - 1;
}

void tune_bytes_text(uint64_t v, char *out, size_t n) {
  static const struct {
    uint64_t unit;
    const char *name;
  } units[] = {{1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (size_t i = 0; v && i < sizeof units / sizeof units[0]; i++)
    if (v % units[i].unit == 0) {
      snprintf(out, n, "%llu%s", (unsigned long long)(v / units[i].unit), units[i].name);
      return;
    }
  snprintf(out, n, "%llu", (unsigned long long)v);
}

void tune_value_text(const tune_dim *d, uint64_t v, char *out, size_t n) {
  if (d->kind == TUNE_BOOL) snprintf(out, n, "%s", v ? "true" : "false");
  else if (d->kind == TUNE_FACTOR) snprintf(out, n, "%g", (double)v / 1000.0);
  else if (d->kind == TUNE_THRESHOLD && !v) snprintf(out, n, "none");
  else tune_bytes_text(v, out, n);
}

int tune_name_declarable(const char *name) {
  size_t len = strlen(name);
  if (!len || len > 63) return 0;
  for (const char *p = name; *p; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_.-", c);
    if (!ok) return 0;
  }
  return 1;
}

/* Whether setting d is written for c: it differs from the default and means something in
 * c's mode (the growth settings do not when c preallocates). */
static int written(const tune_candidate *c, tune_dim_id d) {
  const tune_dim *dim = tune_dim_get(d);
  if (dim->growth_only && !c->v[TUNE_ALLOW_GROWTH]) return 0;
  return c->v[d] != dim->def;
}

size_t tune_ini(const tune_search *s, const tune_candidate *c, char *out, size_t n) {
  text t = {out, n, 0};
  char v[48];
  out[0] = '\0';
  put(&t, "[gpupart]\n");
  for (int d = 0; d < TUNE_DIMS; d++) {
    if (!written(c, (tune_dim_id)d)) continue;
    tune_value_text(tune_dim_get((tune_dim_id)d), c->v[d], v, sizeof v);
    put(&t, "%s = %s\n", tune_dim_get((tune_dim_id)d)->key, v);
  }
  if (s->budget) tune_bytes_text(s->budget, v, sizeof v);
  if (s->budget) put(&t, "memory_limit = %s\n", v);
  if (s->w->processes > 1) put(&t, "shared = true\n");
  for (uint32_t i = 0; i < s->w->nnames; i++) {
    if (!c->limits[i]) continue;
    tune_bytes_text(c->limits[i], v, sizeof v);
    put(&t, "\n[partition %s]\nsize = %s\n", s->w->names[i], v);
  }
  return t.used;
}

size_t tune_env(const tune_search *s, const tune_candidate *c, char *out, size_t n) {
  text t = {out, n, 0};
  char v[48];
  out[0] = '\0';
  for (int d = 0; d < TUNE_DIMS; d++) {
    if (!written(c, (tune_dim_id)d)) continue;
    tune_value_text(tune_dim_get((tune_dim_id)d), c->v[d], v, sizeof v);
    put(&t, "%s=%s\n", tune_dim_get((tune_dim_id)d)->env, v);
  }
  if (s->budget) tune_bytes_text(s->budget, v, sizeof v);
  if (s->budget) put(&t, "GPUPART_MEMORY_LIMIT=%s\n", v);
  if (s->w->processes > 1) put(&t, "GPUPART_SHARED=1\n");
  const char *sep = "GPUPART_PARTITIONS=";
  for (uint32_t i = 0; i < s->w->nnames; i++) {
    if (!c->limits[i]) continue;
    tune_bytes_text(c->limits[i], v, sizeof v);
    put(&t, "%s%s:%s", sep, s->w->names[i], v);
    sep = ",";
  }
  if (*sep == ',') put(&t, "\n");
  return t.used;
}

void tune_describe(const tune_search *s, const tune_candidate *c, char *out, size_t n) {
  text t = {out, n, 0};
  char v[48];
  out[0] = '\0';
  int expandable = c->v[TUNE_ALLOW_GROWTH] && c->v[TUNE_EXPANDABLE];
  put(&t, "%s", expandable ? "expandable" : c->v[TUNE_ALLOW_GROWTH] ? "growth" : "prealloc");
  for (int d = 0; d < TUNE_DIMS; d++) {
    if (d == TUNE_ALLOW_GROWTH || d == TUNE_EXPANDABLE || !written(c, (tune_dim_id)d)) continue;
    tune_value_text(tune_dim_get((tune_dim_id)d), c->v[d], v, sizeof v);
    put(&t, " %s=%s", tune_dim_get((tune_dim_id)d)->key, v);
  }
  for (uint32_t i = 0; i < s->w->nnames; i++) {
    if (!c->limits[i]) continue;
    tune_bytes_text(c->limits[i], v, sizeof v);
    put(&t, " %s:%s", s->w->names[i], v);
  }
  if (c->is_default) put(&t, " (default)");
}
