/* A TEST DOUBLE of the CUDA driver (libcuda), built as libcuda_double.so (and, with
 * CUDA_DOUBLE_OLD, as libcuda_double_old.so, a driver of CUDA 10.2's vintage): the tests
 * point GPUPART_CUDA_LIBRARY at it so the CUDA backend, the conformance suite and the
 * benchmark's cuda target run with no GPU and no driver. It is written from the CUDA
 * driver API reference, not from the backend, and keeps the rules the backend must get
 * right:
 *  - the exported names are the real driver's: the _v2 (ABI-versioned) names where the
 *    driver has them; the unversioned names of those (cuMemAlloc, cuMemFree, ...) exist
 *    too, as in the real driver, but here they only count a legacy call and fail, so a
 *    caller that dlsyms an unversioned name is caught;
 *  - cuGetProcAddress_v2 resolves a base name at a CUDA version to the variant of that
 *    version (cuMemAlloc at 3020 is cuMemAlloc_v2), refuses versions below a symbol's
 *    introduction, and hides symbols newer than the driver;
 *  - cuInit before anything else; calls that need a context fail with
 *    CUDA_ERROR_INVALID_CONTEXT when none is current; the current-context stack is per
 *    thread (cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2); a primary context has a reference
 *    count (cuDevicePrimaryCtxRetain / Release_v2) and its memory is freed when it drops
 *    to 0; a destroyed context's handle stays invalid;
 *  - cuMemAlloc_v2 hands out host memory (mmap'd, so untouched pages cost nothing): the
 *    "device addresses" are host pointers, aligned to at least 256 bytes; cuMemcpy*_v2
 *    check that the range lies inside one live allocation (or in mapped virtual memory
 *    the context's device may access: cuda_double_vmm.c serves the virtual memory
 *    management calls, cuda_double_vmm.h says how).
 * Failure injection and counters: see cuda_double.h. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_double.h"
#include "cuda_double_internal.h"

#define MAX_CONTEXTS 256
#define MAX_ALLOCS 16384
#define STACK_DEPTH 64
#define CTX_MAGIC 0x43554458u

#ifdef CUDA_DOUBLE_OLD
#define DEFAULT_DRIVER_VERSION 10020
#else
#define DEFAULT_DRIVER_VERSION 13000
#endif

struct CUctx_st {
  uint32_t magic;
  int device;
  int alive;
  int primary;
};

typedef struct alloc_rec {
  uintptr_t base;
  size_t size, mapped;
  struct CUctx_st *ctx;
} alloc_rec;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st contexts[MAX_CONTEXTS]; /* never reused, so a dead handle stays dead */
static int ncontexts;
static struct CUctx_st primaries[CUDA_DOUBLE_MAX_DEVICES];
static alloc_rec allocs[MAX_ALLOCS];
static int nallocs;
static uint64_t used[CUDA_DOUBLE_MAX_DEVICES];
static int initialized;
static cuda_double_counters stats;

static _Thread_local struct CUctx_st *stack[STACK_DEPTH];
static _Thread_local int depth;

cuda_double_counters *cuda_double_stats(void);
cuda_double_counters *cuda_double_stats(void) { return &stats; }

/* ---- knobs --------------------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static int device_count(void) {
  uint64_t n = env_u64("GPUPART_TEST_CUDA_DEVICES", 1);
  return n > CUDA_DOUBLE_MAX_DEVICES ? CUDA_DOUBLE_MAX_DEVICES : (int)n;
}

static uint64_t device_total(void) { return env_u64("GPUPART_TEST_CUDA_TOTAL", 4ull << 30); }
static int driver_version(void) { return (int)env_u64("GPUPART_TEST_CUDA_DRIVER_VERSION", DEFAULT_DRIVER_VERSION); }

/* ---- contexts ------------------------------------------------------------------------ */

static int is_context(const struct CUctx_st *c) {
  if (!c) return 0;
  for (int i = 0; i < CUDA_DOUBLE_MAX_DEVICES; i++)
    if (c == &primaries[i]) return 1;
  return c >= contexts && c < contexts + ncontexts && c->magic == CTX_MAGIC;
}

