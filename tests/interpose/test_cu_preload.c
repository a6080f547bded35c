/* The CUDA preload library (interpose/cuda/) on an unmodified driver-API program,
 * tests/interpose/cu_fill.c, linked against the driver test double built as libcuda.so.1
 * (4 GiB, one device) and run under LD_PRELOAD=libgpupart_preload.so: refusals past the
 * limit without a driver call, the limit reported as the device's size, the budget given
 * back at free, each route by which a program finds the driver's functions, each kind of
 * allocation, two processes sharing one partition, the program unchanged without a
 * limit, and the process as a member in `gpupart top --json`. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose_test.h"

#define MIB (1024ull * 1024ull)

/* The variables that put a child under the preload library. */
static const char *preload(void) {
  static char env[4096];
  snprintf(env, sizeof env, "%s LD_PRELOAD='%s'", ip_test_child_env(), ip_test_path("GPUPART_TEST_CU_PRELOAD"));
  return env;
}

static const char *fill(void) { return ip_test_path("GPUPART_TEST_CU_FILL"); }

/* "allocated N code C" (or "again ..."): N, with C in *code. */
static int blocks(const char *out, const char *what, int *code) {
  char key[64];
  int n = -1;
  snprintf(key, sizeof key, "%s ", what);
  const char *at = strstr(out, key);
  *code = -1;
  if (at) sscanf(at + strlen(key), "%d code %d", &n, code);
  return n;
}

/* The free or total figure of a "what: code 0 free F total T" line. */
static uint64_t info(const char *out, const char *what, const char *field) {
  char key[64];
  snprintf(key, sizeof key, "%s: code 0 ", what);
  const char *at = strstr(out, key);
  return at ? ip_test_field(at + strlen(key), field) : 0;
}

static void expect_refused_at_the_limit(const char *route, const char *kind) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s %s %s 1 200", preload(), fill(), route, kind);
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "%s/%s: 1 MiB blocks under 64 MiB: %s", route, kind, out);
  int again = blocks(out, "again", &code);
  cr_assert(again == n && code == 2, "%s/%s: the same again after the frees: %s", route, kind, out);
}

Test(cu_preload, allocations_past_the_limit_are_out_of_memory_without_a_driver_call) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s link plain 1 200", preload(), fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64, "%s", out);
  cr_assert_eq(code, 2, "CUDA_ERROR_OUT_OF_MEMORY: %s", out);
  cr_assert_eq((int)ip_test_field(out, "driver allocs"), n, "the refused call never reached the driver: %s", out);
}

/* A configuration error fails closed: with a misspelt variable (which gpupart refuses)
 * the program ran unlimited; now every allocation is CUDA_ERROR_OUT_OF_MEMORY without a
 * driver call, cuMemGetInfo's free is 0, and why is said once on stderr.
 * GPUPART_FAIL_OPEN=1 is the operator's choice to let it run unaccounted. */
Test(cu_preload, a_configuration_error_fails_closed_and_says_why_once) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMT=64MiB %s link plain 1 8 2>&1", preload(), fill());
  cr_assert_eq(blocks(out, "allocated", &code), 0, "%s", out);
  cr_assert_eq(code, 2, "CUDA_ERROR_OUT_OF_MEMORY: %s", out);
  cr_assert_eq((int)ip_test_field(out, "driver allocs"), 0, "%s", out);
  cr_assert(strstr(out, "start: code 0 free 0 "), "%s", out);
  cr_assert_eq(ip_test_count(out, "gpupart layer:"), 1, "%s", out);
  cr_assert(strstr(out, "context_create: GPUPART_ECONFIG") && strstr(out, "GPUPART_MEMORY_LIMT"), "%s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMT=64MiB GPUPART_FAIL_OPEN=1 %s link plain 1 8 2>&1", preload(),
              fill());
  cr_assert(blocks(out, "allocated", &code) == 8 && code == 0 && strstr(out, "not accounted"), "%s", out);
}

/* In arena mode too: the arena serves nothing past a refusal. */
Test(cu_preload, arena_mode_fails_closed_too) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=lots %s link plain 1 8 2>&1",
              preload(), fill());
  cr_assert(blocks(out, "allocated", &code) == 0 && code == 2, "%s", out);
}

Test(cu_preload, mem_get_info_and_device_total_mem_report_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s link plain 8 3", preload(), fill());
  cr_assert_eq(ip_test_field(out, "device total: code 0 bytes"), 64 * MIB, "%s", out);
  cr_assert_eq(info(out, "start", "total"), 64 * MIB, "%s", out);
  cr_assert_eq(info(out, "start", "free"), 64 * MIB, "%s", out);
  cr_assert_eq(info(out, "full", "total"), 64 * MIB, "%s", out);
  cr_assert_eq(info(out, "full", "free"), 40 * MIB, "64 MiB less the 24 held: %s", out);
}

Test(cu_preload, freeing_gives_the_budget_back) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s link plain 1 200", preload(), fill());
  cr_assert_eq(info(out, "after free", "free"), 64 * MIB, "%s", out);
  expect_refused_at_the_limit("link", "plain");
}

Test(cu_preload, the_cu_get_proc_address_route_is_hooked) { expect_refused_at_the_limit("proc", "plain"); }

Test(cu_preload, the_dlsym_route_is_hooked) { expect_refused_at_the_limit("dlsym", "plain"); }

Test(cu_preload, the_cuda_runtime_route_dlsym_then_cu_get_proc_address_is_hooked) {
  expect_refused_at_the_limit("cudart", "plain");
}

Test(cu_preload, pitch_allocations_account_pitch_times_height) {
  /* 4-byte rows at a 512-byte pitch: width * height would be 8 KiB a block, 200 of them fit */
  expect_refused_at_the_limit("link", "pitch");
}

