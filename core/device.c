/* Devices: opening one physical GPU through its backend, computing this process's
 * budget on it, and the device-wide views (info, stats, the consistency check). The
 * partitions themselves live in partition.c; the accounting in the ledger. */
#include "device.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "context.h"
#include "enumerate.h"
#include "error.h"
#include "events.h"
#include "extstruct.h"
#include "internal.h"
#include "ledgers.h"
#include "configured.h"
#include "partition.h"
#include "pin.h"
#include "trim.h"
#include "verbose.h"

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

/* The backends to try, in order: the configured list, or the registry's AUTO order
 * (cuda, vulkan, opencl, then sim). order has room for GPUPART__BACKEND_COUNT. */
static uint32_t backend_order(const gpupart__settings *s, gpupart_backend *order) {
  const gpupart__value *v = &s->v[GPUPART__OPT_BACKEND];
  if (!v->nbackends) return gpupart__backend_auto_order(order, 1);
  for (uint32_t i = 0; i < v->nbackends; i++) order[i] = (gpupart_backend)v->backends[i];
  return v->nbackends;
}

/* Why backend b was passed over: its load or enumeration error, or too few devices. */
static void skip_reason(gpupart_backend b, int rc, uint32_t found, char *buf, size_t n) {
  if (rc) snprintf(buf, n, "%s: %s", gpupart_backend_name(b), gpupart_last_error());
  else snprintf(buf, n, "%s: %u device%s", gpupart_backend_name(b), found, found == 1 ? "" : "s");
}

/* The first backend of the order that loads and has the device. A single choice is taken
 * without probing, so that its own error (driver missing, no such device) is the one seen. */
static int choose_backend(gpupart_context *ctx, const gpupart__settings *s, gpupart_backend *out) {
  gpupart_backend order[GPUPART__BACKEND_COUNT];
  _Static_assert(GPUPART__MAX_BACKENDS <= GPUPART__BACKEND_COUNT, "a configured list fits the order");
  uint32_t n = backend_order(s, order);
  if (n == 1) {
    *out = order[0];
    return GPUPART_OK;
  }
  char why[GPUPART__BACKEND_COUNT][160];
  for (uint32_t i = 0; i < n; i++) {
    uint32_t found = 0;
    int rc = gpupart__enumerate_one(ctx, order[i], NULL, 0, &found);
    if (rc == GPUPART_OK && found > s->index) {
      *out = order[i];
      return GPUPART_OK;
    }
    skip_reason(order[i], rc, found, why[i], sizeof why[i]);
  }
  char list[64], where[GPUPART__PATH_MAX + 16];
  gpupart__option_format(GPUPART__OPT_BACKEND, &s->v[GPUPART__OPT_BACKEND], list, sizeof list);
  gpupart__source_format(s->v[GPUPART__OPT_BACKEND].src, where, sizeof where);
  gpupart__fail(GPUPART_ENODEV, "device_open: no backend of %s (%s) has a device %u:", list, where, s->index);
  for (uint32_t i = 0; i < n; i++) gpupart__error_append("%s %s", i ? ";" : "", why[i]);
  return GPUPART_ENODEV;
}

static int check_desc(const gpupart_device_desc *d) {
  if ((unsigned)d->backend >= GPUPART__BACKEND_COUNT)
    return gpupart__fail(GPUPART_EINVAL, "device_open: unknown backend %d (use a GPUPART_BACKEND_*)", (int)d->backend);
  if (d->memory_fraction < 0 || d->memory_fraction > 1 || isnan(d->memory_fraction))
    return gpupart__fail(GPUPART_EINVAL, "device_open: memory_fraction %g is outside (0, 1]", d->memory_fraction);
  if (d->granularity && !is_pow2(d->granularity))
    return gpupart__fail(GPUPART_EINVAL, "device_open: granularity %llu is not a power of two",
                         (unsigned long long)d->granularity);
  if (d->growth < GPUPART_GROWTH_DEFAULT || d->growth > GPUPART_GROWTH_OFF)
    return gpupart__fail(GPUPART_EINVAL, "device_open: growth %d is not a GPUPART_GROWTH_*", d->growth);
  if (d->flags & ~GPUPART_DEVICE_SHARED)
    return gpupart__fail(GPUPART_EINVAL, "device_open: unknown flags 0x%x", d->flags);
  return GPUPART_OK;
}

