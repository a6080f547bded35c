/* The public gpupart_vulkan_* calls (include/gpupart_vulkan.h) and the backend's ops
 * table. Buffers made for an allocation live in its core-cached "view": a small record
 * made on first use under the partition lock, holding where the allocation is and the
 * buffers created for it (one per usage asked for), released by gpupart_free through
 * view_release. Each buffer is checked against its own memory requirements (memory
 * type, offset alignment, size within the allocation's range) before it is bound. An
 * allocation of an expandable partition is a range of the partition's sparse buffer
 * (vk_vm.c): gpupart_vulkan_buffer_range names it; the calls that speak of one
 * VkDeviceMemory refuse it (ENOTSUP) and it has no host pointer. */
#include <stdlib.h>

#include "interop.h"
#include "vk_internal.h"

typedef struct vk_buffer_node {
  struct vk_buffer_node *next;
  VkBufferUsageFlags usage;
  VkBuffer buffer;
} vk_buffer_node;

typedef struct vk_view {
  pthread_mutex_t lock; /* guards buffers: create_buffer may run on several threads */
  gpupart__vk_device *dev;
  VkDeviceMemory memory;
  uint64_t offset, size;
  uint64_t room; /* bytes from offset that belong to the allocation (size rounded up) */
  void *host;    /* mapped address of byte 0, or NULL */
  vk_buffer_node *buffers;
} vk_view;

static void *make_view(void *backend_dev, const gpupart_allocation_info *info, void *user) {
  (void)user;
  gpupart__vk_device *d = backend_dev;
  vk_view *v = gpupart__host_calloc(d->state->mem, 1, sizeof *v);
  if (!v) return gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory"), NULL;
  pthread_mutex_init(&v->lock, NULL);
  v->dev = d;
  v->memory = (VkDeviceMemory)info->native_block;
  v->offset = info->offset;
  v->size = info->size;
  v->room = (info->size + d->alignment - 1) & ~(d->alignment - 1);
  if (v->room > info->block_size - info->offset) v->room = info->block_size - info->offset;
  unsigned char *mapped = gpupart__vk_block_host(d, v->memory);
  v->host = mapped ? mapped + info->offset : NULL;
  return v;
}

static void view_release(void *devp, void *view) {
  gpupart__vk_device *d = devp;
  vk_view *v = view;
  for (vk_buffer_node *n = v->buffers, *next; n; n = next) {
    next = n->next;
    d->dfn.DestroyBuffer(d->device, n->buffer, NULL);
    gpupart__host_free(d->state->mem, n);
  }
  pthread_mutex_destroy(&v->lock);
  gpupart__host_free(d->state->mem, v);
}

static gpupart__vk_device *device_of(const char *fn, const gpupart_device *dev) {
  return gpupart__device_native(fn, dev, GPUPART_BACKEND_VULKAN);
}

VkInstance gpupart_vulkan_instance(const gpupart_device *dev) {
  const gpupart__vk_device *d = device_of("vulkan_instance", dev);
  return d ? d->instance : VK_NULL_HANDLE;
}

VkPhysicalDevice gpupart_vulkan_physical_device(const gpupart_device *dev) {
  const gpupart__vk_device *d = device_of("vulkan_physical_device", dev);
  return d ? d->physical : VK_NULL_HANDLE;
}

VkDevice gpupart_vulkan_device(const gpupart_device *dev) {
  const gpupart__vk_device *d = device_of("vulkan_device", dev);
  return d ? d->device : VK_NULL_HANDLE;
}

uint32_t gpupart_vulkan_queue_family(const gpupart_device *dev) {
  const gpupart__vk_device *d = device_of("vulkan_queue_family", dev);
  return d ? d->queue_family : UINT32_MAX;
}

gpupart_result gpupart_vulkan_memory_type(const gpupart_device *dev, uint32_t *type_index,
                                          VkMemoryPropertyFlags *flags) {
  if (!type_index || !flags) return gpupart__fail(GPUPART_EINVAL, "vulkan_memory_type: an output is NULL");
  *type_index = UINT32_MAX, *flags = 0;
  const gpupart__vk_device *d = device_of("vulkan_memory_type", dev);
  if (!d) return GPUPART_EINVAL;
  *type_index = d->type_index, *flags = d->type_flags;
  return GPUPART_OK;
}

