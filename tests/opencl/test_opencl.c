/* The OpenCL backend's own suite: what the conformance suite cannot ask of every backend
 * (the library path, platforms, adopted handles, sub-buffers, SVM, the driver's failures
 * at each call the backend makes). Tests run on whatever OpenCL driver is installed and
 * skip, saying why, where there is none; the failure paths use the counting shim
 * (cl_shim.c) in front of the real driver. Each test runs in its own process, so tests
 * set environment variables (GPUPART_OPENCL_LIBRARY, OCL_ICD_VENDORS, POCL_DEVICES)
 * before their first OpenCL call. */
#include "cl_test.h" /* first: it sets CL_TARGET_OPENCL_VERSION */

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "gpupart_opencl.h"

static gpupart_context *context(uint32_t flags) {
  gpupart_context_desc d = {.flags = flags};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

/* A context with the OpenCL devices counted, or a skip when there is no driver. */
static gpupart_context *need_opencl(uint32_t *count) {
  gpupart_context *ctx = context(GPUPART_CONTEXT_IGNORE_ENV);
  uint32_t n = 0;
  gpupart_result rc = gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n);
  if (rc == GPUPART_ENOBACKEND || (rc == GPUPART_OK && n == 0)) {
    char why[512];
    snprintf(why, sizeof why, "%s", rc ? gpupart_last_error() : "no OpenCL device");
    gpupart_context_destroy(ctx);
    cr_skip_test("no OpenCL driver or device here (%s)", why);
  }
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  if (count) *count = n;
  return ctx;
}

static gpupart_device *open_device(gpupart_context *ctx, uint32_t index, const gpupart_opencl_desc *od) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL, .index = index, .backend_desc = od};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static gpupart_partition *partition(gpupart_device *dev) {
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, NULL, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static gpupart_allocation *alloc(gpupart_partition *p, uint64_t size) {
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, size, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  return a;
}

static void finish(gpupart_context *ctx, gpupart_device *dev) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error());
}

/* The OpenCL device behind dev, through the tests' own loader. */
static const cl_test_api *api(void) {
  const cl_test_api *cl = cl_test_api_get();
  cr_assert_not_null(cl, "the driver gpupart loaded is not visible to the test");
  return cl;
}

/* Opens device 0 through the counting shim, in a context that reads the environment. */
static gpupart_device *open_shimmed(gpupart_context **ctx, uint64_t max_live_blocks, const gpupart_device_desc *base) {
  cr_assert_eq(gpupart_context_destroy(need_opencl(NULL)), GPUPART_OK); /* skips without a driver */
  char why[512] = "";
  cr_assert_eq(cl_shim_context(ctx, why, sizeof why), GPUPART_OK, "%s", why);
  gpupart_device *dev = NULL;
  cr_assert_eq(cl_shim_open(*ctx, base, max_live_blocks, &dev, why, sizeof why), GPUPART_OK, "%s", why);
  return dev;
}

static cl_shim_state *shim(void) {
  char why[512] = "";
  cl_shim_state *s = cl_shim_state_get(why, sizeof why);
  cr_assert_not_null(s, "%s", why);
  return s;
}

/* ---- loading --------------------------------------------------------------------- */