/* The backend that d->backend_desc is for: backend_desc_type, else backend. A descriptor
 * whose backend cannot be proven is refused before anything is opened. */
static int desc_type(const gpupart_device_desc *d, gpupart_backend *out) {
  *out = d->backend_desc_type ? d->backend_desc_type : d->backend;
  if (!d->backend_desc) return GPUPART_OK;
  if (*out == GPUPART_BACKEND_AUTO)
    return gpupart__fail(GPUPART_EINVAL, "device_open: backend_desc is set but backend and backend_desc_type are "
                                         "both auto: say which backend's descriptor it is");
  if ((unsigned)*out >= GPUPART__BACKEND_COUNT)
    return gpupart__fail(GPUPART_EINVAL, "device_open: backend_desc_type %d is not a gpupart_backend", (int)*out);
  return GPUPART_OK;
}

/* A backend descriptor is only ever read by the backend it was made for. */
static int check_desc_backend(const gpupart_device *dev, const gpupart_device_desc *d) {
  gpupart_backend t, b = dev->settings.backend;
  int rc = desc_type(d, &t);
  if (rc || !d->backend_desc || t == b) return rc;
  char where[GPUPART__PATH_MAX + 16];
  gpupart__source_format(dev->settings.v[GPUPART__OPT_BACKEND].src, where, sizeof where);
  return gpupart__fail(GPUPART_EINVAL,
                       "device_open: backend_desc is a %s descriptor, but the device opens through "
                       "%s (backend chosen by %s)",
                       gpupart_backend_name(t), gpupart_backend_name(b), where);
}

/* How a device is opened (open_sized's how). */
#define OPEN_EXACT 0x1u   /* the descriptor's index is physical: GPUPART_DEVICE's list is not applied */
#define OPEN_ABI_0_1 0x2u /* a 0.1 program's open: its descriptor and backend descriptor have 0.1 layouts */

/* The core never reads the backend's descriptor: the backend copies it in by the struct
 * rule (gpupart__backend_desc_in), knowing its own struct's sizes, and reads a 0.1
 * program's as 0.1 laid it out (open_0_1; none: unchanged since 0.1 or added later). */
static int backend_open(gpupart_device *dev, void *state, const gpupart_device_desc *d, unsigned how) {
  int (*open_0_1)(void *, uint32_t, const void *, void **) = GPUPART__BACKEND_OP(dev->ops, open_0_1);
  if ((how & OPEN_ABI_0_1) && open_0_1 && d->backend_desc)
    return open_0_1(state, dev->settings.index, d->backend_desc, &dev->bdev);
  return dev->ops->open(state, dev->settings.index, d->backend_desc, d->backend_desc_size, &dev->bdev);
}

static int open_backend(gpupart_device *dev, gpupart_backend b, const gpupart_device_desc *d, unsigned how) {
  void *state;
  int rc = gpupart__backend_get(dev->ctx, b, &dev->ops, &state);
  if (rc) return rc;
  gpupart__pin_mark mark;
  gpupart__pin_begin(&mark);
  rc = backend_open(dev, state, d, how);
  gpupart__pin_end(dev->ctx->env.mem, &mark); /* the drivers it loaded stay loaded (core/base/pin.c) */
  if (rc) return rc;
  rc = dev->ops->info(dev->bdev, &dev->info);
  if (rc == GPUPART_OK && !is_pow2(dev->info.min_alignment))
    rc = gpupart__fail(GPUPART_EBACKEND, "device_open: backend reports alignment %llu",
                       (unsigned long long)dev->info.min_alignment);
  if (rc == GPUPART_OK && dev->info.block_granularity < dev->info.min_alignment)
    dev->info.block_granularity = dev->info.min_alignment; /* 0: blocks need no more than alignment */
  if (rc == GPUPART_OK && !is_pow2(dev->info.block_granularity))
    rc = gpupart__fail(GPUPART_EBACKEND, "device_open: backend reports block granularity %llu",
                       (unsigned long long)dev->info.block_granularity);
  return rc;
}