static int valid_context(const struct CUctx_st *c) { return is_context(c) && c->alive; }

/* The current context, or why there is none usable. Call with the lock held. */
static CUresult current(struct CUctx_st **out) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (depth == 0) return stats.no_context_calls++, CUDA_ERROR_INVALID_CONTEXT;
  if (!valid_context(stack[depth - 1])) return stats.bad_context_calls++, CUDA_ERROR_INVALID_CONTEXT;
  *out = stack[depth - 1];
  return CUDA_SUCCESS;
}

static void free_record(int i) {
  alloc_rec *a = &allocs[i];
  munmap((void *)a->base, a->mapped);
  used[a->ctx->device] -= a->size;
  stats.live_allocs--;
  stats.live_bytes -= a->size;
  allocs[i] = allocs[--nallocs];
}

/* A context that goes away takes its memory with it, as in the driver. */
static void release_memory_of(const struct CUctx_st *c) {
  for (int i = nallocs - 1; i >= 0; i--)
    if (allocs[i].ctx == c) free_record(i);
}

static CUresult check_device(CUdevice dev) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return dev >= 0 && dev < device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ---- initialisation, versions, errors ------------------------------------------------ */

CUresult cuInit(unsigned int flags) {
  pthread_mutex_lock(&lock);
  stats.init_calls++;
  CUresult r = (CUresult)env_u64("GPUPART_TEST_CUDA_INIT_ERROR", 0);
  if (flags != 0) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) initialized = 1;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = driver_version();
  return CUDA_SUCCESS;
}

static const struct {
  CUresult code;
  const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult code) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == code) return (int)i;
  return -1;
}

CUresult cuGetErrorName(CUresult error, const char **str) {
  int i = error_index(error);
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  *str = i < 0 ? NULL : errors[i].name;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **str) {
  int i = error_index(error);
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  *str = i < 0 ? NULL : errors[i].text;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- devices ------------------------------------------------------------------------- */

CUresult cuDeviceGetCount(int *count) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_device(ordinal);
  if (r == CUDA_SUCCESS) *device = ordinal;
  return r;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && (!name || len <= 0)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) snprintf(name, (size_t)len, "gpupart CUDA test double %d", dev);
  return r;
}

#ifndef CUDA_DOUBLE_OLD
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !uuid) r = CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; r == CUDA_SUCCESS && i < 16; i++) uuid->bytes[i] = (char)(0xc0 + 16 * dev + i);
  if (r == CUDA_SUCCESS && dev >= 16) uuid->bytes[0] = (char)dev; /* 16 * dev wraps: still one UUID a device */
  return r;
}
#endif

CUresult cuDeviceGetPCIBusId(char *pci, int len, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && (!pci || len <= 0)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) snprintf(pci, (size_t)len, "0000:%02x:00.0", 0x17 + dev);
  return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !bytes) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *bytes = (size_t)device_total();
  return r;
}

/* ---- primary and created contexts ---------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !pctx) r = CUDA_ERROR_INVALID_VALUE;
  if (r) return r;
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = &primaries[dev];
  *c = (struct CUctx_st){CTX_MAGIC, dev, 1, 1};
  stats.primary_refs[dev]++;
  *pctx = c;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

#ifndef CUDA_DOUBLE_OLD
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult r = check_device(dev);
  if (r) return r;
  pthread_mutex_lock(&lock);
  if (stats.primary_refs[dev] == 0) r = CUDA_ERROR_INVALID_CONTEXT;
  else if (--stats.primary_refs[dev] == 0) primaries[dev].alive = 0, release_memory_of(&primaries[dev]);
  pthread_mutex_unlock(&lock);
  return r;
}
#endif

#ifndef CUDA_DOUBLE_OLD
/* Frees the primary context's memory and keeps its reference count (the context stays
 * retained and usable, as the driver's reset leaves it to be made again on next use). */
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult r = check_device(dev);
  if (r) return r;
  pthread_mutex_lock(&lock);
  release_memory_of(&primaries[dev]);
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
#endif

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && (!flags || !active)) r = CUDA_ERROR_INVALID_VALUE;
  if (r) return r;
  pthread_mutex_lock(&lock);
  *flags = 0;
  *active = stats.primary_refs[dev] > 0;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

