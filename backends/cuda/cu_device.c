/* CUDA devices: enumerating them (name, UUID, PCI bus id, total and free memory),
 * opening one on its retained primary context or on the application's own CUcontext
 * (gpupart_cuda.h), and the context discipline every driver call follows: push the
 * device's context, call, pop, so the calling thread's current context is never
 * disturbed. */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "gpupart_cuda.h"

/* ---- the current context ------------------------------------------------------------- */

int gpupart__cu_enter(const gpupart__cu_device *d, const char *what) {
  CUresult r = d->s->cu.ctx_push(d->context);
  if (r == CUDA_SUCCESS) return GPUPART_OK;
  gpupart__cu_fail(d->s, GPUPART_EBACKEND, r, "cuCtxPushCurrent_v2");
  gpupart__error_append(" before %s%s", what, d->adopted ? " (was the adopted context destroyed?)" : "");
  return GPUPART_EBACKEND;
}

void gpupart__cu_leave(const gpupart__cu_device *d) {
  CUcontext popped = NULL;
  d->s->cu.ctx_pop(&popped);
}

/* ---- describing a device ------------------------------------------------------------- */

static uint64_t round_down(uint64_t v, uint64_t a) { return v & ~(a - 1); }

/* Free memory through ctx, pushed around the query; UINT64_MAX where it fails. */
static uint64_t free_in(const gpupart__cu_state *s, CUcontext ctx) {
  size_t free_b = 0, total_b = 0;
  if (s->cu.ctx_push(ctx) != CUDA_SUCCESS) return UINT64_MAX;
  CUresult r = s->cu.mem_get_info(&free_b, &total_b);
  CUcontext popped;
  s->cu.ctx_pop(&popped);
  return r == CUDA_SUCCESS ? (uint64_t)free_b : UINT64_MAX;
}

/* Free memory needs a context: the primary one, retained for the query and released. */
static uint64_t free_of(const gpupart__cu_state *s, CUdevice dev) {
  CUcontext ctx = NULL;
  if (s->cu.primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS) return UINT64_MAX;
  uint64_t f = free_in(s, ctx);
  s->cu.primary_ctx_release(dev);
  return f;
}

static void identity(const gpupart__cu_state *s, CUdevice dev, gpupart_device_info *out, char *pci, size_t pci_len) {
  CUuuid uuid;
  if (s->cu.device_get_uuid && s->cu.device_get_uuid(&uuid, dev) == CUDA_SUCCESS)
    memcpy(out->uuid, uuid.bytes, sizeof out->uuid);
  pci[0] = '\0';
  if (s->cu.device_get_pci_bus_id && s->cu.device_get_pci_bus_id(pci, (int)pci_len, dev) != CUDA_SUCCESS) pci[0] = '\0';
  pci[pci_len - 1] = '\0';
  snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%s", pci);
}

/* Everything but free memory, which needs a context. */
static int describe(const gpupart__cu_state *s, CUdevice dev, uint32_t index, gpupart_device_info *out, char *pci,
                    size_t pci_len) {
  memset(out, 0, sizeof *out);
  out->backend = GPUPART_BACKEND_CUDA;
  out->index = index;
  snprintf(out->vendor, sizeof out->vendor, "NVIDIA");
  CUresult r = s->cu.device_get_name(out->name, (int)sizeof out->name, dev);
  if (r != CUDA_SUCCESS) return gpupart__cu_fail(s, GPUPART_EBACKEND, r, "cuDeviceGetName");
  out->name[sizeof out->name - 1] = '\0';
  size_t total = 0;
  if ((r = s->cu.device_total_mem(&total, dev)) != CUDA_SUCCESS)
    return gpupart__cu_fail(s, GPUPART_EBACKEND, r, "cuDeviceTotalMem_v2");
  out->total_bytes = total;
  out->max_block_bytes = round_down(total, GPUPART__CU_ALIGNMENT);
  out->min_alignment = GPUPART__CU_ALIGNMENT;
  out->block_granularity = GPUPART__CU_ALIGNMENT;
  out->free_bytes = UINT64_MAX;
  identity(s, dev, out, pci, pci_len);
  return GPUPART_OK;
}

static int device_count(const gpupart__cu_state *s, int *n) {
  *n = 0;
  if (s->no_device) return GPUPART_OK;
  CUresult r = s->cu.device_get_count(n);
  return r == CUDA_SUCCESS ? GPUPART_OK : gpupart__cu_fail(s, GPUPART_EBACKEND, r, "cuDeviceGetCount");
}

static int device_at(const gpupart__cu_state *s, uint32_t index, CUdevice *dev) {
  CUresult r = s->cu.device_get(dev, (int)index);
  return r == CUDA_SUCCESS ? GPUPART_OK : gpupart__cu_fail(s, GPUPART_EBACKEND, r, "cuDeviceGet");
}

int gpupart__cu_enumerate(gpupart__cu_state *s, gpupart_device_info *out, uint32_t *count) {
  int n = 0;
  int rc = device_count(s, &n);
  for (uint32_t i = 0; rc == GPUPART_OK && out && i < *count && i < (uint32_t)n; i++) {
    CUdevice dev;
    char pci[32];
    rc = device_at(s, i, &dev);
    if (rc == GPUPART_OK) rc = describe(s, dev, i, &out[i], pci, sizeof pci);
    if (rc == GPUPART_OK) out[i].free_bytes = free_of(s, dev);
  }
  if (rc == GPUPART_OK) *count = (uint32_t)n;
  return rc;
}

