/* Conformance adapter of the OpenCL backend: bytes move through the driver
 * (clEnqueueWriteBuffer / clEnqueueReadBuffer on the allocation's own sub-buffer), the
 * adopt round trip uses a context the test creates, and the instrumented driver is the
 * counting shim (tests/opencl/cl_shim.c) in front of the real one. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cl_test.h" /* first: it sets CL_TARGET_OPENCL_VERSION */
#include "conformance.h"
#include "gpupart_opencl.h"

static gpupart_result ocl_open(gpupart_context *ctx, const gpupart_device_desc *base, gpupart_device **out) {
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_OPENCL;
  return gpupart_device_open(ctx, &d, out);
}

/* One blocking transfer on a queue of the device's own context. */
static int transfer(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size, int write) {
  const cl_test_api *cl = cl_test_api_get();
  cl_mem buf = gpupart_opencl_buffer(a);
  cl_context ctx = gpupart_opencl_context(dev);
  if (!cl || !buf || !ctx) return -1;
  cl_int err = CL_SUCCESS;
  cl_command_queue q = cl->clCreateCommandQueue(ctx, gpupart_opencl_device(dev), 0, &err);
  if (!q) return -1;
  err = write ? cl->clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, (size_t)size, data, 0, NULL, NULL)
              : cl->clEnqueueReadBuffer(q, buf, CL_TRUE, 0, (size_t)size, data, 0, NULL, NULL);
  cl->clReleaseCommandQueue(q);
  return err == CL_SUCCESS ? 0 : -1;
}

static int ocl_write(gpupart_device *dev, const gpupart_allocation *a, const void *data, uint64_t size) {
  return transfer(dev, a, (void *)data, size, 1);
}

static int ocl_read(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size) {
  return transfer(dev, a, data, size, 0);
}

static cl_uint context_refs(const cl_test_api *cl, cl_context ctx) {
  cl_uint refs = 0;
  cl->clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL);
  return refs;
}

/* A short life on adopted handles: partition, allocation, data through the driver. */
static int use_adopted(gpupart_context *ctx, cl_context cctx, cl_device_id dev, char *why, size_t n) {
  gpupart_opencl_desc od = {cctx, dev, 0};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL, .backend_desc = &od};
  gpupart_device *gdev = NULL;
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL;
  unsigned char in[4096], out[4096] = {0};
  memset(in, 0x5a, sizeof in);
  int rc = gpupart_device_open(ctx, &d, &gdev) || gpupart_partition_create(gdev, NULL, &p) ||
           gpupart_alloc(p, sizeof in, 0, &a);
  if (rc) snprintf(why, n, "adopting: %s", gpupart_last_error());
  if (!rc && (gpupart_opencl_context(gdev) != cctx || gpupart_opencl_device(gdev) != dev))
    rc = -1, snprintf(why, n, "gpupart_opencl_context/device do not return the adopted handles");
  if (!rc && (ocl_write(gdev, a, in, sizeof in) || ocl_read(gdev, a, out, sizeof out) || memcmp(in, out, sizeof in)))
    rc = -1, snprintf(why, n, "data written through the adopted context was not read back");
  gpupart_free(a);
  if (gdev && gpupart_device_close(gdev)) rc = -1, snprintf(why, n, "close: %s", gpupart_last_error());
  return rc;
}

/* The context's reference count once the driver has settled: PoCL drops the references
 * its finished commands and released buffers hold from a worker thread, a moment after
 * the calls that released them returned, so a count one above the application's is
 * given a bounded time (at most about 2 s) to come down. A reference gpupart kept never
 * comes down, and still fails. */
static cl_uint settled_refs(const cl_test_api *cl, cl_context ctx, cl_uint want) {
  cl_uint refs = context_refs(cl, ctx);
  for (int i = 0; i < 2000 && refs != want; i++) {
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    refs = context_refs(cl, ctx);
  }
  return refs;
}

/* The context must still work, and hold exactly the application's references. */
static int still_ours(const cl_test_api *cl, cl_context cctx, cl_uint refs, char *why, size_t n) {
  if (settled_refs(cl, cctx, refs) != refs)
    return snprintf(why, n, "context reference count %u after close, %u before", context_refs(cl, cctx), refs), -1;
  cl_int err = CL_SUCCESS;
  cl_mem m = cl->clCreateBuffer(cctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
  if (!m) return snprintf(why, n, "the adopted context no longer makes buffers (%d)", (int)err), -1;
  cl->clReleaseMemObject(m);
  return 0;
}

static int ocl_adopt_roundtrip(gpupart_context *ctx, char *why, size_t n) {
  const cl_test_api *cl = cl_test_api_get();
  cl_platform_id plats[8];
  cl_uint np = 0, nd = 0;
  cl_device_id dev = NULL;
  if (!cl || cl->clGetPlatformIDs(8, plats, &np) != CL_SUCCESS) return snprintf(why, n, "no OpenCL platform"), -1;
  for (cl_uint i = 0; i < np && !dev; i++) cl->clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd);
  cl_int err = CL_SUCCESS;
  cl_context cctx = dev ? cl->clCreateContext(NULL, 1, &dev, NULL, NULL, &err) : NULL;
  if (!cctx) return snprintf(why, n, "the test could not create its own context (%d)", (int)err), -1;
  cl_uint refs = context_refs(cl, cctx);
  int rc = use_adopted(ctx, cctx, dev, why, n);
  if (rc == 0) rc = still_ours(cl, cctx, refs, why, n);
  cl->clReleaseContext(cctx);
  return rc;
}

static gpupart_result ocl_open_instrumented(gpupart_context **ctx, const gpupart_device_desc *base,
                                            uint64_t max_live_blocks, gpupart_device **out, char *why, size_t n) {
  *out = NULL;
  gpupart_result rc = cl_shim_context(ctx, why, n);
  return rc ? rc : cl_shim_open(*ctx, base, max_live_blocks, out, why, n);
}

static int ocl_driver_bytes(gpupart_device *dev, uint64_t *bytes) {
  (void)dev;
  char why[256];
  cl_shim_state *s = cl_shim_state_get(why, sizeof why);
  if (!s) return -1;
  *bytes = s->bytes_live;
  return 0;
}

const conformance_adapter conformance_opencl = {.backend = GPUPART_BACKEND_OPENCL,
                                                .open = ocl_open,
                                                .write = ocl_write,
                                                .read = ocl_read,
                                                .adopt_roundtrip = ocl_adopt_roundtrip,
                                                .open_instrumented = ocl_open_instrumented,
                                                .refusal_code = CONFORMANCE_CODE_VARIES, /* -4, or none with SVM */
                                                .driver_bytes = ocl_driver_bytes};
