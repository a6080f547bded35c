/* The Vulkan implicit layer (interpose/vulkan/) under programs that were not written for
 * gpupart: Debian's vulkaninfo and vk_fill (linked to the Vulkan loader only), run as
 * child processes that find the build tree's manifest through XDG_DATA_HOME and enable
 * it with ENABLE_GPUPART_LAYER=1, on whatever Vulkan device is present (lavapipe in CI). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose_test.h"

#define MIB (1024ull * 1024ull)

static const char *fill(void) { return ip_test_path("GPUPART_TEST_VK_FILL"); }

static char layer_env[4200];

/* The manifest's folder and the enable variable, and a device present, or a skip. */
static const char *layer(void) {
  snprintf(layer_env, sizeof layer_env, "%s XDG_DATA_HOME=%s ENABLE_GPUPART_LAYER=1", ip_test_child_env(),
           ip_test_path("GPUPART_TEST_VK_SHARE"));
  char out[4096];
  ip_test_run(out, sizeof out, "%s 1 1", fill());
  if (!strstr(out, "allocated 1 code 0")) cr_skip_test("no Vulkan device: %s", out);
  return layer_env;
}

static uint64_t heap0(const char *vulkaninfo) {
  const char *h = strstr(vulkaninfo, "memoryHeaps[0]:");
  return h ? ip_test_field(h, "size") : 0;
}

Test(vk_layer, vulkaninfo_reports_the_limit_as_the_heap_size) {
  if (system("command -v vulkaninfo >/dev/null 2>&1")) cr_skip_test("vulkaninfo is not installed");
  static char out[1 << 20];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB vulkaninfo 2>/dev/null", layer());
  cr_assert(strstr(out, "VK_LAYER_GPUPART_partition"), "the layer is listed");
  cr_assert_eq(heap0(out), 64 * MIB);
}

/* Compared with the limit, not with another run's heap size: a driver may derive that
 * from the machine's memory at start-up (newer lavapipe does). */
Test(vk_layer, the_disable_variable_turns_the_layer_off) {
  static char off[1 << 20];
  const char *env = layer();
  ip_test_run(off, sizeof off, "env %s DISABLE_GPUPART_LAYER=1 GPUPART_MEMORY_LIMIT=64MiB %s 1 100 2>&1", env, fill());
  cr_assert_gt(ip_test_field(off, "heap"), 64 * MIB, "%s", off);
  cr_assert(strstr(off, "allocated 100 code 0\n"), "nothing refused past 64 MiB: %s", off);
}

Test(vk_layer, allocations_are_refused_past_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s 1 200", layer(), fill());
  cr_assert(strstr(out, "heap 67108864\n"), "%s", out);
  cr_assert(strstr(out, "allocated 64 code -2\n"), "VK_ERROR_OUT_OF_DEVICE_MEMORY: %s", out);
  cr_assert(strstr(out, "again 64 code -2\n"), "freed memory gives its bytes back: %s", out);
}

/* VK_EXT_memory_budget: the driver's capped, or (lavapipe has none) the layer's, which
 * the loader offers from the manifest and keeps from the driver at vkCreateDevice. */
Test(vk_layer, the_memory_budget_extension_reports_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s 1 200", layer(), fill());
  cr_assert(strstr(out, "budget 67108864\n"), "%s", out);
  cr_assert(strstr(out, "allocated 64 code -2\n"), "the device was created with the extension: %s", out);
}

/* The budget struct is an output: whatever the program left in it (ncnn passes it
 * uninitialised) is not taken for the driver's figures. It was: a heapBudget of 1 left in
 * it was "the driver's", capped to 1 byte, and its heapUsage kept. */
Test(vk_layer, the_budget_does_not_read_what_the_program_left_in_the_struct) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_FILL_DIRTY=1 VK_FILL_HELD=1 %s 1 40", layer(),
              fill());
  cr_assert(strstr(out, "budget 67108864\nusage 0\n"), "%s", out);
  cr_assert(strstr(out, "held budget 67108864 usage 41943040\n"), "%s", out);
}

