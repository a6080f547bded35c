/* Configuration that can never apply on this machine: a [device B:I] section, a
 * per-device entry of a variable (GPUPART_MEMORY_FRACTION="cuda:0=50%") or a partition's
 * device that names a backend this library was built without or whose driver cannot be
 * loaded here, an index past the devices the backend has, or a backend the configured
 * backend list leaves out. Such a value is valid (the file may be meant for another
 * machine) but silently changes nothing, so `gpupart check-config`, `gpupart config` and
 * the first device open of a context with a log say so. Finding out loads and
 * enumerates the backends named, through the context, once per call; a device open
 * judges only by the backends its context has already tried, and loads none. */
#include "reach.h"

#include <stdio.h>
#include <string.h>

#include "context.h"
#include "internal.h"
#include "registry.h"

/* What one backend answered: its enumeration's error, or how many devices it has. */
typedef struct probe {
  int done, rc;
  uint32_t count;
  char why[GPUPART__MSG_MAX];
} probe;

typedef struct reach {
  gpupart_context *ctx;
  int loaded_only; /* judge only by backends the context has loaded (or failed to) already */
  probe probes[GPUPART__BACKEND_COUNT];
  gpupart__value list; /* the configured backend list (nbackends 0: auto) */
  gpupart__unreachable_fn fn;
  void *user;
  uint32_t found;
} reach;

static const probe *probe_of(reach *r, gpupart_backend b) {
  probe *p = &r->probes[b];
  if (p->done) return p;
  p->done = 1;
  p->rc = gpupart_enumerate(r->ctx, b, NULL, &p->count);
  if (p->rc) snprintf(p->why, sizeof p->why, "%s", gpupart_last_error());
  return p;
}

static int listed(const gpupart__value *list, gpupart_backend b) {
  for (uint32_t i = 0; i < list->nbackends; i++)
    if (list->backends[i] == b) return 1;
  return 0;
}

/* Why backend b has no device index (its error, or its count); 0 when it has one, or
 * when loaded_only and the context has not tried b yet (not known). The sim backend
 * opens any index it is named with, and has one device (0) otherwise. */
static int lacks(reach *r, gpupart_backend b, uint32_t index, int named, char *why, size_t n) {
  if (b == GPUPART_BACKEND_SIM) {
    if (named || index == 0) return 0;
    snprintf(why, n, "sim: 1 device");
    return 1;
  }
  if (r->loaded_only && !gpupart__backend_known(r->ctx, b)) return 0;
  const probe *p = probe_of(r, b);
  if (p->rc) {
    snprintf(why, n, "%s", p->why);
    return 1;
  }
  if (p->count > index) return 0;
  snprintf(why, n, "%s: %u device%s", gpupart_backend_name(b), p->count, p->count == 1 ? "" : "s");
  return 1;
}

/* B:I: the list must allow B, and B must have device I. */
static int never_on(reach *r, const gpupart__selector *sel, char *why, size_t n) {
  char list[64];
  if (r->list.nbackends && !listed(&r->list, sel->backend)) {
    gpupart__option_format(GPUPART__OPT_BACKEND, &r->list, list, sizeof list);
    snprintf(why, n, "the backend list (%s) leaves %s out", list, gpupart_backend_name(sel->backend));
    return 1;
  }
  char reason[GPUPART__MSG_MAX];
  if (!lacks(r, sel->backend, sel->index, 1, reason, sizeof reason)) return 0;
  snprintf(why, n, "%s", reason);
  return 1;
}

/* An index alone: some backend the device open would try must have it. */
static int never_any(reach *r, uint32_t index, char *why, size_t n) {
  gpupart_backend order[GPUPART__BACKEND_COUNT];
  uint32_t count = r->list.nbackends ? r->list.nbackends : gpupart__backend_auto_order(order, 1);
  size_t used = (size_t)snprintf(why, n, "no backend has a device %u (", index);
  for (uint32_t i = 0; i < count; i++) {
    gpupart_backend b = r->list.nbackends ? (gpupart_backend)r->list.backends[i] : order[i];
    char reason[GPUPART__MSG_MAX];
    if (!lacks(r, b, index, r->list.nbackends != 0, reason, sizeof reason)) return 0;
    if (used < n) used += (size_t)snprintf(why + used, n - used, "%s%s", i ? "; " : "", reason);
  }
  if (used < n) snprintf(why + used, n - used, ")");
  return 1;
}

static void check(reach *r, const gpupart__selector *sel, gpupart__source src, const char *what) {
  gpupart__unreachable u = {.src = src, .sel = *sel};
  int never = sel->backend == GPUPART_BACKEND_AUTO ? never_any(r, sel->index, u.why, sizeof u.why)
                                                   : never_on(r, sel, u.why, sizeof u.why);
  if (!never) return;
  snprintf(u.what, sizeof u.what, "%s", what);
  r->found++;
  if (r->fn) r->fn(&u, r->user);
}

/* Whether l->dev[i] is the first value of its device from its source: a [device]
 * section, or one variable's entries for a device, is judged once. */
static int first_of_device(const gpupart__layer *l, uint32_t i) {
  const gpupart__device_value *v = &l->dev[i];
  for (uint32_t j = 0; j < i; j++) {
    const gpupart__device_value *w = &l->dev[j];
    if (w->sel.backend == v->sel.backend && w->sel.index == v->sel.index && w->v.src.name && v->v.src.name &&
        !strcmp(w->v.src.name, v->v.src.name))
      return 0;
  }
  return 1;
}

static void check_values(reach *r, const gpupart__layer *l) {
  for (uint32_t i = 0; i < l->ndev; i++) {
    const gpupart__device_value *v = &l->dev[i];
    char dev[48], what[GPUPART__NAME_MAX + 96];
    if (!first_of_device(l, i)) continue;
    gpupart__selector_format(&v->sel, dev, sizeof dev);
    if (v->v.src.line) snprintf(what, sizeof what, "[device %s]", dev);
    else snprintf(what, sizeof what, "%s's entry %s", v->v.src.name, dev);
    check(r, &v->sel, v->v.src, what);
  }
}

static void check_partitions(reach *r, const gpupart__layer *l) {
  for (uint32_t i = 0; i < l->nparts; i++) {
    const gpupart__pspec *p = &l->parts[i];
    char dev[48], what[GPUPART__NAME_MAX + 96];
    if (!p->dev.set) continue; /* the default device: it exists wherever a device opens */
    gpupart__selector_format(&p->dev, dev, sizeof dev);
    snprintf(what, sizeof what, "partition '%s' on %s", p->name, dev);
    check(r, &p->dev, p->src, what);
  }
}

uint32_t gpupart__config_unreachable(gpupart_context *ctx, int loaded_only, gpupart__unreachable_fn fn, void *user) {
  reach r = {.ctx = ctx, .loaded_only = loaded_only, .fn = fn, .user = user};
  gpupart__config_get(ctx->cfg, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &r.list);
  check_values(&r, &ctx->cfg->env);
  check_partitions(&r, &ctx->cfg->env);
  check_values(&r, &ctx->cfg->file);
  check_partitions(&r, &ctx->cfg->file);
  return r.found;
}
