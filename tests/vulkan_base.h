/* The Vulkan setup that every Vulkan test program writes alike, in plain C with no
 * Criterion and no gpupart, so that the standalone sparse-binding probe
 * (vulkan/test_sparse_binding.c) links it as well as the suites' helpers (vulkan_test.c)
 * and the expandable suite (vulkan/test_vulkan_expandable.c): whether the validation
 * layer is installed, an instance with that layer and a debug messenger that counts its
 * errors, and the compute pipeline of a shader with one storage buffer.
 *
 * Failures come back as the VkResult of the call that failed, with *failed naming it;
 * each caller turns that into its own kind of failure (a message, a Criterion assertion). */
#ifndef GPUPART_TESTS_VULKAN_BASE_H
#define GPUPART_TESTS_VULKAN_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#define VKB_VALIDATION "VK_LAYER_KHRONOS_validation"

/* 1 when the validation layer is installed (the loader lists it), else 0. */
int vkb_has_validation(void);

/* An instance (Vulkan 1.2, named app) with the validation layer enabled and a
 * VK_EXT_debug_utils messenger that prints each validation error and counts it in
 * *errors. VK_ERROR_INCOMPATIBLE_DRIVER: no Vulkan driver here. On any failure nothing
 * is left to destroy (*instance and *messenger are VK_NULL_HANDLE). */
VkResult vkb_instance_create(const char *app, int *errors, VkInstance *instance, VkDebugUtilsMessengerEXT *messenger,
                             const char **failed);
/* Destroys what vkb_instance_create made; either handle may be VK_NULL_HANDLE. */
void vkb_instance_destroy(VkInstance instance, VkDebugUtilsMessengerEXT messenger);

/* The compute pipeline of a SPIR-V shader whose one binding (set 0, binding 0) is a
 * storage buffer and which takes push_bytes of push constants. */
typedef struct vkb_compute {
  VkShaderModule shader;
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
} vkb_compute;

/* Makes c on device d from spirv (spirv_size bytes). On failure what was made stays in c
 * for vkb_compute_destroy. */
VkResult vkb_compute_create(VkDevice d, const uint32_t *spirv, size_t spirv_size, uint32_t push_bytes, vkb_compute *c,
                            const char **failed);
/* Destroys what vkb_compute_create made (null handles are ignored by Vulkan). */
void vkb_compute_destroy(VkDevice d, vkb_compute *c);

#endif
