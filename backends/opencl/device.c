/* OpenCL devices: enumerating every device of every platform under one global index,
 * describing a device in gpupart's terms (memory, largest allocation, base-address
 * alignment, free memory where AMD's extension tells it), and opening one, either
 * creating its context or adopting the application's (gpupart_opencl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl.h" /* first: it sets CL_TARGET_OPENCL_VERSION */
#include "gpupart_opencl.h"
#include "extstruct.h"

#define CL_PLATFORM_NOT_FOUND -1001 /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no platform */
#define SVM_MAX_ALIGNMENT 128u      /* clSVMAlloc accepts alignments up to sizeof(long16) */

#define ocl_fail gpupart__cl_fail

/* ---- enumeration ------------------------------------------------------------------- */

/* Called for each device in global order; returns 1 to stop. */
typedef int (*visit_fn)(const gpupart__cl_api *cl, cl_platform_id p, cl_device_id d, uint32_t index, void *user);

static int devices_of(const gpupart__cl_api *cl, cl_platform_id p, cl_device_id **out, cl_uint *n) {
  *out = NULL;
  *n = 0;
  cl_int err = cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, n);
  if (err != CL_SUCCESS || *n == 0) return *n = 0, GPUPART_OK; /* none, or a broken ICD: skipped */
  *out = gpupart__host_calloc(cl->mem, *n, sizeof **out);
  if (!*out) return gpupart__fail(GPUPART_ENOMEM, "opencl: out of host memory");
  err = cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, *n, *out, NULL);
  if (err != CL_SUCCESS) gpupart__host_free(cl->mem, *out), *out = NULL, *n = 0;
  return GPUPART_OK;
}

static int platforms(const gpupart__cl_api *cl, cl_platform_id **out, cl_uint *n) {
  *out = NULL;
  *n = 0;
  cl_int err = cl->clGetPlatformIDs(0, NULL, n);
  if (err == CL_PLATFORM_NOT_FOUND || (err == CL_SUCCESS && *n == 0)) return *n = 0, GPUPART_OK;
  if (err != CL_SUCCESS) return ocl_fail(GPUPART_EBACKEND, "clGetPlatformIDs", err);
  *out = gpupart__host_calloc(cl->mem, *n, sizeof **out);
  if (!*out) return gpupart__fail(GPUPART_ENOMEM, "opencl: out of host memory");
  err = cl->clGetPlatformIDs(*n, *out, n);
  if (err != CL_SUCCESS)
    return gpupart__host_free(cl->mem, *out), *out = NULL, ocl_fail(GPUPART_EBACKEND, "clGetPlatformIDs", err);
  return GPUPART_OK;
}

/* Visits every device of every platform; *count receives how many there are (up to the
 * one that stopped the walk). */
static int for_each_device(const gpupart__cl_api *cl, visit_fn fn, void *user, uint32_t *count) {
  cl_platform_id *plats;
  cl_uint np, index = 0;
  int rc = platforms(cl, &plats, &np), stop = 0;
  for (cl_uint p = 0; rc == GPUPART_OK && !stop && p < np; p++) {
    cl_device_id *devs;
    cl_uint nd;
    rc = devices_of(cl, plats[p], &devs, &nd);
    for (cl_uint d = 0; rc == GPUPART_OK && !stop && d < nd; d++, index++)
      stop = fn(cl, plats[p], devs[d], index, user);
    gpupart__host_free(cl->mem, devs);
  }
  gpupart__host_free(cl->mem, plats);
  if (count) *count = index;
  return rc;
}

/* ---- describing a device ----------------------------------------------------------- */

/* What the backend needs to know beyond gpupart_device_info. */
typedef struct caps {
  int version;     /* 100 * major + 10 * minor of CL_DEVICE_VERSION */
  int svm;         /* coarse-grained buffer SVM */
  int host_memory; /* a CPU device */
  int amd_free;    /* cl_amd_device_attribute_query tells the free memory */
} caps;

