/* Devices: opening one physical GPU through its backend, computing this process's
 * budget on it, and the device-wide views (info, stats, the consistency check). The
 * partitions themselves live in partition.c; the accounting in the ledger. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

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

/* The backends to try, in order: the configured list, or cuda, vulkan, opencl, sim. */
static uint32_t backend_order(const gpupart__settings *s, gpupart_backend *order) {
  static const gpupart_backend autos[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_VULKAN,
                                          GPUPART_BACKEND_OPENCL, GPUPART_BACKEND_SIM};
  const gpupart__value *v = &s->v[GPUPART__OPT_BACKEND];
  uint32_t n = v->nbackends ? v->nbackends : 4;
  for (uint32_t i = 0; i < n; i++) order[i] = v->nbackends ? (gpupart_backend)v->backends[i] : autos[i];
  return n;
}

/* The first backend of the order that loads and has the device. A single choice is taken
 * without probing, so that its own error (driver missing, no such device) is the one seen. */
static int choose_backend(gpupart_context *ctx, const gpupart__settings *s, gpupart_backend *out) {
  gpupart_backend order[GPUPART__MAX_BACKENDS];
  uint32_t n = backend_order(s, order);
  if (n == 1) return *out = order[0], GPUPART_OK;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t found = 0;
    if (enumerate_one(ctx, order[i], NULL, 0, &found) == GPUPART_OK && found > s->index)
      return *out = order[i], GPUPART_OK;
  }
  char list[64], where[GPUPART__PATH_MAX + 16];
  gpupart__option_format(GPUPART__OPT_BACKEND, &s->v[GPUPART__OPT_BACKEND], list, sizeof list);
  gpupart__source_format(s->v[GPUPART__OPT_BACKEND].src, where, sizeof where);
  return gpupart__fail(GPUPART_ENODEV, "device_open: no backend of %s (%s) has a device %u", list, where, s->index);
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

/* A bad descriptor field is EINVAL; a bad configured value is ECONFIG naming its source. */
static int source_code(const gpupart__value *v, char *where, size_t n) {
  gpupart__source_format(v->src, where, n);
  return v->src.name && strcmp(v->src.name, "descriptor") == 0 ? GPUPART_EINVAL : GPUPART_ECONFIG;
}

/* A budget of zero is the configuration's fault (ECONFIG) when one of the values that
 * make it came from the environment or a file, else the descriptor's (EINVAL). */
static int empty_budget_code(const gpupart__value *v) {
  static const int opts[] = {GPUPART__OPT_MEMORY_FRACTION, GPUPART__OPT_MEMORY_LIMIT, GPUPART__OPT_HEADROOM,
                             GPUPART__OPT_GRANULARITY};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
    const char *name = v[opts[i]].src.name;
    if (name && strcmp(name, "descriptor") && strcmp(name, "default")) return GPUPART_ECONFIG;
  }
  return GPUPART_EINVAL;
}

/* min(total * fraction, limit) - headroom, rounded down to the granularity. */
static int compute_budget(gpupart_device *dev) {
  const gpupart__value *v = dev->settings.v;
  double fraction = v[GPUPART__OPT_MEMORY_FRACTION].share;
  uint64_t total = dev->info.total_bytes, limit = v[GPUPART__OPT_MEMORY_LIMIT].u;
  uint64_t headroom = v[GPUPART__OPT_HEADROOM].u;
  uint64_t b = fraction >= 1.0 ? total : (uint64_t)((long double)total * fraction);
  char where[GPUPART__PATH_MAX + 16];
  if (limit && limit < b) b = limit;
  if (headroom >= b)
    return gpupart__fail(source_code(&v[GPUPART__OPT_HEADROOM], where, sizeof where),
                         "device_open: headroom %llu (%s) leaves no budget of %llu bytes",
                         (unsigned long long)headroom, where, (unsigned long long)b);
  b = (b - headroom) & ~(dev->granularity - 1);
  gpupart__source_format(v[GPUPART__OPT_GRANULARITY].src, where, sizeof where);
  if (!b)
    return gpupart__fail(empty_budget_code(v), "device_open: the budget rounds down to 0 at granularity %llu (%s)",
                         (unsigned long long)dev->granularity, where);
  dev->budget = b;
  return GPUPART_OK;
}

