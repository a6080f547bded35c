/* The Vulkan test application (see vulkan_test.h): validation made mandatory, an
 * instance and device of our own for gpupart to adopt, and byte moves through the
 * driver (staging buffer + vkCmdCopyBuffer). */
#include "vulkan_test.h"

#include "vulkan_base.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vkt_require_validation(void) {
  cr_assert(vkb_has_validation(), "the Vulkan validation layer " VKB_VALIDATION " is not installed; every Vulkan "
                                  "test requires it (Debian: vulkan-validationlayers, installed by scripts/deps)");
  setenv("VK_INSTANCE_LAYERS", VKB_VALIDATION, 1);
  setenv("VK_LAYER_SETTINGS_PATH", GPUPART_TEST_LAYER_SETTINGS, 1);
}

static int fail(char *why, size_t n, const char *call, VkResult r) {
  snprintf(why, n, "%s failed: %d", call, (int)r);
  return -1;
}

static int make_instance(vkt_env *e, char *why, size_t n) {
  const char *call = NULL;
  VkResult r = vkb_instance_create("gpupart tests", &e->errors, &e->instance, &e->messenger, &call);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return 1;
  return r == VK_SUCCESS ? 0 : fail(why, n, call, r);
}

static uint32_t compute_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
  VkQueueFamilyProperties q[16];
  if (n > 16) n = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
  for (uint32_t i = 0; i < n; i++)
    if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
  return 0;
}

static int make_device(vkt_env *e, int want_bda, int want_sparse, char *why, size_t n) {
  uint32_t count = 1;
  VkResult r = vkEnumeratePhysicalDevices(e->instance, &count, &e->physical);
  if (r < VK_SUCCESS) return fail(why, n, "vkEnumeratePhysicalDevices", r);
  if (!count) return 1;
  VkPhysicalDeviceBufferDeviceAddressFeatures bda = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &bda};
  vkGetPhysicalDeviceFeatures2(e->physical, &f);
  e->bda = want_bda && bda.bufferDeviceAddress;
  e->sparse = want_sparse && f.features.sparseBinding && f.features.sparseResidencyBuffer;
  if (want_sparse && !e->sparse) return 1;
  bda = (VkPhysicalDeviceBufferDeviceAddressFeatures){
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES, .bufferDeviceAddress = VK_TRUE};
  VkPhysicalDeviceFeatures sparse = {.sparseBinding = VK_TRUE, .sparseResidencyBuffer = VK_TRUE};
  float priority = 1.0f;
  e->family = compute_family(e->physical);
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                               .queueFamilyIndex = e->family,
                               .queueCount = 1,
                               .pQueuePriorities = &priority};
  VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .pNext = e->bda ? &bda : NULL,
                           .queueCreateInfoCount = 1,
                           .pQueueCreateInfos = &q,
                           .pEnabledFeatures = e->sparse ? &sparse : NULL};
  if ((r = vkCreateDevice(e->physical, &ci, NULL, &e->device)) != VK_SUCCESS)
    return e->device = VK_NULL_HANDLE, fail(why, n, "vkCreateDevice", r);
  vkGetDeviceQueue(e->device, e->family, 0, &e->queue);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = e->family};
  r = vkCreateCommandPool(e->device, &pi, NULL, &e->pool);
  return r == VK_SUCCESS ? 0 : fail(why, n, "vkCreateCommandPool", r);
}

static int create(vkt_env *e, int want_bda, int want_sparse, char *why, size_t why_len) {
  memset(e, 0, sizeof *e);
  int rc = make_instance(e, why, why_len);
  if (rc == 0) rc = make_device(e, want_bda, want_sparse, why, why_len);
  if (rc) vkt_env_destroy(e);
  return rc;
}

int vkt_env_create(vkt_env *e, int want_bda, char *why, size_t why_len) { return create(e, want_bda, 0, why, why_len); }

int vkt_env_create_sparse(vkt_env *e, char *why, size_t why_len) { return create(e, 1, 1, why, why_len); }

int vkt_env_destroy(vkt_env *e) {
  if (e->pool) vkDestroyCommandPool(e->device, e->pool, NULL);
  if (e->device) vkDestroyDevice(e->device, NULL);
  vkb_instance_destroy(e->instance, e->messenger);
  int errors = e->errors;
  memset(e, 0, sizeof *e);
  return errors;
}

gpupart_vulkan_desc vkt_desc(const vkt_env *e) {
  return (gpupart_vulkan_desc){.instance = e->instance,
                               .physical_device = e->physical,
                               .device = e->device,
                               .memory_type_index = UINT32_MAX,
                               .buffer_device_address = (uint32_t)e->bda};
}

/* A host-visible, coherent staging buffer of size bytes, mapped. */
typedef struct staging {
  VkBuffer buffer;
  VkDeviceMemory memory;
  void *host;
} staging;

static int staging_type(VkPhysicalDevice pd, uint32_t allowed) {
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++)
    if ((allowed & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) return (int)i;
  return -1;
}