static char *info_string(const gpupart__cl_api *cl, cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (cl->clGetDeviceInfo(d, what, 0, NULL, &n) != CL_SUCCESS || n == 0) return NULL;
  char *s = gpupart__host_calloc(cl->mem, 1, n + 1);
  if (s && cl->clGetDeviceInfo(d, what, n, s, NULL) != CL_SUCCESS) gpupart__host_free(cl->mem, s), s = NULL;
  return s;
}

static char *platform_name(const gpupart__cl_api *cl, cl_platform_id p) {
  size_t n = 0;
  if (cl->clGetPlatformInfo(p, CL_PLATFORM_NAME, 0, NULL, &n) != CL_SUCCESS || n == 0) return NULL;
  char *s = gpupart__host_calloc(cl->mem, 1, n + 1);
  if (s && cl->clGetPlatformInfo(p, CL_PLATFORM_NAME, n, s, NULL) != CL_SUCCESS)
    gpupart__host_free(cl->mem, s), s = NULL;
  return s;
}

static int has_extension(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

static uint64_t ulong_info(const gpupart__cl_api *cl, cl_device_id d, cl_device_info what) {
  cl_ulong v = 0;
  return cl->clGetDeviceInfo(d, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

/* cl_amd_device_attribute_query: size_t values in KiB, the first being the free memory
 * (AMD's runtime adds the largest free block after it). UINT64_MAX where unknown. */
static uint64_t free_memory(const gpupart__cl_api *cl, cl_device_id d, int amd) {
  size_t kib[4] = {0}, n = 0;
  if (!amd || cl->clGetDeviceInfo(d, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, 0, NULL, &n) != CL_SUCCESS ||
      n < sizeof kib[0] || n > sizeof kib ||
      cl->clGetDeviceInfo(d, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, n, kib, NULL) != CL_SUCCESS)
    return UINT64_MAX;
  return (uint64_t)kib[0] * 1024u;
}

static uint64_t pow2_at_least(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

/* Memory figures: the sub-buffer origin rule makes the base-address alignment (bits)
 * the granule of every offset, so it is the device's min_alignment. */
static void describe_memory(const gpupart__cl_api *cl, cl_device_id d, const char *ext, gpupart_device_info *out,
                            int *amd) {
  cl_uint bits = 0;
  cl->clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
  out->min_alignment = pow2_at_least(bits / 8 ? bits / 8 : 1);
  out->total_bytes = ulong_info(cl, d, CL_DEVICE_GLOBAL_MEM_SIZE);
  uint64_t max = ulong_info(cl, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  if (max > out->total_bytes) max = out->total_bytes;
  out->max_block_bytes = max & ~(out->min_alignment - 1);
  *amd = has_extension(ext, "cl_amd_device_attribute_query");
  out->free_bytes = free_memory(cl, d, *amd);
  if (has_extension(ext, "cl_khr_device_uuid"))
    cl->clGetDeviceInfo(d, CL_DEVICE_UUID_KHR, sizeof out->uuid, out->uuid, NULL);
  out->block_granularity = out->min_alignment; /* a buffer may have any size */
}

/* The PCI address, from cl_khr_pci_bus_info, else AMD's topology query; "" otherwise. */
static void describe_bus(const gpupart__cl_api *cl, cl_device_id d, const char *ext, gpupart_device_info *out) {
  cl_device_pci_bus_info_khr khr;
  cl_device_topology_amd amd;
  if (has_extension(ext, "cl_khr_pci_bus_info") &&
      cl->clGetDeviceInfo(d, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof khr, &khr, NULL) == CL_SUCCESS)
    snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%04x:%02x:%02x.%x", khr.pci_domain & 0xffffu,
             khr.pci_bus & 0xffu, khr.pci_device & 0xffu, khr.pci_function & 0xfu);
  else if (has_extension(ext, "cl_amd_device_attribute_query") &&
           cl->clGetDeviceInfo(d, CL_DEVICE_TOPOLOGY_AMD, sizeof amd, &amd, NULL) == CL_SUCCESS &&
           amd.raw.type == CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD)
    snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "0000:%02x:%02x.%x", (unsigned)(unsigned char)amd.pcie.bus,
             (unsigned)(unsigned char)amd.pcie.device, (unsigned)(unsigned char)amd.pcie.function);
}

static void describe_caps(const gpupart__cl_api *cl, cl_device_id d, caps *c) {
  char *version = info_string(cl, d, CL_DEVICE_VERSION);
  int major = 1, minor = 0;
  if (version) sscanf(version, "OpenCL %d.%d", &major, &minor);
  gpupart__host_free(cl->mem, version);
  c->version = 100 * major + 10 * minor;
  cl_device_type type = 0;
  cl->clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  c->host_memory = (type & CL_DEVICE_TYPE_CPU) != 0;
  cl_device_svm_capabilities svm = 0;
  if (c->version >= 200 && cl->clSVMAlloc && cl->clSVMFree)
    cl->clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL);
  c->svm = (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) != 0;
}

/* The device's name carries its platform's, since one index spans every platform. */
static void describe(const gpupart__cl_api *cl, cl_platform_id p, cl_device_id d, uint32_t index,
                     gpupart_device_info *out, caps *c) {
  memset(out, 0, sizeof *out);
  out->backend = GPUPART_BACKEND_OPENCL;
  out->index = index;
  char *name = info_string(cl, d, CL_DEVICE_NAME), *vendor = info_string(cl, d, CL_DEVICE_VENDOR);
  char *plat = platform_name(cl, p);
  snprintf(out->name, sizeof out->name, "%s (%s)", name ? name : "unnamed device", plat ? plat : "unnamed platform");
  snprintf(out->vendor, sizeof out->vendor, "%s", vendor ? vendor : "");
  gpupart__host_free(cl->mem, name);
  gpupart__host_free(cl->mem, vendor);
  gpupart__host_free(cl->mem, plat);
  char *ext = info_string(cl, d, CL_DEVICE_EXTENSIONS);
  int amd = 0;
  describe_memory(cl, d, ext, out, &amd);
  describe_bus(cl, d, ext, out);
  gpupart__host_free(cl->mem, ext);
  if (c) describe_caps(cl, d, c), c->amd_free = amd;
}

typedef struct list_walk {
  gpupart_device_info *out;
  uint32_t cap;
} list_walk;

static int list_one(const gpupart__cl_api *cl, cl_platform_id p, cl_device_id d, uint32_t index, void *user) {
  list_walk *w = user;
  if (w->out && index < w->cap) describe(cl, p, d, index, &w->out[index], NULL);
  return 0;
}

static int ocl_enumerate(void *state, gpupart_device_info *out, uint32_t *count) {
  const gpupart__cl_state *s = state;
  list_walk w = {out, *count};
  uint32_t n = 0;
  int rc = for_each_device(&s->cl, list_one, &w, &n);
  if (rc == GPUPART_OK) *count = n;
  return rc;
}

/* ---- opening ----------------------------------------------------------------------- */

typedef struct find_walk {
  cl_device_id want; /* find this device's index, or */
  uint32_t index;    /* the device at this index */
  cl_platform_id platform;
  cl_device_id found;
} find_walk;

static int find_one(const gpupart__cl_api *cl, cl_platform_id p, cl_device_id d, uint32_t index, void *user) {
  (void)cl;
  find_walk *w = user;
  if (w->want ? d != w->want : index != w->index) return 0;
  w->platform = p;
  w->found = d;
  w->index = index;
  return 1;
}

static int create_context(const gpupart__cl_state *s, uint32_t index, gpupart__cl_device *d) {
  find_walk w = {NULL, index, NULL, NULL};
  uint32_t n = 0;
  int rc = for_each_device(&s->cl, find_one, &w, &n);
  if (rc) return rc;
  if (!w.found)
    return gpupart__fail(GPUPART_ENODEV, "opencl: no device %u: %s found %u device(s) on all its platforms", index,
                         s->path, n);
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)w.platform, 0};
  cl_int err = CL_SUCCESS;
  d->context = s->cl.clCreateContext(props, 1, &w.found, NULL, NULL, &err);
  if (!d->context) return ocl_fail(GPUPART_EBACKEND, "clCreateContext", err);
  d->platform = w.platform;
  d->device = w.found;
  d->info.index = index;
  s->cl.clRetainDevice(d->device);
  return GPUPART_OK;
}

