/* CUDA virtual memory for expandable partitions: one cuMemAddressReserve range per
 * partition, into which physical memory made by cuMemCreate (pinned, on the device) is
 * mapped with cuMemMap (whole handles, offset 0) and opened to the device with
 * cuMemSetAccess, since a new mapping has no access at all. Unmapping waits for the
 * device first (cuCtxSynchronize), as cuMemFree does for a block, then cuMemUnmap and
 * cuMemRelease. Support is the device's VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED attribute and
 * the driver having every entry point; the granule is cuMemGetAllocationGranularity's
 * minimum. Every call runs with the device's context pushed. */
#include "cuda_internal.h"

static int have_entries(const gpupart__cu_api *cu) {
  return cu->device_get_attribute && cu->ctx_synchronize && cu->mem_address_reserve && cu->mem_address_free &&
         cu->mem_create && cu->mem_release && cu->mem_map && cu->mem_unmap && cu->mem_set_access &&
         cu->mem_get_allocation_granularity;
}

static CUmemAllocationProp pinned_on(const gpupart__cu_device *d) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = d->device;
  return prop;
}

/* Device d's support, then its granule. */
static int granule_of(gpupart__cu_device *d, uint64_t *granule) {
  const gpupart__cu_api *cu = &d->s->cu;
  if (!have_entries(cu)) return gpupart__fail(GPUPART_ENOTSUP, "cuda: the driver has no virtual memory management");
  int vmm = 0;
  CUresult r = cu->device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->device);
  if (r != CUDA_SUCCESS || !vmm)
    return gpupart__fail(GPUPART_ENOTSUP, "cuda: device %u has no virtual memory management", d->info.index);
  CUmemAllocationProp prop = pinned_on(d);
  size_t g = 0;
  r = cu->mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return gpupart__cu_fail(d->s, GPUPART_EBACKEND, r, "cuMemGetAllocationGranularity");
  *granule = g;
  return GPUPART_OK;
}

int gpupart__cu_vm_granule(gpupart__cu_device *d, uint64_t *granule) {
  int rc = gpupart__cu_enter(d, "cuMemGetAllocationGranularity");
  if (rc) return rc;
  rc = granule_of(d, granule);
  gpupart__cu_leave(d);
  return rc;
}

int gpupart__cu_vm_reserve(gpupart__cu_device *d, uint64_t size, gpupart_block *out) {
  if (size > SIZE_MAX) return gpupart__fail(GPUPART_EDEVMEM, "cuda: a range of %llu bytes", (unsigned long long)size);
  int rc = gpupart__cu_enter(d, "cuMemAddressReserve");
  if (rc) return rc;
  CUdeviceptr base = 0;
  CUresult r = d->s->cu.mem_address_reserve(&base, (size_t)size, 0, 0, 0);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS)
    return gpupart__cu_fail(d->s, r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPART_EDEVMEM : GPUPART_EBACKEND, r,
                            "cuMemAddressReserve");
  *out = (gpupart_block){.size = size, .device_address = (uint64_t)base, .native = (void *)(uintptr_t)base};
  return GPUPART_OK;
}

void gpupart__cu_vm_unreserve(gpupart__cu_device *d, gpupart_block *range) {
  if (gpupart__cu_enter(d, "cuMemAddressFree")) return;
  CUresult r = d->s->cu.mem_address_free((CUdeviceptr)range->device_address, (size_t)range->size);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS)
    gpupart__error_set("cuda: cuMemAddressFree failed: %s (%d)", gpupart__cu_error_name(d->s, r), (int)r);
}

/* Context pushed: create, map, grant access; on failure what was done is undone. */
static int map_locked(gpupart__cu_device *d, CUdeviceptr at, size_t size, CUmemGenericAllocationHandle *out) {
  const gpupart__cu_api *cu = &d->s->cu;
  CUmemAllocationProp prop = pinned_on(d);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cu->mem_create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS)
    return gpupart__cu_fail(d->s, r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPART_EDEVMEM : GPUPART_EBACKEND, r, "cuMemCreate");
  const char *what = "cuMemMap";
  r = cu->mem_map(at, size, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    what = "cuMemSetAccess";
    r = cu->mem_set_access(at, size, &access, 1);
    if (r != CUDA_SUCCESS) cu->mem_unmap(at, size);
  }
  if (r != CUDA_SUCCESS) {
    cu->mem_release(h);
    return gpupart__cu_fail(d->s, r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPART_EDEVMEM : GPUPART_EBACKEND, r, what);
  }
  *out = h;
  return GPUPART_OK;
}

int gpupart__cu_vm_map(gpupart__cu_device *d, gpupart_block *range, uint64_t offset, uint64_t size, void **handle) {
  if (size > SIZE_MAX) return gpupart__fail(GPUPART_EDEVMEM, "cuda: a mapping of %llu bytes", (unsigned long long)size);
  int rc = gpupart__cu_enter(d, "cuMemCreate");
  if (rc) return rc;
  CUmemGenericAllocationHandle h = 0;
  rc = map_locked(d, (CUdeviceptr)(range->device_address + offset), (size_t)size, &h);
  gpupart__cu_leave(d);
  if (rc) gpupart__error_append(" mapping %llu bytes on device %u", (unsigned long long)size, d->info.index);
  else *handle = (void *)(uintptr_t)h;
  return rc;
}

void gpupart__cu_vm_unmap(gpupart__cu_device *d, gpupart_block *range, uint64_t offset, uint64_t size, void *handle) {
  if (gpupart__cu_enter(d, "cuMemUnmap")) return;
  const gpupart__cu_api *cu = &d->s->cu;
  CUresult r = cu->ctx_synchronize(); /* no kernel may still use the memory */
  CUresult u = cu->mem_unmap((CUdeviceptr)(range->device_address + offset), (size_t)size);
  CUresult l = cu->mem_release((CUmemGenericAllocationHandle)(uintptr_t)handle);
  gpupart__cu_leave(d);
  if (r != CUDA_SUCCESS || u != CUDA_SUCCESS || l != CUDA_SUCCESS)
    gpupart__error_set("cuda: unmapping failed: cuCtxSynchronize %d, cuMemUnmap %d, cuMemRelease %d", (int)r, (int)u,
                       (int)l);
}
