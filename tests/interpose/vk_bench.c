/* The Vulkan layer's cost, measured on the first Vulkan device the loader finds
 * (lavapipe here), by an unmodified program (linked to the Vulkan loader only):
 *
 *   vk_bench SHARE [CALLS] [ROUNDS]
 * runs itself ROUNDS times (default 5) without and with the layer, alternating, and
 * prints for each figure the best ns per operation of each and their ratio. SHARE is a
 * folder holding vulkan/implicit_layer.d/ with the layer's manifest (the build tree's
 * interpose/share): both children get XDG_DATA_HOME=SHARE, the one with the layer
 * ENABLE_GPUPART_LAYER=1, the one without DISABLE_GPUPART_LAYER=1. A child
 * (`vk_bench --child CALLS`) times, on one device of its own:
 *   calls the layer does not intercept, CALLS (default 1000000) each:
 *   vkGetBufferMemoryRequirements, vkCmdDispatch recorded into a command buffer (an empty
 *   compute shader bound; the buffer ended, reset and begun again every 4096 commands,
 *   which is timed too), vkGetPhysicalDeviceProperties;
 *   calls it reports through, CALLS / 10 each: vkGetPhysicalDeviceMemoryProperties, and
 *   vkGetPhysicalDeviceMemoryProperties2 with VkPhysicalDeviceMemoryBudgetPropertiesEXT
 *   chained (as VMA reads the budget; lavapipe has no VK_EXT_memory_budget and ignores
 *   the struct, so without the layer this is the bare call);
 *   accounted pairs, CALLS / 10: vkAllocateMemory + vkFreeMemory of 4 KiB.
 * Each child also says whether the layer is mapped into it (/proc/self/maps), and the
 * run stops if that is not as asked. The children inherit the rest of the environment
 * (GPUPART_* apply to the one under the layer). Not a test: no figure is asserted. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, readlink when built outside meson */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ab_bench.h"
#include <vulkan/vulkan.h>

#define FIGURES 6
#define BATCH 4096 /* vkCmdDispatch per recording */

static const char *const names[FIGURES] = {
    "vkGetBufferMemoryRequirements (not intercepted)",
    "vkCmdDispatch recording (not intercepted)",
    "vkGetPhysicalDeviceProperties (not intercepted)",
    "vkGetPhysicalDeviceMemoryProperties (intercepted, reported)",
    "vkGetPhysicalDeviceMemoryProperties2 with the budget (intercepted, reported)",
    "vkAllocateMemory+vkFreeMemory 4 KiB (accounted)",
};

/* glslc -O -mfmt=num of: #version 450, layout(local_size_x = 1) in; void main() {} */
static const uint32_t shader[] = {
    0x07230203, 0x00010000, 0x000d000b, 0x0000000a, 0x00000000, 0x00020011, 0x00000001, 0x0006000b, 0x00000001,
    0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001, 0x0005000f, 0x00000005,
    0x00000004, 0x6e69616d, 0x00000000, 0x00060010, 0x00000004, 0x00000011, 0x00000001, 0x00000001, 0x00000001,
    0x00040047, 0x00000009, 0x0000000b, 0x00000019, 0x00020013, 0x00000002, 0x00030021, 0x00000003, 0x00000002,
    0x00040015, 0x00000006, 0x00000020, 0x00000000, 0x00040017, 0x00000007, 0x00000006, 0x00000003, 0x0004002b,
    0x00000006, 0x00000008, 0x00000001, 0x0006002c, 0x00000007, 0x00000009, 0x00000008, 0x00000008, 0x00000008,
    0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003, 0x000200f8, 0x00000005, 0x000100fd, 0x00010038};

typedef struct bench {
  VkInstance instance;
  VkPhysicalDevice pd;
  VkDevice dev;
  uint32_t family, type;
  VkBuffer buf;
  VkCommandPool pool;
  VkCommandBuffer cmd;
  VkShaderModule module;
  VkPipelineLayout layout;
  VkPipeline pipeline;
} bench;

/* The instance, its first physical device, a queue family with compute, a memory type. */
static int open_device(bench *b) {
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_1};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
  VkQueueFamilyProperties families[16];
  uint32_t count = 1, nf = 16;
  if (vkCreateInstance(&ci, NULL, &b->instance) || vkEnumeratePhysicalDevices(b->instance, &count, &b->pd) < 0 ||
      !count)
    return -1;
  vkGetPhysicalDeviceQueueFamilyProperties(b->pd, &nf, families);
  for (b->family = 0; b->family < nf && !(families[b->family].queueFlags & VK_QUEUE_COMPUTE_BIT);) b->family++;
  if (b->family == nf) return -1;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                .queueFamilyIndex = b->family,
                                .queueCount = 1,
                                .pQueuePriorities = &prio};
  VkDeviceCreateInfo di = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi};
  return vkCreateDevice(b->pd, &di, NULL, &b->dev) ? -1 : 0;
}

/* A 4 KiB storage buffer, and the first memory type it may live in. */
static int make_buffer(bench *b) {
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = 4096,
                           .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkMemoryRequirements req;
  if (vkCreateBuffer(b->dev, &bi, NULL, &b->buf)) return -1;
  vkGetBufferMemoryRequirements(b->dev, b->buf, &req);
  for (b->type = 0; b->type < 32 && !(req.memoryTypeBits & (1u << b->type));) b->type++;
  return b->type < 32 ? 0 : -1;
}

