/* Shared definitions of the CUDA backend's files: the table of driver entry points that
 * cu_load.c resolves from libcuda at run time (libcuda and cudart are never linked), the
 * loaded driver (the backend state), and an opened device. The backend's logic lives in
 * functions of these shapes, independent of the layout of core/base/backend.h's table, which
 * cu_ops.c alone fills. Only files under backends/cuda/ include this. */
#ifndef GPUPART_BACKENDS_CUDA_INTERNAL_H
#define GPUPART_BACKENDS_CUDA_INTERNAL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "extstruct.h"
#include "hostmem.h"

/* X(field, query name, pinned CUDA version, exported name, required, parameters).
 * The query name and pinned version are what cuGetProcAddress_v2 is asked for: the
 * version pins the ABI this file calls (cuMemAlloc at 3020 is the 64-bit cuMemAlloc_v2,
 * not the 32-bit original). The exported name is the dlsym fallback: always the
 * versioned symbol where the driver has one, because cuda.h renames the unversioned names
 * by macro and dlsym("cuMemAlloc") would find the old 32-bit entry point. The query names
 * are string literals so that cuda.h's macros never rewrite them. */
#define GPUPART__CU_ENTRIES(X)                                                                                    \
  X(init, "cuInit", 2000, "cuInit", 1, (unsigned int))                                                            \
  X(get_error_name, "cuGetErrorName", 6000, "cuGetErrorName", 0, (CUresult, const char **))                       \
  X(device_get_count, "cuDeviceGetCount", 2000, "cuDeviceGetCount", 1, (int *))                                   \
  X(device_get, "cuDeviceGet", 2000, "cuDeviceGet", 1, (CUdevice *, int))                                         \
  X(device_get_name, "cuDeviceGetName", 2000, "cuDeviceGetName", 1, (char *, int, CUdevice))                      \
  X(device_get_uuid, "cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", 0, (CUuuid *, CUdevice))                     \
  X(device_get_pci_bus_id, "cuDeviceGetPCIBusId", 4010, "cuDeviceGetPCIBusId", 0, (char *, int, CUdevice))        \
  X(device_total_mem, "cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", 1, (size_t *, CUdevice))                   \
  X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", 1, (CUcontext *, CUdevice)) \
  X(primary_ctx_release, "cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", 1, (CUdevice))       \
  X(ctx_push, "cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2", 1, (CUcontext))                                    \
  X(ctx_pop, "cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2", 1, (CUcontext *))                                     \
  X(ctx_get_device, "cuCtxGetDevice", 2000, "cuCtxGetDevice", 1, (CUdevice *))                                    \
  X(mem_get_info, "cuMemGetInfo", 3020, "cuMemGetInfo_v2", 1, (size_t *, size_t *))                               \
  X(mem_alloc, "cuMemAlloc", 3020, "cuMemAlloc_v2", 1, (CUdeviceptr *, size_t))                                   \
  X(mem_free, "cuMemFree", 3020, "cuMemFree_v2", 1, (CUdeviceptr))                                                \
  X(device_get_attribute, "cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", 0,                                \
    (int *, CUdevice_attribute, CUdevice))                                                                        \
  X(ctx_synchronize, "cuCtxSynchronize", 2000, "cuCtxSynchronize", 0, (void))                                     \
  X(mem_address_reserve, "cuMemAddressReserve", 10020, "cuMemAddressReserve", 0,                                  \
    (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                                             \
  X(mem_address_free, "cuMemAddressFree", 10020, "cuMemAddressFree", 0, (CUdeviceptr, size_t))                    \
  X(mem_create, "cuMemCreate", 10020, "cuMemCreate", 0,                                                           \
    (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))                    \
  X(mem_release, "cuMemRelease", 10020, "cuMemRelease", 0, (CUmemGenericAllocationHandle))                        \
  X(mem_map, "cuMemMap", 10020, "cuMemMap", 0,                                                                    \
    (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))                              \
  X(mem_unmap, "cuMemUnmap", 10020, "cuMemUnmap", 0, (CUdeviceptr, size_t))                                       \
  X(mem_set_access, "cuMemSetAccess", 10020, "cuMemSetAccess", 0,                                                 \
    (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                                                       \
  X(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", 0,   \
    (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))

