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

static const char *fill(void) { return ip_test_path("GPUPART_TEST_CL_FILL"); }

static char layer_env[4200];

/* OPENCL_LAYERS=<the layer>, and a device present, or the test is skipped. */
static const char *layer(void) {
  snprintf(layer_env, sizeof layer_env, "%s OPENCL_LAYERS=%s", ip_test_child_env(),
           ip_test_path("GPUPART_TEST_CL_LAYER"));
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

/* Two clinfo runs: PoCL's figure is pinned for the suite (POCL_MEMORY_LIMIT, meson.build),
 * as it derives it from the machine's memory at start-up and the two runs compared it
 * across a moment when memory moved. */
Test(cl_layer, clinfo_without_a_limit_reports_the_device) {
  need_clinfo();
  const char *pinned = getenv("POCL_MEMORY_LIMIT");
  cr_assert(pinned && *pinned, "PoCL's memory size is pinned (run the suite through meson test)");
  char plain[65536], under[65536];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "clinfo --raw");
  ip_test_run(under, sizeof under, "env %s clinfo --raw", env);
  uint64_t real = ip_test_field(plain, "CL_DEVICE_GLOBAL_MEM_SIZE");
  /* the budget is the device rounded down to the granularity (2 MiB) */
  cr_assert_eq(ip_test_field(under, "CL_DEVICE_GLOBAL_MEM_SIZE"), real & ~(2 * MIB - 1), "%s", under);
  cr_assert_eq(ip_test_field(under, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"),
               ip_test_field(plain, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
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
/* 64 pointers in one clEnqueueSVMFree, each taken from the map before the call. */
Test(cl_layer, svm_freed_by_an_enqueued_free_gives_its_bytes_back) { refused_past("svmq"); }
Test(cl_layer, images_are_refused_past_the_limit) { refused_past("image"); }
Test(cl_layer, sub_buffers_take_no_more_of_the_limit) { refused_past("sub"); }

/* PoCL made to show two devices: a buffer of a two-device context is accounted on the
 * first (the context's device list is longer than one handle). */
Test(cl_layer, buffers_of_a_context_with_two_devices_are_refused_past_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out,
              "env %s POCL_DEVICES='pthread pthread' CL_FILL_ALL_DEVICES=1 GPUPART_MEMORY_LIMIT=64MiB %s buffer 1 200",
              layer(), fill());
  if (!strstr(out, "context devices 2\n")) cr_skip_test("not two devices (not PoCL?): %s", out);
  cr_assert(strstr(out, "allocated 64 code -4\n"), "%s", out);
  cr_assert(strstr(out, "again 64 code -4\n"), "%s", out);
}

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

/* A configuration error fails closed: with a misspelt variable (which gpupart refuses)
 * the program ran unlimited; now every allocation is refused
 * (CL_MEM_OBJECT_ALLOCATION_FAILURE), and why is said once on stderr. */
Test(cl_layer, a_configuration_error_fails_closed_and_says_why_once) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMT=64MiB %s buffer 1 8 2>&1", layer(), fill());
  cr_assert(strstr(out, "allocated 0 code -4\n"), "%s", out);
  cr_assert(strstr(out, "again 0 code -4\n"), "%s", out);
  cr_assert_eq(ip_test_count(out, "gpupart layer:"), 1, "%s", out);
  cr_assert(strstr(out, "context_create: GPUPART_ECONFIG") && strstr(out, "GPUPART_MEMORY_LIMT"), "%s", out);
}

/* GPUPART_FAIL_OPEN=1: the operator's choice to let such a program run, unaccounted. */
Test(cl_layer, fail_open_lets_a_misconfigured_program_run_unaccounted) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=lots GPUPART_FAIL_OPEN=1 %s buffer 1 8 2>&1", layer(),
              fill());
  cr_assert(strstr(out, "allocated 8 code 0\n"), "%s", out);
  cr_assert(strstr(out, "gpupart layer: context_create: GPUPART_ECONFIG") && strstr(out, "not accounted"), "%s", out);
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

/* ---- the GPU's ledger: a gpupart application and programs under the layer ---------- */

#define TEST_UUID "00112233445566778899aabbccddeeff"

static char uuid_env[8400], app_env[4200];

/* The layer over a driver with cl_khr_device_uuid (the test double layer under it), and
 * the same double alone for the gpupart application, so both see one GPU's UUID. */
static const char *layer_over_uuid(void) {
  const char *uuid_layer = ip_test_path("GPUPART_TEST_CL_UUID_LAYER");
  layer();
  snprintf(uuid_env, sizeof uuid_env, "%s OPENCL_LAYERS=%s:%s CL_UUID_LAYER_UUID=" TEST_UUID, ip_test_child_env(),
           uuid_layer, ip_test_path("GPUPART_TEST_CL_LAYER"));
  snprintf(app_env, sizeof app_env, "OPENCL_LAYERS=%s CL_UUID_LAYER_UUID=" TEST_UUID, uuid_layer);
  return uuid_env;
}

/* The mirror carries the device's cl_khr_device_uuid UUID, which the opencl backend names
 * the GPU by: the application and the program under the layer are members of one ledger
 * file and share its 64 MiB budget. */
Test(cl_layer, a_gpupart_application_and_a_program_under_the_layer_share_the_gpus_ledger) {
  const char *env = layer_over_uuid();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_child app, prog;
  ip_test_app_start(&app, &s, app_env, "opencl", 40);
  cr_assert(strstr(app.text, "uuid " TEST_UUID "\nallocated 40 code 0\n"), "%s", app.text);
  ip_test_start(&prog, s.out_b, "env %s %s %s buffer 1 200 hold", env, s.env, fill());
  ip_test_wait_for(&prog, "holding");
  int got = ip_test_allocated(prog.text, -4);
  cr_assert(got >= 16 && got <= 24, "the program got %d MiB of the 24 the application left: %s", got, prog.text);
  cr_expect_eq(ip_test_ledger_files(s.dir), 1, "one ledger file for the GPU");
  static char top[1 << 16];
  ip_test_observe(top, sizeof top, s.dir, 0);
  cr_expect(strstr(top, "\"identity\": \"uuid:00112233-4455-6677-8899-aabbccddeeff\""), "%s", top);
  cr_expect(ip_test_has_member(top, ip_test_pid(&app), "gp_hold"), "the application is a member: %s", top);
  cr_expect(ip_test_has_member(top, ip_test_pid(&prog), "cl_fill"), "the program is a member: %s", top);
  ip_test_finish(&prog);
  ip_test_finish(&app);
  ip_test_shared_end(&s);
}

Test(cl_layer, a_program_under_the_layer_is_refused_while_a_gpupart_application_holds_the_budget) {
  const char *env = layer_over_uuid();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_child app;
  char out[4096];
  ip_test_app_start(&app, &s, app_env, "opencl", 64);
  cr_assert(strstr(app.text, "allocated 64 code 0\n"), "%s", app.text);
  ip_test_run(out, sizeof out, "env %s %s %s buffer 1 200", env, s.env, fill());
  cr_expect_eq(ip_test_allocated(out, -4), 0, "CL_MEM_OBJECT_ALLOCATION_FAILURE at once: %s", out);
  ip_test_finish(&app);
  ip_test_run(out, sizeof out, "env %s %s %s buffer 1 200", env, s.env, fill());
  cr_expect_eq(ip_test_allocated(out, -4), 64, "the whole budget once the application ended: %s", out);
  ip_test_shared_end(&s);
}

/* A device with neither cl_khr_device_uuid nor a bus id (PoCL) cannot be named as the
 * opencl backend names it ("opencl:INDEX"): the mirror keeps a ledger of its own. */
Test(cl_layer, without_a_uuid_or_bus_id_the_layer_keeps_a_ledger_of_its_own) {
  const char *env = layer();
  char ext[65536];
  ip_test_run(ext, sizeof ext, "clinfo --raw 2>/dev/null");
  if (strstr(ext, "cl_khr_device_uuid") || strstr(ext, "cl_khr_pci_bus_info")) cr_skip_test("the device names itself");
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_child app;
  char out[4096];
  ip_test_app_start(&app, &s, "", "opencl", 64);
  ip_test_run(out, sizeof out, "env %s %s %s buffer 1 200", env, s.env, fill());
  cr_expect_eq(ip_test_allocated(out, -4), 64, "a budget of its own: %s", out);
  cr_expect_eq(ip_test_ledger_files(s.dir), 2);
  ip_test_finish(&app);
  ip_test_shared_end(&s);
}

/* Two programs under the layer with one GPUPART_PARTITION join one partition: the second
 * sees the first's 32 MiB limit (the one who made it fixed it: the second's own 16 MiB
 * entry is not applied) and gets what the first left of it. */
Test(cl_layer, two_programs_with_one_partition_name_share_its_limit) {
  const char *env = layer();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_PARTITION=job");
  ip_test_child first;
  char out[4096];
  ip_test_start(&first, s.out_a, "env %s %s GPUPART_PARTITIONS=job:32MiB %s buffer 1 20 hold", env, s.env, fill());
  ip_test_wait_for(&first, "holding");
  cr_assert(strstr(first.text, "global 33554432\nallocated 20 code 0\n"), "%s", first.text);
  ip_test_run(out, sizeof out, "env %s %s GPUPART_PARTITIONS=job:16MiB %s buffer 1 200 2>&1", env, s.env, fill());
  cr_expect(strstr(out, "global 33554432\n"), "the joined partition's limit is reported: %s", out);
  int got = ip_test_allocated(out, -4);
  cr_expect(got >= 8 && got <= 12, "the second got %d MiB of the 12 the first left: %s", got, out);
  cr_expect_null(strstr(out, "gpupart layer:"), "no fallback: %s", out);
  ip_test_finish(&first);
  ip_test_shared_end(&s);
}

Test(cl_layer, a_program_under_the_layer_is_a_member_in_top_and_metrics) {
  const char *env = layer();
  ip_test_shared s;
  char program[4096];
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  snprintf(program, sizeof program, "%s buffer 1 10 hold", fill());
  ip_test_expect_member(&s, env, program, "cl_fill");
  ip_test_shared_end(&s);
}

/* A forked child holds copies of the parent's objects and of its gpupart context, whose
 * shared ledger is the parent's: releasing those copies must not take the parent's bytes
 * from the ledger (the parent, still holding them, could then take the limit again). */
Test(cl_layer, a_forked_child_releasing_its_copies_leaves_the_parents_accounting_alone) {
  const char *env = layer();
  ip_test_shared s;
  char out[4096];
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_run(out, sizeof out, "env %s %s %s buffer 1 40 fork", env, s.env, fill());
  cr_assert(strstr(out, "allocated 40 code 0\n"), "%s", out);
  cr_assert(strstr(out, "parent after the child 64 code -4\n"), "the parent still holds 40 of its 64 MiB: %s", out);
  ip_test_shared_end(&s);
}

/* cl_bench (docs/benchmarks.md) runs, its children without and with the layer (it stops
 * where the layer is not mapped as asked), and prints both figures; none is asserted. */
Test(cl_layer, the_overhead_benchmark_runs_with_and_without_the_layer) {
  char out[4096];
  const char *env = layer();
  ip_test_run(out, sizeof out, "env %s '%s' '%s' 2000 1", env, ip_test_path("GPUPART_TEST_CL_BENCH"),
              ip_test_path("GPUPART_TEST_CL_LAYER"));
  cr_assert(strstr(out, "clSetKernelArg (not accounted): without ") && strstr(out, "with the layer"), "%s", out);
  cr_assert(strstr(out, "clCreateBuffer+clReleaseMemObject 4 KiB (accounted): without ") && strstr(out, "ratio"), "%s",
            out);
}

/* A context of more devices than the layer's fixed list held (64: the device list did not
 * fit and the context's buffers ran unaccounted): 70 here, the test double layer under
 * the gpupart one playing such a context. */
Test(cl_layer, a_context_of_seventy_devices_is_held_to_the_limit) {
  char out[4096];
  layer();
  ip_test_run(out, sizeof out,
              "env %s OPENCL_LAYERS=%s:%s CL_UUID_LAYER_CONTEXT_DEVICES=70 GPUPART_MEMORY_LIMIT=64MiB %s "
              "buffer 1 200",
              ip_test_child_env(), ip_test_path("GPUPART_TEST_CL_UUID_LAYER"), ip_test_path("GPUPART_TEST_CL_LAYER"),
              fill());
  cr_assert(strstr(out, "allocated 64 code -4\n"), "%s", out);
}
