/* Setting a Vulkan device up for gpupart: creating gpupart's own VkDevice (one queue,
 * buffer device address and VK_EXT_memory_budget where present, sparse binding and a
 * queue for it where present: vk_vm.c), then, for own and
 * adopted devices alike, choosing the memory type and deriving what the core is told:
 *  - min_alignment covers (a) the alignment a buffer with every usage of
 *    gpupart_vulkan_create_buffer needs, asked of the device itself with a probe buffer
 *    (VUID-vkBindBufferMemory-memoryOffset-01036), (b) bufferImageGranularity, so that
 *    a buffer and an optimal-tiling image that the application binds at
 *    gpupart_vulkan_memory never share a granularity page (the core rounds every
 *    range's start and size to min_alignment), and (c) nonCoherentAtomSize for a
 *    host-visible, non-coherent type, so each allocation can be flushed on its own
 *    (VUID-VkMappedMemoryRange-offset-00687);
 *  - max_block_bytes is maxMemoryAllocationSize (Vulkan 1.1 maintenance3) capped by the
 *    heap size, and by maxBufferSize where a block needs a whole-block buffer for its
 *    device address (VUID-VkBufferCreateInfo-size-06409);
 *  - the block cap is half of maxMemoryAllocationCount: the limit counts every
 *    allocation on the VkDevice (VUID-vkAllocateMemory-maxMemoryAllocationCount-04101),
 *    so the other half stays the application's. */
#include <stdlib.h>

#include "vk_internal.h"

static uint64_t pow2_at_least(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

static uint32_t queue_family(const gpupart__vk_device *d) {
  uint32_t n = 0;
  d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, NULL);
  VkQueueFamilyProperties *q = n ? gpupart__host_calloc(d->state->mem, n, sizeof *q) : NULL;
  uint32_t family = 0, found = 0;
  if (q) d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, q);
  for (uint32_t i = 0; q && i < n && !found; i++)
    if (q[i].queueCount && (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) family = i, found = 1;
  for (uint32_t i = 0; q && i < n && !found; i++)
    if (q[i].queueCount) family = i, found = 1;
  gpupart__host_free(d->state->mem, q);
  return family;
}

static int bda_supported(const gpupart__vk_device *d, const gpupart__vk_facts *f) {
  if (!f->bda_ext) return 0;
  VkPhysicalDeviceBufferDeviceAddressFeatures bda = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  VkPhysicalDeviceFeatures2 features = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &bda};
  d->ifn.GetPhysicalDeviceFeatures2(d->physical, &features);
  return bda.bufferDeviceAddress == VK_TRUE;
}

int gpupart__vk_create_device(gpupart__vk_device *d, const gpupart__vk_facts *f) {
  int bda = bda_supported(d, f);
  const char *ext[2];
  uint32_t n = 0;
  if (f->budget_ext) ext[n++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
  if (bda && d->api_version < VK_API_VERSION_1_2) ext[n++] = VK_KHR_BUFFER_DEVICE_ADDRESS_EXTENSION_NAME;
  VkPhysicalDeviceBufferDeviceAddressFeatures bda_on = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES, .bufferDeviceAddress = VK_TRUE};
  float priority[2] = {1.0f, 1.0f};
  d->queue_family = queue_family(d);
  uint32_t in_family;
  int extra;
  gpupart__vk_sparse_plan(d, &in_family, &extra);
  VkDeviceQueueCreateInfo queues[2] = {{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                        .queueFamilyIndex = d->queue_family,
                                        .queueCount = in_family,
                                        .pQueuePriorities = priority},
                                       {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                        .queueFamilyIndex = d->sparse_family,
                                        .queueCount = 1,
                                        .pQueuePriorities = priority}};
  VkPhysicalDeviceFeatures sparse = {.sparseBinding = VK_TRUE, .sparseResidencyBuffer = VK_TRUE};
  VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .pNext = bda ? &bda_on : NULL,
                           .queueCreateInfoCount = 1 + (uint32_t)extra,
                           .pQueueCreateInfos = queues,
                           .enabledExtensionCount = n,
                           .ppEnabledExtensionNames = ext,
                           .pEnabledFeatures = d->sparse ? &sparse : NULL};
  VkResult r = d->ifn.CreateDevice(d->physical, &ci, NULL, &d->device);
  if (r != VK_SUCCESS) return d->device = VK_NULL_HANDLE, gpupart__vk_fail(r, "vkCreateDevice");
  d->owns_device = 1;
  return gpupart__vk_load_device(d, bda);
}

/* Asks the device what a buffer with every supported usage needs. */
static int probe(gpupart__vk_device *d, VkMemoryRequirements *req) {
  VkBufferCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = 65536,
                           .usage = d->usages,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer b;
  VkResult r = d->dfn.CreateBuffer(d->device, &ci, NULL, &b);
  if (r != VK_SUCCESS) return gpupart__vk_fail(r, "vkCreateBuffer (probe)");
  d->dfn.GetBufferMemoryRequirements(d->device, b, req);
  d->dfn.DestroyBuffer(d->device, b, NULL);
  return GPUPART_OK;
}

