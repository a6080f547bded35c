/* A pass-through OpenCL "driver" for tests: libgpupart loads it instead of libOpenCL.so.1
 * (GPUPART_OPENCL_LIBRARY), and it forwards every call the backend makes to the real ICD
 * loader, counting the blocks, sub-buffers, SVM allocations and commit writes it sees, so
 * tests can check at the driver what gpupart holds; and, when a test asks, refusing
 * memory or failing a call the way a real driver would, to exercise gpupart's failure
 * paths on the real device. The data path is the real driver's throughout. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_test.h"

#define SHIM_API __attribute__((visibility("default")))

static cl_shim_state state;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *real_library;
static pthread_once_t once = PTHREAD_ONCE_INIT;

SHIM_API cl_shim_state *gpupart_test_cl_shim_state(void) { return &state; }

static void open_real(void) { real_library = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL); }

/* The real entry point; a test machine without it cannot have loaded the shim usefully. */
static void *real(const char *name) {
  pthread_once(&once, open_real);
  void *sym = real_library ? dlsym(real_library, name) : NULL;
  if (!sym) fprintf(stderr, "cl_shim: the real libOpenCL.so.1 has no %s\n", name), abort();
  return sym;
}

#define REAL(name, ret, params) \
  ret(CL_API_CALL *fn) params;  \
  void *sym_ = real(#name);     \
  memcpy(&fn, &sym_, sizeof sym_)

static void count(uint64_t *counter, int64_t by) {
  pthread_mutex_lock(&lock);
  *counter += (uint64_t)by;
  pthread_mutex_unlock(&lock);
}

/* Takes one unit of a "fail the next n" knob; 1 if this call is to fail. */
static int take(uint32_t *knob) {
  pthread_mutex_lock(&lock);
  int fail = *knob > 0;
  if (fail) (*knob)--;
  pthread_mutex_unlock(&lock);
  return fail;
}

static int blocks_full(void) {
  pthread_mutex_lock(&lock);
  int full = state.max_live_blocks && state.blocks_created - state.blocks_released >= state.max_live_blocks;
  pthread_mutex_unlock(&lock);
  return full;
}

SHIM_API cl_int clGetPlatformIDs(cl_uint n, cl_platform_id *p, cl_uint *np) {
  REAL(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *));
  return fn(n, p, np);
}

SHIM_API cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info w, size_t n, void *v, size_t *r) {
  REAL(clGetPlatformInfo, cl_int, (cl_platform_id, cl_platform_info, size_t, void *, size_t *));
  return fn(p, w, n, v, r);
}

SHIM_API cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *nd) {
  REAL(clGetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *));
  return fn(p, t, n, d, nd);
}

SHIM_API cl_int clGetDeviceInfo(cl_device_id d, cl_device_info w, size_t n, void *v, size_t *r) {
  REAL(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *));
  return fn(d, w, n, v, r);
}

SHIM_API cl_int clRetainDevice(cl_device_id d) {
  REAL(clRetainDevice, cl_int, (cl_device_id));
  return fn(d);
}

SHIM_API cl_int clReleaseDevice(cl_device_id d) {
  REAL(clReleaseDevice, cl_int, (cl_device_id));
  return fn(d);
}

typedef void(CL_CALLBACK *notify_fn)(const char *, const void *, size_t, void *);

SHIM_API cl_context clCreateContext(const cl_context_properties *p, cl_uint n, const cl_device_id *d, notify_fn cb,
                                    void *u, cl_int *e) {
  REAL(clCreateContext, cl_context,
       (const cl_context_properties *, cl_uint, const cl_device_id *, notify_fn, void *, cl_int *));
  cl_context c = fn(p, n, d, cb, u, e);
  if (c) count(&state.contexts_created, 1);
  return c;
}

SHIM_API cl_int clRetainContext(cl_context c) {
  REAL(clRetainContext, cl_int, (cl_context));
  return fn(c);
}

SHIM_API cl_int clReleaseContext(cl_context c) {
  REAL(clReleaseContext, cl_int, (cl_context));
  count(&state.contexts_released, 1);
  return fn(c);
}

SHIM_API cl_int clGetContextInfo(cl_context c, cl_context_info w, size_t n, void *v, size_t *r) {
  REAL(clGetContextInfo, cl_int, (cl_context, cl_context_info, size_t, void *, size_t *));
  return fn(c, w, n, v, r);
}

