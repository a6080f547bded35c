/* Judging one configuration file as a whole, as `gpupart check-config` does: beyond what
 * loading checks (every key and value), what no load can see alone: sections and
 * partitions on a backend the file's own backend list excludes, and, per device the file
 * can name, guarantees or preallocated sizes given as shares that add up to more than the
 * budget. Every error is reported; the count is returned. */
#include <stdio.h>

#include "config.h"

/* What check-config knows of the file: its own backend list and default device. */
typedef struct file_view {
  const gpupart__layer *l;
  const char *path;
  gpupart__errors *e;
  unsigned char reported[GPUPART__MAX_PARTS]; /* a partition is judged once */
} file_view;

static int file_allows(const file_view *f, gpupart_backend b) {
  const gpupart__value *v = &f->l->global[GPUPART__OPT_BACKEND];
  for (uint32_t i = 0; v->set && i < v->nbackends; i++)
    if (v->backends[i] == b) return 1;
  return !v->set || !v->nbackends;
}

/* A [device B:I] section or a partition's device = B:I on a backend the list excludes. */
static void never_applies(file_view *f, const gpupart__selector *sel, int line, const char *what) {
  if (!sel->set || sel->backend == GPUPART_BACKEND_AUTO || file_allows(f, sel->backend)) return;
  char list[64];
  gpupart__option_format(GPUPART__OPT_BACKEND, &f->l->global[GPUPART__OPT_BACKEND], list, sizeof list);
  gpupart__errors_add(f->e, line, "%s:%d: %s on %s:%u can never apply: this file's backend = %s (line %d) excludes %s",
                      GPUPART__ECHO(f->path), line, what, gpupart_backend_name(sel->backend), sel->index, list,
                      f->l->global[GPUPART__OPT_BACKEND].src.line, gpupart_backend_name(sel->backend));
}

/* One report per [device B:I] section: its first value names it. */
static int first_of_section(const gpupart__layer *l, uint32_t i) {
  for (uint32_t j = 0; j < i; j++)
    if (l->dev[j].sel.backend == l->dev[i].sel.backend && l->dev[j].sel.index == l->dev[i].sel.index) return 0;
  return 1;
}

static void check_never_applies(file_view *f) {
  for (uint32_t i = 0; i < f->l->ndev; i++)
    if (first_of_section(f->l, i))
      never_applies(f, &f->l->dev[i].sel, f->l->dev[i].v.src.line, "a [device] section's value");
  for (uint32_t i = 0; i < f->l->nparts; i++) {
    char what[GPUPART__NAME_MAX + 16];
    snprintf(what, sizeof what, "partition '%s'", f->l->parts[i].name);
    never_applies(f, &f->l->parts[i].dev, f->l->parts[i].src.line, what);
  }
}

/* Whether partition p is created on device (b, index): its own device, or none and this
 * is the file's default device (the first of its visible list) on a backend it allows. */
static int lands_on(const file_view *f, const gpupart__pspec *p, gpupart_backend b, uint32_t index) {
  const gpupart__value *d = &f->l->global[GPUPART__OPT_DEVICE];
  uint32_t def = d->set && d->nvisible ? d->visible[0] : 0;
  return p->dev.set ? gpupart__selector_matches(&p->dev, b, index) : index == def && file_allows(f, b);
}

static int preallocates(const file_view *f, const gpupart__pspec *p, gpupart_backend b, uint32_t index) {
  if (p->growth) return p->growth == GPUPART_GROWTH_OFF;
  const gpupart__value *v = gpupart__layer_get(f->l, GPUPART__OPT_ALLOW_GROWTH, b, index);
  return v && !v->u;
}

/* Adds amount a to the running sums; 1 when they now pass the budget. */
static int adds_past(double *share, uint64_t *bytes, const gpupart__amount *a) {
  if (a->is_share) *share += a->share;
  else *bytes += a->bytes;
  int added = a->is_share ? a->share > 0 : a->bytes > 0;
  return added && (*share > 1.0 + 1e-9 || (*share >= 1.0 - 1e-9 && *bytes));
}

/* Sums guarantees, and the sizes of preallocated partitions, on device (b, index): shares
 * above 100%, or 100% with bytes on top, can never open. Reported at the partition that
 * passes the line, once per partition. */
static void check_device_sums(file_view *f, gpupart_backend b, uint32_t index) {
  double gs = 0, ps = 0;
  uint64_t gb = 0, pb = 0;
  for (uint32_t i = 0; i < f->l->nparts; i++) {
    const gpupart__pspec *p = &f->l->parts[i];
    if (!lands_on(f, p, b, index)) continue;
    int g = adds_past(&gs, &gb, &p->guarantee);
    int s = preallocates(f, p, b, index) && adds_past(&ps, &pb, &p->size);
    if ((!g && !s) || f->reported[i]) continue;
    f->reported[i] = 1;
    gpupart__errors_add(f->e, p->src.line, "%s:%d: partition '%s': the %s on %s:%u add up to more than the budget",
                        GPUPART__ECHO(f->path), p->src.line, p->name,
                        g ? "guarantees" : "sizes of the preallocated partitions (allow_growth = false)",
                        gpupart_backend_name(b), index);
  }
}

/* Every device the file can name: each backend, at each index it mentions. */
static void check_sums(file_view *f) {
  static const gpupart_backend every[] = {GPUPART__BACKEND_IDS};
  uint32_t idx[2 * GPUPART__MAX_PARTS + GPUPART__MAX_DEVICE_VALUES + 1], n = 0;
  const gpupart__value *d = &f->l->global[GPUPART__OPT_DEVICE];
  idx[n++] = d->set && d->nvisible ? d->visible[0] : 0;
  for (uint32_t i = 0; i < f->l->nparts; i++)
    if (f->l->parts[i].dev.set) idx[n++] = f->l->parts[i].dev.index;
  for (uint32_t i = 0; i < n; i++)
    for (size_t b = 0; b < sizeof every / sizeof every[0]; b++) check_device_sums(f, every[b], idx[i]);
}

int gpupart__config_check_file(const char *path, gpupart__report_fn report, void *user) {
  const gpupart__hostmem *m = gpupart__hostmem_default();
  gpupart__config *c = gpupart__host_calloc(m, 1, sizeof *c);
  gpupart__errors e = {.report = report, .user = user};
  if (!c) gpupart__errors_add(&e, 0, "%s: out of host memory", GPUPART__ECHO(path));
  else if (!gpupart__config_read_file(m, c, path, path, &e)) {
    file_view f = {.l = &c->file, .path = path, .e = &e};
    check_never_applies(&f);
    check_sums(&f);
  }
  gpupart__host_free(m, c);
  return e.count;
}
