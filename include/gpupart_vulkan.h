/* gpupart_vulkan.h: the Vulkan side of gpupart. Adopt the application's instance,
 * physical device and device (gpupart_vulkan_desc as gpupart_device_desc.backend_desc),
 * or let gpupart create its own; then place buffers in partitioned memory with
 * gpupart_vulkan_create_buffer, or bind anything else at gpupart_vulkan_memory.
 * Usable only where libgpupart was built with its Vulkan backend; libvulkan itself is
 * loaded at run time (GPUPART_VULKAN_LIBRARY names another loader).
 *
 * Ownership, in the order things are created:
 *  1. Adopted handles stay the application's: gpupart never destroys them, and they must
 *     outlive every gpupart device opened on them. Without a desc (or with instance NULL)
 *     gpupart creates an instance (one per context) and a device (one per
 *     gpupart_device_open), and destroys them at context destroy and device close.
 *  2. Each gpupart block is one vkAllocateMemory allocation of the device's memory type;
 *     host-visible types are mapped once, persistently, when the block is allocated.
 *  3. Buffers made by gpupart_vulkan_create_buffer belong to their allocation and are
 *     destroyed by gpupart_free; the application must not destroy them, and must not use
 *     them (nor anything it bound at gpupart_vulkan_memory) after the free. */
#ifndef GPUPART_VULKAN_H
#define GPUPART_VULKAN_H

#include <vulkan/vulkan.h>

#include "gpupart.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles to adopt, passed as gpupart_device_desc.backend_desc with backend VULKAN
 * (gpupart_device_desc.index is then ignored; set backend_desc_size to
 * sizeof(gpupart_vulkan_desc)). Adopt all three handles or none: with instance NULL
 * gpupart creates its own and only the memory type is read.
 * Requirements on adopted handles: the instance was created with apiVersion 1.1 or
 * later; physical_device is one of the instance's; device was created from it.
 * gpupart checks the first two and what it can of the third (Vulkan has no query from a
 * VkDevice to its physical device). */
typedef struct gpupart_vulkan_desc {
  VkInstance instance;
  VkPhysicalDevice physical_device;
  VkDevice device;
  PFN_vkGetInstanceProcAddr get_instance_proc_addr; /* NULL = from the loaded libvulkan */
  /* Deprecated since 0.2, still honoured when memory_type is 0: the memory type index,
   * with 0 and UINT32_MAX both meaning "pick" (in 0.1, 0 meant type 0, against the "0
   * means default" rule). Use memory_type; to ask for type 0, set memory_type = 1. */
  uint32_t memory_type_index;
  /* Adoption only: nonzero when the application enabled the bufferDeviceAddress feature
   * on device. Blocks are then allocated with VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT,
   * gpupart_allocation_info.device_address is the buffer device address of the
   * allocation, and create_buffer accepts VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT.
   * A device gpupart creates enables the feature wherever the device has it. */
  uint32_t buffer_device_address;
  /* --- 0.2 --- */
  /* The memory type whose heap this gpupart device partitions, as type index + 1.
   * 0 = pick a device-local type (the one on the largest device-local heap that can back
   * buffers). A type out of range, or one that cannot back buffers, is GPUPART_EINVAL. */
  uint32_t memory_type;
  /* --- 0.3 --- */
  uint32_t reserved; /* ignored: where 0.2's trailing padding was (docs/api.md, Extending structs) */
  /* Since 0.3, adoption only: expandable partitions (GPUPART_PARTITION_EXPANDABLE) on the
   * adopted device, by sparse binding (docs/backends.md). sparse_queue is a queue of
   * device from family sparse_queue_family, which must have VK_QUEUE_SPARSE_BINDING_BIT;
   * gpupart binds the pages of expandable partitions on it with vkQueueBindSparse and
   * waits for a fence of its own. Setting it promises that device was created with the
   * sparseBinding and sparseResidencyBuffer features enabled (Vulkan has no query of the
   * features a VkDevice enabled); gpupart checks that the physical device has them and
   * that the family binds. VK_NULL_HANDLE (a zeroed or 0.2 descriptor): no expandable
   * partitions on the device, which keep growth blocks (or, where required, are refused
   * with ENOTSUP naming this field). Read only with backend_desc_size =
   * sizeof(gpupart_vulkan_desc): with 0 gpupart reads the 0.2 layout. */
  VkQueue sparse_queue;
  /* Vulkan requires host synchronization of a queue: no two calls that use it at once.
   * sparse_queue_lock, where set, is called with lock = 1 just before each of gpupart's
   * vkQueueBindSparse on sparse_queue and with lock = 0 just after (the fence is waited
   * for outside it), on the thread that grows or trims an expandable partition: the
   * caller of gpupart_alloc*, gpupart_partition_trim, gpupart_partition_resize,
   * gpupart_partition_destroy or gpupart_device_close, or, with a shared ledger, gpupart's
   * thread that answers other processes' trim requests; the application takes the same lock
   * around its own vkQueueSubmit, vkQueueWaitIdle, vkQueuePresentKHR, ... on that queue,
   * and must not hold it while calling those gpupart functions (a non-recursive lock
   * would deadlock). NULL: the application promises that it does not use sparse_queue
   * while such a gpupart call runs (as gpupart_vulkan_queue_family says of gpupart's own
   * device); gpupart's own binds on it are serialised among gpupart's devices. */
  void (*sparse_queue_lock)(void *user, int lock);
  void *sparse_queue_user; /* passed to sparse_queue_lock; must be NULL without it */
  uint32_t sparse_queue_family;
  uint32_t reserved_0_3; /* ignored: fills the padding, so a later field comes after it */
} gpupart_vulkan_desc;

