/* The CUDA preload library's hooks (cu_preload.h): each allocation of the driver API is
 * first a charge of the same size on the mirror partition of the current context's
 * device (interpose/common/account.h); a refusal there is the program's
 * CUDA_ERROR_OUT_OF_MEMORY and the driver is not called. The pointer the driver returns
 * is mapped to that charge (handle_map.h, a record tagged as a charge; in arena mode the
 * map also holds the arena's served allocations, tagged so) and its free gives it back. cuMemGetInfo_v2
 * and cuDeviceTotalMem_v2 report the partition's limit as the device's size.
 *  - cuMemAllocPitch_v2 accounts pitch * height: width * height before the driver is
 *    called (a refusal without the driver; CUDA_ERROR_INVALID_VALUE where the product
 *    overflows 64 bits, which no device holds), then the driver's pitch (its memory is
 *    freed again when the rest is refused);
 *  - a pointer the driver returns that the map still holds was freed unseen (with its
 *    context: cuCtxDestroy, cuDevicePrimaryCtxReset): the old record is given back;
 *  - cuMemAllocManaged is accounted like device memory: managed pages live on the device
 *    while it uses them, and a limit that managed memory escaped would not hold;
 *  - the stream-ordered calls (cuMemAllocAsync, cuMemAllocFromPoolAsync and their _ptsz
 *    variants) are accounted at the call and given back at cuMemFreeAsync's call: what
 *    the program holds, not what the pool keeps reserved.
 *  - in arena mode (GPUPART_PRELOAD_ARENA, cu_arena.h) cuMemAlloc_v2 in a primary context
 *    is served by the device's arena, both free hooks give its pointers back to it, a
 *    refusal of the driver's path first trims it, and cuDevicePrimaryCtxReset_v2 (hooked
 *    for that alone) forgets it.
 * Every hook is thread-safe (the accounting and the map lock inside), and a hook called
 * while this thread is inside gpupart (gpupart__cu_busy) goes straight to the driver. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "account.h"
#include "cu_arena.h"
#include "cu_preload.h"
#include "handle_map.h"

#define CACHED_DEVICES 64 /* ordinals whose partition is kept here; later ones are found again */

#define REAL(entry, type) ((type)gpupart__cu_real(entry))

static _Atomic(gpupart_partition *) partitions[CACHED_DEVICES]; /* by device ordinal */

/* ---- which partition ------------------------------------------------------------- */

typedef CUresult (*total_fn)(size_t *, CUdevice);
typedef CUresult (*device_fn)(CUdevice *);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*name_fn)(char *, int, CUdevice);

int gpupart__cu_device_uuid(CUdevice dev, CUuuid *out) {
  uuid_fn f = REAL(CU_DEVICE_GET_UUID_V2, uuid_fn);
  if (!f) f = REAL(CU_DEVICE_GET_UUID, uuid_fn);
  return f && f(out, dev) == CUDA_SUCCESS ? 0 : -1;
}

/* The one place that names the mirror: key = the device's ordinal, total = its size (what
 * the cuda backend reports, so either may come first), named by the GPU's UUID so that it
 * meets the ledger of gpupart applications on that GPU whatever CUDA_VISIBLE_DEVICES
 * says (a driver that tells no UUID leaves the mirror keyed by ordinal, "sim:..."), and
 * by the driver's name of the GPU, which traces record. */
static gpupart_partition *mirror_of(CUdevice dev) {
  total_fn total = REAL(CU_DEVICE_TOTAL_MEM, total_fn);
  name_fn get_name = REAL(CU_DEVICE_GET_NAME, name_fn);
  size_t bytes = 0;
  CUuuid uuid = {{0}};
  char name[256] = "";
  if (!total || total(&bytes, dev) != CUDA_SUCCESS || bytes == 0) return NULL;
  if (gpupart__cu_device_uuid(dev, &uuid)) memset(&uuid, 0, sizeof uuid);
  if (!get_name || get_name(name, (int)sizeof name - 1, dev) != CUDA_SUCCESS) name[0] = '\0';
  gpupart__ip_device d = {.key = (uint32_t)dev, .total = bytes, .uuid = (const uint8_t *)uuid.bytes, .name = name};
  return gpupart__ip_partition_of(&d);
}

/* The partition of an ordinal past the cache is found again at each call (account.c keeps
 * it, once per device): slower, never unaccounted. */
static gpupart_partition *device_partition(CUdevice dev) {
  if (dev < 0) return NULL;
  if (dev >= CACHED_DEVICES) return mirror_of(dev);
  gpupart_partition *p = atomic_load(&partitions[dev]);
  if (!p && (p = mirror_of(dev))) atomic_store(&partitions[dev], p);
  return p;
}