Test(opencl, library_path_that_does_not_exist_is_enobackend) {
  cl_test_scrub_env();
  setenv("GPUPART_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  gpupart_context *ctx = context(0);
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_not_null(strstr(gpupart_last_error(), "/nonexistent/libOpenCL.so.1"), "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENOBACKEND);
  cr_expect_null(dev);
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_AUTO, NULL, &n), GPUPART_OK, "AUTO skips a missing backend");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(opencl, library_that_is_not_opencl_is_enobackend) {
  cl_test_scrub_env();
  setenv("GPUPART_OPENCL_LIBRARY", "libm.so.6", 1);
  gpupart_context *ctx = context(0);
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_not_null(strstr(gpupart_last_error(), "clGetPlatformIDs"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* ---- platforms and devices ------------------------------------------------------- */

Test(opencl, no_platform_is_no_device) {
  char dir[] = "/tmp/gpupart-no-icd-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  setenv("OCL_ICD_VENDORS", dir, 1); /* the ICD loader reads vendors from an empty folder */
  gpupart_context *ctx = context(GPUPART_CONTEXT_IGNORE_ENV);
  uint32_t n = 99;
  gpupart_result rc = gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n);
  rmdir(dir);
  if (rc == GPUPART_ENOBACKEND) gpupart_context_destroy(ctx), cr_skip_test("no ICD loader here");
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  if (n) gpupart_context_destroy(ctx), cr_skip_test("this ICD loader ignores OCL_ICD_VENDORS");
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV);
  cr_expect_not_null(strstr(gpupart_last_error(), "no device 0"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(opencl, index_past_the_last_device_is_enodev) {
  uint32_t n = 0;
  gpupart_context *ctx = need_opencl(&n);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL, .index = n};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV);
  cr_expect_null(dev);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

/* Copies every installed ICD file twice into dir, so each platform appears twice. */
static int doubled_vendors(const char *dir) {
  DIR *d = opendir("/etc/OpenCL/vendors");
  int copied = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".icd") != 0) continue;
    char src[512], line[512] = "";
    snprintf(src, sizeof src, "/etc/OpenCL/vendors/%s", e->d_name);
    FILE *in = fopen(src, "r");
    if (!in) continue;
    if (!fgets(line, sizeof line, in)) line[0] = '\0';
    fclose(in);
    for (int copy = 0; copy < 2 && line[0]; copy++) {
      char dst[600];
      snprintf(dst, sizeof dst, "%s/%d-%s", dir, copy, e->d_name);
      FILE *out = fopen(dst, "w");
      if (out) fputs(line, out), fclose(out), copied++;
    }
  }
  if (d) closedir(d);
  return copied;
}

static void remove_vendors(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.') unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

Test(opencl, device_index_spans_platforms) {
  char dir[] = "/tmp/gpupart-icd-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  int copied = doubled_vendors(dir);
  setenv("OCL_ICD_VENDORS", dir, 1);
  gpupart_context *ctx = context(GPUPART_CONTEXT_IGNORE_ENV);
  gpupart_device_info info[16];
  uint32_t n = 16;
  gpupart_result rc = gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, info, &n);
  remove_vendors(dir);
  if (!copied || rc != GPUPART_OK || n < 2 || n > 16 || n % 2)
    gpupart_context_destroy(ctx), cr_skip_test("no ICD files to list twice (%d copied, %u devices)", copied, n);
  for (uint32_t i = 0; i < n; i++) {
    cr_expect_eq(info[i].index, i, "indexes count across platforms");
    cr_expect_str_eq(info[i].name, info[i % (n / 2)].name, "the second platform lists the same devices");
    cr_expect_not_null(strchr(info[i].name, '('), "the name carries the platform's: %s", info[i].name);
  }
  gpupart_device *dev = open_device(ctx, n - 1, NULL);
  gpupart_device_info got;
  cr_assert_eq(gpupart_device_get_info(dev, &got), GPUPART_OK);
  cr_expect_eq(got.index, n - 1);
  finish(ctx, dev);
}

Test(opencl, device_info_is_the_drivers) {
  gpupart_context *ctx = need_opencl(NULL);
  gpupart_device *dev = open_device(ctx, 0, NULL);
  const cl_test_api *cl = api();
  cl_device_id id = gpupart_opencl_device(dev);
  cl_ulong total = 0, max = 0;
  cl_uint bits = 0;
  cl->clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof total, &total, NULL);
  cl->clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL);
  cl->clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
  char ext[8192] = "";
  cl->clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  cr_expect_eq(info.backend, GPUPART_BACKEND_OPENCL);
  cr_expect_eq(info.total_bytes, total);
  cr_expect_leq(info.max_block_bytes, max);
  cr_expect_gt(info.max_block_bytes + info.min_alignment, max < total ? max : total, "only rounded to the alignment");
  cr_expect_geq(info.min_alignment, bits / 8, "sub-buffer origins need the base-address alignment");
  if (!strstr(ext, "cl_amd_device_attribute_query"))
    cr_expect_eq(info.free_bytes, UINT64_MAX, "free memory is unknown without AMD's query");
  else cr_expect_leq(info.free_bytes, total);
  finish(ctx, dev);
}

/* ---- adopting -------------------------------------------------------------------- */

