/* Vulkan devices as the core sees them: enumerating physical devices (name, vendor, UUID,
 * heap size of the default memory type, largest allocation), and opening one either on
 * gpupart's own instance and device or on handles the application adopts, checking that
 * adopted handles belong together. Choosing the memory type and deriving the limits
 * lives in vk_setup.c; blocks in vk_block.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

static int has_extension(const gpupart__vk_state *s, const gpupart__vk_ifns *ifn, VkPhysicalDevice pd,
                         const char *name) {
  uint32_t n = 0;
  if (ifn->EnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || !n) return 0;
  VkExtensionProperties *ext = gpupart__host_calloc(s->mem, n, sizeof *ext);
  int found = 0;
  if (ext && ifn->EnumerateDeviceExtensionProperties(pd, NULL, &n, ext) >= VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; i++) found = strcmp(ext[i].extensionName, name) == 0;
  gpupart__host_free(s->mem, ext);
  return found;
}

/* Physical-device queries need Vulkan 1.1 on both sides; the extension structures are
 * chained only where the version or the extension provides them, so the validation
 * layer sees only valid chains. instance_version 0: an adopted instance, whose version
 * gpupart cannot know (1.1 or later is required of it); then only the device's
 * extensions vouch for newer structures. */
int gpupart__vk_facts_get(const gpupart__vk_state *s, const gpupart__vk_ifns *ifn, VkPhysicalDevice pd,
                          uint32_t instance_version, gpupart__vk_facts *f) {
  memset(f, 0, sizeof *f);
  VkPhysicalDeviceProperties base;
  ifn->GetPhysicalDeviceProperties(pd, &base);
  uint32_t version = instance_version && instance_version < base.apiVersion ? instance_version : base.apiVersion;
  int known = instance_version != 0;
  if (version < VK_API_VERSION_1_1)
    return gpupart__fail(GPUPART_ENOTSUP, "vulkan: '%s' supports Vulkan %u.%u; gpupart needs 1.1", base.deviceName,
                         VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
  f->props = (VkPhysicalDeviceProperties2){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &f->id};
  f->id = (VkPhysicalDeviceIDProperties){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES, .pNext = &f->m3};
  f->m3 = (VkPhysicalDeviceMaintenance3Properties){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  f->m4 = (VkPhysicalDeviceMaintenance4Properties){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
  if ((known && version >= VK_API_VERSION_1_3) || has_extension(s, ifn, pd, VK_KHR_MAINTENANCE_4_EXTENSION_NAME))
    f->m3.pNext = &f->m4;
  f->pci =
      (VkPhysicalDevicePCIBusInfoPropertiesEXT){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
  f->pci_ext = has_extension(s, ifn, pd, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
  if (f->pci_ext) f->pci.pNext = f->m3.pNext, f->m3.pNext = &f->pci;
  ifn->GetPhysicalDeviceProperties2(pd, &f->props);
  f->props.properties.apiVersion = version; /* the effective version from here on */
  ifn->GetPhysicalDeviceMemoryProperties(pd, &f->mem);
  f->budget_ext = has_extension(s, ifn, pd, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  f->bda_ext = (known && version >= VK_API_VERSION_1_2) ||
               has_extension(s, ifn, pd, VK_KHR_BUFFER_DEVICE_ADDRESS_EXTENSION_NAME);
  return GPUPART_OK;
}

static const char *vendor_name(uint32_t id) {
  switch (id) {
  case 0x1002: return "AMD";
  case 0x10DE: return "NVIDIA";
  case 0x8086: return "Intel";
  case 0x13B5: return "ARM";
  case 0x5143: return "Qualcomm";
  case 0x1010: return "Imagination";
  case 0x106B: return "Apple";
  case 0x144D: return "Samsung";
  case VK_VENDOR_ID_MESA: return "Mesa";
  default: return NULL;
  }
}

static void fill_info(const gpupart__vk_facts *f, uint32_t index, uint32_t type, gpupart_device_info *out) {
  const VkPhysicalDeviceProperties *p = &f->props.properties;
  memset(out, 0, sizeof *out);
  out->backend = GPUPART_BACKEND_VULKAN;
  out->index = index;
  snprintf(out->name, sizeof out->name, "%s", p->deviceName);
  const char *vendor = vendor_name(p->vendorID);
  if (vendor) snprintf(out->vendor, sizeof out->vendor, "%s", vendor);
  else snprintf(out->vendor, sizeof out->vendor, "0x%04x", p->vendorID);
  memcpy(out->uuid, f->id.deviceUUID, sizeof out->uuid);
  uint64_t heap = type < f->mem.memoryTypeCount ? f->mem.memoryHeaps[f->mem.memoryTypes[type].heapIndex].size : 0;
  out->total_bytes = heap;
  out->free_bytes = UINT64_MAX;
  uint64_t max = f->m3.maxMemoryAllocationSize;
  out->max_block_bytes = max && max < heap ? max : heap;
  out->min_alignment =
      gpupart__vk_alignment(&p->limits, type < f->mem.memoryTypeCount ? f->mem.memoryTypes[type].propertyFlags : 0, 1);
  out->block_granularity = out->min_alignment; /* vkAllocateMemory takes any size */
  if (f->pci_ext)
    snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%04x:%02x:%02x.%x", f->pci.pciDomain & 0xffffu,
             f->pci.pciBus & 0xffu, f->pci.pciDevice & 0xffu, f->pci.pciFunction & 0xfu);
}

static int list_physical(gpupart__vk_state *s, VkPhysicalDevice **out, uint32_t *count) {
  *out = NULL, *count = 0;
  VkResult r = s->ifn.EnumeratePhysicalDevices(s->instance, count, NULL);
  if (r != VK_SUCCESS) return gpupart__vk_fail(r, "vkEnumeratePhysicalDevices");
  if (!*count) return GPUPART_OK;
  *out = gpupart__host_calloc(s->mem, *count, sizeof **out);
  if (!*out) return gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
  r = s->ifn.EnumeratePhysicalDevices(s->instance, count, *out);
  if (r < VK_SUCCESS)
    return gpupart__host_free(s->mem, *out), *out = NULL, gpupart__vk_fail(r, "vkEnumeratePhysicalDevices");
  return GPUPART_OK;
}

int gpupart__vk_enumerate(void *state, gpupart_device_info *out, uint32_t *count) {
  gpupart__vk_state *s = state;
  uint32_t cap = out ? *count : 0, n = 0;
  int rc = gpupart__vk_own_instance(s);
  if (rc == GPUPART_ENODEV) return *count = 0, GPUPART_OK; /* no driver: no devices */
  VkPhysicalDevice *pds = NULL;
  if (rc == GPUPART_OK) rc = list_physical(s, &pds, &n);
  for (uint32_t i = 0; rc == GPUPART_OK && i < n && i < cap; i++) {
    gpupart__vk_facts f;
    if (gpupart__vk_facts_get(s, &s->ifn, pds[i], s->instance_version, &f)) {
      memset(&out[i], 0, sizeof out[i]); /* below Vulkan 1.1: listed, but open refuses it */
      out[i].backend = GPUPART_BACKEND_VULKAN;
      out[i].index = i;
      out[i].free_bytes = UINT64_MAX;
      snprintf(out[i].name, sizeof out[i].name, "(Vulkan 1.0 device, not supported)");
      continue;
    }
    fill_info(&f, i, gpupart__vk_default_type(&f.mem, UINT32_MAX), &out[i]);
  }
  gpupart__host_free(s->mem, pds);
  if (rc == GPUPART_OK) *count = n;
  return rc;
}

static gpupart__vk_device *device_new(gpupart__vk_state *s) {
  gpupart__vk_device *d = gpupart__host_calloc(s->mem, 1, sizeof *d);
  if (!d) return NULL;
  d->state = s;
  d->queue_family = UINT32_MAX;
  pthread_mutex_init(&d->lock, NULL);
  return d;
}

void gpupart__vk_close(void *devp) {
  gpupart__vk_device *d = devp;
  if (!d) return;
  if (d->shared) gpupart__vk_shared_detach(d);
  if (d->owns_device && d->device && d->dfn.DestroyDevice) d->dfn.DestroyDevice(d->device, NULL);
  pthread_mutex_destroy(&d->lock);
  gpupart__host_free(d->state->mem, d);
}

static int open_own(gpupart__vk_device *d, uint32_t index, gpupart__vk_facts *f) {
  gpupart__vk_state *s = d->state;
  int rc = gpupart__vk_own_instance(s);
  if (rc) return rc;
  VkPhysicalDevice *pds;
  uint32_t n;
  if ((rc = list_physical(s, &pds, &n))) return rc;
  if (index >= n)
    return gpupart__host_free(s->mem, pds), gpupart__fail(GPUPART_ENODEV, "vulkan: no device %u (%u found)", index, n);
  d->physical = pds[index];
  gpupart__host_free(s->mem, pds);
  d->instance = s->instance;
  d->ifn = s->ifn;
  if ((rc = gpupart__vk_facts_get(s, &d->ifn, d->physical, s->instance_version, f))) return rc;
  d->api_version = f->props.properties.apiVersion;
  return gpupart__vk_create_device(d, f);
}

static int check_adopted(gpupart__vk_state *s, const gpupart_vulkan_desc *v) {
  if (!v->physical_device || !v->device)
    return gpupart__fail(GPUPART_EINVAL,
                         "vulkan: adopt all of instance, physical_device and device, or none "
                         "(instance %p, physical_device %p, device %p)",
                         (void *)v->instance, (void *)v->physical_device, (void *)v->device);
  if (!v->get_instance_proc_addr && !s->gipa) return gpupart__fail(GPUPART_EINVAL, "vulkan: no vkGetInstanceProcAddr");
  return GPUPART_OK;
}

/* The position of the adopted physical device among the adopted instance's, or -1. */
static int64_t index_in_instance(const gpupart__vk_device *d) {
  uint32_t n = 0;
  VkResult r = d->ifn.EnumeratePhysicalDevices(d->instance, &n, NULL);
  VkPhysicalDevice *pds = r == VK_SUCCESS && n ? gpupart__host_calloc(d->state->mem, n, sizeof *pds) : NULL;
  int64_t found = -1;
  if (pds && d->ifn.EnumeratePhysicalDevices(d->instance, &n, pds) >= VK_SUCCESS)
    for (uint32_t i = 0; i < n && found < 0; i++)
      if (pds[i] == d->physical) found = i;
  gpupart__host_free(d->state->mem, pds);
  return found;
}

static int open_adopted(gpupart__vk_device *d, const gpupart_vulkan_desc *v, gpupart__vk_facts *f, uint32_t *index) {
  int rc = check_adopted(d->state, v);
  if (rc) return rc;
  d->instance = v->instance;
  d->physical = v->physical_device;
  d->device = v->device;
  if ((rc = gpupart__vk_load_instance(d->state, d->instance, v->get_instance_proc_addr, &d->ifn))) return rc;
  int64_t at = index_in_instance(d);
  if (at < 0)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: physical_device %p is not one of instance %p's devices",
                         (void *)v->physical_device, (void *)v->instance);
  *index = (uint32_t)at;
  if ((rc = gpupart__vk_facts_get(d->state, &d->ifn, d->physical, 0, f))) return rc;
  d->api_version = f->props.properties.apiVersion;
  if (v->buffer_device_address && !f->bda_ext)
    return gpupart__fail(GPUPART_EINVAL, "vulkan: buffer_device_address is set, but the physical device has none");
  if ((rc = gpupart__vk_sparse_adopt(d, v))) return rc;
  return gpupart__vk_load_device(d, v->buffer_device_address != 0);
}

/* The memory type a descriptor asks for, or UINT32_MAX to pick one: memory_type (type + 1)
 * first, then the deprecated memory_type_index, whose 0 (a zeroed descriptor) also picks. */
static uint32_t requested_type(const gpupart_vulkan_desc *v) {
  if (v->memory_type) return v->memory_type - 1;
  return v->memory_type_index ? v->memory_type_index : UINT32_MAX;
}

int gpupart__vk_open(void *state, uint32_t index, const void *native_desc, size_t native_size, void **out) {
  gpupart_vulkan_desc desc;
  const gpupart_vulkan_desc *v = &desc;
  int rc = gpupart__backend_desc_in(&desc, GPUPART__VK_DESC_SIZE, native_desc, native_size, GPUPART__VK_DESC_SIZE_0_2,
                                    "vulkan: gpupart_vulkan_desc");
  if (rc) return rc;
  if (!v->instance && (v->sparse_queue || v->sparse_queue_lock || v->sparse_queue_user))
    return gpupart__fail(GPUPART_EINVAL, "vulkan: sparse_queue and its lock are for an adopted device only "
                                         "(gpupart's own device binds on a queue of its own)");
  gpupart__vk_device *d = device_new(state);
  if (!d) return gpupart__fail(GPUPART_ENOMEM, "vulkan: out of host memory");
  gpupart__vk_facts f;
  rc = v->instance ? open_adopted(d, v, &f, &index) : open_own(d, index, &f);
  if (rc == GPUPART_OK) rc = gpupart__vk_configure(d, &f, requested_type(v));
  if (rc == GPUPART_OK) {
    fill_info(&f, index, d->type_index, &d->info);
    d->info.total_bytes = d->heap_size;
    d->info.max_block_bytes = d->max_block;
    d->info.min_alignment = d->alignment;
    rc = gpupart__vk_shared_attach(d);
  }
  if (rc) return gpupart__vk_close(d), rc;
  *out = d;
  return GPUPART_OK;
}

/* A 0.1 program's descriptor: it ends before memory_type, and its memory_type_index
 * meant that type, 0 included (only UINT32_MAX picked one). */
int gpupart__vk_open_0_1(void *state, uint32_t index, const void *native_desc, void **dev) {
  gpupart_vulkan_desc desc;
  memset(&desc, 0, sizeof desc);
  memcpy(&desc, native_desc, GPUPART__VK_DESC_SIZE_0_1);
  if (desc.memory_type_index != UINT32_MAX) desc.memory_type = desc.memory_type_index + 1;
  desc.memory_type_index = 0;
  return gpupart__vk_open(state, index, &desc, sizeof desc, dev);
}

int gpupart__vk_info(void *devp, gpupart_device_info *out) {
  const gpupart__vk_device *d = devp;
  *out = d->info;
  return GPUPART_OK;
}
