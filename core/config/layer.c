/* Layers of configuration values (config.h): setting a value from text with its source
 * (each source may set a key once), the pool that keeps a layer's strings, the errors of
 * one load, and the lookups that walk the layers in precedence order for a device:
 * environment over file, within each the device's own value over its index's over the
 * layer-wide one, and the options table's default last. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "error.h"

int gpupart__errors_add(gpupart__errors *e, int line, const char *fmt, ...) {
  char msg[GPUPART__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!e->count) snprintf(e->first, sizeof e->first, "%s", msg);
  if (line > 0 && (!e->first_line || line < e->first_line)) e->first_line = line;
  e->count++;
  if (e->report) e->report(msg, e->user);
  return -1;
}

int gpupart__value_from_user(const gpupart__value *v) {
  return v && v->src.name && strcmp(v->src.name, "descriptor") && strcmp(v->src.name, "default");
}

void gpupart__source_format(gpupart__source s, char *buf, size_t n) {
  if (s.line > 0) snprintf(buf, n, "%s:%d", s.name, s.line);
  else snprintf(buf, n, "%s", s.name ? s.name : "default");
}

const char *gpupart__layer_strdup(gpupart__layer *l, const char *s) {
  size_t len = strlen(s) + 1;
  if (len > sizeof l->pool - l->pool_used) return NULL;
  char *d = l->pool + l->pool_used;
  memcpy(d, s, len);
  l->pool_used += len;
  return d;
}

/* The slot for option o on device sel (NULL = layer-wide), or NULL when the layer is full. */
static gpupart__value *slot(gpupart__layer *l, gpupart__opt o, const gpupart__selector *sel) {
  if (!sel) return &l->global[o];
  for (uint32_t i = 0; i < l->ndev; i++) {
    gpupart__device_value *dv = &l->dev[i];
    if (dv->opt == o && dv->sel.backend == sel->backend && dv->sel.index == sel->index) return &dv->v;
  }
  if (l->ndev == GPUPART__MAX_DEVICE_VALUES) return NULL;
  l->dev[l->ndev] = (gpupart__device_value){.sel = *sel, .opt = o};
  return &l->dev[l->ndev++].v;
}

static int same_source(gpupart__source a, gpupart__source b) {
  return a.name == b.name || (a.name && b.name && strcmp(a.name, b.name) == 0);
}

/* text without surrounding white space, as the option parser read it. */
static const char *trim_copy(const char *text, char *buf, size_t n) {
  size_t b = 0, e = strlen(text);
  while (b < e && isspace((unsigned char)text[b])) b++;
  while (e > b && isspace((unsigned char)text[e - 1])) e--;
  snprintf(buf, n, "%.*s", (int)(e - b), text + b);
  return buf;
}

int gpupart__layer_set(gpupart__layer *l, gpupart__opt o, const gpupart__selector *dev, const char *text,
                       gpupart__source src, char *err, size_t n) {
  gpupart__value v;
  if (gpupart__option_parse(o, text, &v, err, n)) return -1;
  gpupart__value *s = slot(l, o, dev);
  if (!s) return gpupart__say(err, n, "more than %d per-device values", GPUPART__MAX_DEVICE_VALUES);
  if (s->set && same_source(s->src, src)) {
    char where[GPUPART__PATH_MAX + 16];
    gpupart__source_format(s->src, where, sizeof where);
    return gpupart__say(err, n, "set twice (first at %s)", where);
  }
  gpupart__type t = gpupart__options[o].type;
  char path[GPUPART__PATH_MAX];
  if ((t == GPUPART__T_PATH || t == GPUPART__T_DIR) &&
      !(v.str = gpupart__layer_strdup(l, trim_copy(text, path, sizeof path))))
    return gpupart__say(err, n, "the configuration holds more than %d bytes of paths", GPUPART__POOL_SIZE);
  v.src = src;
  *s = v;
  return 0;
}

const gpupart__value *gpupart__layer_get(const gpupart__layer *l, gpupart__opt o, gpupart_backend b, uint32_t index) {
  const gpupart__value *best = NULL;
  int rank = 0;
  for (uint32_t i = 0; b != GPUPART_BACKEND_AUTO && i < l->ndev; i++) {
    const gpupart__device_value *dv = &l->dev[i];
    int r = gpupart__selector_rank(&dv->sel);
    if (dv->opt == o && r > rank && gpupart__selector_matches(&dv->sel, b, index)) {
      best = &dv->v;
      rank = r;
    }
  }
  if (best) return best;
  return l->global[o].set ? &l->global[o] : NULL;
}

void gpupart__config_get(const gpupart__config *c, gpupart__opt o, gpupart_backend b, uint32_t index,
                         gpupart__value *out) {
  const gpupart__value *v = gpupart__layer_get(&c->env, o, b, index);
  if (!v) v = gpupart__layer_get(&c->file, o, b, index);
  if (v) {
    *out = *v;
    return;
  }
  const gpupart__option *opt = &gpupart__options[o];
  char err[GPUPART__ERR_MAX];
  *out = (gpupart__value){0};
  if (opt->def && gpupart__option_parse(o, opt->def, out, err, sizeof err) == 0 &&
      (opt->type == GPUPART__T_PATH || opt->type == GPUPART__T_DIR))
    out->str = opt->def;
  out->src = (gpupart__source){"default", 0};
}

static int backend_allowed(const gpupart__config *c, gpupart_backend b) {
  gpupart__value list;
  gpupart__config_get(c, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &list);
  for (uint32_t i = 0; i < list.nbackends; i++)
    if (list.backends[i] == b) return 1;
  return list.nbackends == 0;
}

static uint32_t layer_partitions(const gpupart__config *c, const gpupart__layer *l, gpupart_backend b, uint32_t index,
                                 const gpupart__pspec **out, uint32_t cap) {
  gpupart__value def;
  gpupart__config_get(c, GPUPART__OPT_DEVICE, GPUPART_BACKEND_AUTO, 0, &def);
  int is_default = (def.nvisible ? def.visible[0] : 0) == index && backend_allowed(c, b);
  uint32_t n = 0;
  for (uint32_t i = 0; i < l->nparts && n < cap; i++) {
    const gpupart__pspec *p = &l->parts[i];
    if (p->dev.set ? gpupart__selector_matches(&p->dev, b, index) : is_default) out[n++] = p;
  }
  return n;
}

uint32_t gpupart__config_partitions(const gpupart__config *c, gpupart_backend b, uint32_t index,
                                    const gpupart__pspec **out, uint32_t cap) {
  uint32_t n = layer_partitions(c, &c->env, b, index, out, cap);
  return n ? n : layer_partitions(c, &c->file, b, index, out, cap);
}
