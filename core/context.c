/* The context: the library instance that owns the host allocator, the configuration
 * sources and the loaded backends. Backends are loaded on first use and unloaded with the
 * context, so a program that never touches Vulkan never opens libvulkan. */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "extstruct.h"
#include "internal.h"
#include "pin.h"

static int copy_strings(gpupart_context *ctx, const gpupart_context_desc *d) {
  ctx->config_path = gpupart__strdup(&ctx->mem, d->config_path);
  ctx->config_text = gpupart__strdup(&ctx->mem, d->config_text);
  ctx->ledger_dir = gpupart__strdup(&ctx->mem, d->ledger_dir);
  return (d->config_path && !ctx->config_path) || (d->config_text && !ctx->config_text) ||
         (d->ledger_dir && !ctx->ledger_dir);
}

static void context_free(gpupart_context *ctx) {
  const gpupart__hostmem mem = ctx->mem;
  for (int b = 0; b < GPUPART__BACKEND_COUNT; b++)
    if (ctx->backends[b].state) ctx->backends[b].ops->unload(ctx->backends[b].state);
  gpupart__host_free(&mem, ctx->config_path);
  gpupart__host_free(&mem, ctx->config_text);
  gpupart__host_free(&mem, ctx->ledger_dir);
  gpupart__config_free(&mem, ctx->cfg);
  gpupart__trace_close(ctx->trace);
  pthread_mutex_destroy(&ctx->lock);
  gpupart__host_free(&mem, ctx);
}

static int hostmem_from(const gpupart_context_desc *d, gpupart__hostmem *out) {
  if (!d->host_alloc != !d->host_free)
    return gpupart__fail(GPUPART_EINVAL, "context: set both host_alloc and host_free, or neither");
  *out = d->host_alloc ? (gpupart__hostmem){d->host_alloc, d->host_free, d->host_user} : *gpupart__hostmem_default();
  return GPUPART_OK;
}

/* The trace option (GPUPART_TRACE, `trace =`): the recording starts with the context. */
static int open_trace(gpupart_context *ctx) {
  gpupart__value v;
  gpupart__config_get(ctx->cfg, GPUPART__OPT_TRACE, GPUPART_BACKEND_AUTO, 0, &v);
  if (!v.str || (ctx->flags & GPUPART_CONTEXT_NO_TRACE)) return GPUPART_OK;
  char src[GPUPART__PATH_MAX + 16];
  gpupart__source_format(v.src, src, sizeof src);
  return gpupart__trace_open(&ctx->mem, v.str, src, &ctx->trace);
}

/* The sim_total option, which the sim backend applies to descriptors that leave their
 * total_bytes 0 (it is not a per-device option, so one value holds for the context). */
static uint64_t sim_total(const gpupart__config *cfg) {
  gpupart__value v;
  gpupart__config_get(cfg, GPUPART__OPT_SIM_TOTAL, GPUPART_BACKEND_SIM, 0, &v);
  return v.u;
}

gpupart_result gpupart_context_create_sized(const gpupart_context_desc *desc, size_t desc_size, gpupart_context **out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "context_create: out is NULL");
  *out = NULL;
  gpupart_context_desc d;
  int rc = gpupart__copy_in(&d, GPUPART__CONTEXT_DESC_SIZE, desc, desc_size, GPUPART__CONTEXT_DESC_SIZE_0_2,
                            "context_create: gpupart_context_desc");
  if (rc) return rc;
  if (d.flags & ~(GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE))
    return gpupart__fail(GPUPART_EINVAL, "context_create: unknown flags 0x%x", d.flags);
  gpupart__hostmem mem;
  rc = hostmem_from(&d, &mem);
  if (rc) return rc;
  gpupart_context *ctx = gpupart__host_calloc(&mem, 1, sizeof *ctx);
  if (!ctx) return gpupart__fail(GPUPART_ENOMEM, "context_create: out of host memory");
  ctx->mem = mem;
  ctx->env.mem = &ctx->mem;
  ctx->flags = d.flags;
  ctx->log = d.log;
  ctx->log_user = d.log_user;
  pthread_mutex_init(&ctx->lock, NULL);
  for (int b = 0; b < GPUPART__BACKEND_COUNT; b++) ctx->backends[b].ops = gpupart__backend_ops(b);
  if (copy_strings(ctx, &d)) {
    context_free(ctx);
    return gpupart__fail(GPUPART_ENOMEM, "context_create: out of host memory");
  }
  rc = gpupart__config_load(&mem, &d, &ctx->cfg);
  if (rc || (rc = open_trace(ctx))) {
    context_free(ctx);
    return rc;
  }
  ctx->env.sim_total = sim_total(ctx->cfg);
  *out = ctx;
  return GPUPART_OK;
}