SHIM_API cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e) {
  REAL(clCreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_command_queue_properties, cl_int *));
  if (take(&state.fail_queues)) {
    if (e) *e = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  cl_command_queue q = fn(c, d, p, e);
  if (q) count(&state.queues_created, 1);
  return q;
}

SHIM_API cl_command_queue clCreateCommandQueueWithProperties(cl_context c, cl_device_id d, const cl_queue_properties *p,
                                                             cl_int *e) {
  REAL(clCreateCommandQueueWithProperties, cl_command_queue,
       (cl_context, cl_device_id, const cl_queue_properties *, cl_int *));
  if (take(&state.fail_queues)) {
    if (e) *e = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  cl_command_queue q = fn(c, d, p, e);
  if (q) count(&state.queues_created, 1);
  return q;
}

SHIM_API cl_int clReleaseCommandQueue(cl_command_queue q) {
  REAL(clReleaseCommandQueue, cl_int, (cl_command_queue));
  count(&state.queues_released, 1);
  return fn(q);
}

SHIM_API cl_mem clCreateBuffer(cl_context c, cl_mem_flags f, size_t size, void *host, cl_int *e) {
  REAL(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *));
  if (!(f & CL_MEM_USE_HOST_PTR) && blocks_full()) {
    if (e) *e = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    return NULL;
  }
  cl_mem m = fn(c, f, size, host, e);
  if (m) count(&state.blocks_created, 1), count(&state.bytes_live, (int64_t)size);
  return m;
}

SHIM_API cl_mem clCreateSubBuffer(cl_mem b, cl_mem_flags f, cl_buffer_create_type t, const void *info, cl_int *e) {
  REAL(clCreateSubBuffer, cl_mem, (cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *));
  if (take(&state.fail_subbuffers)) {
    if (e) *e = CL_OUT_OF_RESOURCES;
    return NULL;
  }
  cl_mem m = fn(b, f, t, info, e);
  if (m) count(&state.subbuffers_created, 1);
  return m;
}

/* A top-level buffer's last release returns a block (gpupart never retains its own). */
SHIM_API cl_int clReleaseMemObject(cl_mem m) {
  REAL(clReleaseMemObject, cl_int, (cl_mem));
  cl_int(CL_API_CALL * info)(cl_mem, cl_mem_info, size_t, void *, size_t *);
  void *sym = real("clGetMemObjectInfo");
  memcpy(&info, &sym, sizeof sym);
  cl_mem parent = NULL;
  cl_uint refs = 0;
  size_t size = 0;
  info(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
  info(m, CL_MEM_REFERENCE_COUNT, sizeof refs, &refs, NULL);
  info(m, CL_MEM_SIZE, sizeof size, &size, NULL);
  cl_int rc = fn(m);
  if (rc == CL_SUCCESS && parent) count(&state.subbuffers_released, 1);
  if (rc == CL_SUCCESS && !parent && refs == 1)
    count(&state.blocks_released, 1), count(&state.bytes_live, -(int64_t)size);
  return rc;
}

SHIM_API cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off, size_t n,
                                     const void *p, cl_uint nw, const cl_event *w, cl_event *ev) {
  REAL(clEnqueueWriteBuffer, cl_int,
       (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *, cl_event *));
  count(&state.writes, 1);
  if (take(&state.fail_writes)) return state.write_error;
  return fn(q, m, blocking, off, n, p, nw, w, ev);
}

SHIM_API cl_int clGetEventInfo(cl_event ev, cl_event_info w, size_t n, void *v, size_t *r) {
  REAL(clGetEventInfo, cl_int, (cl_event, cl_event_info, size_t, void *, size_t *));
  return fn(ev, w, n, v, r);
}

SHIM_API cl_int clReleaseEvent(cl_event ev) {
  REAL(clReleaseEvent, cl_int, (cl_event));
  return fn(ev);
}

SHIM_API void *clSVMAlloc(cl_context c, cl_svm_mem_flags f, size_t size, cl_uint align) {
  REAL(clSVMAlloc, void *, (cl_context, cl_svm_mem_flags, size_t, cl_uint));
  if (blocks_full()) return NULL;
  void *p = fn(c, f, size, align);
  if (p) count(&state.svm_allocs, 1);
  return p;
}

SHIM_API void clSVMFree(cl_context c, void *p) {
  REAL(clSVMFree, void, (cl_context, void *));
  if (p) count(&state.svm_frees, 1);
  fn(c, p);
}