/* The first two devices of any platforms; PoCL is asked for two CPU devices (other
 * drivers ignore the variable and need two real devices). */
static int two_devices(const cl_test_api *cl, cl_device_id dev[2]) {
  cl_platform_id plats[8];
  cl_uint np = 0, found = 0;
  cl->clGetPlatformIDs(8, plats, &np);
  for (cl_uint i = 0; i < np && found < 2; i++) {
    cl_uint nd = 0;
    if (cl->clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 2 - found, dev + found, &nd) == CL_SUCCESS)
      found += nd < 2 - found ? nd : 2 - found;
  }
  return found == 2;
}

Test(opencl, adopted_context_of_another_device_is_einval) {
  setenv("POCL_DEVICES", "pthread pthread", 0);
  gpupart_context *ctx = need_opencl(NULL);
  const cl_test_api *cl = api();
  cl_device_id dev[2];
  if (!two_devices(cl, dev)) gpupart_context_destroy(ctx), cr_skip_test("needs two OpenCL devices");
  cl_int err;
  cl_context c0 = cl->clCreateContext(NULL, 1, &dev[0], NULL, NULL, &err);
  cr_assert_not_null(c0);
  cl_uint before = 0, after = 0;
  cl->clGetContextInfo(c0, CL_CONTEXT_REFERENCE_COUNT, sizeof before, &before, NULL);
  gpupart_opencl_desc od = {c0, dev[1], 0};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL, .backend_desc = &od};
  gpupart_device *gdev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &gdev), GPUPART_EINVAL);
  cr_expect_null(gdev);
  cr_expect_not_null(strstr(gpupart_last_error(), "not one of"), "%s", gpupart_last_error());
  cl->clGetContextInfo(c0, CL_CONTEXT_REFERENCE_COUNT, sizeof after, &after, NULL);
  cr_expect_eq(after, before, "a refused adoption keeps no reference");
  cl->clReleaseContext(c0);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(opencl, adopting_needs_both_handles_and_known_flags) {
  gpupart_context *ctx = need_opencl(NULL);
  gpupart_device *dev = open_device(ctx, 0, NULL);
  cl_context c = gpupart_opencl_context(dev);
  cl_device_id id = gpupart_opencl_device(dev);
  const gpupart_opencl_desc bad[] = {{c, NULL, 0}, {NULL, id, 0}, {c, id, 0x80}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL, .backend_desc = &bad[i]};
    gpupart_device *other;
    cr_expect_eq(gpupart_device_open(ctx, &d, &other), GPUPART_EINVAL, "descriptor %zu", i);
    cr_expect_null(other);
  }
  finish(ctx, dev);
}

/* ---- memory ---------------------------------------------------------------------- */

static int transfer(gpupart_device *dev, cl_mem buf, void *data, size_t size, int write) {
  const cl_test_api *cl = api();
  cl_int err;
  cl_command_queue q = cl->clCreateCommandQueue(gpupart_opencl_context(dev), gpupart_opencl_device(dev), 0, &err);
  if (!q) return err;
  err = write ? cl->clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, size, data, 0, NULL, NULL)
              : cl->clEnqueueReadBuffer(q, buf, CL_TRUE, 0, size, data, 0, NULL, NULL);
  cl->clReleaseCommandQueue(q);
  return err;
}