gpupart_result gpupart_context_destroy(gpupart_context *ctx) {
  if (!ctx) return GPUPART_OK;
  pthread_mutex_lock(&ctx->lock);
  uint32_t open = ctx->open_devices;
  pthread_mutex_unlock(&ctx->lock);
  if (open) return gpupart__fail(GPUPART_EBUSY, "context_destroy: %u device(s) still open", open);
  context_free(ctx);
  return GPUPART_OK;
}

/* GPUPART_<BACKEND>_LIBRARY (or its key in the file), else NULL for the system's; src
 * names where it was set ("GPUPART_VULKAN_LIBRARY=/x") for a load error. */
static const char *library_override(const gpupart_context *ctx, gpupart_backend b, char *src, size_t n) {
  static const int opts[] = {-1, -1, GPUPART__OPT_OPENCL_LIBRARY, GPUPART__OPT_VULKAN_LIBRARY,
                             GPUPART__OPT_CUDA_LIBRARY};
  gpupart__value v = {0};
  if (opts[b] >= 0) gpupart__config_get(ctx->cfg, (gpupart__opt)opts[b], GPUPART_BACKEND_AUTO, 0, &v);
  if (!v.str) return NULL;
  char where[GPUPART__PATH_MAX + 16];
  gpupart__source_format(v.src, where, sizeof where);
  if (v.src.line)
    snprintf(src, n, "%s = %s (%s): ", gpupart__options[opts[b]].key, GPUPART__ECHO(v.str), GPUPART__ECHO(where));
  else snprintf(src, n, "%s=%s: ", GPUPART__ECHO(where), GPUPART__ECHO(v.str));
  return v.str;
}

int gpupart__backend_named(const gpupart_context *ctx, gpupart_backend b) {
  char src[2 * GPUPART__ECHO_MAX + 16];
  gpupart__value list;
  if ((unsigned)b >= GPUPART__BACKEND_COUNT) return 0;
  if (library_override(ctx, b, src, sizeof src)) return 1;
  gpupart__config_get(ctx->cfg, GPUPART__OPT_BACKEND, GPUPART_BACKEND_AUTO, 0, &list);
  for (uint32_t i = 0; i < list.nbackends; i++)
    if (list.backends[i] == b) return 1;
  return 0;
}

/* A table the core can use: this ABI, every required entry present, and the id it is
 * registered under. Optional entries need no check: GPUPART__BACKEND_OP reads them. */
static int check_table(const gpupart_backend_ops *o, gpupart_backend b) {
  if (o->abi_version != GPUPART__BACKEND_ABI)
    return gpupart__fail(GPUPART_ENOBACKEND, "backend '%s' has ABI %u, expected %u", o->name, o->abi_version,
                         GPUPART__BACKEND_ABI);
  if (o->struct_size < GPUPART__BACKEND_OPS_MIN_SIZE || o->id != b || !o->load || !o->unload || !o->enumerate ||
      !o->open || !o->close || !o->info || !o->block_alloc || !o->block_free)
    return gpupart__fail(GPUPART_ENOBACKEND, "backend '%s': its table (%u bytes, id %d) lacks a required entry",
                         o->name, o->struct_size, (int)o->id);
  return GPUPART_OK;
}

static int load_one(gpupart_context *ctx, gpupart__loaded_backend *lb, gpupart_backend b) {
  char src[2 * GPUPART__ECHO_MAX + 16] = "";
  const char *library = library_override(ctx, b, src, sizeof src);
  gpupart__pin_mark mark;
  gpupart__pin_begin(&mark);
  int rc = lb->ops->load(&ctx->env, library, &lb->state);
  gpupart__pin_end(ctx->env.mem, &mark); /* a loader stays loaded (core/base/pin.c) */
  const char *why = gpupart_last_error();
  int named = library && (strstr(why, "_LIBRARY") || strstr(why, "_library")); /* the backend says it already */
  /* A message longer than error is cut: the reason comes first, so what is cut is its tail. */
  if (rc && snprintf(lb->error, sizeof lb->error, "%s%s", named ? "" : src, why) >= (int)sizeof lb->error)
    lb->error[sizeof lb->error - 1] = '\0';
  return rc;
}

