/* The adapters built into this conformance suite. */
#include "conformance.h"

extern const conformance_adapter conformance_sim;
#ifdef GPUPART_HAVE_OPENCL
extern const conformance_adapter conformance_opencl;
#endif
#ifdef GPUPART_HAVE_VULKAN
extern const conformance_adapter conformance_vulkan;
#endif
#ifdef GPUPART_HAVE_CUDA
extern const conformance_adapter conformance_cuda;
#endif

const conformance_adapter *conformance_adapter_for(gpupart_backend b) {
  switch (b) {
  case GPUPART_BACKEND_SIM: return &conformance_sim;
#ifdef GPUPART_HAVE_OPENCL
  case GPUPART_BACKEND_OPENCL: return &conformance_opencl;
#endif
#ifdef GPUPART_HAVE_VULKAN
  case GPUPART_BACKEND_VULKAN: return &conformance_vulkan;
#endif
#ifdef GPUPART_HAVE_CUDA
  case GPUPART_BACKEND_CUDA: return &conformance_cuda;
#endif
  default: return NULL;
  }
}