/* The handles behind a gpupart device opened through the Vulkan backend (adopted or
 * gpupart's own); VK_NULL_HANDLE, with gpupart_last_error set, for NULL or a device of
 * another backend. Own handles are valid until gpupart_device_close (the device) or
 * gpupart_context_destroy (the instance). */
GPUPART_API VkInstance gpupart_vulkan_instance(const gpupart_device *dev);
GPUPART_API VkPhysicalDevice gpupart_vulkan_physical_device(const gpupart_device *dev);
GPUPART_API VkDevice gpupart_vulkan_device(const gpupart_device *dev);
/* The queue family of the one queue (index 0) that gpupart created on its own device: a
 * compute-capable family where there is one. UINT32_MAX for an adopted device (the
 * application knows its queues), NULL, or a device of another backend.
 * Since 0.3, expandable partitions: where the device has sparse binding, gpupart's own
 * device also binds pages with vkQueueBindSparse, on queue 1 of this family where the
 * family has two queues (or on a queue of another family with SPARSE_BINDING), else on
 * queue 0 itself (lavapipe). Queue 0 shared so needs the host synchronization Vulkan asks
 * of every queue: the application does not submit to it while a gpupart call that may
 * grow or shrink an expandable partition of the device runs (gpupart_alloc*,
 * gpupart_partition_trim, gpupart_partition_destroy, gpupart_device_close). */
GPUPART_API uint32_t gpupart_vulkan_queue_family(const gpupart_device *dev);
/* The memory type index and its property flags that dev partitions. EINVAL for NULL or
 * a device of another backend. */
GPUPART_API gpupart_result gpupart_vulkan_memory_type(const gpupart_device *dev, uint32_t *type_index,
                                                      VkMemoryPropertyFlags *flags);

