/* The Vulkan backend's shared definitions: the function tables (every entry point is
 * loaded at run time through vkGetInstanceProcAddr / vkGetDeviceProcAddr, in the manner
 * of volk, so libgpupart never links libvulkan), the loaded-library state, the device
 * object that ops->open returns, and the per-block and per-allocation records. Files:
 * vk_load.c (library, instance, tables, errors), vk_device.c (enumerate, open, close,
 * memory type and limits), vk_block.c (blocks, budget, views), vk_interop.c (the public
 * gpupart_vulkan_* calls and the ops table), vk_vm.c (sparse buffers: the virtual memory of
 * expandable partitions). */
#ifndef GPUPART_BACKENDS_VK_INTERNAL_H
#define GPUPART_BACKENDS_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <vulkan/vulkan.h>

#include "backend.h"
#include "error.h"
#include "extstruct.h"
#include "gpupart_vulkan.h"

/* gpupart_allocation_info.native_block carries the VkDeviceMemory handle. */
_Static_assert(sizeof(VkDeviceMemory) == sizeof(void *), "the Vulkan backend needs 64-bit handles");

/* Lists of macro calls, which clang-format cannot lay out: */
/* clang-format off */
#define GPUPART_VK_INSTANCE_FNS(X)                                                               \
  X(DestroyInstance) X(EnumeratePhysicalDevices) X(GetPhysicalDeviceProperties)                  \
  X(GetPhysicalDeviceProperties2) X(GetPhysicalDeviceMemoryProperties)                           \
  X(GetPhysicalDeviceMemoryProperties2) X(GetPhysicalDeviceQueueFamilyProperties)                \
  X(GetPhysicalDeviceFeatures2) X(EnumerateDeviceExtensionProperties) X(CreateDevice)            \
  X(GetDeviceProcAddr)

#define GPUPART_VK_DEVICE_FNS(X)                                                                 \
  X(DestroyDevice) X(AllocateMemory) X(FreeMemory) X(MapMemory) X(UnmapMemory) X(CreateBuffer)  \
  X(DestroyBuffer) X(GetBufferMemoryRequirements) X(BindBufferMemory) X(GetDeviceQueue)          \
  X(QueueBindSparse) X(CreateFence) X(DestroyFence) X(WaitForFences)
/* clang-format on */

#define GPUPART_VK_FN_FIELD(n) PFN_vk##n n;
typedef struct gpupart__vk_ifns {
  GPUPART_VK_INSTANCE_FNS(GPUPART_VK_FN_FIELD)
} gpupart__vk_ifns;
typedef struct gpupart__vk_dfns {
  GPUPART_VK_DEVICE_FNS(GPUPART_VK_FN_FIELD)
  PFN_vkGetBufferDeviceAddress GetBufferDeviceAddress; /* NULL without buffer device address */
} gpupart__vk_dfns;

/* What gpupart holds on one VkDevice, shared by every gpupart device opened on it, so
 * that the block count (maxMemoryAllocationCount is per VkDevice) and, without
 * VK_EXT_memory_budget, the bytes taken from each heap are counted once. */
typedef struct gpupart__vk_shared {
  struct gpupart__vk_shared *next;
  VkDevice device;
  uint32_t refs;
  uint32_t blocks;                         /* live gpupart blocks on this VkDevice */
  uint64_t heap_used[VK_MAX_MEMORY_HEAPS]; /* bytes of those blocks per heap */
  uint64_t sparse_reserved;                /* bytes of gpupart's sparse buffers on it */
} gpupart__vk_shared;

/* The loaded library (ops->load), one per context. */
typedef struct gpupart__vk_state {
  const gpupart__hostmem *mem; /* the context's allocator: all host memory of the backend */
  void *lib;
  PFN_vkGetInstanceProcAddr gipa;
  PFN_vkCreateInstance CreateInstance;
  pthread_mutex_t lock; /* guards everything below, and every shared record */
  int instance_tried;   /* the own instance is created on first need */
  int instance_result;
  char instance_error[256];
  int64_t instance_native; /* its driver code */
  VkInstance instance;
  uint32_t instance_version;
  gpupart__vk_ifns ifn;
  gpupart__vk_shared *shared;
} gpupart__vk_state;

