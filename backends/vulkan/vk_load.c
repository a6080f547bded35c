/* Loading Vulkan at run time, as volk does: dlopen the loader ("libvulkan.so.1", then
 * "libvulkan.so", or the path in GPUPART_VULKAN_LIBRARY), take vkGetInstanceProcAddr
 * from it, and reach every other entry point through vkGetInstanceProcAddr and
 * vkGetDeviceProcAddr, so one build runs where no Vulkan is installed. Also here: the
 * instance gpupart creates for enumeration and for its own devices (created on first
 * need, so a program that adopts its own handles never gets a second instance), and the
 * VkResult names that failure messages carry. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

const char *gpupart__vk_result_name(VkResult r) {
  switch (r) {
#define GPUPART_VK_RESULT_CASE(x) \
  case x: return #x;
    GPUPART_VK_RESULT_CASE(VK_SUCCESS)
    GPUPART_VK_RESULT_CASE(VK_INCOMPLETE)
    GPUPART_VK_RESULT_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    GPUPART_VK_RESULT_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    GPUPART_VK_RESULT_CASE(VK_ERROR_INITIALIZATION_FAILED)
    GPUPART_VK_RESULT_CASE(VK_ERROR_DEVICE_LOST)
    GPUPART_VK_RESULT_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    GPUPART_VK_RESULT_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    GPUPART_VK_RESULT_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    GPUPART_VK_RESULT_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    GPUPART_VK_RESULT_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    GPUPART_VK_RESULT_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    GPUPART_VK_RESULT_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    GPUPART_VK_RESULT_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    GPUPART_VK_RESULT_CASE(VK_ERROR_UNKNOWN)
#undef GPUPART_VK_RESULT_CASE
  default: return "VkResult";
  }
}

/* The gpupart code for a failed driver call, with the message naming the call and the
 * driver's code: refused memory is EDEVMEM (the core's OOM sequence then runs), host
 * memory ENOMEM, anything else EBACKEND. */
int gpupart__vk_fail(VkResult r, const char *what) {
  gpupart_result code = GPUPART_EBACKEND;
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS) code = GPUPART_EDEVMEM;
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY) code = GPUPART_ENOMEM;
  return gpupart__fail_native(code, r, "vulkan: %s failed: %s (%d)", what, gpupart__vk_result_name(r), (int)r);
}

/* RTLD_NODELETE: the loader keeps process-wide state (its instance and driver lists, the
 * drivers it loaded) that is not made to be unmapped, and the application may use Vulkan
 * itself; closing our handle must leave it loaded (core/base/pin.c keeps the drivers too). */
#define VK_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)

static void *open_library(const char *library, char *why, size_t n) {
  static const char *const names[] = {"libvulkan.so.1", "libvulkan.so"};
  if (library) {
    void *lib = dlopen(library, VK_DLOPEN_FLAGS);
    if (!lib) snprintf(why, n, "%s", dlerror());
    return lib;
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *lib = dlopen(names[i], VK_DLOPEN_FLAGS);
    if (lib) return lib;
    snprintf(why, n, "%s", dlerror());
  }
  return NULL;
}