static void device_free(gpupart_device *dev) {
  const gpupart__hostmem *mem = &dev->ctx->mem;
  gpupart__device_responder_stop(dev);
  while (dev->nparts) gpupart__partition_free(dev->parts[--dev->nparts]); /* a failed open's */
  if (dev->ledger) gpupart__device_asked_enough(dev);                     /* a request it left ends with it */
  if (dev->ledger) gpupart__ledger_release(dev->ctx, dev->ledger, dev->member);
  if (dev->bdev) dev->ops->close(dev->bdev);
  pthread_mutex_destroy(&dev->slow);
  gpupart__host_free(mem, dev->parts);
  gpupart__host_free(mem, dev);
}

/* What an open brings to its settings (settings.h): the descriptor, and the context's. */
static gpupart__settings_in settings_in(const gpupart_context *ctx, const gpupart_device_desc *d, int exact) {
  return (gpupart__settings_in){.desc = d,
                                .exact = exact,
                                .config_path = ctx->config_path,
                                .ledger_dir = ctx->ledger_dir,
                                .ignore_env = (ctx->flags & GPUPART_CONTEXT_IGNORE_ENV) != 0};
}

/* The device's index and the backend that has it (in->backend). */
static int choose(gpupart_device *dev, gpupart__settings_in *in) {
  int rc = gpupart__settings_target(dev->ctx->cfg, in, &dev->settings);
  if (rc == GPUPART_OK) rc = choose_backend(dev->ctx, &dev->settings, &in->backend);
  if (rc == GPUPART_OK) dev->settings.backend = in->backend;
  return rc;
}

/* The operator's ceiling on what this process holds on the device (0: none): the lower of
 * memory_limit_max and memory_fraction_max of the device's total, where set. */
static uint64_t ceiling_of(const gpupart_device *dev) {
  const gpupart__value *v = dev->settings.v;
  uint64_t c = v[GPUPART__OPT_MEMORY_LIMIT_MAX].u;
  double f = v[GPUPART__OPT_MEMORY_FRACTION_MAX].share;
  uint64_t of_total = f > 0 && f < 1 ? (uint64_t)((long double)dev->info.total_bytes * f) : 0;
  if (of_total && (!c || of_total < c)) c = of_total;
  return c & ~(dev->granularity - 1);
}

/* A shared ledger's budget may be larger than this process's ceiling, now or once an
 * operator raises it: the ledger caps what the process's shares hold together (its own
 * budget is the ledger's). */
static void bind_ceiling(gpupart_device *dev) {
  uint64_t c = ceiling_of(dev);
  if (!c || !dev->ledger->ops->set_ceiling) return;
  dev->ceiling = c;
  dev->ledger->ops->set_ceiling(dev->ledger, c);
}

/* Joins the ledger of this physical device: the context's existing one when the device
 * is already open in it (whose budget this handle then shares), else a new one. */
static int join_ledger(gpupart_device *dev) {
  const gpupart__value *v = dev->settings.v;
  int shared = v[GPUPART__OPT_SHARED].u && !dev->ctx->local_only;
  const char *shared_dir = shared ? gpupart__settings_ledger_dir(&dev->settings) : NULL;
  gpupart__identity_of(&dev->info, &dev->id);
  int rc = gpupart__ledger_acquire(dev->ctx, &dev->id, dev->budget, shared_dir, &dev->ledger, &dev->member);
  if (rc) return rc;
  gpupart__ledger_figures t;
  dev->ledger->ops->totals(dev->ledger, &t);
  if (dev->settings.v[GPUPART__OPT_VERBOSE].u) dev->ledger->verbose = 1; /* its events go to stderr too */
  if (dev->ledger->shared) bind_ceiling(dev);
  if (t.limit && t.limit != dev->budget) {            /* 0: the ledger could not be read just now */
    gpupart__event_budget(dev, dev->budget, t.limit); /* says which budget applies */
    dev->budget = t.limit;
  }
  return GPUPART_OK;
}