static int load_locked(gpupart_context *ctx, gpupart__loaded_backend *lb, gpupart_backend b) {
  if (!lb->ops)
    return gpupart__fail(GPUPART_ENOBACKEND, "backend '%s' is not built into this library", gpupart_backend_name(b));
  if (!lb->tried) {
    lb->tried = 1;
    lb->result = check_table(lb->ops, b);
    if (lb->result == GPUPART_OK) lb->result = load_one(ctx, lb, b);
    if (lb->result && !lb->error[0]) snprintf(lb->error, sizeof lb->error, "%s", gpupart_last_error());
    lb->native = lb->result ? gpupart_last_native_error() : 0;
  }
  if (lb->result) return gpupart__fail_native(lb->result, lb->native, "%s", lb->error);
  return GPUPART_OK;
}

int gpupart__backend_known(gpupart_context *ctx, gpupart_backend b) {
  if ((unsigned)b >= GPUPART__BACKEND_COUNT || b == GPUPART_BACKEND_AUTO) return 0;
  pthread_mutex_lock(&ctx->lock);
  const gpupart__loaded_backend *lb = &ctx->backends[b];
  int known = !lb->ops || lb->tried;
  pthread_mutex_unlock(&ctx->lock);
  return known;
}

/* Loads backend b on first use. Later calls return the first load's result, so a missing
 * driver costs one dlopen per context, not one per call. */
int gpupart__backend_get(gpupart_context *ctx, gpupart_backend b, const gpupart_backend_ops **ops, void **state) {
  if ((unsigned)b >= GPUPART__BACKEND_COUNT || b == GPUPART_BACKEND_AUTO)
    return gpupart__fail(GPUPART_EINVAL, "unknown backend %d (use a GPUPART_BACKEND_*)", (int)b);
  pthread_mutex_lock(&ctx->lock);
  gpupart__loaded_backend *lb = &ctx->backends[b];
  int rc = load_locked(ctx, lb, b);
  pthread_mutex_unlock(&ctx->lock);
  if (rc == GPUPART_OK) {
    *ops = lb->ops;
    *state = lb->state;
  }
  return rc;
}

/* One option of ctx's configuration resolved for a device as its open resolves it
 * (gpupart__settings_compute with the device's physical index, no device yet): the rule
 * stays the configuration room's, and a layer that opens devices in a context of its own
 * reads the program's configuration through this. */
gpupart_result gpupart_context_option(gpupart_context *ctx, gpupart_backend backend, uint32_t index, const char *name,
                                      char *out, size_t n) {
  if (!ctx || !name || !out || !n) return gpupart__fail(GPUPART_EINVAL, "context_option: NULL argument or n of 0");
  out[0] = 0;
  if ((unsigned)backend >= GPUPART__BACKEND_COUNT || backend == GPUPART_BACKEND_AUTO)
    return gpupart__fail(GPUPART_EINVAL, "context_option: backend %d is none of sim, opencl, vulkan, cuda",
                         (int)backend);
  int o = gpupart__option_by_key(name);
  if (o < 0 || o == GPUPART__OPT_PARTITIONS)
    return gpupart__fail(GPUPART_EINVAL, "context_option: '%s' is not an option with one value (an INI key)",
                         GPUPART__ECHO(name));
  gpupart_device_desc d = {.backend = backend, .index = index};
  gpupart__settings s;
  gpupart__settings_in in = {.desc = &d,
                             .exact = 1,
                             .backend = backend,
                             .config_path = ctx->config_path,
                             .ledger_dir = ctx->ledger_dir,
                             .ignore_env = (ctx->flags & GPUPART_CONTEXT_IGNORE_ENV) != 0};
  gpupart__settings_compute(ctx->cfg, &in, &s); /* no device: only the options, which cannot fail */
  char text[GPUPART__PATH_MAX + GPUPART__ERR_MAX];
  gpupart__option_format((gpupart__opt)o, &s.v[o], text, sizeof text);
  if (strlen(text) >= n)
    return gpupart__fail(GPUPART_EINVAL, "context_option: %s needs %zu bytes, out has %zu", gpupart__options[o].key,
                         strlen(text) + 1, n);
  memcpy(out, text, strlen(text) + 1);
  return GPUPART_OK;
}
