/* The public CUDA interop of gpupart_cuda.h: the context behind a gpupart device and an
 * allocation's device pointer (its block's cuMemAlloc base plus its offset). */
#include "cuda_internal.h"
#include "gpupart_cuda.h"
#include "interop.h"

CUcontext gpupart_cuda_context(const gpupart_device *dev) {
  const gpupart__cu_device *d = gpupart__device_native("cuda_context", dev, GPUPART_BACKEND_CUDA);
  return d ? d->context : NULL;
}

CUdeviceptr gpupart_cuda_ptr(const gpupart_allocation *a) {
  if (!gpupart__allocation_device("cuda_ptr", a, GPUPART_BACKEND_CUDA)) return 0; /* NULL, freed, another backend */
  gpupart_allocation_info info;
  if (gpupart_allocation_get_info(a, &info) != GPUPART_OK) return 0;
  return (CUdeviceptr)info.device_address;
}
