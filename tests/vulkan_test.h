/* Helpers of the Vulkan test suites (test_vulkan.c, conformance/adapter_vulkan.c): the
 * validation layer made mandatory, and a small application of our own (instance,
 * device, queue) that gpupart adopts and that moves bytes through the driver with
 * vkCmdCopyBuffer. Tests link libvulkan like any application; libgpupart does not.
 *
 * How validation errors fail a test, whichever side makes the call:
 *  - vkt_require_validation() sets VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation, so
 *    the loader puts the layer into every instance of the process, gpupart's own
 *    included, and VK_LAYER_SETTINGS_PATH to tests/vk_layer_settings.txt, whose
 *    debug_action LOG_MSG,BREAK prints the error and raises SIGTRAP: the test crashes,
 *    and Criterion reports it failed, at the call that broke a rule (leaks included:
 *    the layer reports objects still alive at vkDestroyDevice as errors).
 *  - Instances made here also enable the layer explicitly and count errors in a
 *    VK_EXT_debug_utils messenger, so a run where the settings file is not honoured
 *    still fails, at vkt_env_destroy.
 * A missing layer fails the test (scripts/deps installs vulkan-validationlayers). */
#ifndef GPUPART_TESTS_VULKAN_TEST_H
#define GPUPART_TESTS_VULKAN_TEST_H

#include <vulkan/vulkan.h>

#include "gpupart_vulkan.h"

typedef struct vkt_env {
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  VkPhysicalDevice physical;
  VkDevice device;
  uint32_t family;
  VkQueue queue;
  VkCommandPool pool;
  int bda;    /* bufferDeviceAddress enabled */
  int sparse; /* sparseBinding and sparseResidencyBuffer enabled (vkt_env_create_sparse) */
  int errors; /* validation errors counted by the messenger */
} vkt_env;

/* Fails the calling test unless the validation layer is installed; turns it on for every
 * instance created from now on in this process. */
void vkt_require_validation(void);

/* Creates the test application's instance and device (want_bda: enable buffer device
 * address where the device has it). 0 = ready; 1 = no Vulkan device here (e is empty);
 * -1 = failure, why says which call. */
int vkt_env_create(vkt_env *e, int want_bda, char *why, size_t why_len);
/* The same with sparseBinding and sparseResidencyBuffer enabled too, and buffer device
 * address where the device has it; 1 also where the device has no sparse binding. The
 * queue's family is the first compute family: check that it has SPARSE_BINDING. */
int vkt_env_create_sparse(vkt_env *e, char *why, size_t why_len);
/* Destroys what vkt_env_create made; returns the validation errors counted, 0 if none. */
int vkt_env_destroy(vkt_env *e);
/* The descriptor that makes gpupart adopt e's handles (default memory type). */
gpupart_vulkan_desc vkt_desc(const vkt_env *e);

/* Copies size bytes into / out of allocation a (offset 0) through a host-visible staging
 * buffer and vkCmdCopyBuffer on e's queue. 0 = done; -1 = failure, why says which call. */
int vkt_write(vkt_env *e, const gpupart_allocation *a, const void *data, uint64_t size, char *why, size_t why_len);
int vkt_read(vkt_env *e, const gpupart_allocation *a, void *data, uint64_t size, char *why, size_t why_len);
/* Copies size bytes from allocation src to allocation dst on queue q of device d. */
int vkt_copy(VkDevice d, uint32_t family, const gpupart_allocation *src, const gpupart_allocation *dst, uint64_t size,
             char *why, size_t why_len);

#endif
