/* Vulkan virtual memory for expandable partitions, by sparse binding: a reserved range is
 * one sparse VkBuffer (SPARSE_BINDING | SPARSE_RESIDENCY, every usage create_buffer
 * offers) with nothing bound; mapping allocates one VkDeviceMemory of the memory type the
 * device partitions and binds it at an offset with vkQueueBindSparse, then waits for a
 * fence, since binds are not ordered against the application's vkQueueSubmit; unmapping
 * binds VK_NULL_HANDLE over the same pages, waits, and only then frees the memory
 * (vkFreeMemory does not unbind). The granule is the sparse buffer's memory alignment (the
 * sparse block size: 4096 on lavapipe, often 64 KiB elsewhere); the validation layer does
 * not check a bind's resourceOffset against it, so every offset and size is checked here.
 * Offered on gpupart's own devices where the physical device has sparseBinding and
 * sparseResidencyBuffer and a queue family has SPARSE_BINDING; on an adopted device only
 * where the application names a sparse queue in gpupart_vulkan_desc (0.3), which promises
 * the features were enabled (Vulkan cannot be asked which a VkDevice has), and optionally
 * a lock that serialises gpupart's binds with its own use of that queue. Every
 * vkQueueBindSparse of the process is also serialised here (bind_lock), so gpupart
 * devices sharing one queue never bind at once. sparseAddressSpaceSize bounds the sum of
 * every sparse resource of a VkDevice (2 GiB on lavapipe 25): a range that would pass it
 * is refused with ENOTSUP, so the partition keeps growth blocks. */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

#define SPARSE_FLAGS (VK_BUFFER_CREATE_SPARSE_BINDING_BIT | VK_BUFFER_CREATE_SPARSE_RESIDENCY_BIT)

static int sparse_features(const gpupart__vk_device *d) {
  VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  d->ifn.GetPhysicalDeviceFeatures2(d->physical, &f);
  return f.features.sparseBinding && f.features.sparseResidencyBuffer;
}

void gpupart__vk_sparse_plan(gpupart__vk_device *d, uint32_t *queues_in_family, int *extra) {
  *queues_in_family = 1, *extra = 0;
  d->sparse = 0;
  snprintf(d->sparse_why, sizeof d->sparse_why, "the device has no sparseBinding and sparseResidencyBuffer");
  if (!sparse_features(d)) return;
  uint32_t n = 0;
  d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, NULL);
  VkQueueFamilyProperties *q = n ? gpupart__host_calloc(d->state->mem, n, sizeof *q) : NULL;
  if (!q) return;
  d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, q);
  const VkQueueFamilyProperties *own = d->queue_family < n ? &q[d->queue_family] : NULL;
  if (own && (own->queueFlags & VK_QUEUE_SPARSE_BINDING_BIT)) {
    d->sparse = 1;
    d->sparse_family = d->queue_family;
    d->sparse_queue_index = own->queueCount > 1; /* a queue of its own where there is one */
    *queues_in_family = 1 + d->sparse_queue_index;
  }
  for (uint32_t i = 0; i < n && !d->sparse; i++) {
    if (!q[i].queueCount || !(q[i].queueFlags & VK_QUEUE_SPARSE_BINDING_BIT)) continue;
    d->sparse = 1;
    d->sparse_family = i;
    d->sparse_queue_index = 0;
    *extra = 1;
  }
  gpupart__host_free(d->state->mem, q);
  if (!d->sparse) snprintf(d->sparse_why, sizeof d->sparse_why, "no queue family has SPARSE_BINDING");
}

