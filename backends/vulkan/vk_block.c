/* Vulkan blocks: each is one vkAllocateMemory allocation of the device's memory type.
 * Before asking the driver, a block must fit gpupart's share of maxMemoryAllocationCount
 * on its VkDevice and the heap's budget: VK_EXT_memory_budget's heapBudget - heapUsage
 * where the device has it, else the heap size less the bytes gpupart already holds on
 * that heap (a refusal is EDEVMEM, so the core's OOM sequence runs as for a driver
 * refusal). Where the device has buffer device address, a buffer covering the whole
 * block gives the block's address; a host-visible block is mapped once, persistently. */
#include <stdio.h>
#include <stdlib.h>

#include "vk_internal.h"

int gpupart__vk_shared_attach(gpupart__vk_device *d) {
  gpupart__vk_state *s = d->state;
  pthread_mutex_lock(&s->lock);
  gpupart__vk_shared *sh = s->shared;
  while (sh && sh->device != d->device) sh = sh->next;
  if (!sh && (sh = gpupart__host_calloc(s->mem, 1, sizeof *sh))) {
    sh->device = d->device;
    sh->next = s->shared;
    s->shared = sh;
  }
  if (sh) sh->refs++;
  pthread_mutex_unlock(&s->lock);
  d->shared = sh;
  return sh ? GPUPART_OK : gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
}

void gpupart__vk_shared_detach(gpupart__vk_device *d) {
  gpupart__vk_state *s = d->state;
  pthread_mutex_lock(&s->lock);
  if (--d->shared->refs == 0)
    for (gpupart__vk_shared **p = &s->shared; *p; p = &(*p)->next)
      if (*p == d->shared) {
        *p = d->shared->next;
        gpupart__host_free(s->mem, d->shared);
        break;
      }
  pthread_mutex_unlock(&s->lock);
  d->shared = NULL;
}

/* VK_EXT_memory_budget's figures for the device's heap. */
static void heap_budget(const gpupart__vk_device *d, uint64_t *budget, uint64_t *usage) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {.sType =
                                                     VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
  d->ifn.GetPhysicalDeviceMemoryProperties2(d->physical, &p);
  *budget = b.heapBudget[d->heap_index];
  *usage = b.heapUsage[d->heap_index];
}

int gpupart__vk_mem_info(void *devp, uint64_t *free_bytes, uint64_t *total_bytes) {
  const gpupart__vk_device *d = devp;
  *total_bytes = d->heap_size;
  *free_bytes = UINT64_MAX; /* without the extension the driver cannot tell */
  if (d->budget_ext) {
    uint64_t budget, usage;
    heap_budget(d, &budget, &usage);
    *free_bytes = budget > usage ? budget - usage : 0;
  }
  return GPUPART_OK;
}

/* Counts the block against the VkDevice's share and the heap, or says why it cannot. */
int gpupart__vk_heap_take(gpupart__vk_device *d, uint64_t size) {
  uint64_t budget = d->heap_size, usage = 0;
  if (d->budget_ext) heap_budget(d, &budget, &usage);
  gpupart__vk_shared *sh = d->shared;
  pthread_mutex_lock(&d->state->lock);
  if (!d->budget_ext) usage = sh->heap_used[d->heap_index];
  int full = sh->blocks >= d->max_blocks, over = usage > budget || size > budget - usage;
  if (!full && !over) sh->blocks++, sh->heap_used[d->heap_index] += size;
  uint32_t blocks = sh->blocks;
  pthread_mutex_unlock(&d->state->lock);
  if (full)
    return gpupart__fail(GPUPART_EDEVMEM,
                         "vulkan: block refused: gpupart holds %u blocks on this VkDevice, its share "
                         "(half) of maxMemoryAllocationCount",
                         blocks);
  if (over)
    return gpupart__fail(GPUPART_EDEVMEM,
                         "vulkan: block of %llu bytes refused: heap %u has %llu of %llu bytes in use (%s)",
                         (unsigned long long)size, d->heap_index, (unsigned long long)usage, (unsigned long long)budget,
                         d->budget_ext ? "VK_EXT_memory_budget" : "heap size");
  return GPUPART_OK;
}

void gpupart__vk_heap_give(gpupart__vk_device *d, uint64_t size) {
  pthread_mutex_lock(&d->state->lock);
  d->shared->blocks--;
  d->shared->heap_used[d->heap_index] -= size;
  pthread_mutex_unlock(&d->state->lock);
}

static void release(gpupart__vk_device *d, gpupart__vk_block *b) {
  if (b->mapped) d->dfn.UnmapMemory(d->device, b->memory);
  if (b->whole) d->dfn.DestroyBuffer(d->device, b->whole, NULL);
  if (b->memory) d->dfn.FreeMemory(d->device, b->memory, NULL);
  gpupart__host_free(d->state->mem, b);
}