/* The placement of a, and whether a lies in an expandable partition's sparse buffer
 * (*sparse). EINVAL (message set) for NULL, freed, or another backend. */
static int placement(const char *fn, const gpupart_allocation *a, gpupart_allocation_info *info, int *sparse) {
  return gpupart__allocation_place(fn, a, GPUPART_BACKEND_VULKAN, info, sparse);
}

static int refuse_sparse(const char *call) {
  return gpupart__fail(GPUPART_ENOTSUP,
                       "%s: the allocation is a range of an expandable partition's sparse VkBuffer, not of one "
                       "VkDeviceMemory: use gpupart_vulkan_buffer_range",
                       call);
}

gpupart_result gpupart_vulkan_memory(const gpupart_allocation *a, VkDeviceMemory *memory, VkDeviceSize *offset) {
  if (!memory || !offset) return gpupart__fail(GPUPART_EINVAL, "vulkan_memory: an output is NULL");
  *memory = VK_NULL_HANDLE, *offset = 0;
  gpupart_allocation_info info;
  int sparse, rc = placement("vulkan_memory", a, &info, &sparse);
  if (rc) return rc;
  if (sparse) return refuse_sparse("vulkan_memory");
  *memory = (VkDeviceMemory)info.native_block, *offset = info.offset;
  return GPUPART_OK;
}

void *gpupart_vulkan_host_pointer(const gpupart_allocation *a) {
  gpupart_allocation_info info;
  int sparse;
  if (placement("vulkan_host_pointer", a, &info, &sparse)) return NULL;
  if (sparse) return NULL; /* its pages are separate memory objects, never one mapping */
  const vk_view *v = gpupart__allocation_view("vulkan_host_pointer", a, GPUPART_BACKEND_VULKAN, make_view, NULL);
  return v ? v->host : NULL;
}

/* Checks a new buffer's requirements against the allocation, then binds it. */
static int bind(const vk_view *v, VkBuffer b) {
  gpupart__vk_device *d = v->dev;
  VkMemoryRequirements req;
  d->dfn.GetBufferMemoryRequirements(d->device, b, &req);
  if (!(req.memoryTypeBits & (1u << d->type_index)) || v->offset % req.alignment || req.size > v->room)
    return gpupart__fail(GPUPART_ENOTSUP,
                         "vulkan: the buffer needs %llu bytes at alignment %llu in types 0x%x; the allocation has %llu "
                         "bytes at offset %llu of type %u (allocate with that alignment)",
                         (unsigned long long)req.size, (unsigned long long)req.alignment, req.memoryTypeBits,
                         (unsigned long long)v->room, (unsigned long long)v->offset, d->type_index);
  VkResult r = d->dfn.BindBufferMemory(d->device, b, v->memory, v->offset);
  return r == VK_SUCCESS ? GPUPART_OK : gpupart__vk_fail(r, "vkBindBufferMemory");
}

static int new_buffer(vk_view *v, VkBufferUsageFlags usage, VkBuffer *out) {
  gpupart__vk_device *d = v->dev;
  vk_buffer_node *n = gpupart__host_calloc(d->state->mem, 1, sizeof *n);
  if (!n) return gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
  VkBufferCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = v->size,
                           .usage = usage,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = d->dfn.CreateBuffer(d->device, &ci, NULL, &n->buffer);
  int rc = r == VK_SUCCESS ? bind(v, n->buffer) : gpupart__vk_fail(r, "vkCreateBuffer");
  if (rc) {
    if (r == VK_SUCCESS) d->dfn.DestroyBuffer(d->device, n->buffer, NULL);
    return gpupart__host_free(d->state->mem, n), rc;
  }
  n->usage = usage;
  n->next = v->buffers;
  v->buffers = n;
  *out = n->buffer;
  return GPUPART_OK;
}

