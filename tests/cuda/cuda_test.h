/* The CUDA tests' own access to the driver they run on: the test double
 * (libcuda_double.so, whose path meson passes as GPUPART_TEST_CUDA_DOUBLE) or, where that
 * is not set, the system's libcuda.so.1. The entry points are the versioned ones the
 * tests call to make and check contexts and to move bytes; the library is the same
 * instance the backend loads, so its counters see both. */
#ifndef GPUPART_TESTS_CUDA_TEST_H
#define GPUPART_TESTS_CUDA_TEST_H

#include <cuda.h>
#include <stddef.h>

#include "cuda_double.h"
#include "cuda_double_vmm.h"
#include "gpupart.h"

typedef struct cuda_test_api {
  CUresult (*init)(unsigned int);
  CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice); /* cuCtxCreate_v2 */
  CUresult (*ctx_destroy)(CUcontext);                          /* cuCtxDestroy_v2 */
  CUresult (*ctx_push)(CUcontext);                             /* cuCtxPushCurrent_v2 */
  CUresult (*ctx_pop)(CUcontext *);                            /* cuCtxPopCurrent_v2 */
  CUresult (*ctx_get_current)(CUcontext *);
  CUresult (*primary_retain)(CUcontext *, CUdevice);
  CUresult (*primary_release)(CUdevice); /* cuDevicePrimaryCtxRelease_v2 */
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  cuda_double_counters *stats;         /* NULL on a real driver */
  cuda_double_vmm_counters *vmm_stats; /* the double's virtual memory; NULL on a real driver */
} cuda_test_api;

/* The double's path, or NULL (a real driver): GPUPART_TEST_CUDA_REAL=1 makes the suites
 * that can (the conformance suite) run on the system's libcuda.so.1 instead. */
const char *cuda_test_double_path(void);
/* The driver's entry points (cuInit already called); NULL with why on failure. */
const cuda_test_api *cuda_test_api_get(char *why, size_t why_len);
/* "[gpupart]\ncuda_library = PATH\n" for library (NULL = the double, or none on a real driver). */
const char *cuda_test_config(const char *library);
/* A context that reads no environment and loads library (as cuda_test_config). */
gpupart_context *cuda_test_context(const char *library);
/* Copies size bytes to / from the allocation's first byte with its device's context
 * pushed. 0 on success. */
int cuda_test_copy(gpupart_device *dev, const gpupart_allocation *a, void *data, size_t size, int to_device);

#endif
