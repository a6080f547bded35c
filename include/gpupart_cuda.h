/* gpupart_cuda.h: the CUDA side of gpupart. Adopt the application's CUcontext
 * (gpupart_cuda_desc as gpupart_device_desc.backend_desc), or let gpupart use the device's
 * primary context (the one the CUDA runtime, PyTorch, TensorFlow, CuPy and JAX use); then
 * pass gpupart_cuda_ptr(a) to kernels and cuMemcpy* like any cuMemAlloc pointer.
 * Usable only where libgpupart was built with its CUDA backend (the headers alone are
 * needed); libcuda itself is loaded at run time ("libcuda.so.1", or the library that
 * GPUPART_CUDA_LIBRARY names), so one build runs with or without an NVIDIA driver.
 *
 * Ownership and contexts:
 *  1. Without a desc (or with context NULL) gpupart retains device `index`'s primary
 *     context (cuDevicePrimaryCtxRetain) while the gpupart device is open and releases
 *     exactly that reference at gpupart_device_close; the application's own retains, and
 *     the runtime's, are untouched.
 *  2. An adopted CUcontext stays the application's: gpupart never destroys it, and it must
 *     outlive every gpupart device opened on it (destroying it first leaves the blocks to
 *     the driver, and gpupart's later calls fail with GPUPART_EBACKEND). An adopted context
 *     that the driver does not recognise is GPUPART_EINVAL at open.
 *  3. gpupart makes its context current (cuCtxPushCurrent) around each driver call and pops
 *     it after, so the calling thread's current context is the same after every gpupart
 *     call as before it. Kernels on gpupart memory run in the device's context (or in any
 *     context of the same device with unified addressing, as for any cuMemAlloc memory).
 *  4. Each gpupart block is one cuMemAlloc_v2 allocation; gpupart_cuda_ptr points into one.
 *     Do not cuMemFree it; free the allocation with gpupart_free, and only once the work
 *     that uses it has finished (synchronise the stream first, as with cuMemFree). */
#ifndef GPUPART_CUDA_H
#define GPUPART_CUDA_H

#include <cuda.h>

#include "gpupart.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pass as gpupart_device_desc.backend_desc with backend GPUPART_BACKEND_CUDA. With a
 * context, gpupart_device_desc.index is ignored: the device is the context's. */
typedef struct gpupart_cuda_desc {
  CUcontext context; /* the application's context to adopt, or NULL for the primary context */
} gpupart_cuda_desc;

/* The context the device's blocks live in (adopted, or the retained primary context);
 * NULL, with the reason in gpupart_last_error, for NULL or a device of another backend.
 * The primary context stays retained only while the gpupart device is open: retain it
 * yourself (cuDevicePrimaryCtxRetain) to use it past gpupart_device_close. */
GPUPART_API CUcontext gpupart_cuda_context(const gpupart_device *dev);

/* The device address of allocation a's first byte: its block's cuMemAlloc base plus its
 * offset (a multiple of the device's min_alignment, or of the alignment asked for).
 * Valid for the allocation's requested size until gpupart_free. 0, with the reason in
 * gpupart_last_error, for NULL, a freed allocation, or one of another backend. */
GPUPART_API CUdeviceptr gpupart_cuda_ptr(const gpupart_allocation *a);

#ifdef __cplusplus
}
#endif

#endif /* GPUPART_CUDA_H */
