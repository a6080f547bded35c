/* VK_LAYER_GPUPART_partition: a Vulkan implicit layer (loader-layer interface 2) that puts
 * an unmodified Vulkan program under gpupart partitions, one per memory heap of each
 * physical device (interpose/common/account.h: a mirror partition as large as the heap).
 * vkAllocateMemory is accounted against the heap of the memory type before the driver is
 * called, and refused with VK_ERROR_OUT_OF_DEVICE_MEMORY past the partition;
 * vkFreeMemory gives the bytes back. vkGetPhysicalDeviceMemoryProperties(2) report each
 * heap's size as at most its partition's limit, and VK_EXT_memory_budget (the driver's,
 * or the layer's where the driver has none) the partition's usage and what the process
 * may still take, so programs that size themselves (VMA, ncnn) adapt. The mirror of the
 * heap gpupart's vulkan backend uses carries the device's deviceUUID, so it shares the
 * GPU's ledger with gpupart applications on it. A configuration gpupart refuses fails
 * closed (account.h). Every other call goes straight down the chain; the layer adds no
 * policy. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include "account.h"
#include "handle_map.h"

#define EXPORT __attribute__((visibility("default")))

/* The records live in lists of their own allocations, as many as the program makes: a
 * record's address stays valid while its object lives (records are never moved), and a
 * record is allocated before the driver is called, so a lack of host memory is the
 * program's VK_ERROR_OUT_OF_HOST_MEMORY before anything exists that would have to be
 * undone (undoing the driver's vkCreateInstance from inside the chain made the loader
 * free the instance twice). */
typedef struct instance_rec {
  struct instance_rec *next;
  void *key; /* the loader's dispatch pointer, shared by the instance's physical devices */
  VkInstance instance;
  PFN_vkGetInstanceProcAddr gipa;
  PFN_vkDestroyInstance destroy;
  PFN_vkEnumeratePhysicalDevices enumerate;
  PFN_vkGetPhysicalDeviceMemoryProperties mem_props;
  PFN_vkGetPhysicalDeviceMemoryProperties2 mem_props2;     /* NULL: the instance has none */
  PFN_vkGetPhysicalDeviceMemoryProperties2 mem_props2_khr; /* NULL likewise */
  PFN_vkGetPhysicalDeviceProperties props;
  PFN_vkGetPhysicalDeviceProperties2 props2; /* NULL: a Vulkan 1.0 instance */
} instance_rec;

typedef struct device_rec {
  struct device_rec *next;
  void *key;
  PFN_vkGetDeviceProcAddr gdpa;
  PFN_vkDestroyDevice destroy;
  PFN_vkAllocateMemory allocate;
  PFN_vkFreeMemory free_memory;
  VkPhysicalDeviceMemoryProperties props;        /* as the driver reports them */
  gpupart_partition *heaps[VK_MAX_MEMORY_HEAPS]; /* NULL: unaccounted */
} device_rec;

/* The heap partitions of one physical device of an instance (heaps_of). */
typedef struct physical_rec {
  struct physical_rec *next;
  void *instance_key;
  VkPhysicalDevice pd;
  gpupart_partition *heaps[VK_MAX_MEMORY_HEAPS];
} physical_rec;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* guards the three lists */
static instance_rec *instances;
static device_rec *devices;
static physical_rec *physicals;

static void *key_of(const void *dispatchable) { return *(void *const *)dispatchable; }

/* Lock held: the record whose key is key, or NULL. */
static instance_rec *instance_find(void *key) {
  instance_rec *r = instances;
  while (r && r->key != key) r = r->next;
  return r;
}

static device_rec *device_find(void *key) {
  device_rec *r = devices;
  while (r && r->key != key) r = r->next;
  return r;
}

/* Records are written once at creation and freed at destruction, so reading one without
 * the lock between the two is safe (the application may not use a handle while it
 * destroys it). */
static instance_rec *instance_of(const void *dispatchable) {
  pthread_mutex_lock(&lock);
  instance_rec *r = instance_find(key_of(dispatchable));
  pthread_mutex_unlock(&lock);
  return r;
}