/* Is device one of context's devices? The answer, or an error for a context the driver
 * does not recognise. */
static int context_has(const gpupart__cl_api *cl, cl_context ctx, cl_device_id device, cl_uint *ndev) {
  size_t bytes = 0;
  cl_int err = cl->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, 0, NULL, &bytes);
  if (err != CL_SUCCESS)
    return gpupart__fail_native(GPUPART_EINVAL, err, "opencl: the adopted context is not a valid cl_context: %s (%d)",
                                gpupart__cl_error_name(err), (int)err);
  cl_device_id *list = gpupart__host_calloc(cl->mem, 1, bytes ? bytes : 1);
  if (!list) return gpupart__fail(GPUPART_ENOMEM, "opencl: out of host memory");
  *ndev = (cl_uint)(bytes / sizeof *list);
  int found = cl->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, bytes, list, NULL) == CL_SUCCESS ? 0 : -1;
  for (cl_uint i = 0; found == 0 && i < *ndev; i++) found = list[i] == device;
  gpupart__host_free(cl->mem, list);
  return found == 1 ? GPUPART_OK
                    : gpupart__fail(GPUPART_EINVAL,
                                    "opencl: the adopted device is not one of the %u device(s) "
                                    "of the adopted context",
                                    *ndev);
}

static int adopt(const gpupart__cl_state *s, const gpupart_opencl_desc *desc, uint32_t index, gpupart__cl_device *d) {
  cl_uint ndev = 0;
  int rc = context_has(&s->cl, desc->context, desc->device, &ndev);
  if (rc) return rc;
  cl_int err = s->cl.clGetDeviceInfo(desc->device, CL_DEVICE_PLATFORM, sizeof d->platform, &d->platform, NULL);
  if (err != CL_SUCCESS) return ocl_fail(GPUPART_EINVAL, "clGetDeviceInfo(adopted device)", err);
  /* A sub-device has no index of its own; it keeps the one the caller gave. */
  find_walk w = {desc->device, index, NULL, NULL};
  if ((rc = for_each_device(&s->cl, find_one, &w, NULL))) return rc;
  d->info.index = w.index;
  d->context = desc->context;
  d->device = desc->device;
  s->cl.clRetainContext(d->context);
  s->cl.clRetainDevice(d->device);
  return GPUPART_OK;
}

