/* Devices: opening one physical GPU through its backend, computing this process's
 * budget on it, and the device-wide views (info, stats, the consistency check). The
 * partitions themselves live in partition.c; the accounting in the ledger. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define DEFAULT_GRANULARITY (2 * GPUPART__MIB)

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static int enumerate_one(gpupart_context *ctx, gpupart_backend b, gpupart_device_info *infos,
                         uint32_t cap, uint32_t *found) {
  const gpupart_backend_ops *ops;
  void *state;
  int rc = gpupart__backend_get(ctx, b, &ops, &state);
  if (rc) return rc;
  uint32_t n = cap;
  rc = ops->enumerate(state, infos, &n);
  if (rc == GPUPART_OK) *found = n;
  return rc;
}

static int enumerate_auto(gpupart_context *ctx, gpupart_device_info *infos, uint32_t *count) {
  static const gpupart_backend order[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_VULKAN,
                                          GPUPART_BACKEND_OPENCL};
  uint32_t cap = infos ? *count : 0, total = 0;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    uint32_t found = 0, room = cap > total ? cap - total : 0;
    if (enumerate_one(ctx, order[i], room ? infos + total : NULL, room, &found)) continue;
    total += found;
  }
  *count = total;
  return GPUPART_OK;
}

gpupart_result gpupart_enumerate(gpupart_context *ctx, gpupart_backend backend,
                                 gpupart_device_info *infos, uint32_t *count) {
  if (!ctx || !count) return gpupart__fail(GPUPART_EINVAL, "enumerate: ctx or count is NULL");
  if (backend == GPUPART_BACKEND_AUTO) return enumerate_auto(ctx, infos, count);
  uint32_t found = 0;
  int rc = enumerate_one(ctx, backend, infos, infos ? *count : 0, &found);
  if (rc == GPUPART_OK) *count = found;
  return rc;
}

/* AUTO: the first backend that loads and has the device. */
static int choose_backend(gpupart_context *ctx, const gpupart_device_desc *d, gpupart_backend *out) {
  static const gpupart_backend order[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_VULKAN,
                                          GPUPART_BACKEND_OPENCL, GPUPART_BACKEND_SIM};
  if (d->backend != GPUPART_BACKEND_AUTO) return *out = d->backend, GPUPART_OK;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    uint32_t found = 0;
    if (enumerate_one(ctx, order[i], NULL, 0, &found) == GPUPART_OK && found > d->index)
      return *out = order[i], GPUPART_OK;
  }
  return gpupart__fail(GPUPART_ENODEV, "device_open: no backend has a device %u", d->index);
}

static int check_desc(const gpupart_device_desc *d) {
  if (d->memory_fraction < 0 || d->memory_fraction > 1 || isnan(d->memory_fraction))
    return gpupart__fail(GPUPART_EINVAL, "device_open: memory_fraction %g is outside (0, 1]",
                         d->memory_fraction);
  if (d->granularity && !is_pow2(d->granularity))
    return gpupart__fail(GPUPART_EINVAL, "device_open: granularity %llu is not a power of two",
                         (unsigned long long)d->granularity);
  if (d->growth < GPUPART_GROWTH_DEFAULT || d->growth > GPUPART_GROWTH_OFF)
    return gpupart__fail(GPUPART_EINVAL, "device_open: growth %d is not a GPUPART_GROWTH_*", d->growth);
  if (d->flags & ~GPUPART_DEVICE_SHARED)
    return gpupart__fail(GPUPART_EINVAL, "device_open: unknown flags 0x%x", d->flags);
  if (d->flags & GPUPART_DEVICE_SHARED)
    return gpupart__fail(GPUPART_ENOTSUP, "device_open: shared ledgers are not implemented yet");
  return GPUPART_OK;
}

/* min(total * fraction, limit) - headroom, rounded down to the granularity. */
static int compute_budget(gpupart_device *dev, const gpupart_device_desc *d) {
  double fraction = d->memory_fraction > 0 ? d->memory_fraction : 1.0;
  uint64_t total = dev->info.total_bytes;
  uint64_t b = fraction >= 1.0 ? total : (uint64_t)((long double)total * fraction);
  if (d->memory_limit && d->memory_limit < b) b = d->memory_limit;
  if (d->headroom >= b)
    return gpupart__fail(GPUPART_EINVAL, "device_open: headroom %llu leaves no budget of %llu bytes",
                         (unsigned long long)d->headroom, (unsigned long long)b);
  b = (b - d->headroom) & ~(dev->granularity - 1);
  if (!b)
    return gpupart__fail(GPUPART_EINVAL, "device_open: the budget rounds down to 0 at granularity %llu",
                         (unsigned long long)dev->granularity);
  dev->budget = b;
  return GPUPART_OK;
}