static VkBufferCreateInfo sparse_info(const gpupart__vk_device *d, uint64_t size) {
  return (VkBufferCreateInfo){.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .flags = SPARSE_FLAGS,
                              .size = size,
                              .usage = d->usages,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
}

/* The granule from a probe sparse buffer: its alignment, and d's type among its types. */
static void probe_granule(gpupart__vk_device *d) {
  VkBufferCreateInfo ci = sparse_info(d, 1u << 20);
  VkBuffer b;
  VkResult r = d->dfn.CreateBuffer(d->device, &ci, NULL, &b);
  if (r != VK_SUCCESS) {
    snprintf(d->sparse_why, sizeof d->sparse_why, "a sparse buffer cannot be made: %s", gpupart__vk_result_name(r));
    return;
  }
  VkMemoryRequirements req;
  d->dfn.GetBufferMemoryRequirements(d->device, b, &req);
  d->dfn.DestroyBuffer(d->device, b, NULL);
  uint64_t a = req.alignment;
  if (!(req.memoryTypeBits & (1u << d->type_index)))
    snprintf(d->sparse_why, sizeof d->sparse_why, "sparse buffers take memory types 0x%x, not type %u",
             req.memoryTypeBits, d->type_index);
  else if (!a || (a & (a - 1)) || a % d->alignment)
    snprintf(d->sparse_why, sizeof d->sparse_why, "the sparse block size %llu is no multiple of the alignment %llu",
             (unsigned long long)a, (unsigned long long)d->alignment);
  else d->granule = a;
}

/* The queue family flags of family f of the physical device, 0 where there is none. */
static VkQueueFlags family_flags(const gpupart__vk_device *d, uint32_t f) {
  uint32_t n = 0;
  d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, NULL);
  VkQueueFamilyProperties *q = f < n ? gpupart__host_calloc(d->state->mem, n, sizeof *q) : NULL;
  if (!q) return 0;
  d->ifn.GetPhysicalDeviceQueueFamilyProperties(d->physical, &n, q);
  VkQueueFlags flags = f < n && q[f].queueCount ? q[f].queueFlags : 0;
  gpupart__host_free(d->state->mem, q);
  return flags;
}

int gpupart__vk_sparse_adopt(gpupart__vk_device *d, const gpupart_vulkan_desc *v) {
  d->sparse = 0;
  snprintf(d->sparse_why, sizeof d->sparse_why,
           "an adopted device without gpupart_vulkan_desc.sparse_queue (0.3; backend_desc_size = sizeof): gpupart "
           "does not know whether sparseBinding and sparseResidencyBuffer were enabled and has no queue to bind on");
  if (!v->sparse_queue) {
    if (!v->sparse_queue_lock && !v->sparse_queue_user) return GPUPART_OK;
    return gpupart__fail(GPUPART_EINVAL, "vulkan: sparse_queue_lock or sparse_queue_user set without sparse_queue");
  }
  if (v->sparse_queue_user && !v->sparse_queue_lock)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: sparse_queue_user set without sparse_queue_lock");
  if (!sparse_features(d))
    return gpupart__fail(GPUPART_EINVAL,
                         "vulkan: sparse_queue is set, but the physical device has no sparseBinding and "
                         "sparseResidencyBuffer to enable");
  if (!(family_flags(d, v->sparse_queue_family) & VK_QUEUE_SPARSE_BINDING_BIT))
    return gpupart__fail(GPUPART_EINVAL, "vulkan: sparse_queue_family %u is no queue family with SPARSE_BINDING",
                         v->sparse_queue_family);
  d->sparse = 1;
  d->sparse_family = v->sparse_queue_family;
  d->sparse_queue = v->sparse_queue;
  d->sparse_lock = v->sparse_queue_lock;
  d->sparse_user = v->sparse_queue_user;
  return GPUPART_OK;
}

void gpupart__vk_sparse_configure(gpupart__vk_device *d, const gpupart__vk_facts *f) {
  d->granule = 0;
  if (!d->sparse) return;
  if (d->owns_device) d->dfn.GetDeviceQueue(d->device, d->sparse_family, d->sparse_queue_index, &d->sparse_queue);
  d->sparse_space = f->props.properties.limits.sparseAddressSpaceSize;
  d->sparse_max = f->m4.maxBufferSize && f->m4.maxBufferSize < d->sparse_space ? f->m4.maxBufferSize : d->sparse_space;
  probe_granule(d);
}

int gpupart__vk_vm_granule(void *devp, uint64_t *granule) {
  const gpupart__vk_device *d = devp;
  if (!d->granule) return gpupart__fail(GPUPART_ENOTSUP, "vulkan: no sparse binding: %s", d->sparse_why);
  *granule = d->granule;
  return GPUPART_OK;
}

