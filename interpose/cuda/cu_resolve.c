/* How the CUDA preload library is reached and how it reaches the driver (cu_preload.h).
 * A program reaches the hooks by three routes:
 *  - its own calls: the library exports the driver's names (cuMemAlloc_v2, ...), and
 *    LD_PRELOAD puts it ahead of libcuda.so.1 for every object that links the driver;
 *  - cuGetProcAddress / cuGetProcAddress_v2 (how the CUDA runtime >= 11.3 finds every
 *    driver function): the driver answers, then a hooked name at a version that selects
 *    the variant hooked here (cuMemAlloc at >= 3020 is cuMemAlloc_v2; the per-thread
 *    stream flag selects the _ptsz variants) is answered with the hook instead;
 *  - dlsym: a loader that opens libcuda.so.1 itself and resolves names there (the CUDA
 *    runtime resolves cuGetProcAddress so; older runtimes every name) is answered with
 *    the hook for a hooked name the driver has. The library defines dlsym; the real one
 *    is glibc's, found with dlvsym(RTLD_NEXT, "dlsym", version) (dlvsym is not hooked, so
 *    this never recurses; the glibc-private _dl_sym route that older interposers use is
 *    gone from glibc 2.34). RTLD_NEXT lookups are answered as glibc would for the caller
 *    (the next object after the caller's that defines the name), since glibc's dlsym,
 *    called from here, would look after this library instead.
 * The driver's real functions are those lookups' answers (the first one seen), else the
 * exports of libcuda.so.1 as dlopen finds it (a handle: the driver's own scope, never
 * this library). */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "cu_preload.h"

_Thread_local int gpupart__cu_busy;

/* Each entry: its exported name, the cuGetProcAddress base name and the CUDA version
 * from which that base name means this variant, and whether it is the per-thread
 * default stream variant (-1: the name has none). */
