/* gpupart's OpenCL interop: adopt the application's own cl_context and cl_device_id,
 * and reach the OpenCL objects behind gpupart's handles. Usable where the OpenCL backend
 * was built; it includes the Khronos <CL/cl.h> (define CL_TARGET_OPENCL_VERSION before
 * including it, as with any OpenCL header). libgpupart never links libOpenCL: it loads
 * "libOpenCL.so.1" (or $GPUPART_OPENCL_LIBRARY) when an OpenCL device is first used.
 *
 * Ownership:
 *  1. Adopted handles stay the application's: gpupart retains the context and device
 *     while the gpupart device is open and releases exactly those references at
 *     gpupart_device_close; the application releases its own as usual.
 *  2. Without adopted handles (backend_desc NULL, or a desc whose context and device are
 *     both NULL), the backend creates a context for device `index` (counted across every
 *     platform, in clGetPlatformIDs then clGetDeviceIDs order) and destroys it at close.
 *  3. A sub-buffer returned by gpupart_opencl_buffer belongs to its allocation: do not
 *     release it; gpupart_free releases it. Free an allocation only after the commands
 *     that use it have finished (as with clReleaseMemObject on memory you reuse). */
#ifndef GPUPART_OPENCL_H
#define GPUPART_OPENCL_H

#include <CL/cl.h>

#include "gpupart.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gpupart_opencl_desc.flags: never back blocks with shared virtual memory, even where the
 * device supports it; allocations then have device_address 0. */
#define GPUPART_OPENCL_NO_SVM 0x1u

/* Pass as gpupart_device_desc.backend_desc with backend GPUPART_BACKEND_OPENCL. */
typedef struct gpupart_opencl_desc {
  cl_context context;  /* the application's context, or NULL (with device NULL) to create one */
  cl_device_id device; /* a device of that context; gpupart_device_desc.index is then ignored */
  uint32_t flags;      /* GPUPART_OPENCL_* */
} gpupart_opencl_desc;

/* The context the device's blocks live in (adopted or created); NULL, with the reason in
 * gpupart_last_error, for NULL or a device of another backend. Owned by gpupart unless
 * adopted: retain it if you keep it past gpupart_device_close. */
GPUPART_API cl_context gpupart_opencl_context(const gpupart_device *dev);
/* The cl_device_id of the device; NULL as gpupart_opencl_context. */
GPUPART_API cl_device_id gpupart_opencl_device(const gpupart_device *dev);
/* A sub-buffer covering exactly the allocation (origin = its offset in the block, size
 * = the size requested), created on first use, cached, and released by gpupart_free.
 * NULL, with the reason (and the driver's error code) in gpupart_last_error, for NULL,
 * a freed allocation, an allocation of another backend, or a driver failure. It is made
 * and released under the partition's lock: a destructor callback the application sets on
 * it must not call into gpupart for the same partition. */
GPUPART_API cl_mem gpupart_opencl_buffer(const gpupart_allocation *a);

#ifdef __cplusplus
}
#endif

#endif /* GPUPART_OPENCL_H */