Test(cu_preload, managed_allocations_are_accounted) { expect_refused_at_the_limit("link", "managed"); }

Test(cu_preload, stream_ordered_allocations_are_accounted_until_cu_mem_free_async) {
  expect_refused_at_the_limit("link", "async");
  expect_refused_at_the_limit("cudart", "async");
}

Test(cu_preload, pool_allocations_are_accounted_until_cu_mem_free_async) {
  expect_refused_at_the_limit("link", "pool");
  expect_refused_at_the_limit("dlsym", "pool");
}

Test(cu_preload, without_a_limit_the_program_runs_as_before) {
  char plain[4096], under[4096];
  ip_test_run(plain, sizeof plain, "%s link plain 16 200", fill());
  ip_test_run(under, sizeof under, "env %s %s link plain 16 200", preload(), fill());
  cr_assert(strstr(plain, "allocated 200 code 0\n") && strstr(plain, "again 200 code 0\n"), "%s", plain);
  cr_assert_str_eq(under, plain, "the same figures under the preload");
}

Test(cu_preload, two_processes_with_one_partition_name_share_its_limit) {
  char dir[] = "/tmp/gpupart-cu-preload-XXXXXX", env[8192], out[4096];
  int code = 0;
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env,
           "%s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=job GPUPART_PARTITIONS=job:48MiB", preload(),
           dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s link plain 1 30 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert(strstr(holder.text, "allocated 30 code 0\n"), "%s", holder.text);
  ip_test_run(out, sizeof out, "env %s %s link plain 1 200", env, fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 14 && n <= 18 && code == 2, "the second process got %d MiB of the 18 left: %s", n, out);
  cr_assert_eq(info(out, "start", "total"), 48 * MIB, "%s", out);
  ip_test_finish(&holder);
  ip_test_run(out, sizeof out, "env %s %s link plain 1 200", env, fill());
  n = blocks(out, "allocated", &code);
  cr_assert(n >= 44 && n <= 48 && code == 2, "the first one's bytes came back when it ended: %s", out);
  ip_test_cleanup_dir(dir);
}

Test(cu_preload, a_process_holding_memory_is_a_member_in_gpupart_top) {
  const char *gpupart = getenv("GPUPART_TEST_GPUPART");
  if (!gpupart) cr_skip_test("the gpupart command is not built (-Dtools=disabled)");
  char dir[] = "/tmp/gpupart-cu-top-XXXXXX", out[65536], pid[64];
  cr_assert(mkdtemp(dir));
  ip_test_child holder;
  ip_test_start(&holder, dir,
                "env %s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=topjob %s link plain 1 12 hold",
                preload(), dir, fill());
  ip_test_wait_for(&holder, "holding");
  snprintf(pid, sizeof pid, "\"pid\": %lu", (unsigned long)ip_test_field(holder.text, "holding pid"));
  ip_test_run(out, sizeof out, "%s top --json --ledger-dir %s", gpupart, dir);
  cr_assert(strstr(out, "\"name\": \"topjob\""), "the partition: %s", out);
  cr_assert(strstr(out, pid), "the member %s: %s", pid, out);
  cr_assert(strstr(out, "\"command\": \"cu_fill\""), "named after the program: %s", out);
  ip_test_finish(&holder);
  ip_test_cleanup_dir(dir);
}

/* The preload's mirror is named by the GPU's UUID (the double's device 0 is
 * c0c1c2c3-...), so a gpupart application on the cuda backend and a program under the
 * preload meet in one ledger and share its budget. */
Test(cu_preload, a_gpupart_application_and_a_program_under_the_preload_share_the_gpus_ledger) {
  const char *hold = getenv("GPUPART_TEST_GP_HOLD"), *gpupart = getenv("GPUPART_TEST_GPUPART");
  if (!hold || !gpupart) cr_skip_test("gp_hold or the gpupart command is not built");
  ip_test_shared s;
  char out[65536], prefix[4096];
  int code = 0;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  /* gp_hold is built as the library is (sanitized with it): no child variables */
  snprintf(prefix, sizeof prefix, "GPUPART_CUDA_LIBRARY=%s", ip_test_path("GPUPART_TEST_CU_LIBCUDA"));
  ip_test_child app;
  ip_test_app_start(&app, &s, prefix, "cuda", 40);
  cr_assert(strstr(app.text, "uuid c0c1c2c3c4c5c6c7c8c9cacbcccdcecf"), "the double's GPU: %s", app.text);
  ip_test_run(out, sizeof out, "env %s %s GPUPART_PARTITION=job %s link plain 1 200", preload(), s.env, fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 20 && n <= 24 && code == 2, "the program got %d MiB of the 24 the application left: %s", n, out);
  cr_assert_eq(ip_test_ledger_files(s.dir), 1, "one ledger for the GPU");
  ip_test_observe(out, sizeof out, s.dir, 0);
  cr_assert(strstr(out, "c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf"), "keyed by the GPU's UUID: %s", out);
  ip_test_finish(&app);
  ip_test_shared_end(&s);
}

Test(cu_preload, the_overhead_benchmark_runs_with_and_without_the_preload) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s %s '%s' 2000 1", ip_test_child_env(), ip_test_path("GPUPART_TEST_CU_BENCH"),
              ip_test_path("GPUPART_TEST_CU_PRELOAD"));
  cr_assert(strstr(out, "with the preload") && strstr(out, "ratio"), "%s", out);
}