/* cuCtxCreate_v2 (the real driver still exports it; cuda.h 13 maps cuCtxCreate to _v4,
 * below). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !pctx) r = CUDA_ERROR_INVALID_VALUE;
  if (r) return r;
  pthread_mutex_lock(&lock);
  if (ncontexts == MAX_CONTEXTS || depth == STACK_DEPTH) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) {
    struct CUctx_st *c = &contexts[ncontexts++];
    *c = (struct CUctx_st){CTX_MAGIC, dev, 1, 0};
    stats.created_alive++;
    stack[depth++] = c, stats.push_calls++; /* the new context is pushed */
    *pctx = c;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

#if !defined(CUDA_DOUBLE_OLD) && CUDA_VERSION >= 12050 /* the header that declares both */
/* cuCtxCreate_v3 (CUDA 11.4: execution-affinity parameters) and cuCtxCreate_v4 (CUDA 12.5:
 * a CUctxCreateParams, NULL for none; cuda.h 13 maps cuCtxCreate to it): the double takes
 * no parameters (it has no SMs to partition), as a driver refuses what it cannot honour. */
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev) {
  if (n < 0 || (n > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
  return n ? CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY : cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
  if (params && (params->numExecAffinityParams || params->cigParams)) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxCreate_v2(pctx, flags, dev);
}
#endif

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  pthread_mutex_lock(&lock);
  CUresult r = !initialized                          ? CUDA_ERROR_NOT_INITIALIZED
               : valid_context(ctx) && !ctx->primary ? CUDA_SUCCESS
                                                     : CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS) {
    ctx->alive = 0;
    stats.created_alive--;
    release_memory_of(ctx);
    if (depth && stack[depth - 1] == ctx) depth--, stats.pop_calls++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  pthread_mutex_lock(&lock);
  CUresult r = !initialized ? CUDA_ERROR_NOT_INITIALIZED : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && !valid_context(ctx)) stats.bad_context_calls++, r = CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS && depth == STACK_DEPTH) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) stack[depth++] = ctx, stats.push_calls++;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  pthread_mutex_lock(&lock);
  CUresult r = !initialized ? CUDA_ERROR_NOT_INITIALIZED : depth == 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) {
    struct CUctx_st *c = stack[--depth];
    stats.pop_calls++;
    if (pctx) *pctx = c;
  } else if (depth == 0 && initialized) {
    stats.no_context_calls++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = depth ? stack[depth - 1] : NULL;
  return CUDA_SUCCESS;
}

/* Replaces the top of the stack (pushes onto an empty one); NULL pops it. */
CUresult cuCtxSetCurrent(CUcontext ctx) {
  pthread_mutex_lock(&lock);
  CUresult r = !initialized ? CUDA_ERROR_NOT_INITIALIZED : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && ctx && !valid_context(ctx)) stats.bad_context_calls++, r = CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS && !ctx && depth) depth--;
  else if (r == CUDA_SUCCESS && ctx) stack[depth ? depth - 1 : depth++] = ctx;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  if (r == CUDA_SUCCESS && !device) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *device = c->device;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxSynchronize(void) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- memory -------------------------------------------------------------------------- */

static int find_alloc(uintptr_t p, size_t n) {
  for (int i = 0; i < nallocs; i++)
    if (p >= allocs[i].base && n <= allocs[i].size && p - allocs[i].base <= allocs[i].size - n) return i;
  return -1;
}