/* Under a driver that has VK_EXT_memory_budget (vk_count_layer plays one: each heap's size
 * as its budget, all but VK_COUNT_DRIVER_LEFT_MIB of it as its usage), heapUsage is what
 * the process's partition holds, not the driver's figure, and budget - usage is what the
 * program may still take: the partition's room, no more than the driver leaves. It was the
 * driver's usage (the host's RAM on newer lavapipe) beside the partition's budget. */
Test(vk_layer, heap_usage_is_the_partitions_and_the_budget_what_is_left_besides) {
  char out[4096], env[8192];
  snprintf(env, sizeof env, "%s VK_ADD_LAYER_PATH=%s VK_INSTANCE_LAYERS=VK_LAYER_GPUPART_TEST_count", layer(),
           ip_test_path("GPUPART_TEST_VK_COUNT_LAYER_DIR"));
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_COUNT_DRIVER_LEFT_MIB=1024 VK_FILL_HELD=1 %s 1 40",
              env, fill());
  cr_assert(strstr(out, "budget 67108864\nusage 0\n"), "%s", out);
  cr_assert(strstr(out, "held budget 67108864 usage 41943040\n"), "%s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_COUNT_DRIVER_LEFT_MIB=8 %s 1 40", env, fill());
  cr_assert(strstr(out, "budget 8388608\nusage 0\n"), "the driver leaves 8 MiB: %s", out);
}

/* ncnn (PyPI) sizes itself by the budget it reads through vkGetPhysicalDeviceMemoryProperties2KHR
 * with an uninitialised struct: it read 0 MB under a 512 MiB limit. Skipped where
 * ./scripts/test could not install ncnn into the build folder. */
Test(vk_layer, ncnn_reads_the_limit_as_its_heap_budget) {
  const char *site = ip_test_path("GPUPART_TEST_NCNN_PATH"), *script = ip_test_path("GPUPART_TEST_NCNN_SCRIPT");
  char out[4096];
  const char *env = layer();
  ip_test_run(out, sizeof out, "PYTHONPATH='%s' python3 '%s' 2>&1; echo exit $?", site, script);
  if (!strstr(out, "ncnn budget ")) cr_skip_test("ncnn is not installed in %s: %s", site, out);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=512MiB PYTHONPATH='%s' python3 '%s' 2>&1", env, site,
              script);
  cr_assert(strstr(out, "ncnn budget 512\n"), "%s", out);
}

Test(vk_layer, under_the_validation_layer_there_are_no_errors) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_FILL_VALIDATION=1 %s 1 200", layer(), fill());
  if (!strstr(out, "heap ")) cr_skip_test("the validation layer is not installed: %s", out);
  cr_assert(strstr(out, "allocated 64 code -2\n"), "%s", out);
  cr_assert(strstr(out, "budget 67108864\n"), "%s", out);
  cr_assert(strstr(out, "validation_errors 0\n"), "%s", out);
}

/* The layer keeps no fixed table of live objects: 70 instances, each with a device, live
 * at once under the validation layer, as the driver alone takes them. The 65th instance
 * was destroyed again from inside the chain and the loader freed it twice (heap
 * corruption), and the 65th device was refused. */
Test(vk_layer, seventy_live_instances_and_devices_are_taken_as_without_the_layer) {
  char plain[4096], out[4096];
  ip_test_run(plain, sizeof plain, "VK_FILL_MANY=70 VK_FILL_VALIDATION=1 %s 1 1 2>&1", fill());
  if (!strstr(plain, "many 70 70 70\n")) cr_skip_test("the driver alone does not take 70: %s", plain);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_FILL_MANY=70 VK_FILL_VALIDATION=1 %s 1 1 2>&1",
              layer(), fill());
  cr_assert(strstr(out, "many 70 70 70\n"), "%s", out);
  cr_assert(strstr(out, "allocated 1 code 0\n") && strstr(out, "validation_errors 0\n"), "%s", out);
}

/* The partition is the process's on that heap, whichever instance or device allocates:
 * a second instance's device is refused once the first one holds the limit, and both
 * run under the validation layer with no error. */