/* The current context's device, or -1. */
static CUdevice current_device(void) {
  device_fn get = REAL(CU_CTX_GET_DEVICE, device_fn);
  CUdevice dev = -1;
  return get && get(&dev) == CUDA_SUCCESS ? dev : -1;
}

/* ---- accounting ------------------------------------------------------------------ */

/* Accounts size on the current device: CUDA_SUCCESS with *a (NULL: not accounted), or
 * CUDA_ERROR_OUT_OF_MEMORY when the partition or the budget refuses it. In arena mode a
 * refusal first gives the device's arena's empty cached blocks back (the mirror's own OOM
 * sequence does not reach them) and is tried once more where that gave any back. */
static CUresult account(uint64_t size, gpupart_charge **a) { return gpupart__cu_account_on(current_device(), size, a); }

CUresult gpupart__cu_account_on(CUdevice dev, uint64_t size, gpupart_charge **a) {
  *a = NULL;
  if (gpupart__cu_busy) return CUDA_SUCCESS;
  gpupart__cu_busy = 1;
  gpupart_partition *p = dev < 0 ? NULL : device_partition(dev);
  int refused = p && gpupart__ip_account(p, size, a) != 0;
  if (refused && gpupart__cu_arena_wanted() && gpupart__cu_arena_trim(dev))
    refused = gpupart__ip_account(p, size, a) != 0;
  gpupart__cu_busy = 0;
  return refused ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static void unaccount(gpupart_charge *a) { gpupart__cu_unaccount(a); }

void gpupart__cu_unaccount(gpupart_charge *a) {
  if (!a) return;
  gpupart__cu_busy = 1;
  gpupart__ip_unaccount(a);
  gpupart__cu_busy = 0;
}

void gpupart__cu_drop_stale(gpupart__ip_record stale) {
  gpupart__cu_unaccount(gpupart__ip_charge_of(stale)); /* a served one's arena went with its context (cu_arena.h) */
}

/* After the driver's answer r: the pointer is mapped to charge a, or a is given back (the
 * driver failed, or there is no host memory to map it). */
static CUresult settle(CUresult r, const CUdeviceptr *dptr, gpupart_charge *a) {
  gpupart__ip_record stale;
  if (r == CUDA_SUCCESS && a &&
      gpupart__ip_map_set((const void *)(uintptr_t)*dptr, gpupart__ip_charged(a), &stale) == 0) {
    gpupart__cu_drop_stale(stale); /* the driver freed it unseen (with its context): it holds nothing now */
    return r;
  }
  unaccount(a);
  return r;
}

static gpupart__ip_record take(CUdeviceptr p) {
  return p ? gpupart__ip_map_take((const void *)(uintptr_t)p) : (gpupart__ip_record){GPUPART__IP_NONE, {0}};
}

/* After the driver freed p (r): gives a's charge back, or maps it again when the free
 * failed. */
static CUresult given_back(CUresult r, CUdeviceptr p, gpupart__ip_record a) {
  gpupart_charge *c = gpupart__ip_charge_of(a);
  if (r == CUDA_SUCCESS) unaccount(c);
  else if (c && gpupart__ip_map_put((const void *)(uintptr_t)p, a) != 0) unaccount(c);
  return r;
}

/* ---- the allocation hooks -------------------------------------------------------- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

/* Arena mode (cu_arena.h): the current device's arena serves it, where the current
 * context is that device's primary context. */
static gpupart__cu_served from_arena(size_t size, CUdeviceptr *dptr) {
  device_fn get = REAL(CU_CTX_GET_DEVICE, device_fn);
  CUdevice dev = -1;
  if (gpupart__cu_busy || !gpupart__cu_arena_wanted() || !get || get(&dev) != CUDA_SUCCESS) return CU_NOT_SERVED;
  gpupart__cu_busy = 1;
  gpupart_partition *mirror = device_partition(dev);
  gpupart__cu_served s = gpupart__ip_closed(mirror) ? CU_REFUSED : gpupart__cu_arena_alloc(dev, mirror, size, dptr);
  gpupart__cu_busy = 0;
  return s;
}

GPUPART_CU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  alloc_fn real = REAL(CU_MEM_ALLOC, alloc_fn);
  gpupart_charge *a = NULL;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (!dptr || bytesize == 0) return real(dptr, bytesize);
  gpupart__cu_served s = from_arena(bytesize, dptr);
  if (s != CU_NOT_SERVED) return s == CU_SERVED ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  if (account(bytesize, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  return settle(real(dptr, bytesize), dptr, a);
}

/* The pitch the driver chose makes the allocation pitch * height: re-accounted so, and
 * freed again when that is refused (or is more than 64 bits can say). */
static CUresult repitch(CUdeviceptr *dptr, size_t pitch, size_t height, gpupart_charge **a) {
  gpupart_charge *full = NULL;
  uint64_t bytes = 0;
  unaccount(*a);
  *a = NULL;
  if (!__builtin_mul_overflow((uint64_t)pitch, (uint64_t)height, &bytes) && account(bytes, &full) == CUDA_SUCCESS)
    return *a = full, CUDA_SUCCESS;
  free_fn release = REAL(CU_MEM_FREE, free_fn);
  if (release) release(*dptr);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

GPUPART_CU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                              unsigned int element_size) {
  pitch_fn real = REAL(CU_MEM_ALLOC_PITCH, pitch_fn);
  gpupart_charge *a = NULL;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  uint64_t bytes = 0;
  if (!dptr || !pitch || width == 0 || height == 0) return real(dptr, pitch, width, height, element_size);
  if (__builtin_mul_overflow((uint64_t)width, (uint64_t)height, &bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (account(bytes, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(dptr, pitch, width, height, element_size);
  if (r == CUDA_SUCCESS && a && *pitch > width && repitch(dptr, *pitch, height, &a) != CUDA_SUCCESS)
    return CUDA_ERROR_OUT_OF_MEMORY;
  return settle(r, dptr, a);
}

GPUPART_CU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  managed_fn real = REAL(CU_MEM_ALLOC_MANAGED, managed_fn);
  gpupart_charge *a = NULL;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (!dptr || bytesize == 0) return real(dptr, bytesize, flags);
  if (account(bytesize, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  return settle(real(dptr, bytesize, flags), dptr, a);
}

static CUresult alloc_async(gpupart__cu_entry e, CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  async_fn real = REAL(e, async_fn);
  gpupart_charge *a = NULL;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (!dptr || bytesize == 0) return real(dptr, bytesize, stream);
  if (account(bytesize, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  return settle(real(dptr, bytesize, stream), dptr, a);
}

GPUPART_CU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  return alloc_async(CU_MEM_ALLOC_ASYNC, dptr, bytesize, stream);
}

GPUPART_CU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  return alloc_async(CU_MEM_ALLOC_ASYNC_PTSZ, dptr, bytesize, stream);
}

static CUresult alloc_pool(gpupart__cu_entry e, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                           CUstream stream) {
  pool_fn real = REAL(e, pool_fn);
  gpupart_charge *a = NULL;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (!dptr || bytesize == 0) return real(dptr, bytesize, pool, stream);
  if (account(bytesize, &a) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  return settle(real(dptr, bytesize, pool, stream), dptr, a);
}

GPUPART_CU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                   CUstream stream) {
  return alloc_pool(CU_MEM_ALLOC_POOL, dptr, bytesize, pool, stream);
}

GPUPART_CU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                        CUstream stream) {
  return alloc_pool(CU_MEM_ALLOC_POOL_PTSZ, dptr, bytesize, pool, stream);
}

/* ---- the free hooks -------------------------------------------------------------- */

/* Arena mode: whether the free of p (a its record, NULL: none) is the arena's, with its
 * answer in *r. A served pointer goes back to its arena once its context's work is done
 * (so after the work of every stream, which cuMemFreeAsync's order asks for too); a
 * pointer inside an arena block that is no served one (freed twice, or inside an
 * allocation) is CUDA_ERROR_INVALID_VALUE without a driver call, which would free the
 * whole block from under the arena. Every free hook asks, cuMemFreeAsync's included: a
 * program may free cuMemAlloc memory so. */
static int arena_freed(gpupart__ip_record a, CUdeviceptr p, CUresult *r) {
  if (!gpupart__cu_arena_wanted()) return 0;
  if (a.kind == GPUPART__IP_SERVED && gpupart__cu_arena_owns(a.u.served)) {
    gpupart__cu_busy = 1;
    *r = gpupart__cu_arena_free(a.u.served);
    gpupart__cu_busy = 0;
    return 1;
  }
  if (a.kind != GPUPART__IP_NONE || !p || !gpupart__cu_arena_holds(p)) return 0;
  *r = CUDA_ERROR_INVALID_VALUE;
  return 1;
}

GPUPART_CU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  free_fn real = REAL(CU_MEM_FREE, free_fn);
  CUresult r = CUDA_SUCCESS;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  gpupart__ip_record a = take(dptr);
  return arena_freed(a, dptr, &r) ? r : given_back(real(dptr), dptr, a);
}

static CUresult free_async(gpupart__cu_entry e, CUdeviceptr dptr, CUstream stream) {
  free_async_fn real = REAL(e, free_async_fn);
  CUresult r = CUDA_SUCCESS;
  if (!real) return CUDA_ERROR_NOT_FOUND;
  gpupart__ip_record a = take(dptr);
  return arena_freed(a, dptr, &r) ? r : given_back(real(dptr, stream), dptr, a);
}

GPUPART_CU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return free_async(CU_MEM_FREE_ASYNC, dptr, stream);
}

GPUPART_CU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return free_async(CU_MEM_FREE_ASYNC_PTSZ, dptr, stream);
}

/* ---- what the device is said to hold --------------------------------------------- */

typedef CUresult (*info_fn)(size_t *, size_t *);

/* free = what this process could still allocate (the limit less the bytes its own
 * allocations hold and, with a shared ledger, less what the partition's other members
 * hold, and no more than the device budget less what every process holds and less the
 * other partitions' unused guarantees: gpupart_partition_available), never more
 * than the driver's free; total = the limit. This process's bytes are as requested
 * (in_use), not the partition's blocks (reserved, which the growth rounding makes
 * larger), so that without a limit the program sees the driver's own figures. */
static void report(gpupart_partition *p, uint64_t spare, size_t *free_bytes, size_t *total_bytes) {
  uint64_t limit = gpupart__ip_limit(p), left = gpupart__ip_available(p) + spare;
  if (!limit) return;
  if (left < *free_bytes + spare) *free_bytes = (size_t)left;
  else *free_bytes += (size_t)spare;
  *total_bytes = (size_t)limit;
}

GPUPART_CU_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  info_fn real = REAL(CU_MEM_GET_INFO, info_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || gpupart__cu_busy) return r;
  device_fn get = REAL(CU_CTX_GET_DEVICE, device_fn);
  CUdevice dev = -1;
  if (!get || get(&dev) != CUDA_SUCCESS) return r;
  gpupart__cu_busy = 1;
  gpupart_partition *p = device_partition(dev);
  if (gpupart__ip_closed(p)) *free_bytes = 0; /* failing closed: nothing may be allocated */
  else if (p) report(p, gpupart__cu_arena_wanted() ? gpupart__cu_arena_spare(dev) : 0, free_bytes, total_bytes);
  gpupart__cu_busy = 0;
  return r;
}

GPUPART_CU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  total_fn real = REAL(CU_DEVICE_TOTAL_MEM, total_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(bytes, dev);
  if (r != CUDA_SUCCESS || gpupart__cu_busy) return r;
  gpupart__cu_busy = 1;
  gpupart_partition *p = device_partition(dev);
  uint64_t limit = p ? gpupart__ip_limit(p) : 0;
  if (limit) *bytes = (size_t)limit;
  gpupart__cu_busy = 0;
  return r;
}

/* ---- the primary context's reset ------------------------------------------------ */

typedef CUresult (*reset_fn)(CUdevice);

/* cuDevicePrimaryCtxReset_v2 (cudaDeviceReset calls it) frees every allocation of the
 * device's primary context, the arena's blocks among them: in arena mode the arena
 * forgets them with the reset (cu_arena.h), so that it neither serves memory the driver
 * took back nor keeps it accounted. */
GPUPART_CU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  reset_fn real = REAL(CU_PRIMARY_CTX_RESET, reset_fn);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  if (gpupart__cu_busy || !gpupart__cu_arena_wanted()) return real(dev);
  gpupart__cu_busy = 1;
  CUresult r = gpupart__cu_arena_reset(dev, real);
  gpupart__cu_busy = 0;
  return r;
}

/* ---- fork ------------------------------------------------------------------------ */

/* The child keeps nothing of the parent's accounting: its first allocation opens its own
 * mirror and joins the shared ledger as a member of its own. The parent's objects are
 * left as they are (not closed: that would take the parent's share from the ledger). */
static void child_after_fork(void) {
  for (int i = 0; i < CACHED_DEVICES; i++) atomic_store(&partitions[i], NULL);
  gpupart__cu_busy = 0;
  gpupart__ip_forget();
  gpupart__ip_map_forget();
  gpupart__cu_vmm_forget();
  gpupart__cu_arena_forget();
}

__attribute__((constructor)) static void preload_init(void) { pthread_atfork(NULL, NULL, child_after_fork); }