gpupart_result gpupart_vulkan_create_buffer(const gpupart_allocation *a, VkBufferUsageFlags usage, VkBuffer *out) {
  if (!out) return gpupart__fail(GPUPART_EINVAL, "vulkan_create_buffer: out is NULL");
  *out = VK_NULL_HANDLE;
  if (!usage) return gpupart__fail(GPUPART_EINVAL, "vulkan_create_buffer: usage is 0");
  const gpupart__vk_device *d = gpupart__allocation_device("vulkan_create_buffer", a, GPUPART_BACKEND_VULKAN);
  if (!d) return GPUPART_EINVAL;
  if (usage & ~d->usages)
    return gpupart__fail(GPUPART_ENOTSUP,
                         "vulkan_create_buffer: usage bits 0x%x are not supported here (supported: 0x%x)",
                         usage & ~d->usages, d->usages);
  gpupart_allocation_info info;
  int sparse;
  if (placement("vulkan_create_buffer", a, &info, &sparse)) return GPUPART_EINVAL;
  if (sparse) return refuse_sparse("vulkan_create_buffer");
  vk_view *v = gpupart__allocation_view("vulkan_create_buffer", a, GPUPART_BACKEND_VULKAN, make_view, NULL);
  /* NULL: freed meanwhile (EINVAL, message set by the check) or out of host memory. */
  if (!v)
    return gpupart__allocation_device("vulkan_create_buffer", a, GPUPART_BACKEND_VULKAN) ? GPUPART_ENOMEM
                                                                                         : GPUPART_EINVAL;
  pthread_mutex_lock(&v->lock);
  const vk_buffer_node *n = v->buffers;
  while (n && (n->usage & usage) != usage) n = n->next;
  VkBuffer b = n ? n->buffer : VK_NULL_HANDLE;
  int rc = n ? GPUPART_OK : new_buffer(v, usage, &b);
  pthread_mutex_unlock(&v->lock);
  if (rc == GPUPART_OK) *out = b;
  return rc;
}

gpupart_result gpupart_vulkan_buffer_range(const gpupart_allocation *a, VkBuffer *buffer, VkDeviceSize *offset) {
  if (!buffer || !offset) return gpupart__fail(GPUPART_EINVAL, "vulkan_buffer_range: an output is NULL");
  *buffer = VK_NULL_HANDLE, *offset = 0;
  gpupart_allocation_info info;
  int sparse, rc = placement("vulkan_buffer_range", a, &info, &sparse);
  if (rc) return rc;
  if (sparse) {
    *buffer = (VkBuffer)info.native_block, *offset = info.offset;
    return GPUPART_OK;
  }
  /* A block's allocation: its own buffer with every usage, at offset 0. */
  const gpupart__vk_device *d = gpupart__allocation_device("vulkan_buffer_range", a, GPUPART_BACKEND_VULKAN);
  return d ? gpupart_vulkan_create_buffer(a, d->usages, buffer) : GPUPART_EINVAL;
}

const gpupart_backend_ops gpupart__vulkan_ops = {
    .abi_version = GPUPART__BACKEND_ABI,
    .struct_size = sizeof(gpupart_backend_ops),
    .name = "vulkan",
    .id = GPUPART_BACKEND_VULKAN,
    .caps = GPUPART__CAP_FREE_MEMORY | GPUPART__CAP_DEVICE_ADDRESS | GPUPART__CAP_HOST_POINTER | GPUPART__CAP_VIEWS |
            GPUPART__CAP_IDENTITY | GPUPART__CAP_VM,
    .load = gpupart__vk_load,
    .unload = gpupart__vk_unload,
    .enumerate = gpupart__vk_enumerate,
    .open = gpupart__vk_open,
    .close = gpupart__vk_close,
    .info = gpupart__vk_info,
    .mem_info = gpupart__vk_mem_info,
    .block_alloc = gpupart__vk_block_alloc,
    .block_free = gpupart__vk_block_free,
    .view_release = view_release,
    .open_0_1 = gpupart__vk_open_0_1,
    .vm_granule = gpupart__vk_vm_granule,
    .vm_reserve = gpupart__vk_vm_reserve,
    .vm_unreserve = gpupart__vk_vm_unreserve,
    .vm_map = gpupart__vk_vm_map,
    .vm_unmap = gpupart__vk_vm_unmap,
};
