/* vulkan_compute: a Vulkan compute shader on memory that gpupart partitions.
 *
 * The application creates its own instance, device and compute queue, and gpupart
 * adopts them twice: once for the device-local memory type, split into two partitions
 * ("inputs" holds x and y, "outputs" holds the result), and once for a host-visible
 * type, whose "staging" partition carries data to and from the GPU. A saxpy shader
 * (vulkan_compute.comp, compiled to SPIR-V by glslc at build time) computes
 * out = scale * x + y on buffers that gpupart_vulkan_create_buffer bound at the
 * allocations; every result is checked on the host. Run with
 * VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation to watch it under validation.
 * Exit status: 0 results correct, 1 a failure (printed), 2 no Vulkan device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupart_vulkan.h"

static const uint32_t saxpy_spirv[] =
#include "vulkan_compute.spv.h"
    ;

#define N (1u << 20)
#define SCALE 2.5f
#define MiB (1024.0 * 1024.0)

#define CHECK_VK(call)                                                                  \
  do {                                                                                  \
    VkResult r_ = (call);                                                               \
    if (r_ != VK_SUCCESS) return fprintf(stderr, "%s failed: %d\n", #call, (int)r_), 1; \
  } while (0)
#define CHECK_GP(call)                                                                                        \
  do {                                                                                                        \
    gpupart_result r_ = (call);                                                                               \
    if (r_ != GPUPART_OK)                                                                                     \
      return fprintf(stderr, "%s failed: %s: %s\n", #call, gpupart_result_name(r_), gpupart_last_error()), 1; \
  } while (0)

typedef struct app {
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice device;
  uint32_t family;
  VkQueue queue;
  VkCommandPool pool;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  VkDescriptorPool descriptors;
  VkDescriptorSet set;
} app;

typedef struct params {
  float scale;
  uint32_t n;
} params;

static int make_device(app *a) {
  VkApplicationInfo info = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                            .pApplicationName = "vulkan_compute",
                            .apiVersion = VK_API_VERSION_1_1};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &info};
  VkResult r = vkCreateInstance(&ci, NULL, &a->instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return fprintf(stderr, "vulkan_compute: no Vulkan driver installed\n"), 2;
  CHECK_VK(r);
  uint32_t count = 1;
  r = vkEnumeratePhysicalDevices(a->instance, &count, &a->physical);
  if (r < VK_SUCCESS || !count) return fprintf(stderr, "vulkan_compute: no Vulkan device\n"), 2;
  VkQueueFamilyProperties families[16];
  uint32_t nf = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(a->physical, &nf, families);
  for (a->family = 0; a->family < nf && !(families[a->family].queueFlags & VK_QUEUE_COMPUTE_BIT);) a->family++;
  if (a->family == nf) return fprintf(stderr, "vulkan_compute: the device has no compute queue\n"), 2;
  float priority = 1.0f;
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                               .queueFamilyIndex = a->family,
                               .queueCount = 1,
                               .pQueuePriorities = &priority};
  VkDeviceCreateInfo di = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &q};
  CHECK_VK(vkCreateDevice(a->physical, &di, NULL, &a->device));
  vkGetDeviceQueue(a->device, a->family, 0, &a->queue);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = a->family};
  CHECK_VK(vkCreateCommandPool(a->device, &pi, NULL, &a->pool));
  return 0;
}

static int make_pipeline(app *a) {
  VkDescriptorSetLayoutBinding b[3];
  for (uint32_t i = 0; i < 3; i++)
    b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                          .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          .descriptorCount = 1,
                                          .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo li = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 3, .pBindings = b};
  CHECK_VK(vkCreateDescriptorSetLayout(a->device, &li, NULL, &a->set_layout));
  VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = sizeof(params)};
  VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                   .setLayoutCount = 1,
                                   .pSetLayouts = &a->set_layout,
                                   .pushConstantRangeCount = 1,
                                   .pPushConstantRanges = &push};
  CHECK_VK(vkCreatePipelineLayout(a->device, &pl, NULL, &a->layout));
  VkShaderModuleCreateInfo si = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = sizeof saxpy_spirv, .pCode = saxpy_spirv};
  VkShaderModule module;
  CHECK_VK(vkCreateShaderModule(a->device, &si, NULL, &module));
  VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                    .layout = a->layout,
                                    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                              .module = module,
                                              .pName = "main"}};
  VkResult r = vkCreateComputePipelines(a->device, VK_NULL_HANDLE, 1, &ci, NULL, &a->pipeline);
  vkDestroyShaderModule(a->device, module, NULL);
  CHECK_VK(r);
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 3};
  VkDescriptorPoolCreateInfo dp = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &size};
  CHECK_VK(vkCreateDescriptorPool(a->device, &dp, NULL, &a->descriptors));
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = a->descriptors,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &a->set_layout};
  CHECK_VK(vkAllocateDescriptorSets(a->device, &ai, &a->set));
  return 0;
}

static void destroy_app(app *a) {
  if (!a->device) return;
  vkDestroyDescriptorPool(a->device, a->descriptors, NULL);
  vkDestroyPipeline(a->device, a->pipeline, NULL);
  vkDestroyPipelineLayout(a->device, a->layout, NULL);
  vkDestroyDescriptorSetLayout(a->device, a->set_layout, NULL);
  vkDestroyCommandPool(a->device, a->pool, NULL);
  vkDestroyDevice(a->device, NULL);
}

/* The first host-visible, coherent memory type, for the staging device. */
static uint32_t host_visible_type(VkPhysicalDevice pd) {
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++)
    if ((mem.memoryTypes[i].propertyFlags & want) == want) return i;
  return UINT32_MAX;
}

