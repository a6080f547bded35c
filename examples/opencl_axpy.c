/* opencl_axpy: one OpenCL device split 3:1 into two partitions, each running a kernel on
 * buffers allocated from its own share, with every result checked.
 *
 *   opencl_axpy [DEVICE_INDEX]      (OpenCL devices are counted across all platforms)
 *
 * It opens the device with a 256 MiB budget (so the demo behaves the same on a laptop and
 * on a 140 GiB accelerator), creates partitions "main" (75%) and "side" (25%), computes
 * y = a*x + y on sub-buffers from each, shows that "side" cannot grow past its share, and,
 * where the device has shared virtual memory, runs the kernel once more on the
 * allocations' device addresses. Exit status 0 only if every check passed. */
#define CL_TARGET_OPENCL_VERSION 300
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpupart_opencl.h"

#define MiB ((uint64_t)1 << 20)

static const char *source = "__kernel void axpy(float a, __global const float *x, __global float *y) {\n"
                            "  size_t i = get_global_id(0);\n"
                            "  y[i] = a * x[i] + y[i];\n"
                            "}\n";

typedef struct demo {
  gpupart_device *dev;
  cl_context context;
  cl_command_queue queue;
  cl_kernel kernel;
} demo;

static int fail_cl(const char *what, cl_int err) {
  fprintf(stderr, "opencl_axpy: %s failed with OpenCL error %d\n", what, (int)err);
  return 1;
}

static int fail_gp(const char *what, gpupart_result rc) {
  fprintf(stderr, "opencl_axpy: %s: %s: %s\n", what, gpupart_result_name(rc), gpupart_last_error());
  return 1;
}

static int build_kernel(demo *d) {
  cl_device_id device = gpupart_opencl_device(d->dev);
  cl_int err;
  d->queue = clCreateCommandQueueWithProperties(d->context, device, NULL, &err);
  if (!d->queue) return fail_cl("clCreateCommandQueueWithProperties", err);
  cl_program program = clCreateProgramWithSource(d->context, 1, &source, NULL, &err);
  if (!program) return fail_cl("clCreateProgramWithSource", err);
  err = clBuildProgram(program, 1, &device, "", NULL, NULL);
  if (err == CL_SUCCESS) d->kernel = clCreateKernel(program, "axpy", &err);
  clReleaseProgram(program);
  return d->kernel ? 0 : fail_cl("building the axpy kernel", err);
}

/* x[i] and y[i] are small integers, so a*x + y is exact in float and checked exactly. */
static float x_of(size_t i) { return (float)(i % 1000); }
static float y_of(size_t i) { return (float)(i % 7); }

static int upload(demo *d, gpupart_allocation *x, gpupart_allocation *y, size_t n) {
  float *host = malloc(n * sizeof *host);
  if (!host) return fprintf(stderr, "opencl_axpy: out of host memory\n"), 1;
  cl_int err = CL_SUCCESS;
  for (int which = 0; which < 2 && err == CL_SUCCESS; which++) {
    for (size_t i = 0; i < n; i++) host[i] = which ? y_of(i) : x_of(i);
    err = clEnqueueWriteBuffer(d->queue, gpupart_opencl_buffer(which ? y : x), CL_TRUE, 0, n * sizeof *host, host, 0,
                               NULL, NULL);
  }
  free(host);
  return err == CL_SUCCESS ? 0 : fail_cl("clEnqueueWriteBuffer", err);
}

/* Applies y = a*x + y `times` times in all, then checks every element. */
static int check(demo *d, gpupart_allocation *y, size_t n, float a, int times) {
  float *host = malloc(n * sizeof *host);
  if (!host) return fprintf(stderr, "opencl_axpy: out of host memory\n"), 1;
  cl_int err =
      clEnqueueReadBuffer(d->queue, gpupart_opencl_buffer(y), CL_TRUE, 0, n * sizeof *host, host, 0, NULL, NULL);
  size_t bad = err == CL_SUCCESS ? 0 : n;
  for (size_t i = 0; err == CL_SUCCESS && i < n; i++) bad += host[i] != (float)times * a * x_of(i) + y_of(i);
  free(host);
  if (err != CL_SUCCESS) return fail_cl("clEnqueueReadBuffer", err);
  if (bad) fprintf(stderr, "opencl_axpy: %zu of %zu results are wrong\n", bad, n);
  return bad != 0;
}

