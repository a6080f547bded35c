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

static const char *fill(void) {
  return ip_test_path("GPUPART_TEST_VK_FILL");
}

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

Test(vk_layer, the_disable_variable_turns_the_layer_off) {
  static char plain[1 << 20], off[1 << 20];
  const char *env = layer();
  ip_test_run(plain, sizeof plain, "%s 1 1", fill());
  ip_test_run(off, sizeof off, "env %s DISABLE_GPUPART_LAYER=1 GPUPART_MEMORY_LIMIT=64MiB %s 1 1", env, fill());
  cr_assert_eq(ip_test_field(off, "heap"), ip_test_field(plain, "heap"), "%s", off);
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

Test(vk_layer, under_the_validation_layer_there_are_no_errors) {
  char out[4096];
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB VK_FILL_VALIDATION=1 %s 1 200", layer(), fill());
  if (!strstr(out, "heap ")) cr_skip_test("the validation layer is not installed: %s", out);
  cr_assert(strstr(out, "allocated 64 code -2\n"), "%s", out);
  cr_assert(strstr(out, "budget 67108864\n"), "%s", out);
  cr_assert(strstr(out, "validation_errors 0\n"), "%s", out);
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