/* The type on the largest heap among those allowed, device-local ones first, fewest
 * extra properties on a tie (a discrete GPU's small host-visible window loses). */
uint32_t gpupart__vk_default_type(const VkPhysicalDeviceMemoryProperties *mem, uint32_t allowed) {
  uint32_t best = UINT32_MAX;
  for (int local = 1; local >= 0 && best == UINT32_MAX; local--)
    for (uint32_t i = 0; i < mem->memoryTypeCount; i++) {
      VkMemoryPropertyFlags p = mem->memoryTypes[i].propertyFlags;
      if (!(allowed & (1u << i)) || (p & VK_MEMORY_PROPERTY_PROTECTED_BIT)) continue;
      if (local && !(p & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
      uint64_t size = mem->memoryHeaps[mem->memoryTypes[i].heapIndex].size;
      uint64_t best_size = best == UINT32_MAX ? 0 : mem->memoryHeaps[mem->memoryTypes[best].heapIndex].size;
      if (best == UINT32_MAX || size > best_size ||
          (size == best_size && __builtin_popcount(p) < __builtin_popcount(mem->memoryTypes[best].propertyFlags)))
        best = i;
    }
  return best;
}

static int choose_type(gpupart__vk_device *d, const VkPhysicalDeviceMemoryProperties *mem, uint32_t allowed,
                       uint32_t request) {
  if (allowed & ~((1ull << mem->memoryTypeCount) - 1))
    return gpupart__fail(GPUPART_EINVAL,
                         "vulkan: device %p asks for memory types that physical device %p does not "
                         "have: it was not created from that physical device",
                         (void *)d->device, (void *)d->physical);
  uint32_t t = request == UINT32_MAX ? gpupart__vk_default_type(mem, allowed) : request;
  if (request != UINT32_MAX && request >= mem->memoryTypeCount)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: memory type %u is out of range: the device has %u memory types",
                         request, mem->memoryTypeCount);
  if (t == UINT32_MAX) return gpupart__fail(GPUPART_ENOTSUP, "vulkan: no memory type can back buffers");
  if (!(allowed & (1u << t)) || (mem->memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_PROTECTED_BIT))
    return gpupart__fail(GPUPART_EINVAL,
                         "vulkan: memory type %u cannot back buffers (allowed types 0x%x, protected "
                         "types are not supported)",
                         t, allowed);
  d->type_index = t;
  d->type_flags = mem->memoryTypes[t].propertyFlags;
  d->heap_index = mem->memoryTypes[t].heapIndex;
  d->heap_size = mem->memoryHeaps[d->heap_index].size;
  return GPUPART_OK;
}

uint64_t gpupart__vk_alignment(const VkPhysicalDeviceLimits *l, VkMemoryPropertyFlags f, uint64_t probe_align) {
  uint64_t a = probe_align;
  uint64_t limits[] = {l->bufferImageGranularity, l->minUniformBufferOffsetAlignment,
                       l->minStorageBufferOffsetAlignment, l->minTexelBufferOffsetAlignment};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
    if (limits[i] > a) a = limits[i];
  if ((f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && !(f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
      l->nonCoherentAtomSize > a)
    a = l->nonCoherentAtomSize;
  return pow2_at_least(a ? a : 1);
}

static uint64_t largest_block(const gpupart__vk_device *d, const gpupart__vk_facts *f) {
  uint64_t max = d->heap_size;
  if (f->m3.maxMemoryAllocationSize && f->m3.maxMemoryAllocationSize < max) max = f->m3.maxMemoryAllocationSize;
  if (d->dfn.GetBufferDeviceAddress && f->m4.maxBufferSize && f->m4.maxBufferSize < max) max = f->m4.maxBufferSize;
  return max & ~(d->alignment - 1);
}

int gpupart__vk_configure(gpupart__vk_device *d, const gpupart__vk_facts *f, uint32_t type_request) {
  d->usages = GPUPART_VK_BUFFER_USAGES;
  if (d->dfn.GetBufferDeviceAddress) d->usages |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  VkMemoryRequirements req;
  int rc = probe(d, &req);
  if (rc == GPUPART_OK) rc = choose_type(d, &f->mem, req.memoryTypeBits, type_request);
  if (rc) return rc;
  const VkPhysicalDeviceLimits *l = &f->props.properties.limits;
  d->alignment = gpupart__vk_alignment(l, d->type_flags, req.alignment);
  d->max_block = largest_block(d, f);
  d->max_blocks = l->maxMemoryAllocationCount / 2 ? l->maxMemoryAllocationCount / 2 : 1;
  d->budget_ext = f->budget_ext;
  if (!d->max_block)
    return gpupart__fail(GPUPART_ENOTSUP, "vulkan: memory type %u allows no allocation of %llu-byte alignment",
                         d->type_index, (unsigned long long)d->alignment);
  gpupart__vk_sparse_configure(d, f);
  return GPUPART_OK;
}
