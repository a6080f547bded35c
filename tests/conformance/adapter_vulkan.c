/* Conformance adapter of the Vulkan backend. gpupart adopts a device this adapter
 * creates (tests/vulkan_test.c: validation layer on, errors counted), so every
 * conformance test runs under the validation layer with both gpupart's calls and the
 * adapter's on one VkDevice, and release() destroys that device after gpupart closed:
 * anything gpupart left on it (a buffer, a block) is a validation error there. Bytes
 * move through the driver: a staging buffer and vkCmdCopyBuffer into a buffer that
 * gpupart_vulkan_create_buffer bound at the allocation. The instrumented driver is the
 * application's own vkGetInstanceProcAddr, which gpupart_vulkan_desc lets it inject (as
 * volk does): it hands gpupart a vkAllocateMemory that counts live bytes and refuses
 * past a number of live blocks, and the matching vkFreeMemory. */
#include <stdio.h>
#include <string.h>

#include "../vulkan_test.h"
#include "conformance.h"

static vkt_env env; /* one adopted device at a time: each test opens, closes, releases */
static int env_live;

/* The instrumented driver's count of what gpupart holds. */
#define SHIM_MAX 8192
static struct {
  uint64_t max_live; /* refuse new blocks while this many are live; 0 = never */
  uint64_t live, bytes;
  struct {
    VkDeviceMemory memory;
    VkDeviceSize size;
  } blocks[SHIM_MAX];
} shim;

static VKAPI_ATTR VkResult VKAPI_CALL shim_allocate(VkDevice device, const VkMemoryAllocateInfo *info,
                                                    const VkAllocationCallbacks *cb, VkDeviceMemory *memory) {
  if ((shim.max_live && shim.live >= shim.max_live) || shim.live == SHIM_MAX) return VK_ERROR_OUT_OF_DEVICE_MEMORY;
  VkResult r = vkAllocateMemory(device, info, cb, memory);
  if (r != VK_SUCCESS) return r;
  shim.blocks[shim.live].memory = *memory;
  shim.blocks[shim.live++].size = info->allocationSize;
  shim.bytes += info->allocationSize;
  return r;
}

