/* The Vulkan setup that the Vulkan test programs share (see vulkan_base.h): the
 * validation layer's presence, an instance that counts validation errors, and a compute
 * pipeline over one storage buffer. */
#include "vulkan_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vkb_has_validation(void) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS) return 0;
  VkLayerProperties *layers = calloc(n ? n : 1, sizeof *layers);
  if (!layers) return 0;
  int found = 0;
  if (vkEnumerateInstanceLayerProperties(&n, layers) >= VK_SUCCESS)
    for (uint32_t i = 0; i < n; i++) found |= strcmp(layers[i].layerName, VKB_VALIDATION) == 0;
  free(layers);
  return found;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
  (void)types;
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    ++*(int *)user;
    fprintf(stderr, "validation error: %s\n", data->pMessage);
  }
  return VK_FALSE;
}

VkResult vkb_instance_create(const char *app, int *errors, VkInstance *instance, VkDebugUtilsMessengerEXT *messenger,
                             const char **failed) {
  *instance = VK_NULL_HANDLE;
  *messenger = VK_NULL_HANDLE;
  VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                                           .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                                           .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                                                          VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
                                           .pfnUserCallback = on_message,
                                           .pUserData = errors};
  const char *layers[] = {VKB_VALIDATION}, *ext[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkApplicationInfo ai = {
      .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = app, .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pNext = &mi,
                             .pApplicationInfo = &ai,
                             .enabledLayerCount = 1,
                             .ppEnabledLayerNames = layers,
                             .enabledExtensionCount = 1,
                             .ppEnabledExtensionNames = ext};
  *failed = "vkCreateInstance";
  VkResult r = vkCreateInstance(&ci, NULL, instance);
  if (r != VK_SUCCESS) {
    *instance = VK_NULL_HANDLE;
    return r;
  }
  *failed = "vkCreateDebugUtilsMessengerEXT";
  PFN_vkCreateDebugUtilsMessengerEXT create =
      (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(*instance, "vkCreateDebugUtilsMessengerEXT");
  r = create ? create(*instance, &mi, NULL, messenger) : VK_ERROR_EXTENSION_NOT_PRESENT;
  if (r != VK_SUCCESS) {
    vkDestroyInstance(*instance, NULL);
    *instance = VK_NULL_HANDLE;
    *messenger = VK_NULL_HANDLE;
  }
  return r;
}

void vkb_instance_destroy(VkInstance instance, VkDebugUtilsMessengerEXT messenger) {
  if (!instance) return;
  if (messenger) {
    PFN_vkDestroyDebugUtilsMessengerEXT destroy =
        (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT");
    destroy(instance, messenger, NULL);
  }
  vkDestroyInstance(instance, NULL);
}

/* One call of the chain below: stops at the first failure, naming it. */
#define STEP(call)                   \
  do {                               \
    *failed = #call;                 \
    VkResult r_ = (call);            \
    if (r_ != VK_SUCCESS) return r_; \
  } while (0)

VkResult vkb_compute_create(VkDevice d, const uint32_t *spirv, size_t spirv_size, uint32_t push_bytes, vkb_compute *c,
                            const char **failed) {
  memset(c, 0, sizeof *c);
  VkShaderModuleCreateInfo si = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spirv_size, .pCode = spirv};
  STEP(vkCreateShaderModule(d, &si, NULL, &c->shader));
  VkDescriptorSetLayoutBinding b = {.binding = 0,
                                    .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                    .descriptorCount = 1,
                                    .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo li = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 1, .pBindings = &b};
  STEP(vkCreateDescriptorSetLayout(d, &li, NULL, &c->set_layout));
  VkPushConstantRange pc = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_bytes};
  VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &c->set_layout,
                                    .pushConstantRangeCount = push_bytes ? 1 : 0,
                                    .pPushConstantRanges = &pc};
  STEP(vkCreatePipelineLayout(d, &pli, NULL, &c->layout));
  VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                              .module = c->shader,
                                              .pName = "main"},
                                    .layout = c->layout};
  STEP(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &ci, NULL, &c->pipeline));
  return VK_SUCCESS;
}

void vkb_compute_destroy(VkDevice d, vkb_compute *c) {
  vkDestroyPipeline(d, c->pipeline, NULL);
  vkDestroyPipelineLayout(d, c->layout, NULL);
  vkDestroyDescriptorSetLayout(d, c->set_layout, NULL);
  vkDestroyShaderModule(d, c->shader, NULL);
  memset(c, 0, sizeof *c);
}