/* One driver block: what gpupart_block.backend_data points to. */
typedef struct gpupart__vk_block {
  struct gpupart__vk_block *prev, *next; /* the device's list (for host pointers) */
  VkDeviceMemory memory;
  VkBuffer whole; /* covers the block, for its device address; VK_NULL_HANDLE without */
  void *mapped;   /* persistent mapping of a host-visible type; NULL otherwise */
  uint64_t size;
} gpupart__vk_block;

/* A gpupart device opened through the Vulkan backend (what ops->open returns). */
typedef struct gpupart__vk_device {
  gpupart__vk_state *state;
  int owns_device; /* 1: gpupart created device (on state->instance) */
  VkInstance instance;
  gpupart__vk_ifns ifn;
  VkPhysicalDevice physical;
  VkDevice device;
  gpupart__vk_dfns dfn;
  uint32_t api_version; /* min(instance, physical device) */
  uint32_t queue_family;
  uint32_t type_index, heap_index;
  VkMemoryPropertyFlags type_flags;
  VkBufferUsageFlags usages; /* what create_buffer accepts */
  int budget_ext;            /* VK_EXT_memory_budget usable */
  uint64_t heap_size;        /* of the type's heap */
  uint64_t alignment;        /* min_alignment reported to the core */
  uint64_t max_block;        /* max_block_bytes reported to the core */
  uint32_t max_blocks;       /* gpupart's share of maxMemoryAllocationCount on this VkDevice */
  gpupart__vk_shared *shared;
  gpupart_device_info info;
  pthread_mutex_t lock; /* guards blocks */
  gpupart__vk_block *blocks;
  /* Sparse binding (vk_vm.c), on gpupart's own devices and adopted ones given a queue: */
  int sparse;                                /* 1: sparseBinding + sparseResidencyBuffer enabled, a queue */
  uint32_t sparse_family;                    /* the queue family that binds ... */
  uint32_t sparse_queue_index;               /* ... and the queue in it (1 where the family has two; own) */
  VkQueue sparse_queue;                      /* fetched at configure (own), or the descriptor's (adopted) */
  void (*sparse_lock)(void *user, int lock); /* adopted: the application's queue lock */
  void *sparse_user;
  uint64_t granule;      /* a sparse buffer's memory alignment; 0 = no sparse */
  uint64_t sparse_space; /* sparseAddressSpaceSize, for all sparse buffers of the VkDevice */
  uint64_t sparse_max;   /* the largest sparse buffer (maxBufferSize, or the space) */
  char sparse_why[256];  /* why not, where granule is 0 */
} gpupart__vk_device;

/* One reserved range (vm_reserve): a sparse VkBuffer; gpupart_block.backend_data. */
typedef struct gpupart__vk_range {
  VkBuffer buffer;
  uint64_t size;
} gpupart__vk_range;

/* The facts of one physical device that enumerate and open both need. */
typedef struct gpupart__vk_facts {
  VkPhysicalDeviceProperties2 props;
  VkPhysicalDeviceIDProperties id;
  VkPhysicalDeviceMaintenance3Properties m3;
  VkPhysicalDeviceMaintenance4Properties m4; /* maxBufferSize; 0 below 1.3 */
  VkPhysicalDeviceMemoryProperties mem;
  VkPhysicalDevicePCIBusInfoPropertiesEXT pci; /* filled where pci_ext */
  int budget_ext, bda_ext, pci_ext;
} gpupart__vk_facts;

/* The usages every block's memory must serve (create_buffer's list, less device address). */
#define GPUPART_VK_BUFFER_USAGES                                                                                    \
  (VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT | \
   VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |                                  \
   VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_INDEX_BUFFER_BIT | VK_BUFFER_USAGE_VERTEX_BUFFER_BIT |      \
   VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT)

/* vk_load.c */
int gpupart__vk_load(const gpupart__backend_env *env, const char *library, void **state);
void gpupart__vk_unload(void *state);
int gpupart__vk_own_instance(gpupart__vk_state *s);
int gpupart__vk_load_instance(gpupart__vk_state *s, VkInstance instance, PFN_vkGetInstanceProcAddr gipa,
                              gpupart__vk_ifns *out);
int gpupart__vk_load_device(gpupart__vk_device *d, int bda);
const char *gpupart__vk_result_name(VkResult r);
int gpupart__vk_fail(VkResult r, const char *what);