/* gpupart devices over the application's VkDevice: device-local (default type) and
 * host-visible, each with its own partitions. */
typedef struct memory {
  gpupart_context *ctx;
  gpupart_device *local, *host;
  gpupart_partition *inputs, *outputs, *staging;
  gpupart_allocation *x, *y, *out, *up, *down;
} memory;

static int adopt(const app *a, uint32_t type, gpupart_context *ctx, gpupart_device **out) {
  gpupart_vulkan_desc v = {.instance = a->instance,
                           .physical_device = a->physical,
                           .device = a->device,
                           .memory_type = type == UINT32_MAX ? 0 : type + 1};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = &v};
  CHECK_GP(gpupart_device_open(ctx, &d, out));
  return 0;
}

static int make_memory(const app *a, memory *m) {
  uint64_t bytes = (uint64_t)N * sizeof(float);
  CHECK_GP(gpupart_context_create(NULL, &m->ctx));
  if (adopt(a, UINT32_MAX, m->ctx, &m->local) || adopt(a, host_visible_type(a->physical), m->ctx, &m->host)) return 1;
  gpupart_partition_desc in = {.name = "inputs", .fraction = 0.5}, out = {.name = "outputs", .fraction = 0.25},
                         st = {.name = "staging", .limit = 64u << 20};
  CHECK_GP(gpupart_partition_create(m->local, &in, &m->inputs));
  CHECK_GP(gpupart_partition_create(m->local, &out, &m->outputs));
  CHECK_GP(gpupart_partition_create(m->host, &st, &m->staging));
  CHECK_GP(gpupart_alloc(m->inputs, bytes, 0, &m->x));
  CHECK_GP(gpupart_alloc(m->inputs, bytes, 0, &m->y));
  CHECK_GP(gpupart_alloc(m->outputs, bytes, 0, &m->out));
  CHECK_GP(gpupart_alloc(m->staging, 2 * bytes, 0, &m->up));
  CHECK_GP(gpupart_alloc(m->staging, bytes, 0, &m->down));
  return 0;
}

static void free_memory(memory *m) {
  gpupart_allocation *all[] = {m->x, m->y, m->out, m->up, m->down};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpupart_free(all[i]);
  gpupart_device_close(m->local);
  gpupart_device_close(m->host);
  gpupart_context_destroy(m->ctx);
}

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags src, VkPipelineStageFlags to,
                    VkAccessFlags dst) {
  VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src, .dstAccessMask = dst};
  vkCmdPipelineBarrier(cb, from, to, 0, 1, &b, 0, NULL, 0, NULL);
}

/* The shader's three storage buffers, bound to the descriptor set. */
static int bind_buffers(const app *a, const memory *m) {
  VkBufferUsageFlags use =
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  const gpupart_allocation *allocs[3] = {m->x, m->y, m->out};
  VkDescriptorBufferInfo info[3];
  VkWriteDescriptorSet w[3];
  for (int i = 0; i < 3; i++) {
    CHECK_GP(gpupart_vulkan_create_buffer(allocs[i], use, &info[i].buffer));
    info[i].offset = 0;
    info[i].range = VK_WHOLE_SIZE;
    w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                  .dstSet = a->set,
                                  .dstBinding = (uint32_t)i,
                                  .descriptorCount = 1,
                                  .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                  .pBufferInfo = &info[i]};
  }
  vkUpdateDescriptorSets(a->device, 3, w, 0, NULL);
  return 0;
}