/* The empty compute pipeline, a command pool and one primary command buffer. */
static int make_pipeline(bench *b) {
  VkShaderModuleCreateInfo si = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = sizeof shader, .pCode = shader};
  VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  if (vkCreateShaderModule(b->dev, &si, NULL, &b->module) || vkCreatePipelineLayout(b->dev, &li, NULL, &b->layout))
    return -1;
  VkComputePipelineCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                    .layout = b->layout,
                                    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                              .module = b->module,
                                              .pName = "main"}};
  if (vkCreateComputePipelines(b->dev, VK_NULL_HANDLE, 1, &pi, NULL, &b->pipeline)) return -1;
  VkCommandPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                .queueFamilyIndex = b->family};
  if (vkCreateCommandPool(b->dev, &ci, NULL, &b->pool)) return -1;
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = b->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  return vkAllocateCommandBuffers(b->dev, &ai, &b->cmd) ? -1 : 0;
}

static void teardown(bench *b) {
  vkDestroyCommandPool(b->dev, b->pool, NULL);
  vkDestroyPipeline(b->dev, b->pipeline, NULL);
  vkDestroyPipelineLayout(b->dev, b->layout, NULL);
  vkDestroyShaderModule(b->dev, b->module, NULL);
  vkDestroyBuffer(b->dev, b->buf, NULL);
  vkDestroyDevice(b->dev, NULL);
  vkDestroyInstance(b->instance, NULL);
}

/* Ends the recording (if one is open), resets the buffer and begins again with the
 * pipeline bound; nonzero on failure. */
static int rerecord(bench *b, int open) {
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  if ((open && vkEndCommandBuffer(b->cmd)) || vkResetCommandBuffer(b->cmd, 0) || vkBeginCommandBuffer(b->cmd, &bi))
    return 1;
  vkCmdBindPipeline(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, b->pipeline);
  return 0;
}

static int dispatch(bench *b, long i) {
  vkCmdDispatch(b->cmd, 1, 1, 1);
  return i % BATCH == BATCH - 1 && rerecord(b, 1);
}

static int measure(bench *b, long calls, double ns[FIGURES]) {
  VkMemoryRequirements req;
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem_props;
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = 4096, .memoryTypeIndex = b->type};
  VkDeviceMemory mem;
  AB_TIMED(ns[0], calls, (vkGetBufferMemoryRequirements(b->dev, b->buf, &req), req.size == 0));
  if (rerecord(b, 0)) return 1;
  AB_TIMED(ns[1], calls, dispatch(b, i));
  if (vkEndCommandBuffer(b->cmd)) return 1;
  AB_TIMED(ns[2], calls, (vkGetPhysicalDeviceProperties(b->pd, &props), props.apiVersion == 0));
  AB_TIMED(ns[3], calls / 10, (vkGetPhysicalDeviceMemoryProperties(b->pd, &mem_props), mem_props.memoryHeapCount == 0));
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                          .pNext = &budget};
  AB_TIMED(ns[4], calls / 10,
           (vkGetPhysicalDeviceMemoryProperties2(b->pd, &p2), p2.memoryProperties.memoryHeapCount == 0));
  AB_TIMED(ns[5], calls / 10, (vkAllocateMemory(b->dev, &ai, NULL, &mem) || (vkFreeMemory(b->dev, mem, NULL), 0)));
  return 0;
}

/* Prints "<layer mapped 0|1> <ns> ... <ns>". */
static int child(long calls) {
  bench b = {0};
  double ns[FIGURES];
  if (open_device(&b) || make_buffer(&b) || make_pipeline(&b))
    return fprintf(stderr, "vk_bench: no Vulkan device, or its setup failed\n"), 1;
  if (measure(&b, calls, ns)) return fprintf(stderr, "vk_bench: a call failed\n"), 1;
  ab_child_print(ab_mapped("libVkLayer_gpupart_partition"), ns, FIGURES);
  teardown(&b);
  return 0;
}

/* A child with the layer enabled or disabled, the build tree's manifest under share. */
static void command(char *cmd, size_t n, const char *self, const char *share, int with, long calls) {
  snprintf(cmd, n, "env %s XDG_DATA_HOME='%s' '%s' --child %ld",
           with ? "-u DISABLE_GPUPART_LAYER ENABLE_GPUPART_LAYER=1" : "-u ENABLE_GPUPART_LAYER DISABLE_GPUPART_LAYER=1",
           share, self, calls);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child(atol(argv[2]));
  if (argc < 2) return fprintf(stderr, "usage: vk_bench SHARE [CALLS] [ROUNDS]\n"), 2;
  long calls = argc > 2 ? atol(argv[2]) : 1000000, rounds = argc > 3 ? atol(argv[3]) : 5;
  char header[256];
  if (rounds < 1) rounds = 1;
  snprintf(header, sizeof header, "best of %ld rounds, %ld calls (memory properties and pairs %ld) per child:\n",
           rounds, calls, calls / 10 > 0 ? calls / 10 : 1);
  ab_bench b = {"vk_bench", FIGURES, names, command};
  return ab_run(&b, argv[1], calls, rounds, header);
}