static device_rec *device_of(VkDevice device) {
  pthread_mutex_lock(&lock);
  device_rec *r = device_find(key_of(device));
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- the budget: one mirror partition per heap ------------------------------------- */

/* The same in every process: the device's position in the instance's list. The mirror of
 * the device's main heap (backend_heap) has that index, so configuration for device 0
 * (GPUPART_PARTITIONS without a device prefix) applies to the first GPU's; other heaps'
 * are 0x10000 + position * 16 + heap. */
static uint32_t physical_position(instance_rec *in, VkPhysicalDevice pd) {
  VkPhysicalDevice some[16], *list = some;
  uint32_t n = 16, i = 0;
  VkResult r = in->enumerate(in->instance, &n, list);
  if (r == VK_INCOMPLETE && in->enumerate(in->instance, &n, NULL) == VK_SUCCESS && (list = calloc(n, sizeof *list)))
    r = in->enumerate(in->instance, &n, list); /* more than 16: one enumeration more, and a list as long */
  if (r < 0 || !list) n = 0;
  while (i < n && list[i] != pd) i++;
  if (list != some) free(list);
  return i < n ? i : 0;
}

/* The device's deviceUUID (VkPhysicalDeviceIDProperties, Vulkan 1.1), which the vulkan
 * backend names the GPU by; 0, or -1 (none: the instance or the device is Vulkan 1.0).
 * base: the device's properties. */
static int device_uuid(instance_rec *in, VkPhysicalDevice pd, const VkPhysicalDeviceProperties *base,
                       uint8_t uuid[VK_UUID_SIZE]) {
  if (!in->props2 || base->apiVersion < VK_API_VERSION_1_1) return -1;
  VkPhysicalDeviceIDProperties id = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id};
  in->props2(pd, &p2);
  memcpy(uuid, id.deviceUUID, VK_UUID_SIZE);
  return 0;
}

/* The heap gpupart's vulkan backend accounts on by default (gpupart__vk_default_type):
 * that of a device-local type on the largest heap, else of any type on the largest; the
 * mirror of that heap is the GPU (its UUID), the other heaps are mirrors of their own. */
static uint32_t backend_heap(const VkPhysicalDeviceMemoryProperties *props) {
  uint32_t best = UINT32_MAX;
  for (int local = 1; local >= 0 && best == UINT32_MAX; local--)
    for (uint32_t i = 0; i < props->memoryTypeCount; i++) {
      VkMemoryPropertyFlags f = props->memoryTypes[i].propertyFlags;
      uint32_t h = props->memoryTypes[i].heapIndex;
      if ((f & VK_MEMORY_PROPERTY_PROTECTED_BIT) || (local && !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))) continue;
      if (best == UINT32_MAX || props->memoryHeaps[h].size > props->memoryHeaps[best].size) best = h;
    }
  return best;
}

static void heaps_open(instance_rec *in, VkPhysicalDevice pd, const VkPhysicalDeviceMemoryProperties *props,
                       gpupart_partition **heaps) {
  uint32_t pos = physical_position(in, pd), gpu = backend_heap(props);
  VkPhysicalDeviceProperties base;
  uint8_t uuid[VK_UUID_SIZE];
  char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE + 16];
  in->props(pd, &base);
  int named = device_uuid(in, pd, &base, uuid) == 0;
  for (uint32_t h = 0; h < props->memoryHeapCount; h++) {
    gpupart__ip_device d = {.key = h == gpu ? pos : 0x10000u + pos * VK_MAX_MEMORY_HEAPS + h,
                            .total = props->memoryHeaps[h].size,
                            .uuid = h == gpu && named ? uuid : NULL,
                            .name = name};
    if (h == gpu) snprintf(name, sizeof name, "%s", base.deviceName);
    else snprintf(name, sizeof name, "%s heap %u", base.deviceName, h);
    heaps[h] = gpupart__ip_partition_of(&d);
  }
}

/* Lock held. */
static physical_rec *physical_find(void *instance_key, VkPhysicalDevice pd) {
  physical_rec *r = physicals;
  while (r && !(r->instance_key == instance_key && r->pd == pd)) r = r->next;
  return r;
}

/* Lock held: remembers pd's heaps (not remembered without host memory: found again). */
static void physical_remember(void *instance_key, VkPhysicalDevice pd, gpupart_partition *const *heaps) {
  physical_rec *r = physical_find(instance_key, pd) ? NULL : malloc(sizeof *r);
  if (!r) return;
  *r = (physical_rec){.next = physicals, .instance_key = instance_key, .pd = pd};
  memcpy(r->heaps, heaps, sizeof r->heaps);
  physicals = r;
}