/* vk_device.c */
int gpupart__vk_facts_get(const gpupart__vk_state *s, const gpupart__vk_ifns *ifn, VkPhysicalDevice pd,
                          uint32_t instance_version, gpupart__vk_facts *f);
int gpupart__vk_enumerate(void *state, gpupart_device_info *out, uint32_t *count);
/* gpupart_vulkan_desc as 0.1 and 0.2 published it (memory_type is new in 0.2), and as this
 * library knows it. */
#define GPUPART__VK_DESC_SIZE_0_1 GPUPART__END(gpupart_vulkan_desc, buffer_device_address)
#define GPUPART__VK_DESC_SIZE_0_2 GPUPART__END(gpupart_vulkan_desc, memory_type)
#define GPUPART__VK_DESC_SIZE sizeof(gpupart_vulkan_desc)
int gpupart__vk_open(void *state, uint32_t index, const void *native_desc, size_t native_size, void **dev);
/* The backend's open_0_1 (core/base/backend.h): a gpupart 0.1 program's gpupart_vulkan_desc. */
int gpupart__vk_open_0_1(void *state, uint32_t index, const void *native_desc, void **dev);
void gpupart__vk_close(void *dev);
int gpupart__vk_info(void *dev, gpupart_device_info *out);

/* vk_setup.c */
int gpupart__vk_create_device(gpupart__vk_device *d, const gpupart__vk_facts *f);
int gpupart__vk_configure(gpupart__vk_device *d, const gpupart__vk_facts *f, uint32_t type_request);
uint32_t gpupart__vk_default_type(const VkPhysicalDeviceMemoryProperties *mem, uint32_t allowed);
/* min_alignment for a type with flags f: the probe buffer's alignment, the descriptor
 * offset alignments, bufferImageGranularity and, for a non-coherent host-visible type,
 * nonCoherentAtomSize; a power of two. */
uint64_t gpupart__vk_alignment(const VkPhysicalDeviceLimits *l, VkMemoryPropertyFlags f, uint64_t probe_align);

/* vk_block.c */
int gpupart__vk_mem_info(void *dev, uint64_t *free_bytes, uint64_t *total_bytes);
int gpupart__vk_block_alloc(void *dev, uint64_t size, gpupart_block *out);
void gpupart__vk_block_free(void *dev, gpupart_block *block);
void *gpupart__vk_block_host(gpupart__vk_device *d, VkDeviceMemory memory);
int gpupart__vk_shared_attach(gpupart__vk_device *d);
void gpupart__vk_shared_detach(gpupart__vk_device *d);
/* Counts size bytes of one driver allocation against the VkDevice's share of allocations
 * and the heap (EDEVMEM with the reason), and gives them back. */
int gpupart__vk_heap_take(gpupart__vk_device *d, uint64_t size);
void gpupart__vk_heap_give(gpupart__vk_device *d, uint64_t size);

/* vk_vm.c */
/* The queue create info of the sparse family where it differs from d->queue_family
 * (*extra = 1), or the queue count to ask in d->queue_family (1 or 2); sets d->sparse_*
 * when the physical device has sparseBinding and sparseResidencyBuffer. */
void gpupart__vk_sparse_plan(gpupart__vk_device *d, uint32_t *queues_in_family, int *extra);
/* After the device exists and its memory type is chosen: the queue and the granule, or
 * the reason why none (d->sparse_why). Never fails the device. */
void gpupart__vk_sparse_configure(gpupart__vk_device *d, const gpupart__vk_facts *f);
/* An adopted device's sparse queue from the descriptor (0.3 fields), checked against the
 * physical device: GPUPART_OK (d->sparse set where a queue was given) or EINVAL. */
int gpupart__vk_sparse_adopt(gpupart__vk_device *d, const gpupart_vulkan_desc *v);
int gpupart__vk_vm_granule(void *dev, uint64_t *granule);
int gpupart__vk_vm_reserve(void *dev, uint64_t size, gpupart_block *out);
void gpupart__vk_vm_unreserve(void *dev, gpupart_block *range);
int gpupart__vk_vm_map(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void **handle);
void gpupart__vk_vm_unmap(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void *handle);

#endif