/* The defaults of the device's partitions, as configuration (or the options table) set them. */
static void policy_from_settings(gpupart_device *dev) {
  const gpupart__value *v = dev->settings.v;
  dev->growth = v[GPUPART__OPT_ALLOW_GROWTH].u ? GPUPART_GROWTH_ON : GPUPART_GROWTH_OFF;
  dev->release_threshold = v[GPUPART__OPT_RELEASE_THRESHOLD].u;
  dev->prealloc_block = v[GPUPART__OPT_PREALLOC_BLOCK].u;
  dev->initial_block = v[GPUPART__OPT_INITIAL_BLOCK].u;
  dev->max_block = v[GPUPART__OPT_MAX_BLOCK].u;
  dev->growth_factor = v[GPUPART__OPT_GROWTH_FACTOR].factor;
  dev->expandable = (int)v[GPUPART__OPT_EXPANDABLE].u;
}

static int device_setup(gpupart_device *dev, const gpupart_device_desc *d, unsigned how) {
  gpupart__settings_in in = settings_in(dev->ctx, d, (how & OPEN_EXACT) != 0);
  int rc = choose(dev, &in);
  if (rc == GPUPART_OK) rc = check_desc_backend(dev, d);
  if (rc == GPUPART_OK) rc = open_backend(dev, in.backend, d, how);
  in.info = &dev->info;
  if (rc == GPUPART_OK) rc = gpupart__settings_compute(dev->ctx->cfg, &in, &dev->settings);
  if (rc) return rc;
  const gpupart__value *v = dev->settings.v;
  dev->granularity = dev->settings.granularity;
  dev->budget = dev->settings.budget;
  dev->alignment = dev->info.min_alignment;
  policy_from_settings(dev);
  rc = join_ledger(dev);
  if (rc == GPUPART_OK) rc = gpupart__partition_create_configured(dev);
  dev->find_joins = dev->ledger && dev->ledger->shared;
  if (dev->find_joins) dev->ledger->ops->trim_asked(dev->ledger, &dev->trim_seen); /* past requests are not ours */
  if (dev->find_joins && dev->ledger->ops->posted) dev->ledger->ops->posted(dev->ledger, &dev->posted_seen);
  if (rc == GPUPART_OK) rc = gpupart__device_responder_start(dev);
  if (rc == GPUPART_OK && v[GPUPART__OPT_VERBOSE].u) gpupart__verbose_print(dev);
  if (rc == GPUPART_OK) gpupart__verbose_warn_env(dev);
  if (rc == GPUPART_OK) gpupart__verbose_notes(dev);
  if (rc == GPUPART_OK) gpupart__verbose_unreachable(dev);
  return rc;
}

static gpupart_result open_sized(gpupart_context *ctx, const gpupart_device_desc *desc, size_t desc_size, unsigned how,
                                 gpupart_device **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "device_open: out is NULL");
  *out = NULL;
  if (!ctx) return gpupart__fail(GPUPART_EINVAL, "device_open: ctx is NULL");
  gpupart_device_desc d;
  gpupart_backend t;
  size_t min = how & OPEN_ABI_0_1 ? GPUPART__DEVICE_DESC_SIZE_0_1 : GPUPART__DEVICE_DESC_SIZE_0_2;
  int rc = gpupart__copy_in(&d, GPUPART__DEVICE_DESC_SIZE, desc, desc_size, min, "device_open: gpupart_device_desc");
  if (rc == GPUPART_OK) rc = check_desc(&d);
  if (rc == GPUPART_OK) rc = desc_type(&d, &t);
  if (rc) return rc;
  gpupart_device *dev = gpupart__host_calloc(&ctx->mem, 1, sizeof *dev);
  if (!dev) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  dev->ctx = ctx;
  pthread_mutex_init(&dev->slow, NULL);
  rc = device_setup(dev, &d, how);
  if (rc) {
    device_free(dev);
    return rc;
  }
  pthread_mutex_lock(&ctx->lock);
  ctx->open_devices++;
  pthread_mutex_unlock(&ctx->lock);
  gpupart__ledger_report(dev->ledger); /* dead members joining reaped (under the context's lock) */
  gpupart__device_dra_watch(dev);      /* and a generation newer than the context's own, already */
  *out = dev;
  return GPUPART_OK;
}