int gpupart__vk_load(const gpupart__backend_env *env, const char *library, void **state) {
  char why[512] = "";
  void *lib = open_library(library, why, sizeof why);
  if (!lib)
    return gpupart__fail(GPUPART_ENOBACKEND, "vulkan: cannot load the Vulkan loader %s: %s",
                         library ? library : "libvulkan.so.1", why);
  PFN_vkGetInstanceProcAddr gipa;
  *(void **)&gipa = dlsym(lib, "vkGetInstanceProcAddr");
  PFN_vkCreateInstance create = gipa ? (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance") : NULL;
  gpupart__vk_state *s = create ? gpupart__host_calloc(env->mem, 1, sizeof *s) : NULL;
  if (!s) {
    dlclose(lib);
    if (!create)
      return gpupart__fail(GPUPART_ENOBACKEND, "vulkan: %s is not a Vulkan loader (no vkGetInstanceProcAddr)",
                           library ? library : "libvulkan.so.1");
    return gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
  }
  s->mem = env->mem;
  s->lib = lib;
  s->gipa = gipa;
  s->CreateInstance = create;
  pthread_mutex_init(&s->lock, NULL);
  *state = s;
  return GPUPART_OK;
}

void gpupart__vk_unload(void *state) {
  gpupart__vk_state *s = state;
  if (!s) return;
  if (s->instance && s->ifn.DestroyInstance) s->ifn.DestroyInstance(s->instance, NULL);
  pthread_mutex_destroy(&s->lock);
  dlclose(s->lib);
  gpupart__host_free(s->mem, s);
}

int gpupart__vk_load_instance(gpupart__vk_state *s, VkInstance instance, PFN_vkGetInstanceProcAddr gipa,
                              gpupart__vk_ifns *out) {
  if (!gipa) gipa = s->gipa;
#define GPUPART_VK_LOAD_I(n)                          \
  if (!(out->n = (PFN_vk##n)gipa(instance, "vk" #n))) \
    return gpupart__fail(GPUPART_ENOTSUP, "vulkan: the instance has no vk" #n " (Vulkan 1.1 needed)");
  GPUPART_VK_INSTANCE_FNS(GPUPART_VK_LOAD_I)
#undef GPUPART_VK_LOAD_I
  return GPUPART_OK;
}

/* Loads d->dfn from d->device; bda: also the buffer device address query. */
int gpupart__vk_load_device(gpupart__vk_device *d, int bda) {
  PFN_vkGetDeviceProcAddr gdpa = d->ifn.GetDeviceProcAddr;
#define GPUPART_VK_LOAD_D(n)                             \
  if (!(d->dfn.n = (PFN_vk##n)gdpa(d->device, "vk" #n))) \
    return gpupart__fail(GPUPART_EINVAL, "vulkan: the device gives no vk" #n " (is it a VkDevice?)");
  GPUPART_VK_DEVICE_FNS(GPUPART_VK_LOAD_D)
#undef GPUPART_VK_LOAD_D
  d->dfn.GetBufferDeviceAddress = NULL;
  if (!bda) return GPUPART_OK;
  /* Core since 1.2; the KHR name where the device enabled the extension instead. */
  d->dfn.GetBufferDeviceAddress = (PFN_vkGetBufferDeviceAddress)gdpa(d->device, "vkGetBufferDeviceAddress");
  if (!d->dfn.GetBufferDeviceAddress)
    d->dfn.GetBufferDeviceAddress = (PFN_vkGetBufferDeviceAddress)gdpa(d->device, "vkGetBufferDeviceAddressKHR");
  if (!d->dfn.GetBufferDeviceAddress)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: buffer device address asked for, but the device has no "
                                         "vkGetBufferDeviceAddress");
  return GPUPART_OK;
}

/* The highest version gpupart asks for; the effective version of a device is the
 * smaller of this and what the physical device reports. */
static uint32_t instance_version(const gpupart__vk_state *s) {
  PFN_vkEnumerateInstanceVersion ev = (PFN_vkEnumerateInstanceVersion)s->gipa(NULL, "vkEnumerateInstanceVersion");
  uint32_t v = VK_API_VERSION_1_0;
  if (ev && ev(&v) != VK_SUCCESS) v = VK_API_VERSION_1_0;
  return v < VK_API_VERSION_1_3 ? v : VK_API_VERSION_1_3;
}

static int create_instance(gpupart__vk_state *s) {
  uint32_t version = instance_version(s);
  if (version < VK_API_VERSION_1_1)
    return gpupart__fail(GPUPART_ENOBACKEND, "vulkan: the loader supports Vulkan %u.%u; gpupart needs 1.1",
                         VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
  VkApplicationInfo app = {
      .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pEngineName = "gpupart", .apiVersion = version};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
  VkResult r = s->CreateInstance(&ci, NULL, &s->instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) s->instance = VK_NULL_HANDLE; /* undefined on failure */
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    return gpupart__fail_native(GPUPART_ENODEV, r,
                                "vulkan: the loader found no Vulkan driver (VK_ERROR_INCOMPATIBLE_DRIVER)");
  if (r != VK_SUCCESS) return s->instance = VK_NULL_HANDLE, gpupart__vk_fail(r, "vkCreateInstance");
  s->instance_version = version;
  int rc = gpupart__vk_load_instance(s, s->instance, NULL, &s->ifn);
  if (rc) {
    PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)s->gipa(s->instance, "vkDestroyInstance");
    if (destroy) destroy(s->instance, NULL);
    s->instance = VK_NULL_HANDLE;
  }
  return rc;
}

/* gpupart's own instance, created once per state under its lock; a failure is kept and
 * repeated, so a machine without a driver costs one attempt per context. */
int gpupart__vk_own_instance(gpupart__vk_state *s) {
  pthread_mutex_lock(&s->lock);
  if (!s->instance_tried) {
    s->instance_tried = 1;
    s->instance_result = create_instance(s);
    if (s->instance_result) snprintf(s->instance_error, sizeof s->instance_error, "%s", gpupart_last_error());
    s->instance_native = s->instance_result ? gpupart_last_native_error() : 0;
  }
  int rc = s->instance_result;
  pthread_mutex_unlock(&s->lock);
  return rc ? gpupart__fail_native(rc, s->instance_native, "%s", s->instance_error) : GPUPART_OK;
}
