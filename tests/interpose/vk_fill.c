/* vk_fill: a plain Vulkan program that knows nothing of gpupart (linked to the loader
 * only), which the Vulkan layer's tests run unmodified. On the first physical device it
 * prints heap 0's size, allocates CHUNK_MIB blocks of the first memory type of heap 0
 * until one is refused or MAX_MIB are held, frees them and does it once more.
 *   vk_fill CHUNK_MIB MAX_MIB [hold]
 * hold: after the first round, print "holding <pid>" and wait for a line on stdin.
 * VK_FILL_VALIDATION=1 enables the Khronos validation layer and counts its errors;
 * VK_FILL_SECOND=1 tries one allocation more from a second instance and device.
 * VK_FILL_MANY=N first makes N more instances, each with a device, all live at once (with
 * the validation layer too where VK_FILL_VALIDATION=1), allocates 1 MiB on each device and
 * destroys them: "many <instances made> <devices made> <allocations made>".
 * VK_FILL_DIRTY=1 passes the budget struct with what an uninitialised one may hold (ncnn's
 * does): every heapBudget and heapUsage 1.
 * Output: "heap <bytes>", "budget <bytes>" and "usage <bytes>" (VK_EXT_memory_budget, when
 * offered; then the device is created with it enabled), "allocated <MiB> code <VkResult>",
 * "held budget <bytes> usage <bytes>" (VK_FILL_HELD=1: the budget again, while the first
 * round holds its blocks), "again <MiB> code <VkResult>", "validation_errors <n>".
 * Each round ends with a vkFreeMemory of VK_NULL_HANDLE too (valid, a no-op). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#define MAX_BLOCKS 4096

static unsigned errors;

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
  (void)type, (void)user;
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) errors++, fprintf(stderr, "%s\n", data->pMessage);
  return VK_FALSE;
}

static VkInstance make_instance(int validate, VkDebugUtilsMessengerEXT *messenger) {
  const char *layers[] = {"VK_LAYER_KHRONOS_validation"}, *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_1};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pApplicationInfo = &app,
                             .enabledLayerCount = validate,
                             .ppEnabledLayerNames = layers,
                             .enabledExtensionCount = validate,
                             .ppEnabledExtensionNames = exts};
  VkInstance instance;
  if (vkCreateInstance(&ci, NULL, &instance)) return VK_NULL_HANDLE;
  if (validate) {
    VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                                             .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                                                                VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
                                             .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                                                            VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
                                             .pfnUserCallback = on_message};
    PFN_vkCreateDebugUtilsMessengerEXT create =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT");
    if (create) create(instance, &mi, NULL, messenger);
  }
  return instance;
}

/* Heap 0's budget and usage (VK_EXT_memory_budget), the struct as VK_FILL_DIRTY says. */
static void read_budget(VkPhysicalDevice pd, VkDeviceSize *budget_out, VkDeviceSize *usage_out) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                          .pNext = &budget};
  const char *dirty = getenv("VK_FILL_DIRTY");
  for (uint32_t h = 0; dirty && !strcmp(dirty, "1") && h < VK_MAX_MEMORY_HEAPS; h++) {
    budget.heapBudget[h] = 1;
    budget.heapUsage[h] = 1;
  }
  vkGetPhysicalDeviceMemoryProperties2(pd, &p2);
  *budget_out = budget.heapBudget[0];
  *usage_out = budget.heapUsage[0];
}

/* Prints heap 0 (and its budget); 1 when VK_EXT_memory_budget is offered. */
static int print_heap(VkPhysicalDevice pd) {
  VkPhysicalDeviceMemoryProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  VkDeviceSize budget = 0, usage = 0;
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
  VkExtensionProperties *exts = calloc(n ? n : 1, sizeof *exts);
  vkEnumerateDeviceExtensionProperties(pd, NULL, &n, exts);
  int has_budget = 0;
  for (uint32_t i = 0; i < n; i++) has_budget |= !strcmp(exts[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  free(exts);
  vkGetPhysicalDeviceMemoryProperties2(pd, &p2);
  printf("heap %llu\n", (unsigned long long)p2.memoryProperties.memoryHeaps[0].size);
  if (has_budget) read_budget(pd, &budget, &usage);
  if (has_budget) printf("budget %llu\nusage %llu\n", (unsigned long long)budget, (unsigned long long)usage);
  return has_budget;
}

static uint32_t type_of_heap0(VkPhysicalDevice pd) {
  VkPhysicalDeviceMemoryProperties p;
  vkGetPhysicalDeviceMemoryProperties(pd, &p);
  for (uint32_t t = 0; t < p.memoryTypeCount; t++)
    if (p.memoryTypes[t].heapIndex == 0) return t;
  return 0;
}

static VkResult fill(VkDevice dev, uint32_t type, VkDeviceSize chunk, size_t max_mib, VkDeviceMemory *mem, int *n) {
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = chunk, .memoryTypeIndex = type};
  VkResult r = VK_SUCCESS;
  *n = 0;
  while (*n < MAX_BLOCKS && (size_t)*n * (chunk >> 20) < max_mib &&
         (r = vkAllocateMemory(dev, &ai, NULL, &mem[*n])) == VK_SUCCESS)
    (*n)++;
  return r;
}

static void free_all(VkDevice dev, VkDeviceMemory *mem, int n) {
  for (int i = 0; i < n; i++) vkFreeMemory(dev, mem[i], NULL);
  vkFreeMemory(dev, VK_NULL_HANDLE, NULL); /* valid, and a no-op: as programs do */
}

/* VK_FILL_SECOND=1: one allocation more, on a device of a second instance (the same
 * physical device): "second code <VkResult>". */
static void second_device(VkDeviceSize chunk) {
  VkDebugUtilsMessengerEXT none = VK_NULL_HANDLE;
  VkInstance instance = make_instance(0, &none);
  VkPhysicalDevice pd;
  uint32_t count = 1;
  if (!instance || vkEnumeratePhysicalDevices(instance, &count, &pd) < 0 || !count) return;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1, .pQueuePriorities = &prio};
  VkDeviceCreateInfo di = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi};
  VkDevice dev;
  if (vkCreateDevice(pd, &di, NULL, &dev)) return;
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = chunk, .memoryTypeIndex = type_of_heap0(pd)};
  VkDeviceMemory mem;
  VkResult r = vkAllocateMemory(dev, &ai, NULL, &mem);
  printf("second code %d\n", (int)r);
  if (r == VK_SUCCESS) vkFreeMemory(dev, mem, NULL);
  vkDestroyDevice(dev, NULL);
  vkDestroyInstance(instance, NULL);
}