/* heaps_open's partitions of pd, found once per physical device of an instance and then
 * remembered (until vkDestroyInstance): heaps_open enumerates the instance's physical
 * devices and reads their properties, and vkEnumeratePhysicalDevices alone takes 127 us
 * on Debian's loader and lavapipe, while programs that size themselves read the memory
 * properties and budget often (VMA once a frame, and after some 30 allocations). */
static void heaps_of(instance_rec *in, VkPhysicalDevice pd, const VkPhysicalDeviceMemoryProperties *props,
                     gpupart_partition **heaps) {
  pthread_mutex_lock(&lock);
  physical_rec *r = physical_find(in->key, pd);
  if (r) memcpy(heaps, r->heaps, sizeof r->heaps);
  pthread_mutex_unlock(&lock);
  if (r) return;
  heaps_open(in, pd, props, heaps);
  pthread_mutex_lock(&lock);
  physical_remember(in->key, pd, heaps);
  pthread_mutex_unlock(&lock);
}

/* ---- VK_EXT_memory_budget: the driver's, capped; or the layer's where it has none.
 * The manifest lists the extension, so the loader advertises it and keeps it from a
 * driver that lacks it at vkCreateDevice. */

static VkPhysicalDeviceMemoryBudgetPropertiesEXT *budget_in(void *next) {
  for (VkBaseOutStructure *s = next; s; s = s->pNext)
    if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT)
      return (VkPhysicalDeviceMemoryBudgetPropertiesEXT *)s;
  return NULL;
}

/* Before the driver is called: an output struct holds whatever the program left in it
 * (ncnn passes it uninitialised), so it is zeroed, and a heap whose budget is not 0
 * afterwards is one the driver filled (a driver with the extension never reports a
 * budget of 0; one without leaves the struct as it is). */
static void budget_clear(VkPhysicalDeviceMemoryBudgetPropertiesEXT *b) {
  if (!b) return;
  memset(b->heapBudget, 0, sizeof b->heapBudget);
  memset(b->heapUsage, 0, sizeof b->heapUsage);
}

static int driver_filled(const VkPhysicalDeviceMemoryBudgetPropertiesEXT *b, uint32_t heaps) {
  for (uint32_t h = 0; h < heaps; h++)
    if (b->heapBudget[h]) return 1;
  return 0;
}