/* The injected or natural refusal of the call, or CUDA_SUCCESS. */
static CUresult alloc_refusal(int device, size_t size) {
  uint64_t fail_at = env_u64("GPUPART_TEST_CUDA_FAIL_ALLOC_AT", 0), max_live = env_u64("GPUPART_TEST_CUDA_MAX_LIVE", 0);
  if (fail_at && stats.alloc_calls == fail_at)
    return (CUresult)env_u64("GPUPART_TEST_CUDA_FAIL_ALLOC_CODE", CUDA_ERROR_OUT_OF_MEMORY);
  if (max_live && stats.live_allocs >= max_live) return CUDA_ERROR_OUT_OF_MEMORY;
  if (size > device_total() - used[device] || nallocs == MAX_ALLOCS) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

static CUresult map_block(struct CUctx_st *c, size_t size, CUdeviceptr *dptr) {
  size_t mapped = (size + 4095) & ~(size_t)4095;
  void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  allocs[nallocs++] = (alloc_rec){(uintptr_t)p, size, mapped, c};
  used[c->device] += size;
  stats.live_allocs++;
  stats.live_bytes += size;
  if (stats.live_bytes > stats.peak_bytes) stats.peak_bytes = stats.live_bytes;
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

static CUresult allocate(CUdeviceptr *dptr, size_t bytesize) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  if (r == CUDA_SUCCESS && (!dptr || bytesize == 0)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    stats.alloc_calls++;
    r = alloc_refusal(c->device, bytesize);
    if (r == CUDA_SUCCESS) r = map_block(c, bytesize, dptr);
    if (r != CUDA_SUCCESS) stats.alloc_failures++;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return allocate(dptr, bytesize); }

/* The other allocation calls, for the preload library's tests: the pitch is the width
 * rounded up to 512 bytes; managed, stream-ordered and pool memory is device memory here
 * (the streams are not checked: the work is done when the call returns). */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
  if (!pitch || (elem != 4 && elem != 8 && elem != 16)) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~(size_t)511;
  return allocate(dptr, *pitch * height);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  return flags == CU_MEM_ATTACH_GLOBAL || flags == CU_MEM_ATTACH_HOST ? allocate(dptr, bytesize)
                                                                      : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  return (void)stream, allocate(dptr, bytesize);
}

static int default_pools[CUDA_DOUBLE_MAX_DEVICES]; /* their addresses are the pools' handles */

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r == CUDA_SUCCESS && !pool) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *pool = (CUmemoryPool)(void *)&default_pools[dev];
  return r;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  void *p = (void *)pool;
  (void)stream;
  if (p < (void *)default_pools || p >= (void *)(default_pools + CUDA_DOUBLE_MAX_DEVICES))
    return CUDA_ERROR_INVALID_VALUE;
  return allocate(dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  int i = r == CUDA_SUCCESS ? find_alloc((uintptr_t)dptr, 1) : -1;
  if (r == CUDA_SUCCESS && (i < 0 || allocs[i].base != (uintptr_t)dptr)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) stats.free_calls++, free_record(i);
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) { return (void)stream, cuMemFree_v2(dptr); }

/* The per-thread default stream variants, which cuGetProcAddress_v2 answers where the
 * caller asks for them (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): the same work,
 * counted apart (cuda_double_ptsz_calls), so a caller that calls the variant it did not
 * ask for is caught. */
static uint64_t ptsz_calls;
uint64_t cuda_double_ptsz_calls(void);
uint64_t cuda_double_ptsz_calls(void) { return ptsz_calls; }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
  return __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED), cuMemAllocAsync(dptr, bytesize, stream);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  return __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED), cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return __atomic_add_fetch(&ptsz_calls, 1, __ATOMIC_RELAXED), cuMemFreeAsync(dptr, stream);
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  if (r == CUDA_SUCCESS && (!free_bytes || !total_bytes)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    *total_bytes = (size_t)device_total(), *free_bytes = (size_t)(device_total() - used[c->device]);
  pthread_mutex_unlock(&lock);
  return r;
}

/* Whether the context's device may touch [p, p + n): in one cuMemAlloc allocation, or in
 * mapped virtual memory it has access to (write: read-write access). Lock held. */
static int device_range_ok(const struct CUctx_st *c, uintptr_t p, size_t n, int write) {
  if (n == 0) n = 1;
  return find_alloc(p, n) >= 0 || cuda_double__vmm_accessible(p, n, c->device, write);
}

