/* vk_count_layer: a test layer of the vk_layer suite (explicit: VK_LAYER_GPUPART_TEST_count,
 * found through VK_ADD_LAYER_PATH=<its manifest's folder> and enabled by
 * VK_INSTANCE_LAYERS), which the loader puts below the implicit gpupart layer. It counts
 * the vkEnumeratePhysicalDevices calls that reach it (the program's, the loader's and
 * those of the layers above) and prints "enumerations <n>" on stdout at vkDestroyInstance.
 * With VK_COUNT_DRIVER_LEFT_MIB=N it also plays a driver that has VK_EXT_memory_budget
 * (lavapipe here has none): vkGetPhysicalDeviceMemoryProperties2(KHR) fill the budget
 * struct with each heap's size as its budget and all but N MiB of it as its usage (as
 * newer lavapipe counts the host's RAM in use), so that it leaves N MiB. Everything else it passes on. One instance at
 * a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#define EXPORT __attribute__((visibility("default")))

static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkEnumeratePhysicalDevices next_enumerate;
static PFN_vkDestroyInstance next_destroy;
static PFN_vkGetDeviceProcAddr next_gdpa;
static VkInstance the_instance;
static unsigned long enumerations;

static PFN_vkGetPhysicalDeviceMemoryProperties2 next_props2, next_props2_khr;

static void driver_budget(VkPhysicalDeviceMemoryProperties2 *props) {
  const char *left = getenv("VK_COUNT_DRIVER_LEFT_MIB");
  for (VkBaseOutStructure *s = props->pNext; left && s; s = s->pNext) {
    if (s->sType != VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT) continue;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT *b = (VkPhysicalDeviceMemoryBudgetPropertiesEXT *)s;
    for (uint32_t h = 0; h < props->memoryProperties.memoryHeapCount; h++) {
      VkDeviceSize size = props->memoryProperties.memoryHeaps[h].size, spare = strtoull(left, NULL, 10) << 20;
      b->heapBudget[h] = size;
      b->heapUsage[h] = size > spare ? size - spare : 0;
    }
  }
}

static VKAPI_ATTR void VKAPI_CALL props2(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props) {
  next_props2(pd, props);
  driver_budget(props);
}

static VKAPI_ATTR void VKAPI_CALL props2_khr(VkPhysicalDevice pd, VkPhysicalDeviceMemoryProperties2 *props) {
  next_props2_khr(pd, props);
  driver_budget(props);
}

static VKAPI_ATTR VkResult VKAPI_CALL enumerate(VkInstance instance, uint32_t *n, VkPhysicalDevice *pds) {
  enumerations++;
  return next_enumerate(instance, n, pds);
}

static VKAPI_ATTR void VKAPI_CALL destroy_instance(VkInstance instance, const VkAllocationCallbacks *alloc) {
  printf("enumerations %lu\n", enumerations);
  fflush(stdout);
  next_destroy(instance, alloc);
}

static VKAPI_ATTR VkResult VKAPI_CALL create_instance(const VkInstanceCreateInfo *info,
                                                      const VkAllocationCallbacks *alloc, VkInstance *instance) {
  VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)info->pNext;
  while (link &&
         !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
    link = (VkLayerInstanceCreateInfo *)link->pNext;
  if (!link) return VK_ERROR_INITIALIZATION_FAILED;
  next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;
  VkResult r = ((PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance"))(info, alloc, instance);
  if (r != VK_SUCCESS) return r;
  next_enumerate = (PFN_vkEnumeratePhysicalDevices)next_gipa(*instance, "vkEnumeratePhysicalDevices");
  next_destroy = (PFN_vkDestroyInstance)next_gipa(*instance, "vkDestroyInstance");
  next_props2 = (PFN_vkGetPhysicalDeviceMemoryProperties2)next_gipa(*instance, "vkGetPhysicalDeviceMemoryProperties2");
  next_props2_khr =
      (PFN_vkGetPhysicalDeviceMemoryProperties2)next_gipa(*instance, "vkGetPhysicalDeviceMemoryProperties2KHR");
  the_instance = *instance;
  enumerations = 0;
  return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL create_device(VkPhysicalDevice pd, const VkDeviceCreateInfo *info,
                                                    const VkAllocationCallbacks *alloc, VkDevice *device) {
  VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)info->pNext;
  while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
    link = (VkLayerDeviceCreateInfo *)link->pNext;
  if (!link) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  next_gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  link->u.pLayerInfo = link->u.pLayerInfo->pNext;
  return ((PFN_vkCreateDevice)gipa(the_instance, "vkCreateDevice"))(pd, info, alloc, device);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL count_GetDeviceProcAddr(VkDevice device, const char *name) {
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)count_GetDeviceProcAddr;
  return next_gdpa ? next_gdpa(device, name) : NULL;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL count_GetInstanceProcAddr(VkInstance instance, const char *name) {
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)count_GetInstanceProcAddr;
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)count_GetDeviceProcAddr;
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)create_instance;
  if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)destroy_instance;
  if (!strcmp(name, "vkEnumeratePhysicalDevices")) return (PFN_vkVoidFunction)enumerate;
  if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)create_device;
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties2") && next_props2) return (PFN_vkVoidFunction)props2;
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties2KHR") && next_props2_khr)
    return (PFN_vkVoidFunction)props2_khr;
  return next_gipa ? next_gipa(instance, name) : NULL;
}

EXPORT VKAPI_ATTR VkResult VKAPI_CALL vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v) {
  if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT || v->loaderLayerInterfaceVersion < 2)
    return VK_ERROR_INITIALIZATION_FAILED;
  v->loaderLayerInterfaceVersion = 2;
  v->pfnGetInstanceProcAddr = count_GetInstanceProcAddr;
  v->pfnGetDeviceProcAddr = count_GetDeviceProcAddr;
  v->pfnGetPhysicalDeviceProcAddr = NULL;
  return VK_SUCCESS;
}