/* Counts size bytes of sparse address space on the VkDevice, or says why not. */
static int take_space(gpupart__vk_device *d, uint64_t size) {
  pthread_mutex_lock(&d->state->lock);
  uint64_t used = d->shared->sparse_reserved;
  int room = size <= d->sparse_max && size <= d->sparse_space - used;
  if (room) d->shared->sparse_reserved += size;
  pthread_mutex_unlock(&d->state->lock);
  if (room) return GPUPART_OK;
  return gpupart__fail(GPUPART_ENOTSUP,
                       "vulkan: a sparse buffer of %llu bytes does not fit: sparseAddressSpaceSize %llu bytes for "
                       "all of the device, %llu in use by gpupart, largest buffer %llu",
                       (unsigned long long)size, (unsigned long long)d->sparse_space, (unsigned long long)used,
                       (unsigned long long)d->sparse_max);
}

static void give_space(gpupart__vk_device *d, uint64_t size) {
  pthread_mutex_lock(&d->state->lock);
  d->shared->sparse_reserved -= size;
  pthread_mutex_unlock(&d->state->lock);
}

/* The buffer's address where the device has buffer device address, else 0; the buffer's
 * requirements checked against the granule and type probed at open. */
static int check_range(gpupart__vk_device *d, VkBuffer b, uint64_t *address) {
  VkMemoryRequirements req;
  d->dfn.GetBufferMemoryRequirements(d->device, b, &req);
  if (req.alignment > d->granule || d->granule % req.alignment || !(req.memoryTypeBits & (1u << d->type_index)))
    return gpupart__fail(GPUPART_EBACKEND, "vulkan: a sparse buffer needs alignment %llu and types 0x%x (granule %llu)",
                         (unsigned long long)req.alignment, req.memoryTypeBits, (unsigned long long)d->granule);
  *address = 0;
  if (d->dfn.GetBufferDeviceAddress) {
    VkBufferDeviceAddressInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b};
    *address = d->dfn.GetBufferDeviceAddress(d->device, &info);
  }
  return GPUPART_OK;
}

int gpupart__vk_vm_reserve(void *devp, uint64_t size, gpupart_block *out) {
  gpupart__vk_device *d = devp;
  if (!d->granule || !size || size % d->granule)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: a sparse range of %llu bytes (granule %llu)",
                         (unsigned long long)size, (unsigned long long)d->granule);
  int rc = take_space(d, size);
  if (rc) return rc;
  gpupart__vk_range *r = gpupart__host_calloc(d->state->mem, 1, sizeof *r);
  VkBufferCreateInfo ci = sparse_info(d, size);
  VkResult v = r ? d->dfn.CreateBuffer(d->device, &ci, NULL, &r->buffer) : VK_ERROR_OUT_OF_HOST_MEMORY;
  uint64_t address = 0;
  rc = v == VK_SUCCESS ? check_range(d, r->buffer, &address) : gpupart__vk_fail(v, "vkCreateBuffer (sparse)");
  if (rc) {
    if (v == VK_SUCCESS) d->dfn.DestroyBuffer(d->device, r->buffer, NULL);
    gpupart__host_free(d->state->mem, r);
    give_space(d, size);
    return rc;
  }
  r->size = size;
  *out = (gpupart_block){.size = size, .device_address = address, .native = (void *)r->buffer, .backend_data = r};
  return GPUPART_OK;
}

void gpupart__vk_vm_unreserve(void *devp, gpupart_block *range) {
  gpupart__vk_device *d = devp;
  gpupart__vk_range *r = range->backend_data;
  d->dfn.DestroyBuffer(d->device, r->buffer, NULL);
  give_space(d, r->size);
  gpupart__host_free(d->state->mem, r);
}

/* Every vkQueueBindSparse of the process, one at a time: gpupart devices opened on one
 * VkDevice (or adopting one queue) share a queue, which Vulkan requires be used by one
 * call at a time. */
static pthread_mutex_t bind_lock = PTHREAD_MUTEX_INITIALIZER;

/* One vkQueueBindSparse, inside the application's queue lock where it gave one. */
static VkResult queue_bind(gpupart__vk_device *d, const VkBindSparseInfo *info, VkFence fence) {
  if (d->sparse_lock) d->sparse_lock(d->sparse_user, 1);
  pthread_mutex_lock(&bind_lock);
  VkResult r = d->dfn.QueueBindSparse(d->sparse_queue, 1, info, fence);
  pthread_mutex_unlock(&bind_lock);
  if (d->sparse_lock) d->sparse_lock(d->sparse_user, 0);
  return r;
}