Test(opencl, sub_buffer_is_exactly_the_allocation) {
  gpupart_context *ctx = need_opencl(NULL);
  gpupart_device *dev = open_device(ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a = alloc(p, 1000), *b = alloc(p, 5000);
  const cl_test_api *cl = api();
  for (gpupart_allocation *x = a; x; x = x == a ? b : NULL) {
    gpupart_allocation_info info;
    cr_assert_eq(gpupart_allocation_get_info(x, &info), GPUPART_OK);
    cl_mem buf = gpupart_opencl_buffer(x), parent = NULL;
    cr_assert_not_null(buf, "%s", gpupart_last_error());
    cr_expect_eq(gpupart_opencl_buffer(x), buf, "the sub-buffer is cached");
    size_t size = 0, offset = 0;
    cl->clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    cl->clGetMemObjectInfo(buf, CL_MEM_OFFSET, sizeof offset, &offset, NULL);
    cl->clGetMemObjectInfo(buf, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    cr_expect_eq(size, info.size);
    cr_expect_eq(offset, info.offset);
    cr_expect_eq((void *)parent, info.native_block);
  }
  gpupart_free(a);
  gpupart_free(b);
  finish(ctx, dev);
}

static const char *kernel_source =
    "__kernel void fill(__global int *p, int base) { size_t i = get_global_id(0); p[i] = base + (int)i; }\n";

/* Runs fill(pointer, base) over n ints, the pointer given as SVM. */
static int run_fill_svm(gpupart_device *dev, void *pointer, int base, size_t n) {
  const cl_test_api *cl = api();
  cl_context c = gpupart_opencl_context(dev);
  cl_device_id id = gpupart_opencl_device(dev);
  cl_int err;
  cl_program prog = cl->clCreateProgramWithSource(c, 1, &kernel_source, NULL, &err);
  if (!prog || (err = cl->clBuildProgram(prog, 1, &id, "", NULL, NULL)) != CL_SUCCESS) return -1;
  cl_kernel k = cl->clCreateKernel(prog, "fill", &err);
  cl_command_queue q = cl->clCreateCommandQueue(c, id, 0, &err);
  err = k && q ? cl->clSetKernelArgSVMPointer(k, 0, pointer) : -1;
  if (err == CL_SUCCESS) err = cl->clSetKernelArg(k, 1, sizeof base, &base);
  if (err == CL_SUCCESS) err = cl->clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = cl->clFinish(q);
  if (q) cl->clReleaseCommandQueue(q);
  if (k) cl->clReleaseKernel(k);
  cl->clReleaseProgram(prog);
  return err;
}

static int device_has_svm(gpupart_device *dev) {
  const cl_test_api *cl = api();
  char version[128] = "";
  cl_device_svm_capabilities caps = 0;
  cl_device_id id = gpupart_opencl_device(dev);
  cl->clGetDeviceInfo(id, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
  int major = 1;
  sscanf(version, "OpenCL %d", &major);
  if (major >= 2) cl->clGetDeviceInfo(id, CL_DEVICE_SVM_CAPABILITIES, sizeof caps, &caps, NULL);
  return (caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) != 0;
}

Test(opencl, device_address_is_an_svm_pointer_kernels_can_use) {
  gpupart_context *ctx = need_opencl(NULL);
  gpupart_device *dev = open_device(ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  enum { N = 4096 };
  gpupart_allocation *pad = alloc(p, 3000), *a = alloc(p, N * sizeof(int));
  gpupart_allocation_info info;
  cr_assert_eq(gpupart_allocation_get_info(a, &info), GPUPART_OK);
  if (!device_has_svm(dev)) {
    cr_expect_eq(info.device_address, 0, "no SVM, no device address");
    gpupart_free(a), gpupart_free(pad), finish(ctx, dev);
    cr_skip_test("the device has no coarse-grained SVM");
  }
  cr_assert_neq(info.device_address, 0);
  cr_assert_gt(info.offset, 0, "the second allocation is inside the block, not at its base");
  cr_assert_eq(run_fill_svm(dev, (void *)(uintptr_t)info.device_address, 7000, N), CL_SUCCESS, "the kernel failed");
  static int back[N];
  cr_assert_eq(transfer(dev, gpupart_opencl_buffer(a), back, sizeof back, 0), CL_SUCCESS);
  for (int i = 0; i < N; i++) cr_assert_eq(back[i], 7000 + i, "element %d written through the SVM pointer", i);
  gpupart_free(a);
  gpupart_free(pad);
  finish(ctx, dev);
}

Test(opencl, no_svm_flag_gives_plain_buffers) {
  gpupart_context *ctx = need_opencl(NULL);
  gpupart_opencl_desc od = {NULL, NULL, GPUPART_OPENCL_NO_SVM};
  gpupart_device *dev = open_device(ctx, 0, &od);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a = alloc(p, 4096);
  gpupart_allocation_info info;
  cr_assert_eq(gpupart_allocation_get_info(a, &info), GPUPART_OK);
  cr_expect_eq(info.device_address, 0);
  static char in[4096], out[4096];
  memset(in, 0x6b, sizeof in);
  cr_expect_eq(transfer(dev, gpupart_opencl_buffer(a), in, sizeof in, 1), CL_SUCCESS);
  cr_expect_eq(transfer(dev, gpupart_opencl_buffer(a), out, sizeof out, 0), CL_SUCCESS);
  cr_expect_eq(memcmp(in, out, sizeof in), 0);
  gpupart_free(a);
  finish(ctx, dev);
}

Test(opencl, interop_refuses_other_backends) {
  gpupart_context *ctx = context(GPUPART_CONTEXT_IGNORE_ENV);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK);
  cr_expect_null(gpupart_opencl_context(dev));
  cr_expect_not_null(strstr(gpupart_last_error(), "sim"), "%s", gpupart_last_error());
  cr_expect_null(gpupart_opencl_device(dev));
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a = alloc(p, 4096);
  cr_expect_null(gpupart_opencl_buffer(a));
  cr_expect_null(gpupart_opencl_buffer(NULL));
  cr_expect_str_eq(gpupart_last_error(), "opencl_buffer: allocation is NULL");
  cr_expect_null(gpupart_opencl_context(NULL));
  cr_expect_str_eq(gpupart_last_error(), "opencl_context: device is NULL");
  gpupart_free(a);
  finish(ctx, dev);
}

/* ---- what the driver sees (the shim) ---------------------------------------------- */

Test(opencl, everything_goes_back_to_the_driver) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a[3] = {alloc(p, 3 * MiB), alloc(p, 1000), alloc(p, 5 * MiB)};
  cr_expect_not_null(gpupart_opencl_buffer(a[0]));
  cr_expect_not_null(gpupart_opencl_buffer(a[2]));
  cl_shim_state *s = shim();
  cr_expect_eq(s->subbuffers_created, 2, "sub-buffers are made on first use only");
  for (int i = 0; i < 3; i++) gpupart_free(a[i]);
  cr_expect_eq(s->subbuffers_released, 2, "gpupart_free releases the sub-buffer");
  cr_expect_gt(s->blocks_created, 0);
  finish(ctx, dev);
  cr_expect_eq(s->blocks_released, s->blocks_created);
  cr_expect_eq(s->bytes_live, 0);
  cr_expect_eq(s->svm_frees, s->svm_allocs);
  cr_expect_eq(s->queues_released, s->queues_created);
  cr_expect_eq(s->contexts_released, s->contexts_created);
}

Test(opencl, a_block_the_driver_fails_to_back_is_edevmem_at_alloc) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  cl_shim_state *s = shim();
  s->write_error = CL_MEM_OBJECT_ALLOCATION_FAILURE; /* as a lazy driver reports it at first use */
  s->fail_writes = 1000;
  gpupart_allocation *a;
  cr_expect_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_EDEVMEM);
  cr_expect_null(a);
  cr_expect_not_null(strstr(gpupart_last_error(), "CL_MEM_OBJECT_ALLOCATION_FAILURE"), "%s", gpupart_last_error());
  cr_expect_gt(s->blocks_created, 0);
  cr_expect_eq(s->blocks_released, s->blocks_created, "each block that failed its first write went back");
  cr_expect_eq(s->svm_frees, s->svm_allocs);
  s->fail_writes = 0;
  a = alloc(p, 3 * MiB);
  gpupart_free(a);
  finish(ctx, dev);
}

