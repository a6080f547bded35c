/* Shared definitions of the OpenCL backend's files: the table of driver entry points
 * that loader.c fills from the ICD loader at run time (libOpenCL is never linked), and
 * the backend's device object. Only files under backends/opencl/ include this. */
#ifndef GPUPART_BACKENDS_OPENCL_H
#define GPUPART_BACKENDS_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <CL/cl_ext.h> /* cl_khr_device_uuid, cl_amd_device_attribute_query */
#include <stdint.h>

#include "backend.h"
#include "error.h"

/* X(name, return type, parameters): every entry point the backend calls. Optional ones
 * (OpenCL 2.0) may be absent from an old ICD loader; the backend then never uses SVM and
 * creates queues with the 1.x call. */
#define GPUPART__CL_REQUIRED(X)                                                                                \
  X(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                                          \
  X(clGetPlatformInfo, cl_int, (cl_platform_id, cl_platform_info, size_t, void *, size_t *))                   \
  X(clGetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))              \
  X(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *))                         \
  X(clRetainDevice, cl_int, (cl_device_id))                                                                    \
  X(clReleaseDevice, cl_int, (cl_device_id))                                                                   \
  X(clCreateContext, cl_context,                                                                               \
    (const cl_context_properties *, cl_uint, const cl_device_id *,                                             \
     void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))                       \
  X(clRetainContext, cl_int, (cl_context))                                                                     \
  X(clReleaseContext, cl_int, (cl_context))                                                                    \
  X(clGetContextInfo, cl_int, (cl_context, cl_context_info, size_t, void *, size_t *))                         \
  X(clCreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_command_queue_properties, cl_int *)) \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue))                                                         \
  X(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                              \
  X(clCreateSubBuffer, cl_mem, (cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *))          \
  X(clReleaseMemObject, cl_int, (cl_mem))                                                                      \
  X(clEnqueueWriteBuffer, cl_int,                                                                              \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *, cl_event *))  \
  X(clGetEventInfo, cl_int, (cl_event, cl_event_info, size_t, void *, size_t *))                               \
  X(clReleaseEvent, cl_int, (cl_event))

#define GPUPART__CL_OPTIONAL(X)                                          \
  X(clCreateCommandQueueWithProperties, cl_command_queue,                \
    (cl_context, cl_device_id, const cl_queue_properties *, cl_int *))   \
  X(clSVMAlloc, void *, (cl_context, cl_svm_mem_flags, size_t, cl_uint)) \
  X(clSVMFree, void, (cl_context, void *))                               \
  X(clSetMemObjectDestructorCallback, cl_int, (cl_mem, void(CL_CALLBACK *)(cl_mem, void *), void *))

typedef struct gpupart__cl_api {
#define GPUPART__CL_FIELD(name, ret, params) ret(CL_API_CALL *name) params;
  GPUPART__CL_REQUIRED(GPUPART__CL_FIELD)
  GPUPART__CL_OPTIONAL(GPUPART__CL_FIELD)
#undef GPUPART__CL_FIELD
  /* Not an entry point: the context's host allocator (env->mem), kept with the table
   * because every function of the backend has the table at hand. All host memory of
   * the backend comes from it. */
  const gpupart__hostmem *mem;
} gpupart__cl_api;

/* The loaded library: what load() returns as the backend state. */
typedef struct gpupart__cl_state {
  void *library; /* dlopen handle */
  gpupart__cl_api cl;
  char path[256]; /* the library that was loaded, for messages */
} gpupart__cl_state;

/* One opened device (what open() returns). Immutable after open, so the driver calls
 * made with it need no lock: every OpenCL call the backend makes is thread-safe. */
typedef struct gpupart__cl_device {
  const gpupart__cl_api *cl;
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;     /* created here, or adopted and retained while open */
  cl_command_queue queue; /* the backend's own, for the write that commits a new block */
  int svm;                /* blocks are coarse-grained SVM wrapped in a buffer */
  int host_memory;        /* a CPU device: its global memory is host memory */
  int amd_free;           /* cl_amd_device_attribute_query reports free memory */
  cl_uint svm_alignment;  /* passed to clSVMAlloc */
  gpupart_device_info info;
} gpupart__cl_device;

/* loader.c */
int gpupart__cl_load(const gpupart__hostmem *mem, const char *library, gpupart__cl_state **out);
void gpupart__cl_unload(gpupart__cl_state *s);
const char *gpupart__cl_error_name(cl_int code);
/* gpupart__fail_native for a failed OpenCL call: "opencl: WHAT failed: NAME (code)". */
int gpupart__cl_fail(int code, const char *what, cl_int err);

/* memory.c: driver blocks, and the per-allocation sub-buffers (the views of
 * core/door/interop.h). */
int gpupart__cl_block_alloc(void *dev, uint64_t size, gpupart_block *out);
void gpupart__cl_block_free(void *dev, gpupart_block *block);
void *gpupart__cl_make_view(void *dev, const gpupart_allocation_info *info, void *user);
void gpupart__cl_view_release(void *dev, void *view);

#endif