static int staging_make(vkt_env *e, uint64_t size, staging *s, char *why, size_t n) {
  memset(s, 0, sizeof *s);
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = size,
                           .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT};
  VkResult r = vkCreateBuffer(e->device, &bi, NULL, &s->buffer);
  if (r != VK_SUCCESS) return fail(why, n, "vkCreateBuffer (staging)", r);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(e->device, s->buffer, &req);
  int type = staging_type(e->physical, req.memoryTypeBits);
  if (type < 0) return snprintf(why, n, "no host-visible coherent memory type"), -1;
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = (uint32_t)type};
  if ((r = vkAllocateMemory(e->device, &ai, NULL, &s->memory)) != VK_SUCCESS)
    return fail(why, n, "vkAllocateMemory", r);
  if ((r = vkBindBufferMemory(e->device, s->buffer, s->memory, 0)) != VK_SUCCESS)
    return fail(why, n, "vkBindBufferMemory", r);
  r = vkMapMemory(e->device, s->memory, 0, VK_WHOLE_SIZE, 0, &s->host);
  return r == VK_SUCCESS ? 0 : fail(why, n, "vkMapMemory", r);
}

static void staging_free(vkt_env *e, staging *s) {
  if (s->host) vkUnmapMemory(e->device, s->memory);
  if (s->buffer) vkDestroyBuffer(e->device, s->buffer, NULL);
  if (s->memory) vkFreeMemory(e->device, s->memory, NULL);
}

/* Records src -> dst, with barriers that make earlier transfers visible to the copy and
 * the copy visible to the host, submits it and waits. */
static int copy_buffers(VkDevice d, VkQueue q, VkCommandPool pool, VkBuffer src, VkBuffer dst, uint64_t size, char *why,
                        size_t n) {
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkCommandBuffer cb;
  VkResult r = vkAllocateCommandBuffers(d, &ai, &cb);
  if (r != VK_SUCCESS) return fail(why, n, "vkAllocateCommandBuffers", r);
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  vkBeginCommandBuffer(cb, &bi);
  VkMemoryBarrier before = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                            .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                            .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, NULL, 0,
                       NULL);
  VkBufferCopy region = {.size = size};
  vkCmdCopyBuffer(cb, src, dst, 1, &region);
  VkMemoryBarrier after = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after, 0, NULL, 0, NULL);
  vkEndCommandBuffer(cb);
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
  r = vkQueueSubmit(q, 1, &si, VK_NULL_HANDLE);
  if (r == VK_SUCCESS) r = vkQueueWaitIdle(q);
  vkFreeCommandBuffers(d, pool, 1, &cb);
  return r == VK_SUCCESS ? 0 : fail(why, n, "vkQueueSubmit/vkQueueWaitIdle", r);
}

static int gpupart_buffer(const gpupart_allocation *a, VkBuffer *b, char *why, size_t n) {
  gpupart_result rc =
      gpupart_vulkan_create_buffer(a, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, b);
  if (rc) snprintf(why, n, "gpupart_vulkan_create_buffer: %s", gpupart_last_error());
  return rc ? -1 : 0;
}

int vkt_write(vkt_env *e, const gpupart_allocation *a, const void *data, uint64_t size, char *why, size_t why_len) {
  staging s = {0};
  VkBuffer dst;
  int rc = gpupart_buffer(a, &dst, why, why_len);
  if (rc == 0) rc = staging_make(e, size, &s, why, why_len);
  if (rc == 0) {
    memcpy(s.host, data, size);
    rc = copy_buffers(e->device, e->queue, e->pool, s.buffer, dst, size, why, why_len);
  }
  if (s.buffer || s.memory) staging_free(e, &s);
  return rc;
}

int vkt_read(vkt_env *e, const gpupart_allocation *a, void *data, uint64_t size, char *why, size_t why_len) {
  staging s = {0};
  VkBuffer src;
  int rc = gpupart_buffer(a, &src, why, why_len);
  if (rc == 0) rc = staging_make(e, size, &s, why, why_len);
  if (rc == 0) rc = copy_buffers(e->device, e->queue, e->pool, src, s.buffer, size, why, why_len);
  if (rc == 0) memcpy(data, s.host, size);
  if (s.buffer || s.memory) staging_free(e, &s);
  return rc;
}

int vkt_copy(VkDevice d, uint32_t family, const gpupart_allocation *src, const gpupart_allocation *dst, uint64_t size,
             char *why, size_t why_len) {
  VkBuffer from, to;
  if (gpupart_buffer(src, &from, why, why_len) || gpupart_buffer(dst, &to, why, why_len)) return -1;
  VkQueue q;
  vkGetDeviceQueue(d, family, 0, &q);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = family};
  VkCommandPool pool;
  VkResult r = vkCreateCommandPool(d, &pi, NULL, &pool);
  if (r != VK_SUCCESS) return fail(why, why_len, "vkCreateCommandPool", r);
  int rc = copy_buffers(d, q, pool, from, to, size, why, why_len);
  vkDestroyCommandPool(d, pool, NULL);
  return rc;
}