static int create_queue(gpupart__cl_device *d, int version) {
  cl_int err = CL_SUCCESS;
  if (version >= 200 && d->cl->clCreateCommandQueueWithProperties)
    d->queue = d->cl->clCreateCommandQueueWithProperties(d->context, d->device, NULL, &err);
  else d->queue = d->cl->clCreateCommandQueue(d->context, d->device, 0, &err);
  return d->queue ? GPUPART_OK : ocl_fail(GPUPART_EBACKEND, "creating the backend's command queue", err);
}

static int finish_open(gpupart__cl_device *d, uint32_t flags) {
  caps c;
  describe(d->cl, d->platform, d->device, d->info.index, &d->info, &c);
  if (d->info.total_bytes == 0 || d->info.max_block_bytes == 0)
    return gpupart__fail(GPUPART_EBACKEND, "opencl: device %u (%s) reports no global memory or allocation size",
                         d->info.index, d->info.name);
  d->svm = c.svm && !(flags & GPUPART_OPENCL_NO_SVM);
  d->host_memory = c.host_memory;
  d->amd_free = c.amd_free;
  d->svm_alignment = d->info.min_alignment <= SVM_MAX_ALIGNMENT ? (cl_uint)d->info.min_alignment : 0;
  return create_queue(d, c.version);
}

