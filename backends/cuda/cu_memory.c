/* CUDA blocks: each is one cuMemAlloc_v2 allocation in the device's context, made with
 * that context pushed and popped around the call. The driver's refusal of memory
 * (CUDA_ERROR_OUT_OF_MEMORY) is GPUPART_EDEVMEM, so the core can run its out-of-memory
 * sequence; any other code is GPUPART_EBACKEND with the driver's name for it. */
#include <stdio.h>

#include "cuda_internal.h"

int gpupart__cu_block_alloc(gpupart__cu_device *d, uint64_t size, gpupart_block *out) {
  if (size > SIZE_MAX) return gpupart__cu_fail(d->s, GPUPART_EDEVMEM, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2");
  int rc = gpupart__cu_enter(d, "cuMemAlloc_v2");
  if (rc) return rc;
  CUdeviceptr ptr = 0;
  CUresult r = d->s->cu.mem_alloc(&ptr, (size_t)size);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS) {
    gpupart__cu_fail(d->s, r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPART_EDEVMEM : GPUPART_EBACKEND, r, "cuMemAlloc_v2");
    gpupart__error_append(" for a block of %llu bytes on device %u", (unsigned long long)size, d->info.index);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPART_EDEVMEM : GPUPART_EBACKEND;
  }
  *out = (gpupart_block){.size = size, .device_address = (uint64_t)ptr, .native = (void *)(uintptr_t)ptr};
  return GPUPART_OK;
}

/* cuMemFree_v2 synchronises with the device's outstanding work on the block, as the
 * driver documents, so a free never pulls memory from under a running kernel. */
void gpupart__cu_block_free(gpupart__cu_device *d, gpupart_block *block) {
  if (gpupart__cu_enter(d, "cuMemFree_v2")) return;
  CUresult r = d->s->cu.mem_free((CUdeviceptr)block->device_address);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS)
    gpupart__error_set("cuda: cuMemFree_v2 failed: %s (%d)", gpupart__cu_error_name(d->s, r), (int)r);
}