static uint64_t less(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

static uint64_t smaller(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* One heap with a partition: usage is what this process's partition holds (its
 * allocations as it asked for them), never the driver's own figure (which on newer
 * lavapipe counts the host's RAM), and budget is usage plus what the process could
 * still take (gpupart__ip_available: the limit less what other members of a shared
 * ledger hold, within the device budget), no more than the driver leaves where it tells
 * (its budget less its usage) nor than the (reduced) heap size: budget - usage is what
 * the program may still allocate. */
static void budget_heap(VkPhysicalDeviceMemoryBudgetPropertiesEXT *b, uint32_t h, uint64_t size,
                        gpupart_partition *heap, int filled) {
  uint64_t used = gpupart__ip_in_use(heap), left = gpupart__ip_available(heap);
  if (filled) left = smaller(left, less(b->heapBudget[h], b->heapUsage[h]));
  b->heapBudget[h] = smaller(used + left, size);
  b->heapUsage[h] = used;
}

/* The budget struct as the partitions allow: heaps without a partition keep the
 * driver's figures (where it has none: the heap's size, nothing used). */
static void budget_report(VkPhysicalDeviceMemoryBudgetPropertiesEXT *b, const VkPhysicalDeviceMemoryProperties *props,
                          gpupart_partition **heaps) {
  int filled = driver_filled(b, props->memoryHeapCount);
  for (uint32_t h = 0; h < props->memoryHeapCount; h++) {
    if (heaps[h]) budget_heap(b, h, props->memoryHeaps[h].size, heaps[h], filled);
    else if (!filled) b->heapBudget[h] = props->memoryHeaps[h].size;
  }
}

/* The heap sizes (and the budget struct, if any) as the partitions allow. */
static void report(instance_rec *in, VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties *props,
                   VkPhysicalDeviceMemoryBudgetPropertiesEXT *budget) {
  gpupart_partition *heaps[VK_MAX_MEMORY_HEAPS] = {0};
  heaps_of(in, pd, props, heaps);
  for (uint32_t h = 0; h < props->memoryHeapCount; h++) {
    uint64_t limit = heaps[h] ? gpupart__ip_limit(heaps[h]) : 0;
    if (limit && props->memoryHeaps[h].size > limit) props->memoryHeaps[h].size = limit;
  }
  if (budget) budget_report(budget, props, heaps);
}

static VKAPI_ATTR void VKAPI_CALL get_mem_props(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties *props) {
  instance_rec *in = instance_of(pd);
  in->mem_props(pd, props);
  report(in, pd, props, NULL);
}

/* The next layer's vkGetPhysicalDeviceMemoryProperties2, by whichever name the program
 * used, else the other name (an instance gives the core name from 1.1, the KHR one with
 * VK_KHR_get_physical_device_properties2), else the 1.0 call for the struct's base. */
static void mem_props2_next(instance_rec *in, VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props, int khr) {
  PFN_vkGetPhysicalDeviceMemoryProperties2 f = khr ? in->mem_props2_khr : in->mem_props2;
  if (!f) f = khr ? in->mem_props2 : in->mem_props2_khr;
  if (f) f(pd, props);
  else in->mem_props(pd, &props->memoryProperties);
}

static void mem_props2(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props, int khr) {
  instance_rec *in = instance_of(pd);
  VkPhysicalDeviceMemoryBudgetPropertiesEXT *budget = budget_in(props->pNext);
  budget_clear(budget);
  mem_props2_next(in, pd, props, khr);
  report(in, pd, &props->memoryProperties, budget);
}

static VKAPI_ATTR void VKAPI_CALL get_mem_props2(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props) {
  mem_props2(pd, props, 0);
}

static VKAPI_ATTR void VKAPI_CALL get_mem_props2_khr(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props) {
  mem_props2(pd, props, 1);
}

/* ---- allocations ---------------------------------------------------------------------- */

static VKAPI_ATTR VkResult VKAPI_CALL allocate_memory(VkDevice device, const VkMemoryAllocateInfo *info,
                                                      const VkAllocationCallbacks *alloc, VkDeviceMemory *memory) {
  device_rec *d = device_of(device);
  gpupart_partition *p = NULL;
  gpupart_charge *a = NULL;
  if (info && info->memoryTypeIndex < d->props.memoryTypeCount)
    p = d->heaps[d->props.memoryTypes[info->memoryTypeIndex].heapIndex];
  if (p && info->allocationSize && gpupart__ip_account(p, info->allocationSize, &a) != 0)
    return VK_ERROR_OUT_OF_DEVICE_MEMORY;
  VkResult r = d->allocate(device, info, alloc, memory);
  if (r != VK_SUCCESS || (a && gpupart__ip_map_put((const void *)(uintptr_t)*memory, gpupart__ip_charged(a))))
    gpupart__ip_unaccount(a);
  return r;
}

static VKAPI_ATTR void VKAPI_CALL free_memory(VkDevice device, VkDeviceMemory memory,
                                              const VkAllocationCallbacks *alloc) {
  device_rec *d = device_of(device);
  /* taken before the driver frees it: once freed, another thread's vkAllocateMemory may
   * get the same handle and record it, and that record is not this one */
  gpupart_charge *a = memory != VK_NULL_HANDLE ? gpupart__ip_map_take_charge((const void *)(uintptr_t)memory) : NULL;
  d->free_memory(device, memory, alloc);
  gpupart__ip_unaccount(a);
}

/* ---- instances and devices: the chain ----------------------------------------------- */

static VkLayerInstanceCreateInfo *instance_link(const VkInstanceCreateInfo *info) {
  for (VkLayerInstanceCreateInfo *c = (VkLayerInstanceCreateInfo *)info->pNext; c; c = (void *)c->pNext)
    if (c->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && c->function == VK_LAYER_LINK_INFO) return c;
  return NULL;
}

static VkLayerDeviceCreateInfo *device_link(const VkDeviceCreateInfo *info) {
  for (VkLayerDeviceCreateInfo *c = (VkLayerDeviceCreateInfo *)info->pNext; c; c = (void *)c->pNext)
    if (c->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && c->function == VK_LAYER_LINK_INFO) return c;
  return NULL;
}

/* The Vulkan version the application asked of the instance (1.0 when it says none). */
static uint32_t instance_version(const VkInstanceCreateInfo *info) {
  const VkApplicationInfo *app = info->pApplicationInfo;
  return app && app->apiVersion ? app->apiVersion : VK_API_VERSION_1_0;
}

/* Fills r for the new instance (the next layer's entry points) and lists it. */
static void instance_record(instance_rec *r, VkInstance instance, PFN_vkGetInstanceProcAddr gipa, uint32_t version) {
  *r = (instance_rec){.key = key_of(instance), .instance = instance, .gipa = gipa};
  r->props = (PFN_vkGetPhysicalDeviceProperties)gipa(instance, "vkGetPhysicalDeviceProperties");
  if (version >= VK_API_VERSION_1_1)
    r->props2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(instance, "vkGetPhysicalDeviceProperties2");
  r->destroy = (PFN_vkDestroyInstance)gipa(instance, "vkDestroyInstance");
  r->enumerate = (PFN_vkEnumeratePhysicalDevices)gipa(instance, "vkEnumeratePhysicalDevices");
  r->mem_props = (PFN_vkGetPhysicalDeviceMemoryProperties)gipa(instance, "vkGetPhysicalDeviceMemoryProperties");
  r->mem_props2 = (PFN_vkGetPhysicalDeviceMemoryProperties2)gipa(instance, "vkGetPhysicalDeviceMemoryProperties2");
  r->mem_props2_khr =
      (PFN_vkGetPhysicalDeviceMemoryProperties2)gipa(instance, "vkGetPhysicalDeviceMemoryProperties2KHR");
  pthread_mutex_lock(&lock);
  r->next = instances;
  instances = r;
  pthread_mutex_unlock(&lock);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_instance(const VkInstanceCreateInfo *info,
                                                      const VkAllocationCallbacks *alloc, VkInstance *instance) {
  VkLayerInstanceCreateInfo *link = instance_link(info);
  if (!link) return VK_ERROR_INITIALIZATION_FAILED;
  instance_rec *rec = malloc(sizeof *rec);
  if (!rec) return VK_ERROR_OUT_OF_HOST_MEMORY;
  PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;
  PFN_vkCreateInstance next = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
  VkResult r = next(info, alloc, instance);
  if (r == VK_SUCCESS) instance_record(rec, *instance, gipa, instance_version(info));
  else free(rec);
  return r;
}

/* Lock held: unlists in and forgets the heaps of its physical devices. */
static void instance_forget(instance_rec *in) {
  for (physical_rec **at = &physicals; *at;) {
    physical_rec *p = *at;
    if (p->instance_key != in->key) {
      at = &p->next;
      continue;
    }
    *at = p->next;
    free(p);
  }
  instance_rec **at = &instances;
  while (*at && *at != in) at = &(*at)->next;
  if (*at) *at = in->next;
}

static VKAPI_ATTR void VKAPI_CALL destroy_instance(VkInstance instance, const VkAllocationCallbacks *alloc) {
  instance_rec *in = instance ? instance_of(instance) : NULL;
  if (!in) return;
  PFN_vkDestroyInstance destroy = in->destroy;
  pthread_mutex_lock(&lock);
  instance_forget(in);
  pthread_mutex_unlock(&lock);
  free(in);
  destroy(instance, alloc);
}

/* Fills r for the new device and lists it. */
static void device_record(device_rec *r, VkDevice device, PFN_vkGetDeviceProcAddr gdpa, instance_rec *in,
                          VkPhysicalDevice pd) {
  *r = (device_rec){.key = key_of(device), .gdpa = gdpa};
  r->destroy = (PFN_vkDestroyDevice)gdpa(device, "vkDestroyDevice");
  r->allocate = (PFN_vkAllocateMemory)gdpa(device, "vkAllocateMemory");
  r->free_memory = (PFN_vkFreeMemory)gdpa(device, "vkFreeMemory");
  in->mem_props(pd, &r->props);
  heaps_of(in, pd, &r->props, r->heaps);
  pthread_mutex_lock(&lock);
  r->next = devices;
  devices = r;
  pthread_mutex_unlock(&lock);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_device(VkPhysicalDevice pd, const VkDeviceCreateInfo *info,
                                                    const VkAllocationCallbacks *alloc, VkDevice *device) {
  VkLayerDeviceCreateInfo *link = device_link(info);
  instance_rec *in = instance_of(pd);
  if (!link || !in) return VK_ERROR_INITIALIZATION_FAILED;
  device_rec *rec = malloc(sizeof *rec);
  if (!rec) return VK_ERROR_OUT_OF_HOST_MEMORY;
  PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  PFN_vkGetDeviceProcAddr gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;
  PFN_vkCreateDevice next = (PFN_vkCreateDevice)gipa(in->instance, "vkCreateDevice");
  VkResult r = next(pd, info, alloc, device);
  if (r == VK_SUCCESS) device_record(rec, *device, gdpa, in, pd);
  else free(rec);
  return r;
}

static VKAPI_ATTR void VKAPI_CALL destroy_device(VkDevice device, const VkAllocationCallbacks *alloc) {
  device_rec *d = device ? device_of(device) : NULL;
  if (!d) return;
  PFN_vkDestroyDevice destroy = d->destroy;
  pthread_mutex_lock(&lock);
  device_rec **at = &devices;
  while (*at && *at != d) at = &(*at)->next;
  if (*at) *at = d->next;
  pthread_mutex_unlock(&lock);
  free(d);
  destroy(device, alloc);
}

/* ---- entry points ------------------------------------------------------------------- */

static PFN_vkVoidFunction device_override(const char *name);

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL gpupart_vk_GetDeviceProcAddr(VkDevice device, const char *name) {
  PFN_vkVoidFunction own = device_override(name);
  if (own) return own;
  device_rec *d = device_of(device);
  return d ? d->gdpa(device, name) : NULL;
}

static PFN_vkVoidFunction device_override(const char *name) {
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)gpupart_vk_GetDeviceProcAddr;
  if (!strcmp(name, "vkAllocateMemory")) return (PFN_vkVoidFunction)allocate_memory;
  if (!strcmp(name, "vkFreeMemory")) return (PFN_vkVoidFunction)free_memory;
  if (!strcmp(name, "vkDestroyDevice")) return (PFN_vkVoidFunction)destroy_device;
  return NULL;
}

static PFN_vkVoidFunction instance_override(const char *name) {
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)create_instance;
  if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)destroy_instance;
  if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)create_device;
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties")) return (PFN_vkVoidFunction)get_mem_props;
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties2")) return (PFN_vkVoidFunction)get_mem_props2;
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties2KHR")) return (PFN_vkVoidFunction)get_mem_props2_khr;
  return device_override(name);
}

