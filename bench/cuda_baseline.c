/* The CUDA driver's own stream-ordered pool as a baseline (the `cudapool` policy): a
 * cuMemPool created on the device with its release threshold set to UINT64_MAX
 * (cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)), so freed memory stays in the
 * pool as it would in a warmed-up PyTorch or JAX program; requests are
 * cuMemAllocFromPoolAsync / cuMemFreeAsync on one stream of the primary context, and the
 * replay ends with cuStreamSynchronize inside the timed region. The driver is loaded with
 * dlopen like the backend (libcuda.so.1, or $GPUPART_CUDA_LIBRARY): nothing here links
 * libcuda, and a driver without these entry points (CUDA < 11.2, or the test double) makes
 * the policy an error row. The other CUDA baseline, one cuMemAlloc_v2/cuMemFree_v2 per
 * request, is the `driver` policy through the backend itself. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef GPUPART_HAVE_CUDA
#include <cuda.h>

#define CUDA_POOL_FUNCTIONS(X)                                                               \
  X(init, "cuInit", (unsigned int))                                                          \
  X(device_get, "cuDeviceGet", (CUdevice *, int))                                            \
  X(primary_retain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))                     \
  X(primary_release, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                             \
  X(ctx_push, "cuCtxPushCurrent_v2", (CUcontext))                                            \
  X(ctx_pop, "cuCtxPopCurrent_v2", (CUcontext *))                                            \
  X(stream_create, "cuStreamCreate", (CUstream *, unsigned int))                             \
  X(stream_destroy, "cuStreamDestroy_v2", (CUstream))                                        \
  X(stream_sync, "cuStreamSynchronize", (CUstream))                                          \
  X(pool_create, "cuMemPoolCreate", (CUmemoryPool *, const CUmemPoolProps *))                \
  X(pool_destroy, "cuMemPoolDestroy", (CUmemoryPool))                                        \
  X(pool_set, "cuMemPoolSetAttribute", (CUmemoryPool, CUmemPool_attribute, void *))          \
  X(pool_get, "cuMemPoolGetAttribute", (CUmemoryPool, CUmemPool_attribute, void *))          \
  X(alloc_async, "cuMemAllocFromPoolAsync", (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
  X(free_async, "cuMemFreeAsync", (CUdeviceptr, CUstream))

struct bench_cuda_pool {
  void *lib;
#define CUDA_POOL_FIELD(field, name, params) CUresult(*field) params;
  CUDA_POOL_FUNCTIONS(CUDA_POOL_FIELD)
#undef CUDA_POOL_FIELD
  CUdevice device;
  CUcontext ctx;
  CUstream stream;
  CUmemoryPool pool;
  int pushed;
};

static int load(bench_cuda_pool *p, char *err, size_t n) {
  const char *path = bench_cuda_library() ? bench_cuda_library() : "libcuda.so.1";
  p->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!p->lib) return snprintf(err, n, "cudapool: cannot load %s: %s", path, dlerror()), -1;
  void *sym;
#define CUDA_POOL_LOAD(field, name, params)                                                            \
  if (!(sym = dlsym(p->lib, name))) return snprintf(err, n, "cudapool: %s has no %s", path, name), -1; \
  memcpy(&p->field, &sym, sizeof sym);
  CUDA_POOL_FUNCTIONS(CUDA_POOL_LOAD)
#undef CUDA_POOL_LOAD
  return 0;
}

static int check(CUresult r, const char *what, char *err, size_t n) {
  if (r == CUDA_SUCCESS) return 0;
  return snprintf(err, n, "cudapool: %s failed (CUresult %d)", what, (int)r), -1;
}

/* The pool and stream, made with the primary context current. */
static int make_pool(bench_cuda_pool *p, char *err, size_t n) {
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = p->device;
  cuuint64_t keep = UINT64_MAX;
  if (check(p->stream_create(&p->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", err, n) ||
      check(p->pool_create(&p->pool, &props), "cuMemPoolCreate", err, n))
    return -1;
  return check(p->pool_set(p->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), "cuMemPoolSetAttribute", err, n);
}

int bench_cuda_pool_open(uint32_t index, bench_cuda_pool **out, char *err, size_t n) {
  bench_cuda_pool *p = bench_xcalloc(1, sizeof *p);
  *out = p;
  if (load(p, err, n) || check(p->init(0), "cuInit", err, n) ||
      check(p->device_get(&p->device, (int)index), "cuDeviceGet", err, n) ||
      check(p->primary_retain(&p->ctx, p->device), "cuDevicePrimaryCtxRetain", err, n))
    return -1;
  /* The context stays pushed while the pool is open: the replay makes no other calls. */
  if (check(p->ctx_push(p->ctx), "cuCtxPushCurrent_v2", err, n)) return -1;
  p->pushed = 1;
  return make_pool(p, err, n);
}

int bench_cuda_pool_alloc(bench_cuda_pool *p, uint64_t size, uint64_t *ptr) {
  CUdeviceptr d = 0;
  if (p->alloc_async(&d, (size_t)size, p->pool, p->stream) != CUDA_SUCCESS) return -1;
  *ptr = (uint64_t)d;
  return 0;
}

void bench_cuda_pool_free(bench_cuda_pool *p, uint64_t ptr) { p->free_async((CUdeviceptr)ptr, p->stream); }

void bench_cuda_pool_sync(bench_cuda_pool *p) { p->stream_sync(p->stream); }

uint64_t bench_cuda_pool_reserved_high(bench_cuda_pool *p) {
  cuuint64_t v = 0;
  p->pool_get(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v);
  return (uint64_t)v;
}

void bench_cuda_pool_close(bench_cuda_pool *p) {
  if (!p) return;
  CUcontext popped;
  if (p->stream) p->stream_sync(p->stream), p->stream_destroy(p->stream);
  if (p->pool) p->pool_destroy(p->pool);
  if (p->pushed) p->ctx_pop(&popped);
  if (p->ctx) p->primary_release(p->device);
  free(p);
}

#else /* built without the CUDA backend */

struct bench_cuda_pool {
  int unused;
};

int bench_cuda_pool_open(uint32_t index, bench_cuda_pool **out, char *err, size_t n) {
  (void)index;
  *out = NULL;
  return snprintf(err, n, "cudapool: this build has no CUDA backend"), -1;
}

int bench_cuda_pool_alloc(bench_cuda_pool *p, uint64_t size, uint64_t *ptr) {
  (void)p, (void)size, (void)ptr;
  return -1;
}

void bench_cuda_pool_free(bench_cuda_pool *p, uint64_t ptr) { (void)p, (void)ptr; }
void bench_cuda_pool_sync(bench_cuda_pool *p) { (void)p; }
uint64_t bench_cuda_pool_reserved_high(bench_cuda_pool *p) { return (void)p, 0; }
void bench_cuda_pool_close(bench_cuda_pool *p) { (void)p; }

#endif
