/* The OpenCL layer's cost, measured on whatever OpenCL device the ICD loader finds (PoCL
 * here), by an unmodified program (linked to libOpenCL only):
 *
 *   cl_bench LAYER [CALLS] [ROUNDS]
 * runs itself ROUNDS times (default 5) without and with OPENCL_LAYERS=LAYER, alternating,
 * and prints for each figure the best ns per operation of each and their ratio. A child
 * (`cl_bench --child CALLS`) times, on one buffer and one kernel of its own context:
 *   calls the layer does not account, CALLS (default 1000000) each: clGetMemObjectInfo
 *   (CL_MEM_SIZE), clSetKernelArg, clGetDeviceInfo(CL_DEVICE_MAX_COMPUTE_UNITS) (a call
 *   the layer intercepts and passes on, since it answers CL_DEVICE_GLOBAL_MEM_SIZE);
 *   an enqueue, CALLS / 100: clEnqueueNDRangeKernel of one work item and clFinish;
 *   a call it reports through, CALLS: clGetDeviceInfo(CL_DEVICE_GLOBAL_MEM_SIZE);
 *   accounted pairs, CALLS / 10: clCreateBuffer + clReleaseMemObject of 4 KiB.
 * Each child also says whether the layer is mapped into it (/proc/self/maps), and the
 * run stops if that is not as asked. LAYER may be any layer (one that intercepts
 * nothing shows what the loader's layer dispatch itself costs). The children inherit the environment (GPUPART_*
 * apply to the one under the layer). Not a test: no figure is asserted anywhere. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, readlink when built outside meson */
#endif
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ab_bench.h"

#define FIGURES 6

static const char *const names[FIGURES] = {
    "clGetMemObjectInfo (not accounted)",
    "clSetKernelArg (not accounted)",
    "clGetDeviceInfo MAX_COMPUTE_UNITS (intercepted, passed on)",
    "clEnqueueNDRangeKernel+clFinish (not accounted)",
    "clGetDeviceInfo GLOBAL_MEM_SIZE (intercepted, reported)",
    "clCreateBuffer+clReleaseMemObject 4 KiB (accounted)",
};

static const char source[] = "__kernel void k(__global int *a, int v) { if (get_global_id(0) == 0) a[0] = v; }";

typedef struct bench {
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue queue;
  cl_mem buf;
  cl_kernel kernel;
} bench;

/* Whether $OPENCL_LAYERS is set and a mapped file of this process has its last path
 * component (the layer's file name) in its path. */
static int layer_mapped(void) {
  const char *layer = getenv("OPENCL_LAYERS"), *name = layer ? strrchr(layer, '/') : NULL;
  return ab_mapped(name ? name + 1 : layer);
}

static int setup(bench *b) {
  cl_platform_id plat;
  cl_int err;
  const char *src = source;
  if (clGetPlatformIDs(1, &plat, NULL) || clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &b->dev, NULL)) return -1;
  if (!(b->ctx = clCreateContext(NULL, 1, &b->dev, NULL, NULL, &err))) return -1;
  if (!(b->queue = clCreateCommandQueueWithProperties(b->ctx, b->dev, NULL, &err))) return -1;
  if (!(b->buf = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE, 4096, NULL, &err))) return -1;
  cl_program prog = clCreateProgramWithSource(b->ctx, 1, &src, NULL, &err);
  if (!prog || clBuildProgram(prog, 1, &b->dev, NULL, NULL, NULL)) return -1;
  b->kernel = clCreateKernel(prog, "k", &err);
  clReleaseProgram(prog);
  return b->kernel && !clSetKernelArg(b->kernel, 0, sizeof b->buf, &b->buf) ? 0 : -1;
}

static void teardown(bench *b) {
  clReleaseKernel(b->kernel);
  clReleaseMemObject(b->buf);
  clReleaseCommandQueue(b->queue);
  clReleaseContext(b->ctx);
}

static int measure(bench *b, long calls, double ns[FIGURES]) {
  size_t size = 0, one = 1;
  cl_uint units = 0;
  cl_ulong global = 0;
  cl_int v = 0, err = 0;
  cl_mem m;
  AB_TIMED(ns[0], calls, clGetMemObjectInfo(b->buf, CL_MEM_SIZE, sizeof size, &size, NULL));
  AB_TIMED(ns[1], calls, clSetKernelArg(b->kernel, 1, sizeof v, &v));
  AB_TIMED(ns[2], calls, clGetDeviceInfo(b->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
  AB_TIMED(ns[3], calls / 100,
           clEnqueueNDRangeKernel(b->queue, b->kernel, 1, NULL, &one, NULL, 0, NULL, NULL) || clFinish(b->queue));
  AB_TIMED(ns[4], calls, clGetDeviceInfo(b->dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL));
  AB_TIMED(ns[5], calls / 10,
           !(m = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE, 4096, NULL, &err)) || clReleaseMemObject(m));
  return 0;
}

/* Prints "<layer mapped 0|1> <ns> ... <ns>". */
static int child(long calls) {
  bench b;
  double ns[FIGURES];
  if (setup(&b)) return fprintf(stderr, "cl_bench: no OpenCL device, or the kernel did not build\n"), 1;
  if (measure(&b, calls, ns)) return fprintf(stderr, "cl_bench: a call failed\n"), 1;
  ab_child_print(layer_mapped(), ns, FIGURES);
  teardown(&b);
  return 0;
}

/* A child with OPENCL_LAYERS=layer, or without any layer. */
static void command(char *cmd, size_t n, const char *self, const char *layer, int with, long calls) {
  if (with) snprintf(cmd, n, "env OPENCL_LAYERS='%s' '%s' --child %ld", layer, self, calls);
  else snprintf(cmd, n, "env -u OPENCL_LAYERS '%s' --child %ld", self, calls);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child(atol(argv[2]));
  if (argc < 2) return fprintf(stderr, "usage: cl_bench LAYER [CALLS] [ROUNDS]\n"), 2;
  long calls = argc > 2 ? atol(argv[2]) : 1000000, rounds = argc > 3 ? atol(argv[3]) : 5;
  char header[256];
  if (rounds < 1) rounds = 1;
  snprintf(header, sizeof header, "best of %ld rounds, %ld calls (enqueues %ld, pairs %ld) per child:\n", rounds, calls,
           calls / 100 > 0 ? calls / 100 : 1, calls / 10 > 0 ? calls / 10 : 1);
  ab_bench b = {"cl_bench", FIGURES, names, command};
  return ab_run(&b, argv[1], calls, rounds, header);
}