Test(cu_preload, a_forked_child_is_a_member_of_its_own) {
  char dir[] = "/tmp/gpupart-cu-fork-XXXXXX", out[4096];
  int code = 0;
  cr_assert(mkdtemp(dir));
  /* the parent holds 30 of 48 MiB, the child takes the 18 left and ends without freeing:
   * as a member of its own it is reaped, so the parent gets the 18 again */
  ip_test_run(out, sizeof out,
              "env %s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=job "
              "GPUPART_PARTITIONS=job:48MiB %s link plain 1 30 fork",
              preload(), dir, fill());
  cr_assert(strstr(out, "allocated 30 code 0\n"), "%s", out);
  int child = blocks(out, "child allocated", &code);
  cr_assert(child >= 14 && child <= 18 && code == 2, "the child shares the partition's limit: %s", out);
  int parent = blocks(out, "parent after the child", &code);
  cr_assert(parent == child && code == 2, "the child's bytes went with it: %s", out);
  ip_test_cleanup_dir(dir);
}

Test(cu_preload, dlsym_rtld_next_answers_for_the_caller) {
  char plain[4096], under[4096];
  ip_test_run(plain, sizeof plain, "%s link plain 1 1", fill());
  ip_test_run(under, sizeof under, "env %s %s link plain 1 1", preload(), fill());
  cr_assert(strstr(plain, "RTLD_NEXT finds the first definition: yes"), "%s", plain);
  cr_assert(strstr(under, "RTLD_NEXT finds the first definition: yes"), "the preload's dlsym, not glibc's: %s", under);
}

Test(cu_preload, threads_allocating_at_once_leave_the_accounting_balanced) {
  char out[8192];
  int code = 0;
  /* 4 threads, 8 MiB blocks, 16 MiB: at most two blocks live at once, some are refused */
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=16MiB %s link plain 8 2000 threads", preload(), fill());
  cr_assert(strstr(out, "threads: "), "%s", out);
  cr_assert_eq(info(out, "after threads", "free"), 16 * MIB, "every block given back: %s", out);
  cr_assert_eq(blocks(out, "allocated", &code), 2, "%s", out);
  cr_assert_eq(code, 2, "%s", out);
}

Test(cu_preload, the_per_thread_stream_variants_are_hooked_and_old_versions_left_alone) {
  char out[4096];
  expect_refused_at_the_limit("ptds", "async");
  expect_refused_at_the_limit("ptds", "pool");
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s ptds async 1 10", preload(), fill());
  cr_assert(strstr(out, "driver ptsz calls 10\n"), "the hooks call the variants asked for: %s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s proc plain 1 1", preload(), fill());
  cr_assert(strstr(out, "cuMemAlloc at 3010 is the legacy entry: yes"), "%s", out);
}

/* A shared ledger holds names of 63 bytes at most: a longer GPUPART_PARTITION (or program
 * name) is cut and hashed to one, never left unaccounted; every process given the same
 * long name meets in the same partition. */
Test(cu_preload, a_partition_or_program_name_too_long_for_the_shared_ledger_is_still_accounted) {
  char dir[] = "/tmp/gpupart-cu-long-XXXXXX", env[8192], out[4096], link[512], name[80];
  int code = 0;
  cr_assert(mkdtemp(dir));
  memset(name, 'n', 70), name[70] = '\0';
  snprintf(env, sizeof env, "%s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_MEMORY_LIMIT=64MiB", preload(), dir);
  ip_test_run(out, sizeof out, "env %s GPUPART_PARTITION=%s-é-%s %s link plain 1 200 2>&1", env, name, name, fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "a 145-byte GPUPART_PARTITION: %s", out);
  snprintf(link, sizeof link, "%s/%s", dir, name);
  cr_assert_eq(symlink(fill(), link), 0);
  ip_test_run(out, sizeof out, "env %s %s link plain 1 200 2>&1", env, link);
  n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "a 70-byte program name: %s", out);
  unlink(link);
  ip_test_cleanup_dir(dir);
}

/* A program started with an empty argv[0] has no name to name its partition after. */
Test(cu_preload, a_program_started_without_a_name_is_still_accounted) {
  char out[4096];
  int code = 0;
  if (system("command -v perl >/dev/null 2>&1")) cr_skip_test("perl (to exec with an empty argv[0]) is not installed");
  ip_test_run(out, sizeof out,
              "env %s GPUPART_MEMORY_LIMIT=64MiB perl -e 'exec {$ARGV[0]} \"\", @ARGV[1..$#ARGV]' %s "
              "link plain 1 200 2>&1",
              preload(), fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "%s", out);
}

static const char *edge(void) { return ip_test_path("GPUPART_TEST_CU_EDGE"); }

/* NULL arguments, zero sizes, unknown, NULL and twice-freed pointers, refused flags: each
 * call answers as the driver does without the library, and nothing stays accounted. */
Test(cu_preload, bad_arguments_get_the_drivers_answers_and_leave_nothing_accounted) {
  char plain[4096], under[4096];
  ip_test_run(plain, sizeof plain, "%s bad", edge());
  ip_test_run(under, sizeof under, "env %s GPUPART_MEMORY_LIMIT=64MiB %s bad", preload(), edge());
  cr_assert(strstr(plain, "bad calls done\n"), "%s", plain);
  cr_assert(strstr(under, "bad calls done\n"), "no crash under the preload: %s", under);
  *strstr(plain, "after bad calls") = '\0';
  cr_assert(strncmp(under, plain, strlen(plain)) == 0, "the same codes:\n%s\nunder the preload:\n%s", plain, under);
  cr_assert_eq(info(under, "after bad calls", "free"), 64 * MIB, "nothing left accounted: %s", under);
}

Test(cu_preload, a_pitch_allocation_whose_size_overflows_is_refused_before_the_driver) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s pitch", preload(), edge());
  cr_assert(strstr(out, "pitch overflow code 1\n"), "CUDA_ERROR_INVALID_VALUE, not a wrapped size: %s", out);
  cr_assert(strstr(out, "driver allocs 0\n"), "%s", out);
}