static const struct {
  const char *name, *base;
  int since, ptsz;
} entries[CU_ENTRIES] = {
    [CU_MEM_ALLOC] = {"cuMemAlloc_v2", "cuMemAlloc", 3020, -1},
    [CU_MEM_ALLOC_PITCH] = {"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, -1},
    [CU_MEM_ALLOC_MANAGED] = {"cuMemAllocManaged", "cuMemAllocManaged", 6000, -1},
    [CU_MEM_ALLOC_ASYNC] = {"cuMemAllocAsync", "cuMemAllocAsync", 11020, 0},
    [CU_MEM_ALLOC_ASYNC_PTSZ] = {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, 1},
    [CU_MEM_ALLOC_POOL] = {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, 0},
    [CU_MEM_ALLOC_POOL_PTSZ] = {"cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 11020, 1},
    [CU_MEM_FREE] = {"cuMemFree_v2", "cuMemFree", 3020, -1},
    [CU_MEM_FREE_ASYNC] = {"cuMemFreeAsync", "cuMemFreeAsync", 11020, 0},
    [CU_MEM_FREE_ASYNC_PTSZ] = {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, 1},
    [CU_MEM_GET_INFO] = {"cuMemGetInfo_v2", "cuMemGetInfo", 3020, -1},
    [CU_DEVICE_TOTAL_MEM] = {"cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, -1},
    [CU_GET_PROC] = {"cuGetProcAddress", "cuGetProcAddress", 11030, -1},
    [CU_GET_PROC_V2] = {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, -1},
    [CU_PRIMARY_CTX_RESET] = {"cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, -1},
    [CU_MEM_CREATE] = {"cuMemCreate", "cuMemCreate", 10020, -1},
    [CU_MEM_RELEASE] = {"cuMemRelease", "cuMemRelease", 10020, -1},
    [CU_MEM_RETAIN] = {"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000, -1},
    [CU_MEM_MAP] = {"cuMemMap", "cuMemMap", 10020, -1},
    [CU_MEM_UNMAP] = {"cuMemUnmap", "cuMemUnmap", 10020, -1},
    [CU_CTX_GET_DEVICE] = {"cuCtxGetDevice", NULL, 0, -1},
    [CU_DEVICE_GET_UUID_V2] = {"cuDeviceGetUuid_v2", NULL, 0, -1},
    [CU_DEVICE_GET_UUID] = {"cuDeviceGetUuid", NULL, 0, -1},
    [CU_CTX_GET_CURRENT] = {"cuCtxGetCurrent", NULL, 0, -1},
    [CU_CTX_PUSH] = {"cuCtxPushCurrent_v2", NULL, 0, -1},
    [CU_CTX_POP] = {"cuCtxPopCurrent_v2", NULL, 0, -1},
    [CU_CTX_SYNCHRONIZE] = {"cuCtxSynchronize", NULL, 0, -1},
    [CU_DEVICE_GET_NAME] = {"cuDeviceGetName", NULL, 0, -1},
};

static const gpupart__cu_fn hooks[CU_HOOKED] = {
    [CU_MEM_ALLOC] = (gpupart__cu_fn)cuMemAlloc_v2,
    [CU_MEM_ALLOC_PITCH] = (gpupart__cu_fn)cuMemAllocPitch_v2,
    [CU_MEM_ALLOC_MANAGED] = (gpupart__cu_fn)cuMemAllocManaged,
    [CU_MEM_ALLOC_ASYNC] = (gpupart__cu_fn)cuMemAllocAsync,
    [CU_MEM_ALLOC_ASYNC_PTSZ] = (gpupart__cu_fn)cuMemAllocAsync_ptsz,
    [CU_MEM_ALLOC_POOL] = (gpupart__cu_fn)cuMemAllocFromPoolAsync,
    [CU_MEM_ALLOC_POOL_PTSZ] = (gpupart__cu_fn)cuMemAllocFromPoolAsync_ptsz,
    [CU_MEM_FREE] = (gpupart__cu_fn)cuMemFree_v2,
    [CU_MEM_FREE_ASYNC] = (gpupart__cu_fn)cuMemFreeAsync,
    [CU_MEM_FREE_ASYNC_PTSZ] = (gpupart__cu_fn)cuMemFreeAsync_ptsz,
    [CU_MEM_GET_INFO] = (gpupart__cu_fn)cuMemGetInfo_v2,
    [CU_DEVICE_TOTAL_MEM] = (gpupart__cu_fn)cuDeviceTotalMem_v2,
    [CU_GET_PROC] = (gpupart__cu_fn)cuGetProcAddress,
    [CU_GET_PROC_V2] = (gpupart__cu_fn)cuGetProcAddress_v2,
    [CU_PRIMARY_CTX_RESET] = (gpupart__cu_fn)cuDevicePrimaryCtxReset_v2,
    [CU_MEM_CREATE] = (gpupart__cu_fn)cuMemCreate,
    [CU_MEM_RELEASE] = (gpupart__cu_fn)cuMemRelease,
    [CU_MEM_RETAIN] = (gpupart__cu_fn)cuMemRetainAllocationHandle,
    [CU_MEM_MAP] = (gpupart__cu_fn)cuMemMap,
    [CU_MEM_UNMAP] = (gpupart__cu_fn)cuMemUnmap,
};

static _Atomic(gpupart__cu_fn) reals[CU_ENTRIES];

static gpupart__cu_fn as_fn(void *p) {
  gpupart__cu_fn f;
  memcpy(&f, &p, sizeof f);
  return f;
}

static int is_hook(gpupart__cu_fn f) {
  for (int i = 0; i < CU_HOOKED; i++)
    if (hooks[i] == f) return 1;
  return 0;
}

/* ---- glibc's dlsym --------------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);

/* dlsym can be called before any of this library has run: a sanitizer's runtime resolves
 * its interceptors' targets with dlsym(RTLD_NEXT) while it initialises, from a constructor
 * of a library loaded after this one. Until this library's constructor has run, dlsym
 * answers RTLD_NEXT relative to this library (right for the objects loaded before it,
 * the only ones whose code runs by then apart from such runtimes), and the functions on
 * that path are never instrumented (no shadow memory exists yet). */
#define EARLY __attribute__((no_sanitize("address", "undefined")))
static atomic_int ready;

__attribute__((constructor)) static void routes_ready(void) { atomic_store(&ready, 1); }

EARLY static dlsym_fn real_dlsym(void) {
  static _Atomic(dlsym_fn) found;
  static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
  dlsym_fn f = atomic_load(&found);
  for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++) {
    void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (p) memcpy(&f, &p, sizeof f), atomic_store(&found, f);
  }
  return f;
}

/* RTLD_NEXT for the caller: the first object loaded after the caller's that defines name. */
static void *next_after(const void *caller, const char *name) {
  Dl_info info;
  struct link_map *self = NULL, *def = NULL;
  if (!dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) || !self) return real_dlsym()(RTLD_NEXT, name);
  for (struct link_map *l = self->l_next; l; l = l->l_next) {
    void *h = l->l_name && *l->l_name ? dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    void *p = h ? real_dlsym()(h, name) : NULL; /* searches h's dependencies too: */
    if (h) dlclose(h);
    if (p && dladdr1(p, &info, (void **)&def, RTLD_DL_LINKMAP) && def == l) return p; /* l's own */
  }
  return NULL;
}

/* ---- the driver ------------------------------------------------------------------ */

static void *libcuda(void) {
  static void *_Atomic handle;
  void *h = atomic_load(&handle);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h) atomic_store(&handle, h);
  return h;
}

static void remember(gpupart__cu_entry e, gpupart__cu_fn f) {
  gpupart__cu_fn none = NULL;
  if (f && !is_hook(f)) atomic_compare_exchange_strong(&reals[e], &none, f);
}

gpupart__cu_fn gpupart__cu_real(gpupart__cu_entry e) {
  gpupart__cu_fn f = atomic_load(&reals[e]);
  if (f) return f;
  void *h = libcuda();
  remember(e, h && real_dlsym() ? as_fn(real_dlsym()(h, entries[e].name)) : NULL);
  return atomic_load(&reals[e]);
}

/* ---- the routes ------------------------------------------------------------------ */

static int hooked_name(const char *name) {
  if (name[0] != 'c' || name[1] != 'u') return -1;
  for (int i = 0; i < CU_HOOKED; i++)
    if (strcmp(entries[i].name, name) == 0) return i;
  return -1;
}

/* What dlsym answers for name when glibc found p: the hook for a hooked name, where the
 * driver has it. A lookup that found this library itself (RTLD_DEFAULT) keeps the hook
 * only while a libcuda.so.1 is loaded, as the program would find none otherwise. */
static void *routed(const char *name, void *p) {
  int i = p && !gpupart__cu_busy ? hooked_name(name) : -1;
  if (i < 0) return p;
  if (is_hook(as_fn(p))) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return NULL;
    dlclose(h);
    return p;
  }
  remember((gpupart__cu_entry)i, as_fn(p));
  gpupart__cu_fn hook = hooks[i];
  memcpy(&p, &hook, sizeof p);
  return p;
}

EARLY GPUPART_CU_EXPORT void *dlsym(void *restrict handle, const char *restrict name) {
  dlsym_fn real = real_dlsym();
  if (!real) return NULL;
  if (!atomic_load(&ready)) return real(handle, name);
  void *p = handle == RTLD_NEXT ? next_after(__builtin_return_address(0), name) : real(handle, name);
  return routed(name, p);
}

/* The entry cuGetProcAddress selects for symbol at version with flags, or -1. */
static int proc_entry(const char *symbol, int version, cuuint64_t flags) {
  int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, best = -1;
  for (int i = 0; i < CU_HOOKED; i++)
    if (strcmp(entries[i].base, symbol) == 0 && version >= entries[i].since &&
        (entries[i].ptsz < 0 || entries[i].ptsz == ptsz) && (best < 0 || entries[i].since >= entries[best].since))
      best = i;
  return best;
}

/* Replaces the driver's answer *pfn with the hook of the variant it selected. */
static void route_proc(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  if (gpupart__cu_busy || !symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u') return;
  int i = proc_entry(symbol, version, flags);
  if (i < 0) return;
  remember((gpupart__cu_entry)i, as_fn(*pfn));
  memcpy(pfn, &hooks[i], sizeof *pfn);
}

typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*proc_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

GPUPART_CU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags) {
  proc_fn real = (proc_fn)gpupart__cu_real(CU_GET_PROC);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS) route_proc(symbol, pfn, cuda_version, flags);
  return r;
}

GPUPART_CU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *status) {
  proc_v2_fn real = (proc_v2_fn)gpupart__cu_real(CU_GET_PROC_V2);
  if (!real) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS) route_proc(symbol, pfn, cuda_version, flags);
  return r;
}