/* ---- opening ------------------------------------------------------------------------- */

static int retain_primary(gpupart__cu_state *s, uint32_t index, gpupart__cu_device *d) {
  int n = 0;
  int rc = device_count(s, &n);
  if (rc) return rc;
  if (index >= (uint32_t)n)
    return gpupart__fail(GPUPART_ENODEV, "cuda: no device %u: %s has %d device(s)", index, s->path, n);
  if ((rc = device_at(s, index, &d->device))) return rc;
  CUresult r = s->cu.primary_ctx_retain(&d->context, d->device);
  if (r != CUDA_SUCCESS) return gpupart__cu_fail(s, GPUPART_EBACKEND, r, "cuDevicePrimaryCtxRetain");
  d->info.index = index;
  return GPUPART_OK;
}

/* The ordinal of the device behind an adopted context: the index enumerate gives it. */
static int ordinal_of(const gpupart__cu_state *s, CUdevice dev, uint32_t *index) {
  int n = 0;
  int rc = device_count(s, &n);
  for (int i = 0; rc == GPUPART_OK && i < n; i++) {
    CUdevice other;
    if (s->cu.device_get(&other, i) == CUDA_SUCCESS && other == dev) return *index = (uint32_t)i, GPUPART_OK;
  }
  return rc ? rc
            : gpupart__fail(GPUPART_EBACKEND, "cuda: the adopted context's device is not among the %d device(s)", n);
}

/* The driver must recognise the context: pushing it and asking its device proves that. */
static int adopt(gpupart__cu_state *s, CUcontext ctx, gpupart__cu_device *d) {
  CUresult r = s->cu.ctx_push(ctx);
  if (r != CUDA_SUCCESS) {
    gpupart__cu_fail(s, GPUPART_EINVAL, r, "cuCtxPushCurrent_v2 of the adopted context");
    gpupart__error_append(": %p is not a valid CUcontext (destroyed?)", (void *)ctx);
    return GPUPART_EINVAL;
  }
  r = s->cu.ctx_get_device(&d->device);
  CUcontext popped;
  s->cu.ctx_pop(&popped);
  if (r != CUDA_SUCCESS) return gpupart__cu_fail(s, GPUPART_EINVAL, r, "cuCtxGetDevice on the adopted context");
  d->context = ctx;
  d->adopted = 1;
  return ordinal_of(s, d->device, &d->info.index);
}

static int finish_open(gpupart__cu_device *d) {
  int rc = describe(d->s, d->device, d->info.index, &d->info, d->pci_bus_id, sizeof d->pci_bus_id);
  if (rc) return rc;
  if (d->info.total_bytes < GPUPART__CU_ALIGNMENT)
    return gpupart__fail(GPUPART_EBACKEND, "cuda: device %u (%s) reports %llu bytes of memory", d->info.index,
                         d->info.name, (unsigned long long)d->info.total_bytes);
  uint64_t total = 0;
  return gpupart__cu_mem_info(d, &d->info.free_bytes, &total);
}

/* A desc shorter than gpupart_cuda_desc leaves the rest zero (the Core 0.2 rule). */
int gpupart__cu_open(gpupart__cu_state *s, uint32_t index, const void *desc, size_t desc_size,
                     gpupart__cu_device **out) {
  gpupart_cuda_desc cd;
  int rc =
      gpupart__backend_desc_in(&cd, sizeof cd, desc, desc_size, sizeof(gpupart_cuda_desc), "cuda: gpupart_cuda_desc");
  if (rc) return rc;
  gpupart__cu_device *d = gpupart__host_calloc(s->mem, 1, sizeof *d);
  if (!d) return gpupart__fail(GPUPART_ENOMEM, "cuda: out of host memory");
  d->s = s;
  rc = cd.context ? adopt(s, cd.context, d) : retain_primary(s, index, d);
  if (rc == GPUPART_OK) rc = finish_open(d);
  if (rc) return gpupart__cu_close(d), rc;
  *out = d;
  return GPUPART_OK;
}

void gpupart__cu_close(gpupart__cu_device *d) {
  if (!d) return;
  if (d->context && !d->adopted) d->s->cu.primary_ctx_release(d->device);
  gpupart__host_free(d->s->mem, d);
}

int gpupart__cu_info(const gpupart__cu_device *d, gpupart_device_info *out) {
  *out = d->info;
  return GPUPART_OK;
}

int gpupart__cu_mem_info(const gpupart__cu_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
  int rc = gpupart__cu_enter(d, "cuMemGetInfo_v2");
  if (rc) return rc;
  size_t f = 0, t = 0;
  CUresult r = d->s->cu.mem_get_info(&f, &t);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS) return gpupart__cu_fail(d->s, GPUPART_EBACKEND, r, "cuMemGetInfo_v2");
  *free_bytes = f, *total_bytes = t;
  return GPUPART_OK;
}