/* A context destroyed with memory in it frees that memory in the driver, unseen by the
 * library; when the driver hands one of those addresses out again, the old record goes. */
Test(cu_preload, a_pointer_the_driver_reuses_after_freeing_it_with_its_context_is_not_counted_twice) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s context", preload(), edge());
  int n = blocks(out, "after destroy", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "the 32 MiB of the destroyed context came back: %s", out);
}

/* With a shared ledger, cuMemGetInfo's free is what the process could still allocate:
 * the partition's limit less what every member holds, and the budget less what every
 * process holds, so a program that sizes itself by it fits beside the others. */
/* "other" is configured beside the program's own "job", before or after it: the figures
 * are job's either way. */
static void expect_free_of_the_own_partition(const char *partitions) {
  char dir[] = "/tmp/gpupart-cu-info-XXXXXX", env[8192], out[4096];
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env,
           "%s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=job "
           "GPUPART_PARTITIONS=%s",
           preload(), dir, partitions);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s link plain 1 30 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert_eq(info(holder.text, "full", "free"), 18 * MIB, "its own partition's figures, not other's: %s",
               holder.text);
  ip_test_run(out, sizeof out, "env %s %s link plain 1 5", env, fill());
  cr_assert_eq(info(out, "start", "total"), 48 * MIB, "%s", out);
  cr_assert_eq(info(out, "start", "free"), 18 * MIB, "48 MiB less the other member's 30: %s", out);
  cr_assert_eq(info(out, "full", "free"), 13 * MIB, "and less its own 5: %s", out);
  ip_test_finish(&holder);
  ip_test_cleanup_dir(dir);
}

Test(cu_preload, mem_get_info_free_leaves_out_what_the_other_members_hold) {
  expect_free_of_the_own_partition("other:8MiB,job:48MiB");
}

Test(cu_preload, mem_get_info_free_is_the_own_partitions_whatever_is_configured_after_it) {
  expect_free_of_the_own_partition("job:48MiB,other:8MiB");
}

Test(cu_preload, mem_get_info_free_leaves_out_what_a_gpupart_application_holds_of_the_budget) {
  const char *hold = getenv("GPUPART_TEST_GP_HOLD");
  if (!hold) cr_skip_test("gp_hold is not built");
  ip_test_shared s;
  char out[65536], prefix[4096];
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  /* gp_hold is built as the library is (sanitized with it): no child variables */
  snprintf(prefix, sizeof prefix, "GPUPART_CUDA_LIBRARY=%s", ip_test_path("GPUPART_TEST_CU_LIBCUDA"));
  ip_test_child app;
  ip_test_app_start(&app, &s, prefix, "cuda", 40);
  ip_test_run(out, sizeof out, "env %s %s GPUPART_PARTITION=job %s link plain 1 1", preload(), s.env, fill());
  cr_assert_eq(info(out, "start", "total"), 64 * MIB, "%s", out);
  uint64_t free_bytes = info(out, "start", "free");
  /* the application's 40 MiB are held in blocks of gpupart's growth, a little more */
  cr_assert(free_bytes >= 20 * MIB && free_bytes <= 24 * MIB, "the budget less the application's 40 MiB: %s", out);
  ip_test_finish(&app);
  ip_test_shared_end(&s);
}

/* Managed memory may oversubscribe the device: one allocation larger than the whole
 * device (4 GiB) is past a limit before the driver is asked, not left to the driver. */
Test(cu_preload, an_allocation_larger_than_the_device_is_refused_before_the_driver_under_a_limit) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s link managed 5000 1", preload(), fill());
  cr_assert(blocks(out, "allocated", &code) == 0 && code == 2, "%s", out);
  cr_assert(strstr(out, "driver allocs 0\n"), "refused without a driver call: %s", out);
  ip_test_run(out, sizeof out, "env %s %s link managed 5000 1", preload(), fill());
  cr_assert(strstr(out, "driver allocs 1\n"), "without a limit the driver answers: %s", out);
}

/* ---- arena mode (GPUPART_PRELOAD_ARENA=1) ------------------------------------------ */

Test(cu_preload, arena_mode_serves_allocations_from_blocks_with_few_driver_calls) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 %s link plain 1 200", preload(), fill());
  cr_assert(strstr(out, "allocated 200 code 0\n") && strstr(out, "again 200 code 0\n"), "%s", out);
  uint64_t driver = ip_test_field(out, "driver allocs");
  cr_assert(driver >= 1 && driver <= 50, "200 allocations in growth blocks, not 200 driver calls: %s", out);
  cr_assert_eq(info(out, "after free", "free"), info(out, "start", "free"), "the cached blocks count as free: %s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 %s link plain 1 200 threads", preload(), fill());
  cr_assert(strstr(out, "threads: 0 refused") && blocks(out, "allocated", &code) == 200, "%s", out);
}

Test(cu_preload, arena_mode_holds_the_limit_in_blocks_and_gives_them_back) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s link plain 1 200",
              preload(), fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 56 && n <= 64 && code == 2, "1 MiB allocations in blocks under 64 MiB: %s", out);
  cr_assert(ip_test_field(out, "driver allocs") < (uint64_t)n, "fewer blocks than allocations: %s", out);
  cr_assert_eq(info(out, "start", "total"), 64 * MIB, "%s", out);
  cr_assert_eq(info(out, "after free", "free"), 64 * MIB, "%s", out);
  cr_assert(blocks(out, "again", &code) == n && code == 2, "the same again from the cached blocks: %s", out);
}

Test(cu_preload, arena_mode_leaves_other_kinds_of_allocation_to_the_driver_accounted_as_before) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s link managed 1 200",
              preload(), fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "%s", out);
  cr_assert_eq((int)ip_test_field(out, "driver allocs"), n, "one driver call each: %s", out);
}