/* The memory properties 2 calls exist where the instance has them (Vulkan 1.1, or the
 * KHR extension enabled): a program that asks for one is answered as without the layer
 * (NULL where the next layer has none), and with the layer's where it has. */
static int is_mem_props2(const char *name) { return strncmp(name, "vkGetPhysicalDeviceMemoryProperties2", 36) == 0; }

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL gpupart_vk_GetInstanceProcAddr(VkInstance instance, const char *name) {
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)gpupart_vk_GetInstanceProcAddr;
  PFN_vkVoidFunction own = instance_override(name);
  instance_rec *in = instance ? instance_of(instance) : NULL;
  if (own && !(in && is_mem_props2(name))) return own;
  PFN_vkVoidFunction below = in ? in->gipa(instance, name) : NULL;
  return own && below ? own : below;
}

/* The loader's first call: interface version 2, and our two entry points. */
EXPORT VKAPI_ATTR VkResult VKAPI_CALL vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v) {
  if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT) return VK_ERROR_INITIALIZATION_FAILED;
  if (v->loaderLayerInterfaceVersion > 2) v->loaderLayerInterfaceVersion = 2;
  if (v->loaderLayerInterfaceVersion < 2) return VK_ERROR_INITIALIZATION_FAILED;
  v->pfnGetInstanceProcAddr = gpupart_vk_GetInstanceProcAddr;
  v->pfnGetDeviceProcAddr = gpupart_vk_GetDeviceProcAddr;
  v->pfnGetPhysicalDeviceProcAddr = NULL;
  return VK_SUCCESS;
}