static CUresult copy(void *dst, const void *src, uintptr_t device_side, size_t n, int write) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  if (r == CUDA_SUCCESS && (!device_range_ok(c, device_side, n, write) || !dst || !src)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) memcpy(dst, src, n);
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  return copy((void *)(uintptr_t)dst, src, (uintptr_t)dst, n, 1);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  return copy(dst, (const void *)(uintptr_t)src, (uintptr_t)src, n, 0);
}

/* Sets n bytes of device memory to value (the work is done when the call returns). */
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  pthread_mutex_lock(&lock);
  struct CUctx_st *c = NULL;
  CUresult r = current(&c);
  if (r == CUDA_SUCCESS && !device_range_ok(c, (uintptr_t)dst, n, 1)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) memset((void *)(uintptr_t)dst, value, n);
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- the unversioned entry points: present in the real driver with the old ABI ------- */

static CUresult legacy(void) {
  pthread_mutex_lock(&lock);
  stats.legacy_calls++;
  pthread_mutex_unlock(&lock);
  return CUDA_ERROR_NOT_SUPPORTED;
}

#undef cuMemAlloc
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDeviceGetUuid
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult cuMemFree(unsigned int dptr);
CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes);
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize) { return (void)dptr, (void)bytesize, legacy(); }
CUresult cuMemFree(unsigned int dptr) { return (void)dptr, legacy(); }
CUresult cuMemGetInfo(unsigned int *f, unsigned int *t) { return (void)f, (void)t, legacy(); }
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) { return (void)bytes, (void)dev, legacy(); }
CUresult cuCtxPushCurrent(CUcontext ctx) { return (void)ctx, legacy(); }
CUresult cuCtxPopCurrent(CUcontext *pctx) { return (void)pctx, legacy(); }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return (void)dev, legacy(); }
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return (void)uuid, (void)dev, legacy(); }

/* ---- cuGetProcAddress_v2 (CUDA 12.0) ------------------------------------------------- */

#ifndef CUDA_DOUBLE_OLD
typedef void (*any_fn)(void);

/* Each variant of a base name, oldest first, with the CUDA version that introduced it
 * (cuda_double__vmm_symbols() has the virtual memory management calls'). */