Test(cu_preload, arena_mode_blocks_are_what_other_members_of_a_shared_partition_see) {
  char dir[] = "/tmp/gpupart-cu-arena-XXXXXX", env[8192], out[4096];
  int code = 0;
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env,
           "%s GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=job GPUPART_PARTITIONS=job:48MiB", preload(),
           dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s GPUPART_PRELOAD_ARENA=1 %s link plain 1 30 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert(strstr(holder.text, "allocated 30 code 0\n"), "%s", holder.text);
  ip_test_run(out, sizeof out, "env %s %s link plain 1 200", env, fill());
  int n = blocks(out, "allocated", &code);
  cr_assert(n >= 12 && n <= 18 && code == 2, "the second process got %d MiB of what the blocks leave: %s", n, out);
  ip_test_finish(&holder);
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 %s link plain 1 200", env, fill());
  n = blocks(out, "allocated", &code);
  cr_assert(n >= 40 && n <= 48 && code == 2, "the holder's blocks came back when it ended: %s", out);
  ip_test_cleanup_dir(dir);
}

Test(cu_preload, arena_mode_a_forked_child_takes_blocks_of_its_own) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 %s link plain 1 30 fork", preload(), fill());
  cr_assert(strstr(out, "allocated 30 code 0\n"), "%s", out);
  cr_assert(blocks(out, "child allocated", &code) == 30 && code == 0, "%s", out);
  cr_assert(blocks(out, "parent after the child", &code) == 30 && code == 0, "%s", out);
}

/* cu_edge frees its first allocation twice: in arena mode that pointer is the block's
 * own base, which the driver would free from under the arena. */
Test(cu_preload, arena_mode_bad_calls_get_the_drivers_answers_and_never_free_a_block) {
  char plain[4096], under[4096];
  ip_test_run(plain, sizeof plain, "%s bad", edge());
  ip_test_run(under, sizeof under, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s bad", preload(),
              edge());
  cr_assert(strstr(under, "bad calls done\n"), "no crash under the preload: %s", under);
  cr_assert(strstr(under, "free 0, again 1\n"), "the second free is CUDA_ERROR_INVALID_VALUE: %s", under);
  *strstr(plain, "after bad calls") = '\0';
  cr_assert(strncmp(under, plain, strlen(plain)) == 0, "the same codes:\n%s\nunder the preload:\n%s", plain, under);
  ip_test_run(under, sizeof under, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s context", preload(),
              edge());
  int code = 0, n = blocks(under, "after destroy", &code);
  cr_assert(n >= 60 && n <= 64 && code == 2, "created contexts take the driver's path: %s", under);
}

/* ---- arena mode, call by call (tests/interpose/cu_seq.c) ---------------------------- */

static const char *seq(void) { return ip_test_path("GPUPART_TEST_CU_SEQ"); }

/* The nth (from 1) line of out that starts with prefix, or "" where there is none. */
static const char *nth_line(const char *out, const char *prefix, int nth) {
  size_t len = strlen(prefix);
  for (const char *at = out; at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL)
    if (strncmp(at, prefix, len) == 0 && --nth == 0) return at;
  return "";
}

/* The growth rule gives both empty 2 MiB blocks back inside the 3 MiB request, and the
 * double's mmap puts the new 4 MiB block at the lower one's address: the arena recorded it
 * at the old block's 2 MiB, so the mirror counted 2 MiB less than the process held and
 * managed memory (the driver's path, accounted on the mirror) went 2 MiB past the limit. */
Test(cu_preload, arena_mode_a_new_block_at_a_released_blocks_address_is_accounted_at_its_own_size) {
  char out[16384], ops[2048];
  int n = snprintf(ops, sizeof ops, "a:1048576 a:1572864 f:0 f:1 a:3145728 i");
  for (int i = 0; i < 64; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, " m:1048576");
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s %s d", preload(), seq(),
              ops);
  cr_assert(strstr(out, "a 2 code 0 at 1\n"), "the precondition: the new block has the released one's address: %s",
            out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 61 * MIB, "the limit less the 3 MiB held: %s", out);
  cr_assert_leq(ip_test_field(nth_line(out, "driver", 1), "live"), 64 * MIB,
                "the driver holds no more than the limit: %s", out);
}

/* cuMemFreeAsync of a served pointer went to the driver, which freed the whole block (the
 * pointer is its base): the arena then served memory the driver no longer had. */