Test(vk_layer, a_second_instance_and_device_share_the_limit) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_FILL_SECOND=1 VK_FILL_VALIDATION=1 %s 1 200",
              layer(), fill());
  cr_assert(strstr(out, "allocated 64 code -2\nsecond code -2\n"), "%s", out);
  cr_assert(strstr(out, "again 64 code -2\n"), "%s", out);
  cr_assert(strstr(out, "validation_errors 0\n"), "%s", out);
}

/* A configuration error fails closed: with a misspelt variable (which gpupart refuses)
 * the program ran unlimited; now every allocation is refused
 * (VK_ERROR_OUT_OF_DEVICE_MEMORY), the budget is 0, and why is said once on stderr.
 * GPUPART_FAIL_OPEN=1 is the operator's choice to let it run unaccounted. */
Test(vk_layer, a_configuration_error_fails_closed_and_says_why_once) {
  char out[4096];
  const char *env = layer();
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMT=64MiB %s 1 8 2>&1", env, fill());
  cr_assert(strstr(out, "budget 0\n") && strstr(out, "allocated 0 code -2\n"), "%s", out);
  cr_assert(strstr(out, "again 0 code -2\n"), "%s", out);
  cr_assert_eq(ip_test_count(out, "gpupart layer:"), 1, "%s", out);
  cr_assert(strstr(out, "context_create: GPUPART_ECONFIG") && strstr(out, "GPUPART_MEMORY_LIMT"), "%s", out);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMT=64MiB GPUPART_FAIL_OPEN=1 %s 1 8 2>&1", env, fill());
  cr_assert(strstr(out, "allocated 8 code 0\n") && strstr(out, "not accounted"), "%s", out);
}

Test(vk_layer, without_a_limit_the_program_runs_as_before) {
  char plain[4096], under[4096];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "%s 16 256", fill());
  ip_test_run(under, sizeof under, "env %s %s 16 256", env, fill());
  cr_assert(strstr(plain, "allocated 256 code 0\nagain 256 code 0\n"), "%s", plain);
  cr_assert(strstr(under, "allocated 256 code 0\nagain 256 code 0\n"), "%s", under);
}

Test(vk_layer, two_processes_share_one_budget) {
  char dir[] = "/tmp/gpupart-vk-layer-XXXXXX", env[8192], out[4096];
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env, "%s GPUPART_MEMORY_LIMIT=64MiB GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s", layer(), dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s 1 40 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  cr_assert(strstr(holder.text, "allocated 40 code 0\n"), "%s", holder.text);
  ip_test_run(out, sizeof out, "env %s %s 1 200", env, fill());
  unsigned got = 0;
  const char *at = strstr(out, "allocated ");
  cr_assert_eq(sscanf(at ? at : "", "allocated %u code -2", &got), 1, "%s", out);
  cr_assert(got <= 24 && got >= 16, "the second process got %u MiB of the 24 left: %s", got, out);
  ip_test_finish(&holder);
  ip_test_run(out, sizeof out, "env %s %s 1 200", env, fill());
  cr_assert(strstr(out, "allocated 64 code -2\n"), "the first one's bytes came back when it ended: %s", out);
  ip_test_cleanup_dir(dir);
}

/* ---- the GPU's ledger: a gpupart application and programs under the layer ---------- */

/* The mirror of the heap the vulkan backend uses carries the GPU's deviceUUID: the
 * application and the program under the layer are members of one ledger file and share
 * its 64 MiB budget (the program gets what the application left), under the validation
 * layer with no error. */
