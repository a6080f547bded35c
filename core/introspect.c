/* The introspect door (door/introspect.h): the few things the gpupart command needs to see
 * of an open device and of a context's configuration, handed out as the configuration
 * room's own values so that the command never reads a handle's fields. */
#include "introspect.h"

#include <stdio.h>

#include "context.h"
#include "device.h"
#include "error.h"
#include "internal.h"
#include "shm.h"
#include "vmspace.h"

gpupart_result gpupart__introspect_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
                                        gpupart_device **out) {
  if (ctx) atomic_store(&ctx->unreachable_said, 1);
  return gpupart__device_open(ctx, desc, exact, out);
}

const gpupart__settings *gpupart__introspect_settings(const gpupart_device *dev) { return &dev->settings; }

const gpupart__config *gpupart__introspect_config(const gpupart_context *ctx) { return ctx->cfg; }

int gpupart__introspect_configured(gpupart_device *dev, uint32_t i, gpupart__introspect_partition *out) {
  const gpupart__settings *s = &dev->settings;
  if (i >= s->nparts) return gpupart__fail(GPUPART_EINVAL, "no configured partition %u", i);
  gpupart_partition *p = gpupart_partition_at(dev, i); /* configured partitions are made first, in order */
  *out = (gpupart__introspect_partition){.handle = p, .spec = s->parts[i], .preallocated = p && p->growth.prealloc};
  return GPUPART_OK;
}

void gpupart__introspect_ledger_dir(const gpupart_context *ctx, char *out, size_t n) {
  gpupart_device_desc d = {0};
  gpupart__settings s;
  gpupart__settings_in in = {.desc = &d,
                             .exact = 1,
                             .backend = GPUPART_BACKEND_SIM,
                             .config_path = ctx->config_path,
                             .ledger_dir = ctx->ledger_dir,
                             .ignore_env = (ctx->flags & GPUPART_CONTEXT_IGNORE_ENV) != 0};
  gpupart__settings_compute(ctx->cfg, &in, &s); /* no device: only the options, which cannot fail */
  snprintf(out, n, "%s", gpupart__settings_ledger_dir(&s));
}

int gpupart__introspect_vm(gpupart_device *dev, uint64_t *granule, char *why, size_t n) {
  *granule = 0;
  if (gpupart__vm_granule(dev->ops, dev->bdev, granule) == GPUPART_OK) return 1;
  snprintf(why, n, "%s", gpupart_last_error());
  return 0;
}

int gpupart__introspect_backend_named(const gpupart_context *ctx, gpupart_backend b) {
  return gpupart__backend_named(ctx, b);
}

/* The device of desc opened with its configuration but without its shared ledger (the
 * configured partitions then resolve against its own budget): budget, folder and the
 * partitions' figures for the operator's ledger. */
static int open_local(gpupart_context *ctx, const gpupart_device_desc *desc, int exact, gpupart_device **dev) {
  ctx->local_only = 1;
  int rc = gpupart__device_open(ctx, desc, exact, dev);
  ctx->local_only = 0;
  return rc;
}

int gpupart__introspect_ledger_create(gpupart_context *ctx, const gpupart_device_desc *desc, int exact, char *path,
                                      size_t n, uint64_t *budget, uint32_t *nparts, int *shared) {
  gpupart_device *dev;
  int rc = open_local(ctx, desc, exact, &dev);
  if (rc) return rc;
  const gpupart__settings *s = &dev->settings;
  gpupart__operator_part *parts = gpupart__host_calloc(&ctx->mem, s->nparts + 1, sizeof *parts);
  uint32_t k = 0;
  for (uint32_t i = 0; parts && i < s->nparts; i++) {
    gpupart_partition *p = gpupart_partition_at(dev, i);
    gpupart__ledger_figures f;
    if (!p) continue;
    dev->ledger->ops->get(dev->ledger, p->account, &f);
    snprintf(parts[k].name, sizeof parts[k].name, "%s", p->name);
    parts[k++].size =
        (gpupart__ledger_size){f.limit, f.guarantee, p->limit_fraction, p->guarantee_fraction, dev->granularity};
  }
  *budget = dev->budget;
  *nparts = k;
  *shared = s->v[GPUPART__OPT_SHARED].u != 0;
  rc = !parts ? gpupart__fail(GPUPART_ENOMEM, "ledger create: out of host memory")
              : gpupart__ledger_shm_operator_create(&ctx->mem, &dev->id, dev->budget, gpupart__settings_ledger_dir(s),
                                                    parts, k, path, n);
  gpupart__host_free(&ctx->mem, parts);
  gpupart_device_close(dev);
  return rc;
}

int gpupart__introspect_ledger_remove(gpupart_context *ctx, const gpupart_device_desc *desc, int exact, int force,
                                      char *path, size_t n) {
  gpupart_device *dev;
  int rc = open_local(ctx, desc, exact, &dev);
  if (rc) return rc;
  rc = gpupart__ledger_shm_operator_remove(&ctx->mem, &dev->id, gpupart__settings_ledger_dir(&dev->settings), force,
                                           path, n);
  gpupart_device_close(dev);
  return rc;
}

int gpupart__introspect_ledger_source(gpupart_device *dev, const char *name, char *out, size_t n) {
  char path[4096];
  if (!gpupart__ledger_shm_operator_of(dev->ledger, name, path, sizeof path)) return 0;
  snprintf(out, n, "ledger %s", path);
  return 1;
}