Test(cu_preload, arena_mode_free_async_of_a_served_pointer_goes_back_to_the_arena) {
  char out[4096];
  ip_test_run(out, sizeof out,
              "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s a:1048576 F:0 F:0 d "
              "a:1048576 w:1 i",
              preload(), seq());
  cr_assert(strstr(out, "F 0 code 0\nF 0 code 1\n"), "freed, then CUDA_ERROR_INVALID_VALUE: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "driver", 1), "frees"), 0, "the block is the arena's: %s", out);
  cr_assert(strstr(out, "w 1 code 0\n"), "the next allocation is memory the driver holds: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 63 * MIB, "%s", out);
}

/* A created context destroyed with an allocation in it (the driver frees it; the library
 * does not see it), then an arena block at that address: the served pointer replaces the
 * old record, which is given back (it was left accounted for good). */
Test(cu_preload, arena_mode_a_served_pointer_gives_back_the_record_the_driver_freed_unseen) {
  char out[4096];
  ip_test_run(out, sizeof out,
              "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s c a:2097152 x P:0 "
              "a:1048576 f:1 i",
              preload(), seq());
  cr_assert(strstr(out, "a 1 code 0 at 0\n"), "the precondition: the block has the freed allocation's address: %s",
            out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 64 * MIB, "nothing is held: %s", out);
}

/* 512 MiB served (growth blocks up to 32 MiB by then), managed memory up to the limit,
 * 20 MiB of it freed: 30 MiB are left, 10 in the arena's blocks and 20 in holes of the
 * mirror's (the largest 14 MiB). The arena sized its next block by its own partition
 * alone, took a 20 MiB block from the driver (past the limit there) and had it refused by
 * the mirror, again at each call: 10 allocations of the 30. */
Test(cu_preload, arena_mode_a_new_block_is_sized_to_what_the_limit_leaves) {
  char out[65536], ops[16384];
  int n = 0;
  for (int i = 0; i < 512; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "a:1048576 ");
  for (int i = 0; i < 251; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "m:2097152 ");
  for (int i = 600; i < 610; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "f:%d ", i);
  n += snprintf(ops + n, sizeof ops - (size_t)n, "i d");
  for (int i = 0; i < 40; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, " a:1048576");
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=1GiB %s %s d", preload(), seq(),
              ops);
  cr_assert(strstr(out, "m 762 code 0\nf 600 code 0\n"), "the precondition: 251 managed allocations");
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 30 * MIB, "%.80s", nth_line(out, "info", 1));
  cr_assert(strstr(out, "a 792 code 0\na 793 code 2\n"), "30 served, then refused: %.200s", nth_line(out, "a 770 ", 1));
  const char *before = nth_line(out, "driver", 1), *after = nth_line(out, "driver", 2);
  cr_assert_eq(ip_test_field(after, "frees"), ip_test_field(before, "frees"), "no block taken to be refused: %.80s",
               after);
  cr_assert_leq(ip_test_field(after, "peak"), 1024 * MIB, "never past the limit in the driver: %.80s", after);
}

/* cuDevicePrimaryCtxReset (cudaDeviceReset) frees the arena's blocks: the arena went on
 * serving memory in them (the driver no longer had it) and the mirror kept them. */
Test(cu_preload, arena_mode_a_primary_context_reset_leaves_no_block_behind) {
  char out[4096];
  ip_test_run(out, sizeof out,
              "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB %s a:1048576 a:1048576 R i "
              "a:1048576 w:2 i f:2 i",
              preload(), seq());
  cr_assert(strstr(out, "R code 0\n"), "%s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 64 * MIB, "the reset freed everything: %s", out);
  cr_assert(strstr(out, "w 2 code 0\n"), "the next allocation is memory the driver holds: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 2), "free"), 63 * MIB, "%s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 3), "free"), 64 * MIB, "%s", out);
}

/* The arena's empty cached blocks held the whole limit on the mirror: cuMemGetInfo said
 * 16 MiB free, and a managed allocation (the driver's path) or one in a created context
 * was refused, as the mirror's OOM sequence does not reach the arena's blocks. */
Test(cu_preload, arena_mode_cached_blocks_give_way_to_the_drivers_path) {
  char out[8192], ops[2048];
  int n = 0;
  for (int i = 0; i < 16; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "a:1048576 ");
  for (int i = 0; i < 16; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "f:%d ", i);
  ip_test_run(out, sizeof out,
              "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=16MiB %s %s i m:1048576 c a:1048576 d", preload(),
              seq(), ops);
  cr_assert(strstr(out, "a 15 code 0\n"), "the precondition: 16 MiB served: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 16 * MIB, "%s", out);
  cr_assert(strstr(out, "m 16 code 0\n"), "managed memory gets the cached bytes: %s", out);
  cr_assert(strstr(out, "c code 0\na 17 code 0\n"), "so does a created context: %s", out);
  cr_assert_leq(ip_test_field(nth_line(out, "driver", 1), "peak"), 16 * MIB, "%s", out);
}

/* Four threads at once, sizes from 1 byte to 4 MiB under a 16 MiB limit (refusals, growth
 * blocks, the growth rule giving cached blocks back): when all is freed the mirror holds
 * exactly the arena's blocks (cuMemGetInfo's free is the limit), and the driver never
 * held more than the limit. */
Test(cu_preload, arena_mode_threads_at_once_leave_the_records_equal_to_the_blocks) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=16MiB %s t:3000 d i", preload(),
              seq());
  cr_assert(strstr(out, "t code 0\n"), "no call failed but refusals: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 16 * MIB, "%s", out);
  cr_assert_leq(ip_test_field(nth_line(out, "driver", 1), "peak"), 16 * MIB, "%s", out);
}

/* Two devices: each has its arena and its mirror (one limit each), and a pointer freed
 * while the other device's context is current goes back to its own arena. */
Test(cu_preload, arena_mode_each_device_has_its_own_arena) {
  char out[4096];
  ip_test_run(out, sizeof out,
              "env %s GPUPART_TEST_CUDA_DEVICES=2 GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=64MiB "
              "%s a:1048576 a:1048576 P:1 a:3145728 i f:0 d P:0 i f:1 f:2 i",
              preload(), seq());
  cr_assert(strstr(out, "P 1 code 0\na 2 code 0\n"), "%s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 61 * MIB, "device 1's limit less its 3 MiB: %s", out);
  cr_assert(strstr(out, "f 0 code 0\n"), "freed with the other device current: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "driver", 1), "allocs"), 2, "one block on each device: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 2), "free"), 63 * MIB, "device 0's limit less its 1 MiB: %s", out);
  cr_assert(strstr(out, "f 1 code 0\nf 2 code 0\n"), "%s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "info", 3), "free"), 64 * MIB, "%s", out);
}

/* Managed memory holds the whole limit: the arena (holding nothing) still took a 2 MiB
 * block from the driver for each refused call (past the limit there) and gave it back. */