/* Where allocation a lives: its block's VkDeviceMemory and a's offset in it (a multiple
 * of the device's min_alignment, or of the alignment asked for). The allocation may use
 * its requested size from there; bind images with vkBindImageMemory only if their
 * memory requirements fit that size, alignment and memory type. EINVAL for NULL, a
 * freed allocation, or one of another backend; outputs are then VK_NULL_HANDLE and 0.
 * Since 0.3: ENOTSUP (outputs VK_NULL_HANDLE and 0) for an allocation of an expandable
 * partition, which lies in a sparse VkBuffer bound to several memory objects, not in one
 * VkDeviceMemory: use gpupart_vulkan_buffer_range. */
GPUPART_API gpupart_result gpupart_vulkan_memory(const gpupart_allocation *a, VkDeviceMemory *memory,
                                                 VkDeviceSize *offset);

/* A VkBuffer of a's requested size, with the given usage, bound at a's memory and offset.
 * Since 0.3: ENOTSUP for an allocation of an expandable partition (no VkBuffer can be
 * bound inside a sparse buffer): gpupart_vulkan_buffer_range names its buffer and offset.
 * Made on the first call for a usage (a later call whose usage is a subset of an earlier
 * one returns that buffer), owned by the allocation and destroyed by gpupart_free.
 * Supported usage bits: TRANSFER_SRC/DST, UNIFORM/STORAGE (TEXEL) BUFFER, INDEX, VERTEX,
 * INDIRECT, and SHADER_DEVICE_ADDRESS where the device has buffer device address.
 * Errors: EINVAL (NULL, freed, another backend, usage 0), ENOTSUP (a usage bit outside
 * the list, or a buffer whose memory requirements the allocation cannot meet: the
 * message says which), EDEVMEM (the driver is out of device memory for the buffer object),
 * EBACKEND or ENOMEM (the driver's code in the message). The buffer is made and later
 * destroyed under the partition's lock: callbacks the application hangs on it must not
 * call into gpupart for the same partition. */
GPUPART_API gpupart_result gpupart_vulkan_create_buffer(const gpupart_allocation *a, VkBufferUsageFlags usage,
                                                        VkBuffer *out);

/* Since 0.3: a buffer that holds allocation a, and a's offset in it, for either kind of
 * partition, so one code path serves both:
 *  - an expandable partition's allocation (GPUPART_PARTITION_EXPANDABLE,
 *    GPUPART_EXPANDABLE=1): the partition's one sparse VkBuffer, owned by gpupart, and
 *    a's offset in it (a multiple of min_alignment, or of the alignment asked for). The
 *    buffer has every usage gpupart_vulkan_create_buffer supports; the pages under a are
 *    bound before gpupart_alloc returns and stay bound until a is freed and the partition
 *    trimmed. Use [offset, offset + a's size) only: the rest belongs to other allocations
 *    or is not bound. Mind maxStorageBufferRange and maxUniformBufferRange when binding
 *    a descriptor over the range.
 *  - a block partition's allocation: the buffer gpupart_vulkan_create_buffer makes with
 *    every supported usage, offset 0 (owned by the allocation).
 * The buffer must not be destroyed, nor used after gpupart_free(a). Errors: EINVAL (NULL,
 * freed, another backend; outputs VK_NULL_HANDLE and 0), and create_buffer's for a block
 * partition's allocation. */
GPUPART_API gpupart_result gpupart_vulkan_buffer_range(const gpupart_allocation *a, VkBuffer *buffer,
                                                       VkDeviceSize *offset);

/* The host address of a's first byte when the device's memory type is HOST_VISIBLE (the
 * block stays mapped while it is held), else NULL (and, since 0.3, NULL for an allocation
 * of an expandable partition: its pages are not one mapping). For a type without HOST_COHERENT the
 * application flushes and invalidates the range itself: offsets and sizes rounded to
 * the device's min_alignment are multiples of nonCoherentAtomSize. NULL (message set)
 * for NULL, freed, or another backend. */
GPUPART_API void *gpupart_vulkan_host_pointer(const gpupart_allocation *a);

#ifdef __cplusplus
}
#endif

#endif /* GPUPART_VULKAN_H */