typedef struct gpupart__cu_api {
#define GPUPART__CU_FIELD(field, query, version, exported, required, params) CUresult(*field) params;
  GPUPART__CU_ENTRIES(GPUPART__CU_FIELD)
#undef GPUPART__CU_FIELD
} gpupart__cu_api;

/* The loaded driver: what load returns as the backend state. Immutable after load. */
typedef struct gpupart__cu_state {
  const gpupart__hostmem *mem; /* every host allocation of the backend */
  void *library;               /* dlopen handle */
  gpupart__cu_api cu;
  int driver_version; /* cuDriverGetVersion: 1000 * major + 10 * minor; 0 when unknown */
  int no_device;      /* cuInit said CUDA_ERROR_NO_DEVICE: zero devices */
  int proc_lookups;   /* entry points cuGetProcAddress_v2 gave (the rest came from dlsym) */
  char path[256];     /* the library that was loaded, for messages */
} gpupart__cu_state;

/* One opened device (what open returns). Immutable after open, so calls made with it
 * need no lock: the driver is thread-safe and the current-context stack is per thread. */
typedef struct gpupart__cu_device {
  const gpupart__cu_state *s;
  CUdevice device;
  CUcontext context; /* the retained primary context, or the adopted one */
  int adopted;
  char pci_bus_id[32]; /* "0000:01:00.0", or "" where the driver cannot tell */
  gpupart_device_info info;
} gpupart__cu_device;

#define GPUPART__CU_ALIGNMENT 256u /* cuMemAlloc returns addresses aligned to at least 256 */

/* cu_load.c */
int gpupart__cu_load(const gpupart__hostmem *mem, const char *library, gpupart__cu_state **out);
void gpupart__cu_unload(gpupart__cu_state *s);
/* The driver's name of r ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUDA error" where unknown. */
const char *gpupart__cu_error_name(const gpupart__cu_state *s, CUresult r);
/* Sets the thread's message "cuda: WHAT failed: NAME (N)" and returns code. The one
 * place a driver code becomes a gpupart failure (with Core 0.2: gpupart__fail_native). */
int gpupart__cu_fail(const gpupart__cu_state *s, int code, CUresult r, const char *what);

/* cu_device.c */
int gpupart__cu_enumerate(gpupart__cu_state *s, gpupart_device_info *out, uint32_t *count);
/* desc: a gpupart_cuda_desc of desc_size bytes (as its caller compiled it), or NULL. */
int gpupart__cu_open(gpupart__cu_state *s, uint32_t index, const void *desc, size_t desc_size,
                     gpupart__cu_device **out);
void gpupart__cu_close(gpupart__cu_device *d);
int gpupart__cu_info(const gpupart__cu_device *d, gpupart_device_info *out);
int gpupart__cu_mem_info(const gpupart__cu_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
/* Makes d's context current on this thread (pushed above the caller's); what names the
 * call for the message. Every driver call on d sits between enter and leave. */
int gpupart__cu_enter(const gpupart__cu_device *d, const char *what);
/* Pops what enter pushed, so the caller's current context is current again. */
void gpupart__cu_leave(const gpupart__cu_device *d);

/* cu_memory.c */
int gpupart__cu_block_alloc(gpupart__cu_device *d, uint64_t size, gpupart_block *out);
void gpupart__cu_block_free(gpupart__cu_device *d, gpupart_block *block);

/* cu_vm.c: virtual memory (expandable partitions; core/base/backend.h's vm_* entries) */
int gpupart__cu_vm_granule(gpupart__cu_device *d, uint64_t *granule);
int gpupart__cu_vm_reserve(gpupart__cu_device *d, uint64_t size, gpupart_block *out);
void gpupart__cu_vm_unreserve(gpupart__cu_device *d, gpupart_block *range);
int gpupart__cu_vm_map(gpupart__cu_device *d, gpupart_block *range, uint64_t offset, uint64_t size, void **handle);
void gpupart__cu_vm_unmap(gpupart__cu_device *d, gpupart_block *range, uint64_t offset, uint64_t size, void *handle);

#endif