/* upload x, y -> dispatch -> download out, in one command buffer. */
static int record(const app *a, const memory *m, VkCommandBuffer cb) {
  VkBufferUsageFlags t = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer up, down, x, y, out;
  CHECK_GP(gpupart_vulkan_create_buffer(m->up, t, &up));
  CHECK_GP(gpupart_vulkan_create_buffer(m->down, t, &down));
  CHECK_GP(gpupart_vulkan_create_buffer(m->x, VK_BUFFER_USAGE_TRANSFER_DST_BIT, &x));
  CHECK_GP(gpupart_vulkan_create_buffer(m->y, VK_BUFFER_USAGE_TRANSFER_DST_BIT, &y));
  CHECK_GP(gpupart_vulkan_create_buffer(m->out, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &out));
  VkDeviceSize bytes = (VkDeviceSize)N * sizeof(float);
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  CHECK_VK(vkBeginCommandBuffer(cb, &bi));
  vkCmdCopyBuffer(cb, up, x, 1, &(VkBufferCopy){.srcOffset = 0, .size = bytes});
  vkCmdCopyBuffer(cb, up, y, 1, &(VkBufferCopy){.srcOffset = bytes, .size = bytes});
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, a->pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, a->layout, 0, 1, &a->set, 0, NULL);
  params p = {SCALE, N};
  vkCmdPushConstants(cb, a->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof p, &p);
  vkCmdDispatch(cb, (N + 255) / 256, 1, 1);
  barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT);
  vkCmdCopyBuffer(cb, out, down, 1, &(VkBufferCopy){.size = bytes});
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);
  CHECK_VK(vkEndCommandBuffer(cb));
  return 0;
}

static int run(const app *a, const memory *m) {
  float *up = gpupart_vulkan_host_pointer(m->up);
  const float *down = gpupart_vulkan_host_pointer(m->down);
  if (!up || !down) return fprintf(stderr, "staging is not host-visible: %s\n", gpupart_last_error()), 1;
  for (uint32_t i = 0; i < N; i++) up[i] = (float)i, up[N + i] = 1.0f - (float)(i % 1000);
  if (bind_buffers(a, m)) return 1;
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = a->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkCommandBuffer cb;
  CHECK_VK(vkAllocateCommandBuffers(a->device, &ai, &cb));
  if (record(a, m, cb)) return 1;
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
  CHECK_VK(vkQueueSubmit(a->queue, 1, &si, VK_NULL_HANDLE));
  CHECK_VK(vkQueueWaitIdle(a->queue));
  vkFreeCommandBuffers(a->device, a->pool, 1, &cb);
  uint32_t wrong = 0;
  for (uint32_t i = 0; i < N; i++) wrong += fabsf(down[i] - (SCALE * up[i] + up[N + i])) > 1e-3f * (1.0f + (float)i);
  printf("saxpy over %u floats on the GPU: %u wrong result(s)\n", N, wrong);
  return wrong ? 1 : 0;
}

static void report(const memory *m) {
  gpupart_device_info info;
  gpupart_device_get_info(m->local, &info);
  uint32_t type;
  VkMemoryPropertyFlags flags;
  gpupart_vulkan_memory_type(m->local, &type, &flags);
  printf("device: %s (%s), memory type %u, heap %.0f MiB, budget %.0f MiB\n", info.name, info.vendor, type,
         info.total_bytes / MiB, gpupart_device_budget(m->local) / MiB);
  const gpupart_partition *parts[] = {m->inputs, m->outputs, m->staging};
  for (int i = 0; i < 3; i++) {
    gpupart_stats s;
    gpupart_partition_get_stats(parts[i], &s);
    printf("  partition %-8s limit %7.1f MiB  in use %5.1f MiB  reserved %5.1f MiB in %llu vkAllocateMemory block(s)\n",
           gpupart_partition_name(parts[i]), s.limit / MiB, s.in_use / MiB, s.reserved / MiB,
           (unsigned long long)(s.driver_allocs - s.driver_frees));
  }
}

int main(void) {
  app a = {0};
  memory m = {0};
  int rc = make_device(&a);
  if (rc == 0) rc = make_pipeline(&a);
  if (rc == 0) rc = make_memory(&a, &m);
  if (rc == 0) report(&m), rc = run(&a, &m);
  if (m.ctx) free_memory(&m);
  destroy_app(&a);
  if (a.instance) vkDestroyInstance(a.instance, NULL);
  printf("vulkan_compute: %s\n", rc == 0 ? "results correct" : rc == 2 ? "no Vulkan device, nothing run" : "FAILED");
  return rc;
}