/* Binds memory (or VK_NULL_HANDLE) over [offset, offset + size) of buffer and waits. */
static int bind_wait(gpupart__vk_device *d, VkBuffer buffer, uint64_t offset, uint64_t size, VkDeviceMemory memory) {
  VkSparseMemoryBind bind = {.resourceOffset = offset, .size = size, .memory = memory, .memoryOffset = 0};
  VkSparseBufferMemoryBindInfo sb = {.buffer = buffer, .bindCount = 1, .pBinds = &bind};
  VkBindSparseInfo info = {.sType = VK_STRUCTURE_TYPE_BIND_SPARSE_INFO, .bufferBindCount = 1, .pBufferBinds = &sb};
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence;
  VkResult r = d->dfn.CreateFence(d->device, &fi, NULL, &fence);
  if (r != VK_SUCCESS) return gpupart__vk_fail(r, "vkCreateFence");
  const char *what = "vkQueueBindSparse";
  r = queue_bind(d, &info, fence);
  if (r == VK_SUCCESS) what = "vkWaitForFences", r = d->dfn.WaitForFences(d->device, 1, &fence, VK_TRUE, UINT64_MAX);
  d->dfn.DestroyFence(d->device, fence, NULL);
  return r == VK_SUCCESS ? GPUPART_OK : gpupart__vk_fail(r, what);
}

/* Offsets and sizes in whole granules inside the range (the layer does not check them). */
static int check_pages(const gpupart__vk_device *d, const gpupart_block *range, uint64_t offset, uint64_t size) {
  if (d->granule && size && !(offset % d->granule) && !(size % d->granule) && offset <= range->size &&
      size <= range->size - offset)
    return GPUPART_OK;
  return gpupart__fail(GPUPART_EINVAL, "vulkan: %llu bytes at %llu of a %llu-byte sparse buffer (granule %llu)",
                       (unsigned long long)size, (unsigned long long)offset, (unsigned long long)range->size,
                       (unsigned long long)d->granule);
}

int gpupart__vk_vm_map(void *devp, gpupart_block *range, uint64_t offset, uint64_t size, void **handle) {
  gpupart__vk_device *d = devp;
  const gpupart__vk_range *rg = range->backend_data;
  int rc = check_pages(d, range, offset, size);
  if (rc == GPUPART_OK) rc = gpupart__vk_heap_take(d, size);
  if (rc) return rc;
  VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                     .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .pNext = d->dfn.GetBufferDeviceAddress ? &flags : NULL,
                             .allocationSize = size,
                             .memoryTypeIndex = d->type_index};
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkResult r = d->dfn.AllocateMemory(d->device, &ai, NULL, &memory);
  if (r != VK_SUCCESS) rc = gpupart__vk_fail(r, "vkAllocateMemory (sparse pages)");
  else rc = bind_wait(d, rg->buffer, offset, size, memory);
  if (rc == GPUPART_OK) {
    *handle = (void *)memory;
    return GPUPART_OK;
  }
  /* A bind that failed to complete may have happened: unbind before freeing. */
  if (r == VK_SUCCESS && bind_wait(d, rg->buffer, offset, size, VK_NULL_HANDLE) == GPUPART_OK)
    d->dfn.FreeMemory(d->device, memory, NULL);
  gpupart__vk_heap_give(d, size);
  return rc;
}

void gpupart__vk_vm_unmap(void *devp, gpupart_block *range, uint64_t offset, uint64_t size, void *handle) {
  gpupart__vk_device *d = devp;
  const gpupart__vk_range *rg = range->backend_data;
  /* Memory whose pages could not be unbound is kept: freeing it would leave the buffer
   * pointing at freed memory. */
  if (bind_wait(d, rg->buffer, offset, size, VK_NULL_HANDLE) != GPUPART_OK) return;
  d->dfn.FreeMemory(d->device, (VkDeviceMemory)handle, NULL);
  gpupart__vk_heap_give(d, size);
}