static int open_backend(gpupart_device *dev, gpupart_backend b, const gpupart_device_desc *d) {
  void *state;
  int rc = gpupart__backend_get(dev->ctx, b, &dev->ops, &state);
  if (rc) return rc;
  const void *native = d->backend_desc;
  gpupart_sim_desc sim = {0};
  if (b == GPUPART_BACKEND_SIM) { /* the configured size, unless the descriptor gives one */
    if (native) sim = *(const gpupart_sim_desc *)native;
    sim.total_bytes = dev->settings.v[GPUPART__OPT_SIM_TOTAL].u;
    native = &sim;
  }
  rc = dev->ops->open(state, dev->settings.index, native, &dev->bdev);
  if (rc) return rc;
  rc = dev->ops->info(dev->bdev, &dev->info);
  if (rc == GPUPART_OK && !is_pow2(dev->info.min_alignment))
    rc = gpupart__fail(GPUPART_EBACKEND, "device_open: backend reports alignment %llu",
                       (unsigned long long)dev->info.min_alignment);
  return rc;
}

static void device_free(gpupart_device *dev) {
  const gpupart__hostmem *mem = &dev->ctx->mem;
  while (dev->nparts) gpupart__partition_free(dev->parts[--dev->nparts]); /* a failed open's */
  if (dev->ledger) dev->ledger->ops->destroy(dev->ledger);
  if (dev->bdev) dev->ops->close(dev->bdev);
  pthread_mutex_destroy(&dev->slow);
  gpupart__host_free(mem, dev->parts);
  gpupart__host_free(mem, dev);
}

static int resolve_settings(gpupart_device *dev, const gpupart_device_desc *d, int exact) {
  gpupart__settings *s = &dev->settings;
  gpupart_backend b = GPUPART_BACKEND_AUTO;
  gpupart__settings_target(dev->ctx, d, exact, s);
  int rc = choose_backend(dev->ctx, s, &b);
  if (rc) return rc;
  gpupart__settings_resolve(dev->ctx, d, b, s);
  if (s->v[GPUPART__OPT_SHARED].u)
    return gpupart__fail(GPUPART_ENOTSUP, "device_open: shared ledgers (GPUPART_SHARED) are not implemented yet");
  return GPUPART_OK;
}

static int device_setup(gpupart_device *dev, const gpupart_device_desc *d, int exact) {
  int rc = resolve_settings(dev, d, exact);
  if (rc == GPUPART_OK) rc = open_backend(dev, dev->settings.backend, d);
  if (rc) return rc;
  const gpupart__value *v = dev->settings.v;
  dev->granularity = v[GPUPART__OPT_GRANULARITY].u;
  dev->alignment = dev->info.min_alignment;
  /* Blocks and limits are whole multiples of the granularity, and the driver hands out
   * only whole multiples of its alignment: a finer granularity is raised to it. */
  if (dev->granularity < dev->alignment) dev->granularity = dev->alignment;
  dev->growth = v[GPUPART__OPT_ALLOW_GROWTH].u ? GPUPART_GROWTH_ON : GPUPART_GROWTH_OFF;
  dev->release_threshold = v[GPUPART__OPT_RELEASE_THRESHOLD].u;
  dev->prealloc_block = v[GPUPART__OPT_PREALLOC_BLOCK].u;
  rc = compute_budget(dev);
  if (rc) return rc;
  dev->ledger = gpupart__ledger_local_create(&dev->ctx->mem, dev->budget);
  if (!dev->ledger) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  rc = gpupart__settings_create_partitions(dev);
  if (rc == GPUPART_OK && v[GPUPART__OPT_VERBOSE].u) gpupart__settings_print(dev);
  return rc;
}

gpupart_result gpupart__device_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
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
  rc = device_setup(dev, &d, exact);
  if (rc) return device_free(dev), rc;
  pthread_mutex_lock(&ctx->lock);
  ctx->open_devices++;
  pthread_mutex_unlock(&ctx->lock);
  *out = dev;
  return GPUPART_OK;
}

gpupart_result gpupart_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                   gpupart_device **out) {
  return gpupart__device_open(ctx, desc, 0, out);
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
  if (atomic_load(&dev->allocating))
    return gpupart__fail(GPUPART_EBUSY, "device_close: allocation in progress on this device (a reclaim "
                                        "callback may not close the device it runs for)");
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