static void ocl_close(void *devp) {
  gpupart__cl_device *d = devp;
  if (d->queue) d->cl->clReleaseCommandQueue(d->queue);
  if (d->context) d->cl->clReleaseContext(d->context);
  if (d->device) d->cl->clReleaseDevice(d->device);
  gpupart__host_free(d->cl->mem, d);
}

static int check_desc(const gpupart_opencl_desc *desc) {
  if (desc->flags & ~GPUPART_OPENCL_NO_SVM)
    return gpupart__fail(GPUPART_EINVAL, "opencl: unknown gpupart_opencl_desc flags 0x%x", desc->flags);
  if (!desc->context != !desc->device)
    return gpupart__fail(GPUPART_EINVAL,
                         "opencl: adopting needs both a cl_context and a cl_device_id "
                         "(got context %p, device %p)",
                         (void *)desc->context, (void *)desc->device);
  return GPUPART_OK;
}

/* gpupart_opencl_desc as 0.2 published it, and as this library knows it. */
#define OPENCL_DESC_SIZE_0_2 GPUPART__END(gpupart_opencl_desc, flags)
#define OPENCL_DESC_SIZE sizeof(gpupart_opencl_desc)

static int ocl_open(void *state, uint32_t index, const void *native_desc, size_t native_size, void **out) {
  const gpupart__cl_state *s = state;
  gpupart_opencl_desc desc;
  int rc = gpupart__backend_desc_in(&desc, OPENCL_DESC_SIZE, native_desc, native_size, OPENCL_DESC_SIZE_0_2,
                                    "opencl: gpupart_opencl_desc");
  if (rc == GPUPART_OK) rc = check_desc(&desc);
  if (rc) return rc;
  gpupart__cl_device *d = gpupart__host_calloc(s->cl.mem, 1, sizeof *d);
  if (!d) return gpupart__fail(GPUPART_ENOMEM, "opencl: out of host memory");
  d->cl = &s->cl;
  rc = desc.context ? adopt(s, &desc, index, d) : create_context(s, index, d);
  if (rc == GPUPART_OK) rc = finish_open(d, desc.flags);
  if (rc) return ocl_close(d), rc;
  *out = d;
  return GPUPART_OK;
}

static int ocl_info(void *devp, gpupart_device_info *out) {
  const gpupart__cl_device *d = devp;
  *out = d->info;
  return GPUPART_OK;
}

static int ocl_mem_info(void *devp, uint64_t *free_bytes, uint64_t *total_bytes) {
  const gpupart__cl_device *d = devp;
  *free_bytes = free_memory(d->cl, d->device, d->amd_free);
  *total_bytes = d->info.total_bytes;
  return GPUPART_OK;
}

/* ---- the table ----------------------------------------------------------------------- */

static int ocl_load(const gpupart__backend_env *env, const char *library, void **state) {
  gpupart__cl_state *s = NULL;
  int rc = gpupart__cl_load(env->mem, library, &s);
  if (rc == GPUPART_OK) *state = s;
  return rc;
}

static void ocl_unload(void *state) { gpupart__cl_unload(state); }

const gpupart_backend_ops gpupart__opencl_ops = {
    .abi_version = GPUPART__BACKEND_ABI,
    .struct_size = sizeof(gpupart_backend_ops),
    .name = "opencl",
    .id = GPUPART_BACKEND_OPENCL,
    .caps = GPUPART__CAP_FREE_MEMORY | GPUPART__CAP_DEVICE_ADDRESS | GPUPART__CAP_VIEWS | GPUPART__CAP_IDENTITY,
    .load = ocl_load,
    .unload = ocl_unload,
    .enumerate = ocl_enumerate,
    .open = ocl_open,
    .close = ocl_close,
    .info = ocl_info,
    .mem_info = ocl_mem_info,
    .block_alloc = gpupart__cl_block_alloc,
    .block_free = gpupart__cl_block_free,
    .view_release = gpupart__cl_view_release,
};