Test(opencl, a_device_that_fails_to_open_keeps_nothing) {
  gpupart_context *ctx;
  /* A first device loads the shim; it is closed before counting starts. */
  cr_assert_eq(gpupart_device_close(open_shimmed(&ctx, 0, NULL)), GPUPART_OK);
  cl_shim_state *s = shim();
  *s = (cl_shim_state){.fail_queues = 1};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EBACKEND);
  cr_expect_null(dev);
  cr_expect_not_null(strstr(gpupart_last_error(), "command queue"), "%s", gpupart_last_error());
  cr_expect_eq(s->contexts_created, 1);
  cr_expect_eq(s->contexts_released, 1, "the context made for the device went back");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(opencl, a_failed_sub_buffer_is_reported_and_not_cached) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a = alloc(p, 4096);
  shim()->fail_subbuffers = 1;
  cr_expect_null(gpupart_opencl_buffer(a));
  cr_expect_not_null(strstr(gpupart_last_error(), "clCreateSubBuffer"), "%s", gpupart_last_error());
  cr_expect_not_null(gpupart_opencl_buffer(a), "the next call tries again: %s", gpupart_last_error());
  gpupart_free(a);
  finish(ctx, dev);
}

Test(opencl, request_above_the_largest_allocation_reaches_no_driver) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a;
  cr_expect_eq(gpupart_alloc(p, info.max_block_bytes + 1, 0, &a), GPUPART_EINVAL);
  cr_expect_not_null(strstr(gpupart_last_error(), "largest driver allocation"), "%s", gpupart_last_error());
  cl_shim_state *s = shim();
  cr_expect_eq(s->blocks_created + s->svm_allocs, 0, "refused before the driver");
  finish(ctx, dev);
}