/* A buffer over the whole block, for the block's device address. */
static int address_of(gpupart__vk_device *d, gpupart__vk_block *b, uint64_t *address) {
  VkBufferCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = b->size,
                           .usage = d->usages,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = d->dfn.CreateBuffer(d->device, &ci, NULL, &b->whole);
  if (r != VK_SUCCESS) return b->whole = VK_NULL_HANDLE, gpupart__vk_fail(r, "vkCreateBuffer (whole block)");
  VkMemoryRequirements req;
  d->dfn.GetBufferMemoryRequirements(d->device, b->whole, &req);
  if (req.size > b->size || !(req.memoryTypeBits & (1u << d->type_index)))
    return gpupart__fail(GPUPART_EBACKEND, "vulkan: a %llu-byte buffer needs %llu bytes or another memory type",
                         (unsigned long long)b->size, (unsigned long long)req.size);
  if ((r = d->dfn.BindBufferMemory(d->device, b->whole, b->memory, 0)) != VK_SUCCESS)
    return gpupart__vk_fail(r, "vkBindBufferMemory (whole block)");
  VkBufferDeviceAddressInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b->whole};
  *address = d->dfn.GetBufferDeviceAddress(d->device, &info);
  return GPUPART_OK;
}

static int back(gpupart__vk_device *d, gpupart__vk_block *b, uint64_t *address) {
  VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                     .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .pNext = d->dfn.GetBufferDeviceAddress ? &flags : NULL,
                             .allocationSize = b->size,
                             .memoryTypeIndex = d->type_index};
  VkResult r = d->dfn.AllocateMemory(d->device, &ai, NULL, &b->memory);
  if (r != VK_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "vkAllocateMemory(%llu bytes, type %u)", (unsigned long long)b->size, d->type_index);
    return b->memory = VK_NULL_HANDLE, gpupart__vk_fail(r, what);
  }
  int rc = d->dfn.GetBufferDeviceAddress ? address_of(d, b, address) : GPUPART_OK;
  if (rc == GPUPART_OK && (d->type_flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
      (r = d->dfn.MapMemory(d->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped)) != VK_SUCCESS) {
    b->mapped = NULL;
    rc = gpupart__vk_fail(r, "vkMapMemory");
  }
  return rc;
}

static void link_block(gpupart__vk_device *d, gpupart__vk_block *b) {
  pthread_mutex_lock(&d->lock);
  b->next = d->blocks;
  if (d->blocks) d->blocks->prev = b;
  d->blocks = b;
  pthread_mutex_unlock(&d->lock);
}

int gpupart__vk_block_alloc(void *devp, uint64_t size, gpupart_block *out) {
  gpupart__vk_device *d = devp;
  if (size > d->max_block)
    return gpupart__fail(GPUPART_EDEVMEM, "vulkan: block of %llu bytes exceeds the largest allocation, %llu bytes",
                         (unsigned long long)size, (unsigned long long)d->max_block);
  int rc = gpupart__vk_heap_take(d, size);
  if (rc) return rc;
  gpupart__vk_block *b = gpupart__host_calloc(d->state->mem, 1, sizeof *b);
  uint64_t address = 0;
  if (!b) rc = gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
  else b->size = size, rc = back(d, b, &address);
  if (rc) {
    if (b) release(d, b);
    gpupart__vk_heap_give(d, size);
    return rc;
  }
  link_block(d, b);
  *out = (gpupart_block){.size = size,
                         .device_address = address,
                         .native = (void *)b->memory,
                         .host_pointer = b->mapped,
                         .backend_data = b};
  return GPUPART_OK;
}

void gpupart__vk_block_free(void *devp, gpupart_block *block) {
  gpupart__vk_device *d = devp;
  gpupart__vk_block *b = block->backend_data;
  pthread_mutex_lock(&d->lock);
  if (b->prev) b->prev->next = b->next;
  else d->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
  pthread_mutex_unlock(&d->lock);
  uint64_t size = b->size;
  release(d, b);
  gpupart__vk_heap_give(d, size);
}

/* The persistent mapping of the block behind memory, or NULL. Called while the core
 * holds the partition lock, which keeps the block alive. */
void *gpupart__vk_block_host(gpupart__vk_device *d, VkDeviceMemory memory) {
  pthread_mutex_lock(&d->lock);
  const gpupart__vk_block *b = d->blocks;
  while (b && b->memory != memory) b = b->next;
  void *mapped = b ? b->mapped : NULL;
  pthread_mutex_unlock(&d->lock);
  return mapped;
}