static int run(demo *d, size_t n) {
  cl_int err = clEnqueueNDRangeKernel(d->queue, d->kernel, 1, NULL, &n, NULL, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clFinish(d->queue);
  return err == CL_SUCCESS ? 0 : fail_cl("running axpy", err);
}

/* The kernel on the allocations' own sub-buffers. */
static int axpy_buffers(demo *d, gpupart_allocation *x, gpupart_allocation *y, size_t n, float a) {
  cl_mem xb = gpupart_opencl_buffer(x), yb = gpupart_opencl_buffer(y);
  if (!xb || !yb) return fail_gp("gpupart_opencl_buffer", GPUPART_EBACKEND);
  cl_int err = clSetKernelArg(d->kernel, 0, sizeof a, &a);
  if (err == CL_SUCCESS) err = clSetKernelArg(d->kernel, 1, sizeof xb, &xb);
  if (err == CL_SUCCESS) err = clSetKernelArg(d->kernel, 2, sizeof yb, &yb);
  return err == CL_SUCCESS ? run(d, n) : fail_cl("clSetKernelArg", err);
}

/* The same kernel on the allocations' device addresses (shared virtual memory). */
static int axpy_svm(demo *d, uint64_t x, uint64_t y, size_t n, float a) {
  cl_int err = clSetKernelArg(d->kernel, 0, sizeof a, &a);
  if (err == CL_SUCCESS) err = clSetKernelArgSVMPointer(d->kernel, 1, (void *)(uintptr_t)x);
  if (err == CL_SUCCESS) err = clSetKernelArgSVMPointer(d->kernel, 2, (void *)(uintptr_t)y);
  return err == CL_SUCCESS ? run(d, n) : fail_cl("clSetKernelArgSVMPointer", err);
}

/* x and y of n floats each from partition p; axpy on sub-buffers, then on SVM pointers
 * where the device has them. */
static int use_partition(demo *d, gpupart_partition *p, size_t n) {
  const char *name = gpupart_partition_name(p);
  gpupart_allocation *x = NULL, *y = NULL;
  gpupart_result rc = gpupart_alloc(p, n * sizeof(float), 0, &x);
  if (rc == GPUPART_OK) rc = gpupart_alloc(p, n * sizeof(float), 0, &y);
  int bad = rc ? fail_gp(name, rc) : upload(d, x, y, n);
  if (!bad) bad = axpy_buffers(d, x, y, n, 2.0f) || check(d, y, n, 2.0f, 1);
  if (!bad) printf("%-5s axpy on %zu floats (two %" PRIu64 " MiB sub-buffers): ok\n", name, n, n * 4 / MiB);
  gpupart_allocation_info xi, yi;
  if (!bad && !gpupart_allocation_get_info(x, &xi) && !gpupart_allocation_get_info(y, &yi) && xi.device_address) {
    bad = axpy_svm(d, xi.device_address, yi.device_address, n, 2.0f) || check(d, y, n, 2.0f, 2);
    if (!bad)
      printf("%-5s axpy again through SVM pointers 0x%" PRIx64 ", 0x%" PRIx64 ": ok\n", name, xi.device_address,
             yi.device_address);
  }
  gpupart_free(x);
  gpupart_free(y);
  return bad;
}

/* "side" holds 25% of the budget: a request past it is refused before any driver call. */
static int show_limit(gpupart_partition *side) {
  gpupart_allocation *a = NULL, *b = NULL;
  gpupart_result rc = gpupart_alloc(side, 40 * MiB, 0, &a);
  if (rc == GPUPART_OK) rc = gpupart_alloc(side, 40 * MiB, 0, &b);
  int ok = rc == GPUPART_ELIMIT;
  printf("side  40 MiB + 40 MiB: %s (%s)\n", gpupart_result_name(rc), ok ? gpupart_last_error() : "expected ELIMIT");
  gpupart_free(a);
  gpupart_free(b);
  return !ok;
}

static void report(gpupart_partition *p) {
  gpupart_stats s;
  if (gpupart_partition_get_stats(p, &s)) return;
  printf("%-5s limit %" PRIu64 " MiB, peak in use %" PRIu64 " MiB, peak held %" PRIu64 " MiB, %" PRIu64
         " driver allocations\n",
         gpupart_partition_name(p), s.limit / MiB, s.peak_in_use / MiB, s.peak_reserved / MiB, s.driver_allocs);
}

static int with_partitions(demo *d) {
  gpupart_partition_desc md = {.name = "main", .fraction = 0.75}, sd = {.name = "side", .fraction = 0.25};
  gpupart_partition *main_p = NULL, *side = NULL;
  gpupart_result rc = gpupart_partition_create(d->dev, &md, &main_p);
  if (rc == GPUPART_OK) rc = gpupart_partition_create(d->dev, &sd, &side);
  if (rc) return fail_gp("gpupart_partition_create", rc);
  int bad = use_partition(d, main_p, 64 * MiB / sizeof(float)) || use_partition(d, side, 16 * MiB / sizeof(float)) ||
            show_limit(side);
  report(main_p);
  report(side);
  return bad;
}

int main(int argc, char **argv) {
  uint32_t index = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 0;
  gpupart_context *ctx = NULL;
  gpupart_result rc = gpupart_context_create(NULL, &ctx);
  if (rc) return fail_gp("gpupart_context_create", rc);
  demo d = {0};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_OPENCL, .index = index, .memory_limit = 256 * MiB};
  rc = gpupart_device_open(ctx, &dd, &d.dev);
  int bad = rc ? fail_gp("gpupart_device_open", rc) : 0;
  gpupart_device_info info;
  if (!bad && !gpupart_device_get_info(d.dev, &info))
    printf("device %u: %s, budget %" PRIu64 " MiB of %" PRIu64 " MiB\n", index, info.name,
           gpupart_device_budget(d.dev) / MiB, info.total_bytes / MiB);
  if (!bad) d.context = gpupart_opencl_context(d.dev), bad = build_kernel(&d);
  if (!bad) bad = with_partitions(&d);
  if (d.kernel) clReleaseKernel(d.kernel);
  if (d.queue) clReleaseCommandQueue(d.queue);
  if (d.dev && gpupart_device_close(d.dev)) bad = fail_gp("gpupart_device_close", GPUPART_EBUSY);
  gpupart_context_destroy(ctx);
  puts(bad ? "opencl_axpy: FAILED" : "opencl_axpy: all results correct");
  return bad;
}