/* ---- the driver's own codes and the context's host allocator ------------------------ */

Test(opencl, a_refused_block_carries_the_drivers_code) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  cl_shim_state *s = shim();
  s->write_error = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  s->fail_writes = 1000;
  gpupart_allocation *a;
  cr_expect_eq(gpupart_alloc(p, 3 * MiB, 0, &a), GPUPART_EDEVMEM);
  cr_expect_eq(gpupart_last_native_error(), CL_MEM_OBJECT_ALLOCATION_FAILURE, "native %lld: %s",
               (long long)gpupart_last_native_error(), gpupart_last_error());
  cr_expect_not_null(strstr(gpupart_last_error(), "CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)"), "%s", gpupart_last_error());
  s->fail_writes = 0;
  a = alloc(p, 3 * MiB);
  gpupart_free(a);
  finish(ctx, dev);
}

Test(opencl, a_failed_open_and_a_failed_sub_buffer_carry_the_drivers_code) {
  gpupart_context *ctx;
  gpupart_device *dev = open_shimmed(&ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  gpupart_allocation *a = alloc(p, 4096);
  shim()->fail_subbuffers = 1;
  cr_expect_null(gpupart_opencl_buffer(a));
  cr_expect_eq(gpupart_last_native_error(), CL_OUT_OF_RESOURCES, "%s", gpupart_last_error());
  gpupart_free(a);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  shim()->fail_queues = 1;
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_OPENCL};
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EBACKEND);
  cr_expect_eq(gpupart_last_native_error(), CL_OUT_OF_HOST_MEMORY, "%s", gpupart_last_error());
  cr_expect_not_null(strstr(gpupart_last_error(), "CL_OUT_OF_HOST_MEMORY"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(opencl, the_backend_takes_host_memory_from_the_contexts_allocator) {
  cr_assert_eq(gpupart_context_destroy(need_opencl(NULL)), GPUPART_OK); /* skips without a driver */
  test_counting c = {0};
  gpupart_context_desc cd = test_counting_desc(&c);
  gpupart_context *ctx;
  cr_assert_eq(gpupart_context_create(&cd, &ctx), GPUPART_OK);
  long before = c.calls;
  uint32_t n = 0;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, NULL, &n), GPUPART_OK, "%s", gpupart_last_error());
  long loaded = c.calls;
  cr_expect_gt(loaded, before, "the backend's state");
  gpupart_device_info info;
  uint32_t one = 1;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, &info, &one), GPUPART_OK);
  cr_expect_gt(c.calls, loaded, "the platform and device lists and the name strings of enumerate");
  gpupart_device *dev = open_device(ctx, 0, NULL);
  gpupart_partition *p = partition(dev);
  long opened = c.calls;
  gpupart_allocation *a = alloc(p, 4096);
  cr_expect_not_null(gpupart_opencl_buffer(a));
  gpupart_free(a);
  cr_expect_gt(c.calls, opened, "blocks and views are counted too");
  finish(ctx, dev);
  cr_expect_eq(c.live, 0, "%ld host allocations left behind", c.live);
}

Test(opencl, info_reports_block_granularity_and_a_pci_bus_id_field) {
  uint32_t n = 0;
  gpupart_context *ctx = need_opencl(&n);
  gpupart_device_info info;
  uint32_t one = 1;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_OPENCL, &info, &one), GPUPART_OK);
  cr_expect_eq(info.block_granularity, info.min_alignment, "a buffer may have any size");
  cr_expect_lt(strlen(info.pci_bus_id), sizeof info.pci_bus_id, "terminated (\"\" where the driver cannot tell)");
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
