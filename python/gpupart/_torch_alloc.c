/* libgpupart_torch: gpupart memory behind PyTorch's torch.cuda.memory.CUDAPluggableAllocator.
 *
 * PyTorch loads this library by path and calls gpupart_torch_alloc and gpupart_torch_free
 * with the exact signatures CUDAPluggableAllocator expects; gpupart.torch.use() names them
 * and first binds a gpupart partition of a CUDA device to each PyTorch device index
 * (gpupart_torch_set_partition). Each PyTorch allocation is one gpupart allocation;
 * a table from device pointer to allocation lets free find it (PyTorch passes only the
 * pointer back). gpupart is not stream-ordered: freed memory is reused at once, which is
 * safe for work on one stream (as PyTorch's own allocator on one stream) but needs the
 * program to synchronise before freeing a tensor that another stream still uses.
 * PyTorch does not check the pointer alloc returns, so a NULL (a refused allocation) makes
 * a tensor over address 0 that faults when used: gpupart_torch_set_abort_on_failure(1)
 * (what gpupart.torch.use sets) instead prints gpupart's message and aborts at the refusal.
 * Built by meson only where the CUDA backend is (it needs gpupart_cuda_ptr). */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpupart.h"
#include "gpupart_cuda.h"

#if defined(__GNUC__)
#define TORCH_API __attribute__((visibility("default")))
#else
#define TORCH_API
#endif

/* cudaStream_t is the runtime's name for the driver's CUstream (struct CUstream_st *). */
typedef CUstream gpupart_torch_stream;

#define MAX_DEVICES 64

typedef struct slot {
  uintptr_t ptr; /* 0 = empty, 1 = deleted */
  gpupart_allocation *a;
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gpupart_partition *partitions[MAX_DEVICES];
static slot *table;
static size_t capacity, used, live; /* used counts live and deleted slots */
static int abort_on_failure;

static size_t hash(uintptr_t p) {
  uint64_t x = (uint64_t)p >> 8; /* allocations are at least 256-byte aligned */
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

/* The slot holding ptr, or the first free slot on its probe path (capacity is a power of two). */
static slot *find(uintptr_t ptr, int for_insert) {
  slot *tomb = NULL;
  for (size_t i = hash(ptr) & (capacity - 1);; i = (i + 1) & (capacity - 1)) {
    slot *s = &table[i];
    if (s->ptr == ptr) return s;
    if (s->ptr == 1 && !tomb) tomb = s;
    if (s->ptr == 0) return for_insert ? (tomb ? tomb : s) : NULL;
  }
}

/* Rehashes into twice the live count (at least 64 slots); 0 on success. */
static int grow(void) {
  size_t old_cap = capacity, cap = 64;
  while (cap < 4 * (live + 1)) cap *= 2;
  slot *fresh = calloc(cap, sizeof *fresh), *old = table;
  if (!fresh) return -1;
  table = fresh;
  capacity = cap;
  used = live;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].ptr > 1) *find(old[i].ptr, 1) = old[i];
  free(old);
  return 0;
}

static int insert(uintptr_t ptr, gpupart_allocation *a) {
  if (2 * (used + 1) > capacity && grow()) return -1;
  slot *s = find(ptr, 1);
  if (s->ptr == 0) used++;
  *s = (slot){ptr, a};
  live++;
  return 0;
}

/* Binds PyTorch device index `device` to partition p (a partition of a CUDA device; NULL
 * unbinds). EINVAL for an index outside [0, 64). Allocations already made stay valid. */
TORCH_API gpupart_result gpupart_torch_set_partition(int device, gpupart_partition *p) {
  if (device < 0 || device >= MAX_DEVICES) return GPUPART_EINVAL;
  pthread_mutex_lock(&lock);
  partitions[device] = p;
  pthread_mutex_unlock(&lock);
  return GPUPART_OK;
}

/* on != 0: a refused gpupart_torch_alloc prints the reason to stderr and aborts the
 * process instead of returning NULL (which PyTorch would use as a tensor's address). */
TORCH_API void gpupart_torch_set_abort_on_failure(int on) {
  pthread_mutex_lock(&lock);
  abort_on_failure = on;
  pthread_mutex_unlock(&lock);
}

/* NULL, or the end of the process, as gpupart_torch_set_abort_on_failure chose. */
static void *refused(size_t size, int device, const char *why) {
  pthread_mutex_lock(&lock);
  int fatal = abort_on_failure;
  pthread_mutex_unlock(&lock);
  if (!fatal) return NULL;
  fprintf(stderr, "gpupart_torch_alloc: %zu bytes on device %d refused: %s\n", size, device, why);
  abort();
}

/* CUDAPluggableAllocator's alloc: size bytes from the partition bound to device, on any
 * stream. NULL when none is bound or gpupart refuses (gpupart_last_error says why, on this
 * thread), or the process aborts (gpupart_torch_set_abort_on_failure). A request of 0 bytes gets a distinct minimal
 * allocation. */
TORCH_API void *gpupart_torch_alloc(size_t size, int device, gpupart_torch_stream stream) {
  (void)stream;
  if (device < 0 || device >= MAX_DEVICES) return refused(size, device, "no such device index");
  pthread_mutex_lock(&lock);
  gpupart_partition *p = partitions[device];
  pthread_mutex_unlock(&lock);
  gpupart_allocation *a = NULL;
  if (!p) return refused(size, device, "no gpupart partition is bound to it (gpupart.torch.bind)");
  if (gpupart_alloc(p, size ? size : 1, 0, &a) != GPUPART_OK) return refused(size, device, gpupart_last_error());
  CUdeviceptr ptr = gpupart_cuda_ptr(a);
  pthread_mutex_lock(&lock);
  int rc = ptr ? insert((uintptr_t)ptr, a) : -1;
  pthread_mutex_unlock(&lock);
  if (rc) {
    gpupart_free(a);
    return refused(size, device, ptr ? "out of host memory for the pointer table" : "gpupart_cuda_ptr failed");
  }
  return (void *)(uintptr_t)ptr;
}

/* CUDAPluggableAllocator's free: returns ptr (from gpupart_torch_alloc) to its partition.
 * A pointer this library did not hand out, or NULL, is ignored. */
TORCH_API void gpupart_torch_free(void *ptr, size_t size, int device, gpupart_torch_stream stream) {
  (void)size, (void)device, (void)stream;
  gpupart_allocation *a = NULL;
  pthread_mutex_lock(&lock);
  slot *s = ptr && capacity ? find((uintptr_t)ptr, 0) : NULL;
  if (s) {
    a = s->a;
    *s = (slot){1, NULL};
    live--;
  }
  pthread_mutex_unlock(&lock);
  if (a) gpupart_free(a);
}

/* The gpupart allocation behind ptr, or NULL. */
TORCH_API gpupart_allocation *gpupart_torch_allocation(const void *ptr) {
  pthread_mutex_lock(&lock);
  slot *s = ptr && capacity ? find((uintptr_t)ptr, 0) : NULL;
  gpupart_allocation *a = s ? s->a : NULL;
  pthread_mutex_unlock(&lock);
  return a;
}

/* Number of allocations handed to PyTorch and not yet freed. */
TORCH_API uint64_t gpupart_torch_live(void) {
  pthread_mutex_lock(&lock);
  uint64_t n = live;
  pthread_mutex_unlock(&lock);
  return n;
}