static int open_backend(gpupart_device *dev, gpupart_backend b, const gpupart_device_desc *d) {
  void *state;
  int rc = gpupart__backend_get(dev->ctx, b, &dev->ops, &state);
  if (rc) return rc;
  rc = dev->ops->open(state, d->index, d->backend_desc, &dev->bdev);
  if (rc) return rc;
  rc = dev->ops->info(dev->bdev, &dev->info);
  if (rc == GPUPART_OK && !is_pow2(dev->info.min_alignment))
    rc = gpupart__fail(GPUPART_EBACKEND, "device_open: backend reports alignment %llu",
                       (unsigned long long)dev->info.min_alignment);
  return rc;
}

static void device_free(gpupart_device *dev) {
  const gpupart__hostmem *mem = &dev->ctx->mem;
  if (dev->ledger) dev->ledger->ops->destroy(dev->ledger);
  if (dev->bdev) dev->ops->close(dev->bdev);
  pthread_mutex_destroy(&dev->slow);
  gpupart__host_free(mem, dev->parts);
  gpupart__host_free(mem, dev);
}

static int device_setup(gpupart_device *dev, const gpupart_device_desc *d) {
  gpupart_backend b = GPUPART_BACKEND_AUTO;
  int rc = choose_backend(dev->ctx, d, &b);
  if (rc == GPUPART_OK) rc = open_backend(dev, b, d);
  if (rc) return rc;
  dev->granularity = d->granularity ? d->granularity : DEFAULT_GRANULARITY;
  dev->alignment = dev->info.min_alignment;
  /* Blocks and limits are whole multiples of the granularity, and the driver hands out
   * only whole multiples of its alignment: a finer granularity is raised to it. */
  if (dev->granularity < dev->alignment) dev->granularity = dev->alignment;
  dev->growth = d->growth ? d->growth : GPUPART_GROWTH_ON;
  rc = compute_budget(dev, d);
  if (rc) return rc;
  dev->ledger = gpupart__ledger_local_create(&dev->ctx->mem, dev->budget);
  return dev->ledger ? GPUPART_OK : gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
}

gpupart_result gpupart_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                   gpupart_device **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "device_open: out is NULL");
  *out = NULL;
  if (!ctx) return gpupart__fail(GPUPART_EINVAL, "device_open: ctx is NULL");
  const gpupart_device_desc d = desc ? *desc : (gpupart_device_desc){0};
  int rc = check_desc(&d);
  if (rc) return rc;
  gpupart_device *dev = gpupart__host_calloc(&ctx->mem, 1, sizeof *dev);
  if (!dev) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  dev->ctx = ctx;
  pthread_mutex_init(&dev->slow, NULL);
  rc = device_setup(dev, &d);
  if (rc) return device_free(dev), rc;
  pthread_mutex_lock(&ctx->lock);
  ctx->open_devices++;
  pthread_mutex_unlock(&ctx->lock);
  *out = dev;
  return GPUPART_OK;
}

static uint64_t live_allocations(gpupart_device *dev) {
  uint64_t live = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) {
    gpupart_partition *p = dev->parts[i];
    gpupart__lock_acquire(&p->lock);
    live += p->c.live_allocations;
    gpupart__lock_release(&p->lock);
  }
  return live;
}

gpupart_result gpupart_device_close(gpupart_device *dev) {
  if (!dev) return GPUPART_OK;
  pthread_mutex_lock(&dev->slow);
  uint64_t live = live_allocations(dev);
  if (live) {
    pthread_mutex_unlock(&dev->slow);
    return gpupart__fail(GPUPART_EBUSY, "device_close: %llu allocation(s) still live",
                         (unsigned long long)live);
  }
  while (dev->nparts) gpupart__partition_free(dev->parts[--dev->nparts]);
  pthread_mutex_unlock(&dev->slow);
  gpupart_context *ctx = dev->ctx;
  device_free(dev);
  pthread_mutex_lock(&ctx->lock);
  ctx->open_devices--;
  pthread_mutex_unlock(&ctx->lock);
  return GPUPART_OK;
}

gpupart_result gpupart_device_get_info(const gpupart_device *dev, gpupart_device_info *out) {
  if (!dev || !out) return gpupart__fail(GPUPART_EINVAL, "device_get_info: dev or out is NULL");
  gpupart_device_info info = dev->info;
  uint64_t free_bytes, total;
  if (dev->ops->mem_info(dev->bdev, &free_bytes, &total) == GPUPART_OK) info.free_bytes = free_bytes;
  *out = info;
  return GPUPART_OK;
}

uint64_t gpupart_device_budget(const gpupart_device *dev) { return dev ? dev->budget : 0; }
