/* OpenCL memory: driver blocks (clCreateBuffer objects, wrapping coarse-grained SVM where
 * the device has it, so allocations get a device_address usable with
 * clSetKernelArgSVMPointer), the sub-buffer that exposes one allocation, and the public
 * interop functions of gpupart_opencl.h. */
#include <stdint.h>
#include <stdlib.h>

#include "opencl.h" /* first: it sets CL_TARGET_OPENCL_VERSION */
#include "gpupart_opencl.h"
#include "interop.h"

/* The driver refused memory (EDEVMEM: the core may try a smaller block or free cached
 * ones), or failed otherwise (EBACKEND). CL_OUT_OF_HOST_MEMORY counts as a refusal: on a
 * CPU device, host memory is the device's memory. */
static int block_error(const char *what, uint64_t size, cl_int err) {
  int refused = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY ||
                err == CL_INVALID_BUFFER_SIZE;
  return gpupart__fail_native(refused ? GPUPART_EDEVMEM : GPUPART_EBACKEND, err,
                              "opencl: %s for a block of %llu bytes failed: %s (%d)", what, (unsigned long long)size,
                              gpupart__cl_error_name(err), (int)err);
}

/* OpenCL drivers may allocate a buffer's memory only when a command first uses it (PoCL
 * always does; GPU drivers may wait until they know which device needs it), so a refusal
 * would surface at the application's first kernel. A blocking write of a few bytes makes
 * the driver allocate now, where the core can still report EDEVMEM or try a smaller
 * block. The event catches drivers that report the failure only in the command's status. */
static int commit(const gpupart__cl_device *d, cl_mem mem, uint64_t size) {
  static const unsigned char zeros[16];
  size_t n = size < sizeof zeros ? (size_t)size : sizeof zeros;
  cl_event ev = NULL;
  cl_int err = d->cl->clEnqueueWriteBuffer(d->queue, mem, CL_TRUE, 0, n, zeros, 0, NULL, &ev);
  cl_int status = CL_COMPLETE;
  if (err == CL_SUCCESS && ev)
    err = d->cl->clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
  if (ev) d->cl->clReleaseEvent(ev);
  if (err == CL_SUCCESS && status < 0) err = status;
  return err == CL_SUCCESS ? GPUPART_OK : block_error("the first write (which makes the driver allocate)", size, err);
}

/* Coarse-grained SVM for a block. A pointer the driver did not align to the base-address
 * alignment cannot be the base of offsets that sub-buffers also use; that block then does
 * without SVM (*out NULL, device_address 0). */
static int svm_block(const gpupart__cl_device *d, uint64_t size, void **out) {
  void *p = d->cl->clSVMAlloc(d->context, CL_MEM_READ_WRITE, (size_t)size, d->svm_alignment);
  if (!p)
    return gpupart__fail(GPUPART_EDEVMEM, "opencl: clSVMAlloc of %llu bytes returned NULL (the driver refused it)",
                         (unsigned long long)size);
  if ((uintptr_t)p & (d->info.min_alignment - 1)) d->cl->clSVMFree(d->context, p), p = NULL;
  *out = p;
  return GPUPART_OK;
}

int gpupart__cl_block_alloc(void *devp, uint64_t size, gpupart_block *out) {
  const gpupart__cl_device *d = devp;
  if (size > SIZE_MAX) return block_error("clCreateBuffer", size, CL_INVALID_BUFFER_SIZE);
  void *svm = NULL;
  int rc = d->svm ? svm_block(d, size, &svm) : GPUPART_OK;
  if (rc) return rc;
  /* On a CPU device ALLOC_HOST_PTR makes the driver allocate inside clCreateBuffer (and
   * PoCL reports a refusal cleanly there, where its lazy path would abort). */
  cl_mem_flags flags = CL_MEM_READ_WRITE | (svm ? CL_MEM_USE_HOST_PTR : d->host_memory ? CL_MEM_ALLOC_HOST_PTR : 0);
  cl_int err = CL_SUCCESS;
  cl_mem mem = d->cl->clCreateBuffer(d->context, flags, (size_t)size, svm, &err);
  rc = mem ? commit(d, mem, size) : block_error("clCreateBuffer", size, err);
  if (rc) {
    if (mem) d->cl->clReleaseMemObject(mem);
    if (svm) d->cl->clSVMFree(d->context, svm);
    return rc;
  }
  *out = (gpupart_block){.size = size, .device_address = (uint64_t)(uintptr_t)svm, .native = mem, .backend_data = svm};
  return GPUPART_OK;
}