Test(cu_preload, arena_mode_a_full_limit_refuses_without_a_driver_call) {
  char out[4096], ops[1024];
  int n = 0;
  for (int i = 0; i < 16; i++) n += snprintf(ops + n, sizeof ops - (size_t)n, "m:1048576 ");
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=16MiB %s %s a:1048576 a:1048576 d",
              preload(), seq(), ops);
  cr_assert(strstr(out, "m 15 code 0\na 16 code 2\na 17 code 2\n"), "the limit held by managed memory: %s", out);
  cr_assert_eq(ip_test_field(nth_line(out, "driver", 1), "allocs"), 16, "only the managed ones: %s", out);
  cr_assert_leq(ip_test_field(nth_line(out, "driver", 1), "peak"), 16 * MIB, "%s", out);
}

/* Two processes in arena mode in one shared partition: the second is served what the
 * first one's blocks leave, in blocks that fit it, and `gpupart top --json` shows each
 * member holding its blocks (the first's 30 MiB of allocations in 30 MiB of blocks). */
Test(cu_preload, arena_mode_two_processes_share_a_partition_and_top_shows_their_blocks) {
  const char *gpupart = getenv("GPUPART_TEST_GPUPART");
  if (!gpupart) cr_skip_test("the gpupart command is not built (-Dtools=disabled)");
  char dir[] = "/tmp/gpupart-cu-arena2-XXXXXX", env[8192], out[65536], member[128];
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env,
           "%s GPUPART_PRELOAD_ARENA=1 GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s GPUPART_PARTITION=job "
           "GPUPART_PARTITIONS=job:48MiB",
           preload(), dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s link plain 1 30 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert(strstr(holder.text, "allocated 30 code 0\n"), "%s", holder.text);
  ip_test_run(out, sizeof out, "env %s %s i a:4194304 a:4194304 a:4194304 a:4194304 a:2097152 a:1048576 d", env, seq());
  cr_assert_eq(ip_test_field(nth_line(out, "info", 1), "free"), 18 * MIB, "what the first one's blocks leave: %s", out);
  cr_assert(strstr(out, "a 3 code 0\na 4 code 0\na 5 code 2\n"), "18 MiB served, then refused: %s", out);
  cr_assert_leq(ip_test_field(nth_line(out, "driver", 1), "live"), 18 * MIB, "%s", out);
  unsigned long pid = (unsigned long)ip_test_field(holder.text, "holding pid");
  snprintf(member, sizeof member, "\"pid\": %lu, \"reserved\": %llu", pid, 30 * MIB);
  ip_test_run(out, sizeof out, "%s top --json --ledger-dir %s", gpupart, dir);
  cr_assert(strstr(out, member), "the first one holds its 30 MiB of blocks (%s): %s", member, out);
  ip_test_finish(&holder);
  ip_test_cleanup_dir(dir);
}

Test(cu_preload, arena_mode_a_value_that_is_no_choice_is_off_and_said_once) {
  char out[8192];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=maybe %s link plain 1 20 threads 2>&1", preload(), fill());
  const char *said = strstr(out, "GPUPART_PRELOAD_ARENA='maybe' is none of");
  cr_assert(said && !strstr(said + 1, "GPUPART_PRELOAD_ARENA='maybe'"), "said once: %s", out);
  cr_assert(blocks(out, "allocated", &code) == 20 && code == 0, "%s", out);
  cr_assert_eq((int)ip_test_field(out, "driver allocs"), 20 + 4 * 20, "one driver call each, arena mode off: %s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_PRELOAD_ARENA=off %s link plain 1 20 2>&1", preload(), fill());
  cr_assert(!strstr(out, "GPUPART_PRELOAD_ARENA"), "off is a choice: %s", out);
}

/* ---- devices past any fixed table, CUDA 13's names, what traces say ------------------- */

/* The partition cache held 64 ordinals and a device past it ran unaccounted: device 69 of
 * 70 is held to its limit as device 0 is, in arena mode too. */
Test(cu_preload, a_device_past_the_64th_is_held_to_its_limit) {
  char out[4096];
  const char *ops = "P:69 a:67108864 a:1048576 c:69 a:1048576 P:0 a:67108864 a:1048576";
  for (int arena = 0; arena < 2; arena++) {
    ip_test_run(out, sizeof out,
                "env %s GPUPART_TEST_CUDA_DEVICES=70 GPUPART_PRELOAD_ARENA=%d GPUPART_MEMORY_LIMIT=64MiB %s %s",
                preload(), arena, seq(), ops);
    cr_assert(strstr(out, "P 69 code 0\na 0 code 0\na 1 code 2\n"), "arena %d: %s", arena, out);
    cr_assert(strstr(out, "c code 0\na 2 code 2\n"), "a created context of device 69 too: %s", out);
    cr_assert(strstr(out, "P 0 code 0\na 3 code 0\na 4 code 2\n"), "device 0 has its own: %s", out);
  }
}

/* A program built against CUDA 13's cuda.h calls cuCtxCreate_v4 (cu_seq's c): the double
 * has it, and memory of such a context is accounted as any other. */
Test(cu_preload, cuda_13s_cu_ctx_create_runs_under_the_preload) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s c a:67108864 a:1048576 x", preload(), seq());
  cr_assert(strstr(out, "c code 0\na 0 code 0\na 1 code 2\nx code 0\n"), "%s", out);
}

/* A trace recorded under the preload names the GPU (the driver's name of the device),
 * not "gpupart simulated device", the mirror's own name. */