/* VK_FILL_MANY=n: n live instances and devices at once (see the top). */
static void many(int n, int validate) {
  VkInstance *instances = calloc((size_t)n, sizeof *instances);
  VkDevice *devices = calloc((size_t)n, sizeof *devices);
  VkDebugUtilsMessengerEXT *messengers = calloc((size_t)n, sizeof *messengers);
  int made = 0, devs = 0, allocs = 0;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1, .pQueuePriorities = &prio};
  VkDeviceCreateInfo di = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi};
  for (;
       instances && devices && messengers && made < n && (instances[made] = make_instance(validate, &messengers[made]));
       made++) {
    VkPhysicalDevice pd;
    uint32_t count = 1;
    if (vkEnumeratePhysicalDevices(instances[made], &count, &pd) < 0 || !count) continue;
    if (vkCreateDevice(pd, &di, NULL, &devices[made]) != VK_SUCCESS) continue;
    devs++;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = 1 << 20,
                               .memoryTypeIndex = type_of_heap0(pd)};
    VkDeviceMemory mem;
    if (vkAllocateMemory(devices[made], &ai, NULL, &mem) == VK_SUCCESS)
      allocs++, vkFreeMemory(devices[made], mem, NULL);
  }
  printf("many %d %d %d\n", made, devs, allocs);
  for (int i = made; i-- > 0;) {
    if (devices[i]) vkDestroyDevice(devices[i], NULL);
    if (messengers[i])
      ((PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instances[i], "vkDestroyDebugUtilsMessengerEXT"))(
          instances[i], messengers[i], NULL);
    vkDestroyInstance(instances[i], NULL);
  }
  free(instances);
  free(devices);
  free(messengers);
}

int main(int argc, char **argv) {
  static VkDeviceMemory mem[MAX_BLOCKS];
  if (argc < 3) return fprintf(stderr, "usage: vk_fill CHUNK_MIB MAX_MIB [hold]\n"), 2;
  VkDeviceSize chunk = strtoull(argv[1], NULL, 10) << 20;
  size_t max_mib = strtoull(argv[2], NULL, 10);
  const char *v = getenv("VK_FILL_VALIDATION");
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  const char *n_many = getenv("VK_FILL_MANY");
  if (n_many) many(atoi(n_many), v && !strcmp(v, "1"));
  VkInstance instance = make_instance(v && !strcmp(v, "1"), &messenger);
  VkPhysicalDevice pd;
  uint32_t count = 1;
  if (!instance || vkEnumeratePhysicalDevices(instance, &count, &pd) < 0 || !count)
    return fprintf(stderr, "vk_fill: no Vulkan device\n"), 1;
  const char *budget_ext[] = {VK_EXT_MEMORY_BUDGET_EXTENSION_NAME};
  int has_budget = print_heap(pd); /* enabled, as a VMA program enables it */
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi = {
      .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1, .pQueuePriorities = &prio};
  VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .queueCreateInfoCount = 1,
                           .pQueueCreateInfos = &qi,
                           .enabledExtensionCount = (uint32_t)has_budget,
                           .ppEnabledExtensionNames = budget_ext};
  VkDevice dev;
  if (vkCreateDevice(pd, &di, NULL, &dev)) return fprintf(stderr, "vk_fill: vkCreateDevice failed\n"), 1;
  uint32_t type = type_of_heap0(pd);
  int n;
  VkResult r = fill(dev, type, chunk, max_mib, mem, &n);
  printf("allocated %zu code %d\n", (size_t)n * (size_t)(chunk >> 20), (int)r);
  const char *held = getenv("VK_FILL_HELD");
  if (has_budget && held && !strcmp(held, "1")) {
    VkDeviceSize budget = 0, usage = 0;
    read_budget(pd, &budget, &usage);
    printf("held budget %llu usage %llu\n", (unsigned long long)budget, (unsigned long long)usage);
  }
  const char *second = getenv("VK_FILL_SECOND");
  if (second && !strcmp(second, "1")) second_device(chunk);
  fflush(stdout);
  if (argc > 3) {
    char line[16];
    printf("holding %ld\n", (long)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
  }
  free_all(dev, mem, n);
  r = fill(dev, type, chunk, max_mib, mem, &n);
  printf("again %zu code %d\n", (size_t)n * (size_t)(chunk >> 20), (int)r);
  free_all(dev, mem, n);
  vkDestroyDevice(dev, NULL);
  if (messenger)
    ((PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"))(
        instance, messenger, NULL);
  vkDestroyInstance(instance, NULL);
  printf("validation_errors %u\n", errors);
  return 0;
}
