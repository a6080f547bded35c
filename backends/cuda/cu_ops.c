/* The CUDA backend's table of core/base/backend.h: thin adapters from the table's shapes to
 * the backend's functions (cu_load.c, cu_device.c, cu_memory.c), so that a change of the
 * table's layout touches this file only. */
#include "cuda_internal.h"
#include "gpupart_cuda.h"

static int cu_load(const gpupart__backend_env *env, const char *library, void **state) {
  gpupart__cu_state *s = NULL;
  int rc = gpupart__cu_load(env->mem, library, &s);
  if (rc == GPUPART_OK) *state = s;
  return rc;
}

static void cu_unload(void *state) { gpupart__cu_unload(state); }

static int cu_enumerate(void *state, gpupart_device_info *out, uint32_t *count) {
  return gpupart__cu_enumerate(state, out, count);
}

/* native_size 0 is the 0.2 size of gpupart_cuda_desc (gpupart__backend_desc_in). */
static int cu_open(void *state, uint32_t index, const void *native_desc, size_t native_size, void **dev) {
  gpupart__cu_device *d = NULL;
  int rc = gpupart__cu_open(state, index, native_desc, native_size, &d);
  if (rc == GPUPART_OK) *dev = d;
  return rc;
}

static void cu_close(void *dev) { gpupart__cu_close(dev); }

static int cu_info(void *dev, gpupart_device_info *out) { return gpupart__cu_info(dev, out); }

static int cu_mem_info(void *dev, uint64_t *free_bytes, uint64_t *total_bytes) {
  return gpupart__cu_mem_info(dev, free_bytes, total_bytes);
}

static int cu_block_alloc(void *dev, uint64_t size, gpupart_block *out) {
  return gpupart__cu_block_alloc(dev, size, out);
}

static void cu_block_free(void *dev, gpupart_block *block) { gpupart__cu_block_free(dev, block); }

static int cu_vm_granule(void *dev, uint64_t *granule) { return gpupart__cu_vm_granule(dev, granule); }

static int cu_vm_reserve(void *dev, uint64_t size, gpupart_block *out) {
  return gpupart__cu_vm_reserve(dev, size, out);
}

static void cu_vm_unreserve(void *dev, gpupart_block *range) { gpupart__cu_vm_unreserve(dev, range); }

static int cu_vm_map(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void **handle) {
  return gpupart__cu_vm_map(dev, range, offset, size, handle);
}

static void cu_vm_unmap(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void *handle) {
  gpupart__cu_vm_unmap(dev, range, offset, size, handle);
}

const gpupart_backend_ops gpupart__cuda_ops = {
    .abi_version = GPUPART__BACKEND_ABI,
    .struct_size = sizeof(gpupart_backend_ops),
    .name = "cuda",
    .id = GPUPART_BACKEND_CUDA,
    .caps = GPUPART__CAP_FREE_MEMORY | GPUPART__CAP_DEVICE_ADDRESS | GPUPART__CAP_IDENTITY | GPUPART__CAP_VM,
    .load = cu_load,
    .unload = cu_unload,
    .enumerate = cu_enumerate,
    .open = cu_open,
    .close = cu_close,
    .info = cu_info,
    .mem_info = cu_mem_info,
    .block_alloc = cu_block_alloc,
    .block_free = cu_block_free,
    .vm_granule = cu_vm_granule,
    .vm_reserve = cu_vm_reserve,
    .vm_unreserve = cu_vm_unreserve,
    .vm_map = cu_vm_map,
    .vm_unmap = cu_vm_unmap,
};