/* A list of macro calls, which clang-format cannot lay out: */
/* clang-format off */
static const cuda_double_symbol symbols[] = {
#define SYM(name, since, fn) {name, since, (any_fn)fn},
    SYM("cuInit", 2000, cuInit) SYM("cuDriverGetVersion", 2020, cuDriverGetVersion)
    SYM("cuGetErrorName", 6000, cuGetErrorName) SYM("cuGetErrorString", 6000, cuGetErrorString)
    SYM("cuDeviceGetCount", 2000, cuDeviceGetCount) SYM("cuDeviceGet", 2000, cuDeviceGet)
    SYM("cuDeviceGetName", 2000, cuDeviceGetName) SYM("cuDeviceGetUuid", 9020, cuDeviceGetUuid)
    SYM("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2) SYM("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId)
    SYM("cuDeviceTotalMem", 2000, cuDeviceTotalMem) SYM("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2)
    SYM("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain)
    SYM("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease)
    SYM("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2)
    SYM("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2)
    SYM("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState)
    SYM("cuCtxCreate", 3020, cuCtxCreate_v2)
#if CUDA_VERSION >= 12050
    SYM("cuCtxCreate", 11040, cuCtxCreate_v3) SYM("cuCtxCreate", 12050, cuCtxCreate_v4)
#endif
    SYM("cuCtxDestroy", 4000, cuCtxDestroy_v2)
    SYM("cuCtxPushCurrent", 2000, cuCtxPushCurrent) SYM("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2)
    SYM("cuCtxPopCurrent", 2000, cuCtxPopCurrent) SYM("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2)
    SYM("cuCtxGetCurrent", 4000, cuCtxGetCurrent) SYM("cuCtxSetCurrent", 4000, cuCtxSetCurrent)
    SYM("cuCtxGetDevice", 2000, cuCtxGetDevice) SYM("cuCtxSynchronize", 2000, cuCtxSynchronize)
    SYM("cuMemGetInfo", 2000, cuMemGetInfo) SYM("cuMemGetInfo", 3020, cuMemGetInfo_v2)
    SYM("cuMemAlloc", 2000, cuMemAlloc) SYM("cuMemAlloc", 3020, cuMemAlloc_v2)
    SYM("cuMemFree", 2000, cuMemFree) SYM("cuMemFree", 3020, cuMemFree_v2)
    SYM("cuMemAllocPitch", 3020, cuMemAllocPitch_v2) SYM("cuMemAllocManaged", 6000, cuMemAllocManaged)
    SYM("cuMemAllocAsync", 11020, cuMemAllocAsync) SYM("cuMemFreeAsync", 11020, cuMemFreeAsync)
    SYM("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync)
    SYM("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool)
    SYM("cuMemAllocAsync_ptsz", 11020, cuMemAllocAsync_ptsz) SYM("cuMemFreeAsync_ptsz", 11020, cuMemFreeAsync_ptsz)
    SYM("cuMemAllocFromPoolAsync_ptsz", 11020, cuMemAllocFromPoolAsync_ptsz)
    SYM("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2) SYM("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2)
    SYM("cuMemsetD8", 3020, cuMemsetD8_v2)
#undef SYM
};
/* clang-format on */

/* Scans one table for lookup(): known is set when a variant the driver offers exists,
 * best to the newest one at or before limit. */
static void scan(const cuda_double_symbol *table, size_t n, const char *name, int limit, int *known, any_fn *best) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(table[i].name, name) || table[i].since > driver_version()) continue;
    *known = 1;
    if (table[i].since <= limit) *best = table[i].fn;
  }
}

/* The newest variant of name introduced at or before min(version, the driver's). */
static CUresult lookup(const char *name, int version, void **pfn, CUdriverProcAddressQueryResult *status) {
  int known = 0, limit = version < driver_version() ? version : driver_version();
  any_fn best = NULL;
  size_t nvmm = 0;
  const cuda_double_symbol *vmm = cuda_double__vmm_symbols(&nvmm);
  scan(symbols, sizeof symbols / sizeof symbols[0], name, limit, &known, &best);
  scan(vmm, nvmm, name, limit, &known, &best);
  if (status)
    *status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
              : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  memcpy(pfn, &best, sizeof best);
  return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  const char *mode = getenv("GPUPART_TEST_CUDA_PROC");
  pthread_mutex_lock(&lock);
  stats.proc_queries++;
  CUresult r = CUDA_SUCCESS;
  *pfn = NULL;
  if (mode && strcmp(mode, "null") == 0) {
    stats.proc_null_returns++;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  } else if (mode && strcmp(mode, "fail") == 0) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    r = CUDA_ERROR_NOT_FOUND;
  } else {
    char ptsz[128];
    snprintf(ptsz, sizeof ptsz, "%s_ptsz", symbol);
    r = CUDA_ERROR_NOT_FOUND;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) r = lookup(ptsz, version, pfn, status);
    if (r != CUDA_SUCCESS) r = lookup(symbol, version, pfn, status);
  }
  if (r != CUDA_SUCCESS) stats.proc_refusals++;
  pthread_mutex_unlock(&lock);
  return r;
}
#endif

/* ---- what cuda_double_vmm.c shares (cuda_double_internal.h) -------------------------- */

void cuda_double__lock(void) { pthread_mutex_lock(&lock); }
void cuda_double__unlock(void) { pthread_mutex_unlock(&lock); }
uint64_t cuda_double__env(const char *name, uint64_t dflt) { return env_u64(name, dflt); }
CUresult cuda_double__check_device(CUdevice dev) { return check_device(dev); }
int cuda_double__initialized(void) { return initialized; }

int cuda_double__current_device(void) {
  if (!initialized || depth == 0 || !valid_context(stack[depth - 1])) return -1;
  return stack[depth - 1]->device;
}

CUresult cuda_double__charge(int device, uint64_t size) {
  if (used[device] > device_total() || size > device_total() - used[device]) return CUDA_ERROR_OUT_OF_MEMORY;
  used[device] += size;
  return CUDA_SUCCESS;
}

void cuda_double__uncharge(int device, uint64_t size) { used[device] -= size; }
