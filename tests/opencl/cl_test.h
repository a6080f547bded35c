/* The test suites' own access to OpenCL, loaded at run time like the library's, so a
 * machine without an ICD loader reports OpenCL tests as skipped instead of failing to
 * start; and the counting, fault-injecting driver shim (cl_shim.c) that tests put between
 * gpupart and the real driver through GPUPART_OPENCL_LIBRARY. */
#ifndef GPUPART_TESTS_CL_TEST_H
#define GPUPART_TESTS_CL_TEST_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <stdint.h>

#include "gpupart.h"

#define CL_TEST_FUNCTIONS(X)                                                                                          \
  X(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                                                 \
  X(clGetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))                     \
  X(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *))                                \
  X(clCreateContext, cl_context,                                                                                      \
    (const cl_context_properties *, cl_uint, const cl_device_id *,                                                    \
     void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))                              \
  X(clReleaseContext, cl_int, (cl_context))                                                                           \
  X(clGetContextInfo, cl_int, (cl_context, cl_context_info, size_t, void *, size_t *))                                \
  X(clCreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))        \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue))                                                                \
  X(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                                     \
  X(clReleaseMemObject, cl_int, (cl_mem))                                                                             \
  X(clGetMemObjectInfo, cl_int, (cl_mem, cl_mem_info, size_t, void *, size_t *))                                      \
  X(clEnqueueWriteBuffer, cl_int,                                                                                     \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *, cl_event *))         \
  X(clEnqueueReadBuffer, cl_int,                                                                                      \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *, cl_event *))               \
  X(clCreateProgramWithSource, cl_program, (cl_context, cl_uint, const char **, const size_t *, cl_int *))            \
  X(clBuildProgram, cl_int,                                                                                           \
    (cl_program, cl_uint, const cl_device_id *, const char *, void(CL_CALLBACK *)(cl_program, void *), void *))       \
  X(clReleaseProgram, cl_int, (cl_program))                                                                           \
  X(clCreateKernel, cl_kernel, (cl_program, const char *, cl_int *))                                                  \
  X(clReleaseKernel, cl_int, (cl_kernel))                                                                             \
  X(clSetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void *))                                               \
  X(clEnqueueNDRangeKernel, cl_int,                                                                                   \
    (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint, const cl_event *, \
     cl_event *))                                                                                                     \
  X(clFinish, cl_int, (cl_command_queue))                                                                             \
  X(clSetKernelArgSVMPointer, cl_int, (cl_kernel, cl_uint, const void *))

typedef struct cl_test_api {
#define CL_TEST_FIELD(name, ret, params) ret(CL_API_CALL *name) params;
  CL_TEST_FUNCTIONS(CL_TEST_FIELD)
#undef CL_TEST_FIELD
} cl_test_api;

/* The system's OpenCL entry points, loaded on first call; NULL where there is no ICD
 * loader (or it lacks one of them). */
const cl_test_api *cl_test_api_get(void);

/* Counters and knobs of the driver shim (cl_shim.c). Blocks are the top-level buffers
 * gpupart creates; a refused block is clSVMAlloc returning NULL, or clCreateBuffer
 * returning CL_MEM_OBJECT_ALLOCATION_FAILURE. */
typedef struct cl_shim_state {
  uint64_t blocks_created, blocks_released, bytes_live;
  uint64_t subbuffers_created, subbuffers_released;
  uint64_t svm_allocs, svm_frees, writes;
  uint64_t contexts_created, contexts_released, queues_created, queues_released;
  uint64_t max_live_blocks; /* refuse a new block while this many are live; 0 = no limit */
  uint32_t fail_writes;     /* the next n clEnqueueWriteBuffer calls fail */
  cl_int write_error;       /* ... with this code */
  uint32_t fail_subbuffers; /* the next n clCreateSubBuffer calls fail (CL_OUT_OF_RESOURCES) */
  uint32_t fail_queues;     /* the next n command-queue creations fail (CL_OUT_OF_HOST_MEMORY) */
} cl_shim_state;

/* The shim's path (meson passes it in GPUPART_TEST_OPENCL_SHIM), or NULL. */
const char *cl_shim_path(void);
/* The live state of the shim that the library loads from cl_shim_path(); NULL (reason in
 * why) if it cannot be loaded. */
cl_shim_state *cl_shim_state_get(char *why, size_t why_len);

/* Removes every GPUPART_* variable from the environment. */
void cl_test_scrub_env(void);

/* Removes every GPUPART_* variable and points GPUPART_OPENCL_LIBRARY at the shim, so a
 * context that reads the environment loads the shim and nothing else changes policy. */
int cl_shim_route_library(char *why, size_t why_len);

/* cl_shim_route_library, then a context that reads the environment (so it loads the
 * shim). On failure the reason is in why. */
gpupart_result cl_shim_context(gpupart_context **out, char *why, size_t why_len);

/* Opens OpenCL device base->index in ctx (from cl_shim_context) through the shim,
 * counters zeroed, refusing a new block while max_live_blocks are live (0 = never). On
 * failure the reason is in why. */
gpupart_result cl_shim_open(gpupart_context *ctx, const gpupart_device_desc *base, uint64_t max_live_blocks,
                            gpupart_device **out, char *why, size_t why_len);

#endif