Test(cu_preload, a_trace_names_the_gpu) {
  char dir[] = "/tmp/gpupart-cu-trace-XXXXXX", out[4096], trace[4096];
  cr_assert(mkdtemp(dir));
  ip_test_run(out, sizeof out, "env %s GPUPART_TRACE=%s/t.ops %s a:1048576 f:0 && cat %s/t.ops", preload(), dir, seq(),
              dir);
  snprintf(trace, sizeof trace, "%s", out);
  cr_assert(strstr(trace, "\n# device sim:0 gpupart%20CUDA%20test%20double%200\na 1 1048576 cu_seq\nf 1\n"), "%s",
            trace);
  ip_test_cleanup_dir(dir);
}

/* The mirror's block tail (issue 26): under a 1 GiB limit, 200 allocations of 1 MiB and
 * 199 of them freed, cuMemGetInfo says 1023 MiB free, and one allocation of all of it is
 * served: the program holds its limit to the byte, free is then 0 and one byte more is
 * refused without a driver call. Everything freed, a managed allocation of 1023 MiB (the
 * driver's path in either mode) is served, which in arena mode needs the arena's cached
 * memory given back first, and leaves 1 MiB free. Accounted in growth blocks of a sim
 * mirror, the 1023 MiB were refused (its largest piece was 1012 MiB); an arena of growth
 * blocks refuses them too (the block holding the first MiB is the tail), an expandable
 * arena (one range growing by mapped granules) serves them. */
static void expect_churn_reaches_the_limit(const char *mode, const char *driver) {
  char ops[4096], out[32768];
  size_t n = 0;
  for (int i = 0; i < 200; i++) n += (size_t)snprintf(ops + n, sizeof ops - n, "a:1048576 ");
  for (int i = 1; i < 200; i++) n += (size_t)snprintf(ops + n, sizeof ops - n, "f:%d ", i);
  cr_assert_lt(n, sizeof ops - 128);
  snprintf(ops + n, sizeof ops - n, "i a:%llu i a:1 f:0 f:200 m:%llu i d", 1023 * MIB, 1023 * MIB);
  ip_test_run(out, sizeof out, "env %s %s GPUPART_MEMORY_LIMIT=1GiB %s %s", preload(), mode, seq(), ops);
  const char *tail = strstr(out, "info"), *full = tail ? strstr(tail, "\na 200 code 0") : NULL;
  cr_assert(tail, "%s", out);
  cr_assert_eq(ip_test_field(tail, "free"), 1023 * MIB, "%s: %s", mode, tail);
  cr_assert(full, "%s: the 1023 MiB are served: %s", mode, tail);
  cr_assert_eq(ip_test_field(full, "info code 0 free"), 0, "%s: %s", mode, tail);
  cr_assert(strstr(tail, "\na 201 code 2\n"), "%s: a byte more is refused: %s", mode, tail);
  const char *managed = strstr(tail, "\nm 202 code 0"); /* " at J" where the driver reused an address */
  cr_assert(managed && strstr(managed, "\ninfo code 0 free 1048576 "), "%s: %s", mode, tail);
  cr_assert(strstr(tail, driver), "%s: %s: %s", mode, driver, tail);
}

Test(cu_preload, after_a_churn_one_allocation_takes_what_free_says_to_the_byte) {
  expect_churn_reaches_the_limit("", "driver allocs 202 frees 201 live 1072693248 peak 1073741824");
}

Test(cu_preload, arena_mode_expandable_serves_from_one_range_to_the_byte) {
  expect_churn_reaches_the_limit("GPUPART_PRELOAD_ARENA=1 GPUPART_EXPANDABLE=1", "driver allocs 1 frees 0 ");
}

/* The arena follows the program's configuration as the library resolves it for its
 * device (gpupart_context_option), not only a plain GPUPART_EXPANDABLE=1: the per-device
 * form, and the file GPUPART_CONFIG names. Read as a plain word, both left the arena in
 * growth blocks, which refuse the 1023 MiB. */
Test(cu_preload, arena_mode_expandable_per_device) {
  expect_churn_reaches_the_limit("GPUPART_PRELOAD_ARENA=1 GPUPART_EXPANDABLE=cuda:0=1", "driver allocs 1 frees 0 ");
}

Test(cu_preload, arena_mode_expandable_from_the_config_file) {
  char dir[] = "/tmp/gpupart-cu-ini-XXXXXX", path[4096], mode[4200];
  cr_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/gpupart.ini", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs("[gpupart]\nexpandable = false\n[device cuda:0]\nexpandable = true\n", f);
  fclose(f);
  snprintf(mode, sizeof mode, "GPUPART_PRELOAD_ARENA=1 GPUPART_CONFIG=%s", path);
  expect_churn_reaches_the_limit(mode, "driver allocs 1 frees 0 ");
  ip_test_cleanup_dir(dir);
}

/* An expandable arena whose range still holds an allocation gives its free top back to
 * the driver's path: with the first MiB live and 1023 MiB freed, a managed allocation of
 * 1022 MiB is served once the top is unmapped and its charges given back, the range's
 * one mapped granule (2 MiB) still charged: free is then 1 MiB, the granule's free half. */
Test(cu_preload, arena_mode_expandable_gives_back_its_free_top_while_it_holds_allocations) {
  char out[8192];
  ip_test_run(out, sizeof out,
              "env %s GPUPART_PRELOAD_ARENA=1 GPUPART_EXPANDABLE=1 GPUPART_MEMORY_LIMIT=1GiB %s a:1048576 a:%llu f:1 "
              "m:%llu i d",
              preload(), seq(), 1023 * MIB, 1022 * MIB);
  const char *managed = strstr(out, "f 1 code 0\nm 2 code 0"); /* " at J" where the driver reused an address */
  cr_assert(managed && strstr(managed, "\ninfo code 0 free 1048576 "), "%s", out);
  cr_assert(strstr(out, "driver allocs 1 frees 0 live 1071644672 "), "one driver allocation, the managed one: %s", out);
}
