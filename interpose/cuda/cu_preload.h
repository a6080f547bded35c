/* libgpupart_preload.so, the CUDA preload library: what its two files share.
 * cu_resolve.c finds the driver's real entry points and routes every lookup a program or
 * the CUDA runtime makes (its own exported names, dlsym, cuGetProcAddress) to the hooks;
 * cu_hooks.c is the hooks, which account each allocation on the process's gpupart
 * partition (interpose/common/account.h). docs/unmodified.md says what is intercepted. */
#ifndef GPUPART_INTERPOSE_CU_PRELOAD_H
#define GPUPART_INTERPOSE_CU_PRELOAD_H

#include <cuda.h>
#include <stdint.h>

#include "gpupart.h"
#include "handle_map.h"

#define GPUPART_CU_EXPORT __attribute__((visibility("default")))

/* The entry points the library hooks (up to CU_HOOKED), then those it only calls. */
typedef enum gpupart__cu_entry {
  CU_MEM_ALLOC,
  CU_MEM_ALLOC_PITCH,
  CU_MEM_ALLOC_MANAGED,
  CU_MEM_ALLOC_ASYNC,
  CU_MEM_ALLOC_ASYNC_PTSZ,
  CU_MEM_ALLOC_POOL,
  CU_MEM_ALLOC_POOL_PTSZ,
  CU_MEM_FREE,
  CU_MEM_FREE_ASYNC,
  CU_MEM_FREE_ASYNC_PTSZ,
  CU_MEM_GET_INFO,
  CU_DEVICE_TOTAL_MEM,
  CU_GET_PROC,
  CU_GET_PROC_V2,
  CU_PRIMARY_CTX_RESET,
  CU_MEM_CREATE,
  CU_MEM_RELEASE,
  CU_MEM_RETAIN,
  CU_MEM_MAP,
  CU_MEM_UNMAP,
  CU_HOOKED,
  CU_CTX_GET_DEVICE = CU_HOOKED,
  CU_DEVICE_GET_UUID_V2,
  CU_DEVICE_GET_UUID,
  CU_CTX_GET_CURRENT,
  CU_CTX_PUSH,
  CU_CTX_POP,
  CU_CTX_SYNCHRONIZE,
  CU_DEVICE_GET_NAME,
  CU_ENTRIES
} gpupart__cu_entry;

typedef void (*gpupart__cu_fn)(void);

/* The driver's own function for entry e (never a hook of this library), found once: the
 * one a lookup of the program returned first, else libcuda.so.1's export. NULL where the
 * driver has none (or no libcuda.so.1 is loadable). */
gpupart__cu_fn gpupart__cu_real(gpupart__cu_entry e);

/* The device's UUID (cuDeviceGetUuid_v2, else cuDeviceGetUuid): 0, or -1 where the driver
 * tells none. It names the mirror (cu_hooks.c's mirror_of), so that the preload meets
 * the GPU's own ledger. */
int gpupart__cu_device_uuid(CUdevice dev, CUuuid *out);

/* cu_hooks.c: charges size on device dev's partition (CUDA_SUCCESS with *c, NULL when
 * not accounted; CUDA_ERROR_OUT_OF_MEMORY when refused), and gives it back. */
CUresult gpupart__cu_account_on(CUdevice dev, uint64_t size, gpupart_charge **c);
void gpupart__cu_unaccount(gpupart_charge *c);
/* A record the map held for a pointer the driver hands out again (it freed the old one
 * unseen, with its context): a charge is given back; a served allocation is left alone,
 * as its arena was forgotten with that context (gpupart__cu_arena_reset). */
void gpupart__cu_drop_stale(gpupart__ip_record stale);

/* cu_vmm.c: the virtual memory hooks. In a forked child: forgets the parent's records. */
void gpupart__cu_vmm_forget(void);

/* Set while a hook is inside gpupart (or the driver on gpupart's behalf): the hooks and
 * the routes then pass every call and lookup straight through. */
extern _Thread_local int gpupart__cu_busy;

/* The names cuda.h maps away or declares only under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);

#endif
