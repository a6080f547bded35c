/* The preload's metering of the driver's virtual memory calls, which PyTorch's expandable
 * segments, NCCL >= 2.19 and XLA use instead of cuMemAlloc:
 *  - cuMemCreate is accounted on the partition of the device it names (prop->location),
 *    before the driver is called; a refusal is CUDA_ERROR_OUT_OF_MEMORY with no driver
 *    call, as for cuMemAlloc_v2;
 *  - the physical allocation is given back when the driver frees it: when its references
 *    (cuMemCreate +1, cuMemRetainAllocationHandle +1, cuMemRelease -1) and its mappings
 *    (cuMemMap +1, cuMemUnmap -1) are both 0, so a handle mapped in several places, or
 *    released while still mapped, counts once and until the memory is really gone;
 *  - imports (cuMemImportFromShareableHandle) are never charged: the exporting process's
 *    cuMemCreate was. docs/unmodified.md lists what this under-counts (an exporter that
 *    releases its handle while an importer still maps the memory; memory located on the
 *    host, which no device partition holds).
 * The records are a small table under one lock: each physical allocation, and each
 * mapping (address, size) with the allocation it maps. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cu_preload.h"

#define REAL(entry, type) ((type)gpupart__cu_real(entry))

typedef struct phys {
  CUmemGenericAllocationHandle handle;
  gpupart_charge *a;
  int64_t refs, maps;
} phys;

typedef struct mapping {
  CUdeviceptr at;
  size_t size;
  CUmemGenericAllocationHandle handle;
} mapping;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static phys *physs;
static mapping *maps;
static size_t nphys, cap_phys, nmaps, cap_maps;

/* Lock held: room for one more of a table. */
static int grow(void **table, size_t n, size_t *cap, size_t each) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  void *t = realloc(*table, c * each);
  if (!t) return -1;
  *table = t;
  *cap = c;
  return 0;
}

/* Lock held. */
static phys *phys_of(CUmemGenericAllocationHandle h) {
  for (size_t i = 0; i < nphys; i++)
    if (physs[i].handle == h) return &physs[i];
  return NULL;
}

/* Lock held: removes p when the driver has freed its memory; returns what to give back. */
static gpupart_charge *settled(phys *p) {
  if (!p || p->refs > 0 || p->maps > 0) return NULL;
  gpupart_charge *a = p->a;
  *p = physs[--nphys];
  return a;
}

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);

/* Records the new allocation; where there is no host memory for the record, it stays
 * unaccounted (given back now) rather than failing the program's call. */
static void note_created(CUmemGenericAllocationHandle h, gpupart_charge *a) {
  pthread_mutex_lock(&lock);
  int ok = grow((void **)&physs, nphys, &cap_phys, sizeof *physs) == 0;
  if (ok) physs[nphys++] = (phys){.handle = h, .a = a, .refs = 1};
  pthread_mutex_unlock(&lock);
  if (!ok) gpupart__cu_unaccount(a);
}

GPUPART_CU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                       const CUmemAllocationProp *prop, unsigned long long flags) {
  create_fn real = REAL(CU_MEM_CREATE, create_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  gpupart_charge *a = NULL;
  int on_device = handle && prop && size && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  if (on_device && gpupart__cu_account_on(prop->location.id, size, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(handle, size, prop, flags);
  if (r != CUDA_SUCCESS) gpupart__cu_unaccount(a);
  else if (a) note_created(*handle, a);
  return r;
}

GPUPART_CU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  release_fn real = REAL(CU_MEM_RELEASE, release_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(handle);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&lock);
  phys *p = phys_of(handle);
  if (p) p->refs--;
  gpupart_charge *gone = settled(p);
  pthread_mutex_unlock(&lock);
  gpupart__cu_unaccount(gone);
  return r;
}

GPUPART_CU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  retain_fn real = REAL(CU_MEM_RETAIN, retain_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(handle, addr);
  if (r != CUDA_SUCCESS || !handle) return r;
  pthread_mutex_lock(&lock);
  phys *p = phys_of(*handle);
  if (p) p->refs++;
  pthread_mutex_unlock(&lock);
  return r;
}

GPUPART_CU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                    unsigned long long flags) {
  map_fn real = REAL(CU_MEM_MAP, map_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(ptr, size, offset, handle, flags);
  if (r != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&lock);
  phys *p = phys_of(handle);
  if (p && grow((void **)&maps, nmaps, &cap_maps, sizeof *maps) == 0) {
    maps[nmaps++] = (mapping){ptr, size, handle};
    p->maps++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* Lock held: drops the mappings inside [ptr, ptr + size); returns one allocation the
 * driver freed with them (the caller loops while there are more). */
static gpupart_charge *unmapped(CUdeviceptr ptr, size_t size) {
  for (size_t i = 0; i < nmaps; i++) {
    if (maps[i].at < ptr || maps[i].at - ptr >= size) continue;
    phys *p = phys_of(maps[i].handle);
    maps[i] = maps[--nmaps];
    if (p) p->maps--;
    gpupart_charge *gone = settled(p);
    if (gone) return gone;
    i--; /* the entry moved into slot i is looked at next (wraps to 0 from 0 - 1) */
  }
  return NULL;
}

GPUPART_CU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  unmap_fn real = REAL(CU_MEM_UNMAP, unmap_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(ptr, size);
  if (r != CUDA_SUCCESS) return r;
  gpupart_charge *gone;
  do {
    pthread_mutex_lock(&lock);
    gone = unmapped(ptr, size);
    pthread_mutex_unlock(&lock);
    gpupart__cu_unaccount(gone);
  } while (gone);
  return r;
}

void gpupart__cu_vmm_forget(void) {
  pthread_mutex_init(&lock, NULL);
  physs = NULL;
  maps = NULL;
  nphys = 0;
  nmaps = 0;
  cap_phys = 0;
  cap_maps = 0;
}