/* What the destructor of an SVM-backed block frees, once the driver is done with it. */
typedef struct svm_release {
  void(CL_API_CALL *svm_free)(cl_context, void *);
  cl_context context;
  void *svm;
  gpupart__hostmem mem; /* a copy: the callback may run after the context is gone */
} svm_release;

static void CL_CALLBACK free_svm_when_destroyed(cl_mem mem, void *user) {
  (void)mem;
  svm_release *r = user;
  r->svm_free(r->context, r->svm);
  const gpupart__hostmem m = r->mem;
  gpupart__host_free(&m, r);
}

/* An SVM pointer may be freed only once the buffer made from it is destroyed, which can
 * be later than this release (queued commands, or a sub-buffer the application retained):
 * the spec's destructor callback frees it then. Without that entry point, or without
 * host memory for the callback's record, the pointer is freed right after the release. */
static int free_svm_later(const gpupart__cl_device *d, cl_mem mem, void *svm) {
  svm_release *r = d->cl->clSetMemObjectDestructorCallback ? gpupart__host_calloc(d->cl->mem, 1, sizeof *r) : NULL;
  if (!r) return 0;
  *r = (svm_release){d->cl->clSVMFree, d->context, svm, *d->cl->mem};
  if (d->cl->clSetMemObjectDestructorCallback(mem, free_svm_when_destroyed, r) == CL_SUCCESS) return 1;
  gpupart__host_free(d->cl->mem, r);
  return 0;
}

void gpupart__cl_block_free(void *devp, gpupart_block *block) {
  const gpupart__cl_device *d = devp;
  cl_mem mem = (cl_mem)block->native;
  void *svm = block->backend_data;
  int later = svm && free_svm_later(d, mem, svm);
  d->cl->clReleaseMemObject(mem);
  if (svm && !later) d->cl->clSVMFree(d->context, svm);
}

/* Every offset is a multiple of the base-address alignment (the device's min_alignment),
 * as clCreateSubBuffer requires of the origin. Flags 0: the access is inherited. */
void *gpupart__cl_make_view(void *devp, const gpupart_allocation_info *info, void *user) {
  (void)user;
  const gpupart__cl_device *d = devp;
  cl_buffer_region region = {(size_t)info->offset, (size_t)info->size};
  cl_int err = CL_SUCCESS;
  cl_mem sub = d->cl->clCreateSubBuffer((cl_mem)info->native_block, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  if (!sub)
    gpupart__fail_native(GPUPART_EBACKEND, err, "opencl: clCreateSubBuffer(origin %llu, size %llu) failed: %s (%d)",
                         (unsigned long long)info->offset, (unsigned long long)info->size, gpupart__cl_error_name(err),
                         (int)err);
  return sub;
}

void gpupart__cl_view_release(void *devp, void *view) {
  const gpupart__cl_device *d = devp;
  d->cl->clReleaseMemObject((cl_mem)view);
}

cl_context gpupart_opencl_context(const gpupart_device *dev) {
  const gpupart__cl_device *d = gpupart__device_native("opencl_context", dev, GPUPART_BACKEND_OPENCL);
  return d ? d->context : NULL;
}

cl_device_id gpupart_opencl_device(const gpupart_device *dev) {
  const gpupart__cl_device *d = gpupart__device_native("opencl_device", dev, GPUPART_BACKEND_OPENCL);
  return d ? d->device : NULL;
}

cl_mem gpupart_opencl_buffer(const gpupart_allocation *a) {
  return gpupart__allocation_view("opencl_buffer", a, GPUPART_BACKEND_OPENCL, gpupart__cl_make_view, NULL);
}