static VKAPI_ATTR void VKAPI_CALL shim_free(VkDevice device, VkDeviceMemory memory, const VkAllocationCallbacks *cb) {
  for (uint64_t i = 0; i < shim.live; i++)
    if (shim.blocks[i].memory == memory) {
      shim.bytes -= shim.blocks[i].size;
      shim.blocks[i] = shim.blocks[--shim.live];
      break;
    }
  vkFreeMemory(device, memory, cb);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL shim_device_proc(VkDevice device, const char *name) {
  if (strcmp(name, "vkAllocateMemory") == 0) return (PFN_vkVoidFunction)shim_allocate;
  if (strcmp(name, "vkFreeMemory") == 0) return (PFN_vkVoidFunction)shim_free;
  return vkGetDeviceProcAddr(device, name);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL shim_instance_proc(VkInstance instance, const char *name) {
  if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction)shim_device_proc;
  return vkGetInstanceProcAddr(instance, name);
}

/* Destroys the adopted device of an earlier open that was closed without release()
 * (the suite's probe before an instrumented open does that). */
static int drop_env(void) {
  if (!env_live) return 0;
  env_live = 0;
  int errors = vkt_env_destroy(&env);
  if (errors) fprintf(stderr, "adapter_vulkan: %d validation error(s) on the previous device\n", errors);
  return errors;
}

/* Opens a device adopting a fresh env; gipa NULL = the loader's own. */
static gpupart_result adopt_fresh(gpupart_context *ctx, const gpupart_device_desc *base, PFN_vkGetInstanceProcAddr gipa,
                                  gpupart_device **out) {
  vkt_require_validation();
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_VULKAN;
  char why[256] = "";
  if (drop_env()) return GPUPART_EBACKEND;
  int rc = vkt_env_create(&env, 1, why, sizeof why);
  if (rc == 1) return gpupart_device_open(ctx, &d, out); /* no device: gpupart says why (ENODEV) */
  if (rc) {
    fprintf(stderr, "adapter_vulkan: %s\n", why);
    return GPUPART_EBACKEND;
  }
  gpupart_vulkan_desc v = vkt_desc(&env);
  v.get_instance_proc_addr = gipa;
  d.backend_desc = &v;
  gpupart_result r = gpupart_device_open(ctx, &d, out);
  if (r) vkt_env_destroy(&env);
  else env_live = 1;
  return r;
}

static gpupart_result vk_open(gpupart_context *ctx, const gpupart_device_desc *base, gpupart_device **out) {
  return adopt_fresh(ctx, base, NULL, out);
}

static gpupart_result vk_open_instrumented(gpupart_context **ctx, const gpupart_device_desc *base,
                                           uint64_t max_live_blocks, gpupart_device **out, char *why, size_t n) {
  *out = NULL;
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_result rc = gpupart_context_create(&cd, ctx);
  if (rc) return snprintf(why, n, "context: %s", gpupart_last_error()), rc;
  memset(&shim, 0, sizeof shim);
  shim.max_live = max_live_blocks;
  rc = adopt_fresh(*ctx, base, shim_instance_proc, out);
  if (rc) snprintf(why, n, "%s", gpupart_last_error());
  return rc;
}

static int vk_driver_bytes(gpupart_device *dev, uint64_t *bytes) {
  (void)dev;
  *bytes = shim.bytes;
  return 0;
}

static int vk_release(char *why, size_t why_len) {
  if (!env_live) return 0;
  env_live = 0;
  int errors = vkt_env_destroy(&env);
  if (errors) snprintf(why, why_len, "%d Vulkan validation error(s), printed above", errors);
  return errors;
}

static int vk_write(gpupart_device *dev, const gpupart_allocation *a, const void *data, uint64_t size) {
  (void)dev;
  char why[256];
  int rc = vkt_write(&env, a, data, size, why, sizeof why);
  if (rc) fprintf(stderr, "adapter_vulkan: write: %s\n", why);
  return rc;
}

static int vk_read(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size) {
  (void)dev;
  char why[256];
  int rc = vkt_read(&env, a, data, size, why, sizeof why);
  if (rc) fprintf(stderr, "adapter_vulkan: read: %s\n", why);
  return rc;
}

/* One alloc/write/read cycle on an adopted device. */
static int cycle(vkt_env *e, gpupart_device *dev, char *why, size_t n) {
  if (gpupart_vulkan_device(dev) != e->device || gpupart_vulkan_instance(dev) != e->instance ||
      gpupart_vulkan_physical_device(dev) != e->physical || gpupart_vulkan_queue_family(dev) != UINT32_MAX)
    return snprintf(why, n, "the device does not report the adopted handles"), -1;
  gpupart_partition_desc pd = {.name = "adopted", .limit = 8u << 20};
  gpupart_partition *p;
  gpupart_allocation *a;
  if (gpupart_partition_create(dev, &pd, &p) || gpupart_alloc(p, 4096, 0, &a))
    return snprintf(why, n, "alloc: %s", gpupart_last_error()), -1;
  unsigned char out[4096], back[4096] = {0};
  for (size_t i = 0; i < sizeof out; i++) out[i] = (unsigned char)(i * 7 + 3);
  int rc = vkt_write(e, a, out, sizeof out, why, n) || vkt_read(e, a, back, sizeof back, why, n) ? -1 : 0;
  if (rc == 0 && memcmp(out, back, sizeof out)) rc = -1, snprintf(why, n, "bytes read back differ");
  gpupart_free(a);
  return rc;
}

/* Adopts e's handles, runs a cycle, and closes. */
static int roundtrip(gpupart_context *ctx, vkt_env *e, char *why, size_t n) {
  gpupart_vulkan_desc v = vkt_desc(e);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = &v};
  gpupart_device *dev;
  if (gpupart_device_open(ctx, &d, &dev)) return snprintf(why, n, "open: %s", gpupart_last_error()), -1;
  int rc = cycle(e, dev, why, n);
  if (gpupart_device_close(dev)) return snprintf(why, n, "close: %s", gpupart_last_error()), -1;
  return rc;
}

/* After gpupart closed, the application's handles must still work. */
static int still_works(vkt_env *e, char *why, size_t n) {
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = 4096};
  VkDeviceMemory m;
  uint32_t count = 0;
  if (vkAllocateMemory(e->device, &ai, NULL, &m) != VK_SUCCESS) return snprintf(why, n, "device unusable"), -1;
  vkFreeMemory(e->device, m, NULL);
  if (vkEnumeratePhysicalDevices(e->instance, &count, NULL) != VK_SUCCESS || !count)
    return snprintf(why, n, "instance unusable"), -1;
  return vkDeviceWaitIdle(e->device) == VK_SUCCESS ? 0 : (snprintf(why, n, "vkDeviceWaitIdle failed"), -1);
}

static int vk_adopt_roundtrip(gpupart_context *ctx, char *why, size_t n) {
  vkt_require_validation();
  vkt_env e;
  int rc = vkt_env_create(&e, 1, why, n);
  if (rc) return rc == 1 ? (snprintf(why, n, "no Vulkan device"), -1) : -1;
  rc = roundtrip(ctx, &e, why, n);
  if (rc == 0) rc = still_works(&e, why, n);
  int errors = vkt_env_destroy(&e);
  if (rc == 0 && errors) rc = -1, snprintf(why, n, "%d Vulkan validation error(s), printed above", errors);
  return rc;
}

const conformance_adapter conformance_vulkan = {.backend = GPUPART_BACKEND_VULKAN,
                                                .open = vk_open,
                                                .write = vk_write,
                                                .read = vk_read,
                                                .adopt_roundtrip = vk_adopt_roundtrip,
                                                .open_instrumented = vk_open_instrumented,
                                                .driver_bytes = vk_driver_bytes,
                                                .release = vk_release,
                                                .refusal_code = VK_ERROR_OUT_OF_DEVICE_MEMORY,
                                                .refusal_name = "VK_ERROR_OUT_OF_DEVICE_MEMORY"};
