/* The backends this build contains. Each is compiled only when meson found its headers;
 * its driver library is still loaded at run time, so a built backend may be absent. */
#include "backend.h"

extern const gpupart_backend_ops gpupart__sim_ops;
#ifdef GPUPART_HAVE_OPENCL
extern const gpupart_backend_ops gpupart__opencl_ops;
#endif
#ifdef GPUPART_HAVE_VULKAN
extern const gpupart_backend_ops gpupart__vulkan_ops;
#endif
#ifdef GPUPART_HAVE_CUDA
extern const gpupart_backend_ops gpupart__cuda_ops;
#endif

const gpupart_backend_ops *gpupart__backend_ops(gpupart_backend b) {
  switch (b) {
  case GPUPART_BACKEND_SIM:
    return &gpupart__sim_ops;
#ifdef GPUPART_HAVE_OPENCL
  case GPUPART_BACKEND_OPENCL:
    return &gpupart__opencl_ops;
#endif
#ifdef GPUPART_HAVE_VULKAN
  case GPUPART_BACKEND_VULKAN:
    return &gpupart__vulkan_ops;
#endif
#ifdef GPUPART_HAVE_CUDA
  case GPUPART_BACKEND_CUDA:
    return &gpupart__cuda_ops;
#endif
  default:
    return NULL;
  }
}