Test(vk_layer, a_gpupart_application_and_a_program_under_the_layer_share_the_gpus_ledger) {
  const char *layer_env = layer();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_child app, prog;
  ip_test_app_start(&app, &s, "", "vulkan", 40);
  cr_assert(strstr(app.text, "allocated 40 code 0\n"), "%s", app.text);
  ip_test_start(&prog, s.out_b, "env %s %s VK_FILL_VALIDATION=1 %s 1 200 hold", layer_env, s.env, fill());
  ip_test_wait_for(&prog, "holding");
  int got = ip_test_allocated(prog.text, -2);
  cr_assert(got >= 16 && got <= 24, "the program got %d MiB of the 24 the application left: %s", got, prog.text);
  cr_expect_eq(ip_test_ledger_files(s.dir), 1, "one ledger file for the GPU");
  static char top[1 << 16];
  ip_test_observe(top, sizeof top, s.dir, 0);
  cr_expect(ip_test_has_member(top, ip_test_pid(&app), "gp_hold"), "the application is a member: %s", top);
  cr_expect(ip_test_has_member(top, ip_test_pid(&prog), "vk_fill"), "the program under the layer is a member: %s", top);
  ip_test_finish(&prog);
  if (strstr(prog.text, "heap ")) cr_expect(strstr(prog.text, "validation_errors 0\n"), "%s", prog.text);
  ip_test_finish(&app);
  ip_test_shared_end(&s);
}

Test(vk_layer, a_program_under_the_layer_is_refused_while_a_gpupart_application_holds_the_budget) {
  const char *layer_env = layer();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  ip_test_child app;
  char out[4096];
  ip_test_app_start(&app, &s, "", "vulkan", 64);
  cr_assert(strstr(app.text, "allocated 64 code 0\n"), "%s", app.text);
  ip_test_run(out, sizeof out, "env %s %s %s 1 200", layer_env, s.env, fill());
  cr_expect_eq(ip_test_allocated(out, -2), 0, "VK_ERROR_OUT_OF_DEVICE_MEMORY at once: %s", out);
  ip_test_finish(&app);
  ip_test_run(out, sizeof out, "env %s %s %s 1 200", layer_env, s.env, fill());
  cr_expect_eq(ip_test_allocated(out, -2), 64, "the whole budget once the application ended: %s", out);
  ip_test_shared_end(&s);
}

/* Two programs under the layer with one GPUPART_PARTITION join one partition: the second
 * sees the first's 32 MiB limit (its own configuration declares none) and gets what the
 * first left of it, though the device budget has room. */
Test(vk_layer, two_programs_with_one_partition_name_share_its_limit) {
  const char *layer_env = layer();
  ip_test_shared s;
  ip_test_shared_begin(&s, "GPUPART_PARTITION=job");
  ip_test_child first;
  char out[4096];
  ip_test_start(&first, s.out_a, "env %s %s GPUPART_PARTITIONS=job:32MiB %s 1 20 hold", layer_env, s.env, fill());
  ip_test_wait_for(&first, "holding");
  cr_assert(strstr(first.text, "heap 33554432\n") && strstr(first.text, "allocated 20 code 0\n"), "%s", first.text);
  ip_test_run(out, sizeof out, "env %s %s %s 1 200 2>&1", layer_env, s.env, fill());
  cr_expect(strstr(out, "heap 33554432\n"), "the joined partition's limit is reported: %s", out);
  int got = ip_test_allocated(out, -2);
  cr_expect(got >= 8 && got <= 12, "the second got %d MiB of the 12 the first left: %s", got, out);
  cr_expect_null(strstr(out, "gpupart layer:"), "no fallback: %s", out);
  ip_test_finish(&first);
  ip_test_shared_end(&s);
}

/* While it holds memory, a program under the layer is a member of the ledger (pid and
 * command name) in gpupart top and in gpupart metrics. */
Test(vk_layer, a_program_under_the_layer_is_a_member_in_top_and_metrics) {
  const char *layer_env = layer();
  ip_test_shared s;
  char program[4096];
  ip_test_shared_begin(&s, "GPUPART_MEMORY_LIMIT=64MiB");
  snprintf(program, sizeof program, "%s 1 10 hold", fill());
  ip_test_expect_member(&s, layer_env, program, "vk_fill");
  ip_test_shared_end(&s);
}

/* VK_EXT_memory_budget's heapBudget is what the process can use: with a shared ledger,
 * the limit less what the other members hold (VMA sizes itself by it). */
