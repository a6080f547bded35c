/* The OpenCL layer (interpose/opencl/) under programs that were not written for gpupart:
 * Debian's clinfo and cl_fill (linked to libOpenCL only), run as child processes with
 * OPENCL_LAYERS naming the layer, on whatever OpenCL device is present (PoCL in CI).
 * Each test asserts on what the program printed: the device size it was told, the MiB
 * it obtained and the code of the refusal. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interpose_test.h"

#define MIB (1024ull * 1024ull)

static const char *fill(void) {
  return ip_test_path("GPUPART_TEST_CL_FILL");
}

static char layer_env[4200];

/* OPENCL_LAYERS=<the layer>, and a device present, or the test is skipped. */
static const char *layer(void) {
  snprintf(layer_env, sizeof layer_env, "%s OPENCL_LAYERS=%s", ip_test_child_env(), ip_test_path("GPUPART_TEST_CL_LAYER"));
  char out[4096];
  ip_test_run(out, sizeof out, "%s buffer 1 1", fill());
  if (!strstr(out, "allocated 1 code 0")) cr_skip_test("no OpenCL device: %s", out);
  return layer_env;
}

/* Debian's clinfo 3.0.23 overflows one of its own sprintf buffers by a byte, which the
 * ASan runtime that a sanitizer build preloads into it reports: clinfo runs only in
 * plain builds (the other programs cover the layer there). */
static void need_clinfo(void) {
  if (system("command -v clinfo >/dev/null 2>&1")) cr_skip_test("clinfo is not installed");
  if (*ip_test_child_env()) cr_skip_test("clinfo's own overflow under a preloaded ASan runtime");
}

Test(cl_layer, clinfo_reports_the_limit_as_global_memory) {
  need_clinfo();
  char out[65536];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB clinfo --raw", layer());
  cr_assert_eq(ip_test_field(out, "CL_DEVICE_GLOBAL_MEM_SIZE"), 64 * MIB, "%s", out);
  cr_assert_eq(ip_test_field(out, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"), 64 * MIB);
}

Test(cl_layer, clinfo_without_a_limit_reports_the_device) {
  need_clinfo();
  char plain[65536], under[65536];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "clinfo --raw");
  ip_test_run(under, sizeof under, "env %s clinfo --raw", env);
  uint64_t real = ip_test_field(plain, "CL_DEVICE_GLOBAL_MEM_SIZE");
  /* the budget is the device rounded down to the granularity (2 MiB) */
  cr_assert_eq(ip_test_field(under, "CL_DEVICE_GLOBAL_MEM_SIZE"), real & ~(2 * MIB - 1), "%s", under);
  cr_assert_eq(ip_test_field(under, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"), ip_test_field(plain, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
}

static void refused_past(const char *mode) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s %s 1 200", layer(), fill(), mode);
  cr_assert(strstr(out, "global 67108864\n"), "%s", out);
  cr_assert(strstr(out, "allocated 64 code -4\n"), "%s: %s", mode, out); /* CL_MEM_OBJECT_ALLOCATION_FAILURE */
  cr_assert(strstr(out, "again 64 code -4\n"), "released objects give their bytes back: %s", out);
}

Test(cl_layer, buffers_are_refused_past_the_limit) { refused_past("buffer"); }
Test(cl_layer, buffers_with_properties_are_refused_past_the_limit) { refused_past("props"); }
Test(cl_layer, svm_is_refused_past_the_limit) { refused_past("svm"); }
Test(cl_layer, images_are_refused_past_the_limit) { refused_past("image"); }
Test(cl_layer, sub_buffers_take_no_more_of_the_limit) { refused_past("sub"); }

Test(cl_layer, a_pyopencl_script_is_refused_past_the_limit) {
  if (system("/usr/bin/python3 -c 'import pyopencl' 2>/dev/null")) cr_skip_test("python3-pyopencl is not installed");
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB /usr/bin/python3 %s", layer(),
              ip_test_path("GPUPART_TEST_CL_FILL_PY"));
  cr_assert(strstr(out, "global 67108864\nallocated 64 code -4\n"), "%s", out);
}

Test(cl_layer, without_a_limit_the_program_runs_as_before) {
  char plain[4096], under[4096];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "%s buffer 16 256", fill());
  ip_test_run(under, sizeof under, "env %s %s buffer 16 256", env, fill());
  cr_assert(strstr(plain, "allocated 256 code 0\nagain 256 code 0\n"), "%s", plain);
  cr_assert(strstr(under, "allocated 256 code 0\nagain 256 code 0\n"), "%s", under);
}

/* More than the device holds: the driver's own answer (CL_INVALID_BUFFER_SIZE on PoCL),
 * not a refusal of the layer's. */
Test(cl_layer, a_buffer_larger_than_the_device_gets_the_drivers_answer) {
  char plain[4096], under[4096];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "%s buffer 1048576 1048576", fill());
  ip_test_run(under, sizeof under, "env %s %s buffer 1048576 1048576", env, fill());
  const char *code = strstr(plain, "allocated 0 code ");
  cr_assert(code, "%s", plain);
  cr_assert(strstr(under, code), "'%s' lacks '%s'", under, code);
}

Test(cl_layer, a_configured_partition_named_by_gpupart_partition_sets_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_PARTITION=job GPUPART_PARTITIONS=job:32MiB %s buffer 1 200", layer(),
              fill());
  cr_assert(strstr(out, "global 33554432\n"), "%s", out);
  cr_assert(strstr(out, "allocated 32 code -4\n"), "%s", out);
}

Test(cl_layer, a_bad_configuration_leaves_the_program_unaccounted_and_says_so) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=lots %s buffer 1 8 2>&1", layer(), fill());
  cr_assert(strstr(out, "allocated 8 code 0\n"), "%s", out);
  cr_assert(strstr(out, "gpupart layer: context_create: GPUPART_ECONFIG"), "%s", out);
}

/* Two processes in one shared ledger share the 64 MiB budget: the first holds 40 MiB,
 * the second gets what is left (less the first one's unused block tail), never more. */
Test(cl_layer, two_processes_share_one_budget) {
  char dir[] = "/tmp/gpupart-cl-layer-XXXXXX", env[8192], out[4096];
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env, "%s GPUPART_MEMORY_LIMIT=64MiB GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s", layer(), dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s buffer 1 40 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert(strstr(holder.text, "allocated 40 code 0\n"), "%s", holder.text);
  ip_test_run(out, sizeof out, "env %s %s buffer 1 200", env, fill());
  unsigned got = 0;
  cr_assert_eq(sscanf(strstr(out, "allocated ") ? strstr(out, "allocated ") : "", "allocated %u code -4", &got), 1,
               "%s", out);
  cr_assert(got <= 24 && got >= 16, "the second process got %u MiB of the 24 left: %s", got, out);
  ip_test_finish(&holder);
  ip_test_run(out, sizeof out, "env %s %s buffer 1 200", env, fill());
  cr_assert(strstr(out, "allocated 64 code -4\n"), "the first one's bytes came back when it ended: %s", out);
  ip_test_cleanup_dir(dir);
}