gpupart_result gpupart__device_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
                                    gpupart_device **out) {
  return open_sized(ctx, desc, sizeof *desc, exact ? OPEN_EXACT : 0, out);
}

gpupart_result gpupart__device_open_0_1(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out) {
  return open_sized(ctx, desc, GPUPART__DEVICE_DESC_SIZE_0_1, OPEN_ABI_0_1, out);
}

gpupart_result gpupart_device_open_sized(gpupart_context *ctx, const gpupart_device_desc *desc, size_t desc_size,
                                         gpupart_device **out) {
  return open_sized(ctx, desc, desc_size, 0, out);
}

/* The live allocations of dev's partitions, and how many of them are charges. */
static uint64_t live_allocations(gpupart_device *dev, uint64_t *charges) {
  uint64_t live = 0;
  *charges = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) {
    gpupart_partition *p = dev->parts[i];
    gpupart__lock_acquire(&p->lock);
    live += p->c.live_allocations;
    *charges += p->arena.charged_count;
    gpupart__lock_release(&p->lock);
  }
  return live;
}

/* What keeps dev from closing now: EBUSY with the message, or OK. */
static int close_refused(gpupart_device *dev) {
  if (atomic_load(&dev->allocating))
    return gpupart__fail(GPUPART_EBUSY, "device_close: allocation in progress on this device (a reclaim "
                                        "callback may not close the device it runs for)");
  uint64_t charges, live = live_allocations(dev, &charges);
  if (live)
    return gpupart__fail(GPUPART_EBUSY, "device_close: %llu allocation(s) still live, %llu of them charge(s)",
                         (unsigned long long)live, (unsigned long long)charges);
  return GPUPART_OK;
}

/* The responder stops first (so that a callback it runs is done), and starts again when
 * the device cannot close. */
gpupart_result gpupart_device_close(gpupart_device *dev) {
  if (!dev) return GPUPART_OK;
  if (gpupart__device_on_responder(dev))
    return gpupart__fail(GPUPART_EBUSY, "device_close: called from a reclaim callback that the device's "
                                        "responder runs (a reclaim callback may not close its device)");
  gpupart__device_responder_stop(dev);
  pthread_mutex_lock(&dev->slow);
  int rc = close_refused(dev);
  if (rc == GPUPART_OK)
    while (dev->nparts) gpupart__partition_free(dev->parts[--dev->nparts]);
  pthread_mutex_unlock(&dev->slow);
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "%s", gpupart_last_error());
    gpupart__device_responder_start(dev); /* where it cannot, the device answers at its next call */
    return gpupart__fail(rc, "%s", why);
  }
  gpupart_context *ctx = dev->ctx;
  device_free(dev);
  pthread_mutex_lock(&ctx->lock);
  ctx->open_devices--;
  pthread_mutex_unlock(&ctx->lock);
  return GPUPART_OK;
}

gpupart_result gpupart_device_get_info_sized(const gpupart_device *dev, gpupart_device_info *out, size_t out_size) {
  if (!dev || !out) return gpupart__fail(GPUPART_EINVAL, "device_get_info: dev or out is NULL");
  gpupart_device_info info = dev->info;
  uint64_t free_bytes, total;
  int (*mem_info)(void *, uint64_t *, uint64_t *) = GPUPART__BACKEND_OP(dev->ops, mem_info);
  info.free_bytes = UINT64_MAX; /* unknown, unless the backend can tell */
  if (mem_info && mem_info(dev->bdev, &free_bytes, &total) == GPUPART_OK) info.free_bytes = free_bytes;
  return gpupart__copy_out(out, out_size, &info, sizeof info, GPUPART__DEVICE_INFO_SIZE_0_2,
                           "device_get_info: gpupart_device_info");
}

/* The budget of the physical device: every handle of one device in a context shares the
 * first open's (join_ledger). */
uint64_t gpupart_device_budget(const gpupart_device *dev) { return dev ? gpupart__budget_now(dev) : 0; }