Test(vk_layer, the_memory_budget_leaves_out_what_other_members_hold) {
  char dir[] = "/tmp/gpupart-vk-budget-XXXXXX", env[8192], out[4096];
  cr_assert(mkdtemp(dir));
  snprintf(env, sizeof env, "%s GPUPART_MEMORY_LIMIT=64MiB GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s", layer(), dir);
  ip_test_child holder;
  ip_test_start(&holder, dir, "env %s %s 1 40 hold", env, fill());
  ip_test_wait_for(&holder, "holding");
  ip_test_run(out, sizeof out, "env %s %s 1 1", env, fill());
  uint64_t budget = ip_test_field(out, "budget");
  cr_assert(budget >= 20 * MIB && budget <= 24 * MIB, "64 MiB less the other member's 40: %s", out);
  ip_test_finish(&holder);
  ip_test_cleanup_dir(dir);
}

/* One allocation larger than the whole heap: more than gpupart can account on the
 * mirror, but past the limit all the same (lavapipe takes it, host memory behind it). */
Test(vk_layer, an_allocation_larger_than_the_device_is_refused_past_the_limit) {
  char plain[4096], out[4096], cmd[64];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "%s 1 1", fill());
  unsigned long long mib = ip_test_field(plain, "heap") / MIB + 64;
  snprintf(cmd, sizeof cmd, "%llu %llu", mib, mib);
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s %s", env, fill(), cmd);
  cr_assert(strstr(out, "allocated 0 code -2\n"), "VK_ERROR_OUT_OF_DEVICE_MEMORY for %s MiB: %s", cmd, out);
  ip_test_run(out, sizeof out, "env %s %s %s", env, fill(), cmd);
  ip_test_run(plain, sizeof plain, "%s %s", fill(), cmd);
  const char *answer = strstr(plain, "allocated ");
  cr_assert(answer && strstr(out, answer), "without a limit the driver answers as without the layer:\n%s\n%s", plain,
            out);
}

/* vk_bench (docs/benchmarks.md) runs, its children without and with the layer (it stops
 * where the layer is not mapped as asked), and prints both figures; none is asserted. */
Test(vk_layer, the_overhead_benchmark_runs_with_and_without_the_layer) {
  char out[4096];
  const char *env = layer();
  ip_test_run(out, sizeof out, "env %s '%s' '%s' 2000 1", env, ip_test_path("GPUPART_TEST_VK_BENCH"),
              ip_test_path("GPUPART_TEST_VK_SHARE"));
  cr_assert(strstr(out, "vkCmdDispatch recording (not intercepted): without ") && strstr(out, "with the layer"), "%s",
            out);
  cr_assert(strstr(out, "vkAllocateMemory+vkFreeMemory 4 KiB (accounted): without ") && strstr(out, "ratio"), "%s",
            out);
}

/* The number vk_count_layer printed, or -1. */
static long enumerations(const char *out) {
  const char *at = strstr(out, "enumerations ");
  return at ? strtol(at + strlen("enumerations "), NULL, 10) : -1;
}

/* Reading the memory properties (24 reads in vk_bench's child of 100 calls, half of them
 * with the budget) looks the heaps' partitions up once per physical device, not at each
 * read: it enumerated the instance's devices each time (115 us a call on lavapipe), as
 * counted by a layer below this one. */
Test(vk_layer, reading_the_memory_properties_enumerates_the_devices_once) {
  char plain[4096], under[4096], count[4300];
  const char *env = layer();
  snprintf(count, sizeof count, "VK_ADD_LAYER_PATH=%s VK_INSTANCE_LAYERS=VK_LAYER_GPUPART_TEST_count",
           ip_test_path("GPUPART_TEST_VK_COUNT_LAYER_DIR"));
  ip_test_run(plain, sizeof plain, "env %s %s %s --child 100", ip_test_child_env(), count,
              ip_test_path("GPUPART_TEST_VK_BENCH"));
  ip_test_run(under, sizeof under, "env %s %s %s --child 100", env, count, ip_test_path("GPUPART_TEST_VK_BENCH"));
  long without = enumerations(plain), with = enumerations(under);
  cr_assert(without > 0 && with > 0, "the counting layer ran:\n%s\n%s", plain, under);
  cr_assert(with - without <= 2, "%ld enumerations under the layer, %ld without", with, without);
}
