/* The Vulkan backend's own behaviours, on whatever Vulkan device is present (Mesa's
 * lavapipe on a plain Debian machine), under the validation layer (vulkan_test.h):
 * enumeration, gpupart's own instance and device, the memory type choice, alignment
 * against real buffer requirements, buffers and device addresses, host-visible
 * partitions, and bad input: no loader, no device, handles that do not belong together,
 * a memory type out of range, a request above maxMemoryAllocationSize. Every test that
 * needs a device skips, saying why, where there is none. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vulkan_test.h"

static gpupart_context *ctx;

static void setup(void) {
  vkt_require_validation();
  ctx = test_context();
}

static void teardown(void) { cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK, "%s", gpupart_last_error()); }

TestSuite(vulkan, .init = setup, .fini = teardown);

/* gpupart's own device (desc NULL = default type), or skip when there is none. */
static gpupart_device *open_own(const gpupart_vulkan_desc *v) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = v};
  gpupart_device *dev = NULL;
  gpupart_result rc = gpupart_device_open(ctx, &d, &dev);
  if (rc == GPUPART_ENODEV) cr_skip_test("no Vulkan device here: %s", gpupart_last_error());
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static void close_dev(gpupart_device *dev) {
  test_check(dev);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
}

static void env_or_skip(vkt_env *e, int bda) {
  char why[256] = "";
  int rc = vkt_env_create(e, bda, why, sizeof why);
  if (rc == 1) cr_skip_test("no Vulkan device here");
  cr_assert_eq(rc, 0, "%s", why);
}

static void env_done(vkt_env *e) { cr_expect_eq(vkt_env_destroy(e), 0, "validation errors, printed above"); }

Test(vulkan, enumerate_reports_name_vendor_uuid_and_heap) {
  vkt_env e;
  env_or_skip(&e, 0);
  gpupart_device_info info[8];
  uint32_t n = 8;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_VULKAN, info, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_geq(n, 1);
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceProperties(e.physical, &props);
  vkGetPhysicalDeviceMemoryProperties(e.physical, &mem);
  cr_expect_str_eq(info[0].name, props.deviceName);
  cr_expect_gt(strlen(info[0].vendor), 0);
  static const uint8_t zero[16];
  cr_expect_neq(memcmp(info[0].uuid, zero, 16), 0, "a Vulkan 1.1 device has a UUID");
  int heap_found = 0;
  for (uint32_t h = 0; h < mem.memoryHeapCount; h++) heap_found |= mem.memoryHeaps[h].size == info[0].total_bytes;
  cr_expect(heap_found, "total_bytes %llu is the size of a heap", (unsigned long long)info[0].total_bytes);
  cr_expect_leq(info[0].max_block_bytes, info[0].total_bytes);
  cr_expect_geq(info[0].min_alignment, props.limits.bufferImageGranularity);
  env_done(&e);
}

Test(vulkan, own_device_has_a_queue_and_takes_blocks_from_the_driver) {
  gpupart_device *dev = open_own(NULL);
  cr_expect_neq(gpupart_vulkan_instance(dev), VK_NULL_HANDLE);
  cr_expect_neq(gpupart_vulkan_physical_device(dev), VK_NULL_HANDLE);
  VkDevice vd = gpupart_vulkan_device(dev);
  cr_assert_neq(vd, VK_NULL_HANDLE);
  uint32_t family = gpupart_vulkan_queue_family(dev);
  cr_assert_neq(family, UINT32_MAX);
  VkQueue q;
  vkGetDeviceQueue(vd, family, 0, &q);
  cr_expect_eq(vkQueueWaitIdle(q), VK_SUCCESS);
  gpupart_partition *p = test_partition(dev, "own", 64 * MiB, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 1000, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_allocation_info info;
  cr_assert_eq(gpupart_allocation_get_info(a, &info), GPUPART_OK);
  VkDeviceMemory m;
  VkDeviceSize off;
  cr_assert_eq(gpupart_vulkan_memory(a, &m, &off), GPUPART_OK);
  cr_expect_eq((void *)m, info.native_block);
  cr_expect_eq(off, info.offset);
  cr_expect_eq(test_stats(p).driver_allocs, 1);
  gpupart_free(a);
  close_dev(dev);
}

/* Buffers of every supported usage, at many sizes and alignments, bind where gpupart
 * put them: their own requirements (alignment, type, size) are met. */
Test(vulkan, buffers_of_every_usage_meet_their_memory_requirements) {
  gpupart_device *dev = open_own(NULL);
  VkDevice vd = gpupart_vulkan_device(dev);
  gpupart_partition *p = test_partition(dev, "bufs", 128 * MiB, 0);
  static const VkBufferUsageFlags usages[] = {
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT,
      VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT,
      VK_BUFFER_USAGE_VERTEX_BUFFER_BIT | VK_BUFFER_USAGE_INDEX_BUFFER_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT,
      VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT};
  uint32_t type;
  VkMemoryPropertyFlags flags;
  cr_assert_eq(gpupart_vulkan_memory_type(dev, &type, &flags), GPUPART_OK);
  enum { N = 40 };
  gpupart_allocation *a[N];
  for (int i = 0; i < N; i++) {
    cr_assert_eq(gpupart_alloc(p, 1 + 4099 * (uint64_t)i * i, i % 3 ? 0 : 4096, &a[i]), GPUPART_OK, "%s",
                 gpupart_last_error());
    VkBuffer b;
    cr_assert_eq(gpupart_vulkan_create_buffer(a[i], usages[i % 5], &b), GPUPART_OK, "%s", gpupart_last_error());
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vd, b, &req);
    gpupart_allocation_info info;
    gpupart_allocation_get_info(a[i], &info);
    cr_expect_eq(info.offset % req.alignment, 0);
    cr_expect(req.memoryTypeBits & (1u << type));
    cr_expect_leq(info.offset + req.size, info.block_size);
  }
  for (int i = 0; i < N; i++) gpupart_free(a[i]);
  close_dev(dev);
}

Test(vulkan, create_buffer_reuses_covering_usages_and_rejects_bad_ones) {
  gpupart_device *dev = open_own(NULL);
  gpupart_partition *p = test_partition(dev, "b", 16 * MiB, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 12345, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  VkBuffer both, storage, transfer, bad = (VkBuffer)1;
  VkBufferUsageFlags two = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  cr_assert_eq(gpupart_vulkan_create_buffer(a, two, &both), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_vulkan_create_buffer(a, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &storage), GPUPART_OK);
  cr_expect_eq(storage, both, "a subset of an earlier usage reuses that buffer");
  cr_assert_eq(gpupart_vulkan_create_buffer(a, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &transfer), GPUPART_OK);
  cr_expect_neq(transfer, both);
  cr_expect_eq(gpupart_vulkan_create_buffer(a, 0, &bad), GPUPART_EINVAL);
  cr_expect_eq(bad, VK_NULL_HANDLE);
  cr_expect_eq(gpupart_vulkan_create_buffer(a, VK_BUFFER_USAGE_TRANSFORM_FEEDBACK_BUFFER_BIT_EXT, &bad),
               GPUPART_ENOTSUP);
  cr_expect_neq(strstr(gpupart_last_error(), "not supported"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_vulkan_create_buffer(NULL, two, &bad), GPUPART_EINVAL);
  cr_expect_eq(gpupart_vulkan_create_buffer(a, two, NULL), GPUPART_EINVAL);
  gpupart_free(a); /* destroys both buffers: a leak would be a validation error at close */
  close_dev(dev);
}

Test(vulkan, device_address_is_the_buffer_device_address) {
  gpupart_device *dev = open_own(NULL);
  VkDevice vd = gpupart_vulkan_device(dev);
  gpupart_partition *p = test_partition(dev, "bda", 64 * MiB, 0);
  gpupart_allocation *a[8];
  VkBuffer b;
  cr_assert_eq(gpupart_alloc(p, 100, 0, &a[0]), GPUPART_OK);
  if (gpupart_vulkan_create_buffer(a[0], VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT, &b) == GPUPART_ENOTSUP) {
    gpupart_free(a[0]);
    close_dev(dev);
    cr_skip_test("the device has no buffer device address");
  }
  gpupart_free(a[0]);
  for (int i = 0; i < 8; i++) {
    uint64_t align = 256ull << i;
    cr_assert_eq(gpupart_alloc(p, 3000 + 777 * i, align, &a[i]), GPUPART_OK, "%s", gpupart_last_error());
    cr_assert_eq(gpupart_vulkan_create_buffer(
                     a[i], VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &b),
                 GPUPART_OK, "%s", gpupart_last_error());
    VkBufferDeviceAddressInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b};
    gpupart_allocation_info info;
    gpupart_allocation_get_info(a[i], &info);
    cr_expect_eq(info.device_address, vkGetBufferDeviceAddress(vd, &bi));
    cr_expect_eq(info.device_address % align, 0, "alignment applies to the device address");
  }
  for (int i = 0; i < 8; i++) gpupart_free(a[i]);
  close_dev(dev);
}

/* Finds a host-visible type of the device, or skips. */
static uint32_t host_visible_type(gpupart_device *probe_dev) {
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(gpupart_vulkan_physical_device(probe_dev), &mem);
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++)
    if ((mem.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        (mem.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
      return i;
  return UINT32_MAX;
}

Test(vulkan, a_host_visible_type_is_partitioned_mapped_and_copied_by_the_gpu) {
  gpupart_device *probe = open_own(NULL);
  uint32_t type = host_visible_type(probe);
  close_dev(probe);
  if (type == UINT32_MAX) cr_skip_test("no host-visible coherent memory type");
  gpupart_vulkan_desc v = {.memory_type = type + 1};
  gpupart_device *dev = open_own(&v);
  uint32_t got;
  VkMemoryPropertyFlags flags;
  cr_assert_eq(gpupart_vulkan_memory_type(dev, &got, &flags), GPUPART_OK);
  cr_expect_eq(got, type);
  gpupart_partition *in = test_partition(dev, "in", 8 * MiB, 0), *out = test_partition(dev, "out", 8 * MiB, 0);
  gpupart_allocation *a, *b;
  enum { SIZE = 300000 };
  cr_assert_eq(gpupart_alloc(in, SIZE, 0, &a), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(out, SIZE, 0, &b), GPUPART_OK);
  unsigned char *src = gpupart_vulkan_host_pointer(a), *dst = gpupart_vulkan_host_pointer(b);
  cr_assert(src && dst, "%s", gpupart_last_error());
  for (int i = 0; i < SIZE; i++) src[i] = (unsigned char)(i * 31 + 7), dst[i] = 0;
  char why[256];
  cr_assert_eq(vkt_copy(gpupart_vulkan_device(dev), gpupart_vulkan_queue_family(dev), a, b, SIZE, why, sizeof why), 0,
               "%s", why);
  cr_expect_eq(memcmp(src, dst, SIZE), 0, "the GPU copied the bytes between partitions");
  gpupart_free(a);
  gpupart_free(b);
  close_dev(dev);
}

static void expect_out_of_range(const gpupart_vulkan_desc *v) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = v};
  gpupart_device *dev = (gpupart_device *)v;
  gpupart_result rc = gpupart_device_open(ctx, &d, &dev);
  if (rc == GPUPART_ENODEV) cr_skip_test("no Vulkan device here");
  cr_expect_eq(rc, GPUPART_EINVAL);
  cr_expect_null(dev);
  cr_expect_neq(strstr(gpupart_last_error(), "memory type 1000 is out of range"), NULL, "%s", gpupart_last_error());
}

Test(vulkan, memory_type_out_of_range_is_refused) {
  expect_out_of_range(&(gpupart_vulkan_desc){.memory_type = 1001});
  expect_out_of_range(&(gpupart_vulkan_desc){.memory_type_index = 1000}); /* deprecated, still honoured */
}

static uint32_t type_of(gpupart_device *dev) {
  uint32_t type = UINT32_MAX;
  VkMemoryPropertyFlags flags;
  cr_assert_eq(gpupart_vulkan_memory_type(dev, &type, &flags), GPUPART_OK, "%s", gpupart_last_error());
  return type;
}

/* 0 means default, as everywhere in the headers: a zeroed descriptor picks the type a
 * NULL one picks (in 0.1, memory_type_index 0 asked for type 0), and memory_type = 1
 * is how to ask for type 0. */
Test(vulkan, a_zeroed_descriptor_picks_the_default_memory_type) {
  gpupart_device *probe = open_own(NULL);
  uint32_t picked = type_of(probe);
  close_dev(probe);
  gpupart_vulkan_desc zero = {0};
  gpupart_device *dev = open_own(&zero);
  cr_expect_eq(type_of(dev), picked);
  close_dev(dev);
  dev = open_own(&(gpupart_vulkan_desc){.memory_type_index = UINT32_MAX});
  cr_expect_eq(type_of(dev), picked);
  close_dev(dev);
  dev = open_own(&(gpupart_vulkan_desc){.memory_type = picked + 1});
  cr_expect_eq(type_of(dev), picked);
  close_dev(dev);
}

typedef gpupart_result (*open_fn)(gpupart_context *, const gpupart_device_desc *, gpupart_device **);

/* A gpupart 0.1 program's open (the versioned gpupart_device_open@GPUPART_0.1) of the
 * type memory_type_index names, with both descriptors in their 0.1 layouts: every byte
 * past the 0.1 fields (0.2's backend_desc_type and backend_desc_size, the Vulkan
 * descriptor's memory_type) holds 0xa5, which the 0.1 open must not read. */
static gpupart_device *open_0_1(uint32_t memory_type_index) {
  void *sym = dlvsym(RTLD_DEFAULT, "gpupart_device_open", "GPUPART_0.1");
  cr_assert_not_null(sym, "no gpupart_device_open@GPUPART_0.1: %s", dlerror());
  open_fn open;
  memcpy(&open, &sym, sizeof sym);
  gpupart_vulkan_desc v;
  memset(&v, 0xa5, sizeof v);
  v.instance = NULL;
  v.physical_device = NULL;
  v.device = NULL;
  v.get_instance_proc_addr = NULL;
  v.memory_type_index = memory_type_index;
  v.buffer_device_address = 0;
  gpupart_device_desc d;
  memset(&d, 0xa5, sizeof d);
  d.backend = GPUPART_BACKEND_VULKAN;
  d.index = 0;
  d.memory_fraction = 0;
  d.memory_limit = 0;
  d.headroom = 0;
  d.growth = GPUPART_GROWTH_DEFAULT;
  d.granularity = 0;
  d.backend_desc = &v;
  d.flags = 0;
  gpupart_device *dev = NULL;
  gpupart_result rc = open(ctx, &d, &dev);
  if (rc == GPUPART_ENODEV) cr_skip_test("no Vulkan device here: %s", gpupart_last_error());
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

/* In 0.1, memory_type_index meant that type, 0 included, and UINT32_MAX picked one. */
Test(vulkan, a_0_1_programs_descriptor_is_read_as_0_1_laid_it_out) {
  gpupart_device *probe = open_own(NULL);
  uint32_t picked = type_of(probe);
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(gpupart_vulkan_physical_device(probe), &mem);
  close_dev(probe);
  gpupart_device *dev = open_0_1(UINT32_MAX);
  cr_expect_eq(type_of(dev), picked);
  close_dev(dev);
  for (uint32_t t = 0; t < mem.memoryTypeCount && t < 2; t++) {
    gpupart_vulkan_desc v = {.memory_type = t + 1};
    gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = &v};
    if (gpupart_device_open(ctx, &d, &dev) != GPUPART_OK) continue; /* a type that cannot back buffers */
    close_dev(dev);
    dev = open_0_1(t);
    cr_expect_eq(type_of(dev), t, "0.1's memory_type_index %u", t);
    close_dev(dev);
  }
}

Test(vulkan, adopted_handles_that_do_not_belong_together_are_refused) {
  vkt_env a, b;
  env_or_skip(&a, 0);
  env_or_skip(&b, 0);
  gpupart_vulkan_desc mixed = vkt_desc(&a);
  mixed.physical_device = b.physical; /* another instance's physical device */
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = &mixed};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "is not one of instance"), NULL, "%s", gpupart_last_error());
  gpupart_vulkan_desc partial = vkt_desc(&a);
  partial.device = VK_NULL_HANDLE;
  d.backend_desc = &partial;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "adopt all of"), NULL, "%s", gpupart_last_error());
  env_done(&b);
  env_done(&a);
}

Test(vulkan, request_above_max_allocation_size_makes_no_driver_call) {
  gpupart_device *dev = open_own(NULL);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  gpupart_partition *p = test_partition(dev, "big", 0, 0);
  gpupart_allocation *a = (gpupart_allocation *)&info;
  cr_expect_eq(gpupart_alloc(p, info.max_block_bytes + 1, 0, &a), GPUPART_EINVAL);
  cr_expect_null(a);
  cr_expect_neq(strstr(gpupart_last_error(), "largest driver allocation"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p).driver_allocs, 0);
  close_dev(dev);
}

/* Two gpupart devices on one adopted VkDevice are one physical device (one UUID), so
 * they share one budget: what one holds, the other cannot take beyond it. The shared
 * ledger refuses (ELIMIT) before the driver is asked, with nothing changed. */
Test(vulkan, devices_on_one_vkdevice_share_one_budget) {
  vkt_env e;
  env_or_skip(&e, 0);
  gpupart_vulkan_desc v = vkt_desc(&e);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = &v};
  gpupart_device *one, *two;
  cr_assert_eq(gpupart_device_open(ctx, &d, &one), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_device_open(ctx, &d, &two), GPUPART_OK, "%s", gpupart_last_error());
  uint64_t heap = gpupart_device_budget(one);
  gpupart_partition *p1 = test_partition(one, "p1", 0, 0), *p2 = test_partition(two, "p2", 0, 0);
  gpupart_allocation *a, *b;
  cr_assert_eq(gpupart_alloc(p1, heap / 4 * 3, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(two), heap, "the second handle shares the first one's budget");
  cr_expect_eq(gpupart_alloc(p2, heap / 2, 0, &b), GPUPART_ELIMIT);
  cr_expect_neq(strstr(gpupart_last_error(), "budget"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(test_stats(p2).reserved, 0);
  gpupart_free(a);
  cr_expect_eq(gpupart_partition_trim(p1), GPUPART_OK);
  cr_expect_eq(gpupart_alloc(p2, heap / 2, 0, &b), GPUPART_OK, "the heap is free again once one gave it back: %s",
               gpupart_last_error());
  gpupart_free(b);
  cr_expect_eq(gpupart_device_close(one), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(two), GPUPART_OK);
  env_done(&e);
}

Test(vulkan, interop_calls_refuse_other_backends_and_null) {
  gpupart_sim_desc sim = {.host_backed = 1};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(dev, "s", 8 * MiB, 0);
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 64, 0, &a), GPUPART_OK);
  VkDeviceMemory m = (VkDeviceMemory)1;
  VkDeviceSize off = 1;
  cr_expect_eq(gpupart_vulkan_memory(a, &m, &off), GPUPART_EINVAL);
  cr_expect_eq(m, VK_NULL_HANDLE);
  cr_expect_eq(off, 0);
  cr_expect_neq(strstr(gpupart_last_error(), "not vulkan"), NULL, "%s", gpupart_last_error());
  cr_expect_null(gpupart_vulkan_host_pointer(a));
  cr_expect_eq(gpupart_vulkan_device(dev), VK_NULL_HANDLE);
  cr_expect_eq(gpupart_vulkan_device(NULL), VK_NULL_HANDLE);
  cr_expect_eq(gpupart_vulkan_queue_family(dev), UINT32_MAX);
  cr_expect_eq(gpupart_vulkan_memory(NULL, &m, &off), GPUPART_EINVAL);
  gpupart_free(a);
  close_dev(dev);
}

/* Variables read by the loader and by gpupart need a context that reads the
 * environment; Criterion runs each test in its own process, so they stay here. */
static gpupart_context *env_context(void) {
  gpupart_context *c = NULL;
  cr_assert_eq(gpupart_context_create(NULL, &c), GPUPART_OK, "%s", gpupart_last_error());
  return c;
}

Test(vulkan, no_loader_is_enobackend_naming_the_library) {
  setenv("GPUPART_VULKAN_LIBRARY", "/nonexistent/libvulkan.so.1", 1);
  gpupart_context *c = env_context();
  uint32_t n = 0;
  cr_expect_eq(gpupart_enumerate(c, GPUPART_BACKEND_VULKAN, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_neq(strstr(gpupart_last_error(), "/nonexistent/libvulkan.so.1"), NULL, "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(c, &d, &dev), GPUPART_ENOBACKEND);
  cr_expect_eq(gpupart_context_destroy(c), GPUPART_OK);
  setenv("GPUPART_VULKAN_LIBRARY", "libm.so.6", 1);
  c = env_context();
  cr_expect_eq(gpupart_enumerate(c, GPUPART_BACKEND_VULKAN, NULL, &n), GPUPART_ENOBACKEND);
  cr_expect_neq(strstr(gpupart_last_error(), "not a Vulkan loader"), NULL, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(c), GPUPART_OK);
}

Test(vulkan, no_driver_is_no_device) {
  setenv("VK_DRIVER_FILES", "/nonexistent/icd.json", 1); /* the loader's names, old and new */
  setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json", 1);
  uint32_t n = 5;
  cr_expect_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_VULKAN, NULL, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(n, 0);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV);
  cr_expect_neq(strstr(gpupart_last_error(), "no Vulkan driver"), NULL, "%s", gpupart_last_error());
}

Test(vulkan, a_device_index_past_the_last_is_enodev) {
  vkt_env e;
  env_or_skip(&e, 0);
  env_done(&e);
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .index = 1000};
  gpupart_device *dev;
  cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_ENODEV);
  cr_expect_neq(strstr(gpupart_last_error(), "no device 1000"), NULL, "%s", gpupart_last_error());
}

Test(vulkan, the_backend_takes_host_memory_from_the_contexts_allocator) {
  test_counting c = {0};
  gpupart_context_desc cd = test_counting_desc(&c);
  gpupart_context *own;
  cr_assert_eq(gpupart_context_create(&cd, &own), GPUPART_OK);
  long before = c.calls;
  gpupart_device_info info;
  uint32_t n = 1;
  gpupart_result rc = gpupart_enumerate(own, GPUPART_BACKEND_VULKAN, &info, &n);
  if (rc == GPUPART_OK && n == 0) gpupart_context_destroy(own), cr_skip_test("no Vulkan device here");
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_gt(c.calls, before + 1, "the backend's state and its physical-device lists");
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN};
  gpupart_device *dev;
  cr_assert_eq(gpupart_device_open(own, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition *p = test_partition(dev, "counted", 64 * MiB, 0);
  long opened = c.calls;
  gpupart_allocation *a;
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  VkBuffer b;
  cr_expect_eq(gpupart_vulkan_create_buffer(a, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &b), GPUPART_OK, "%s",
               gpupart_last_error());
  gpupart_free(a);
  cr_expect_gt(c.calls, opened + 2, "the block record, the view and its buffer node are counted too");
  close_dev(dev);
  cr_expect_eq(gpupart_context_destroy(own), GPUPART_OK);
  cr_expect_eq(c.live, 0, "%ld host allocations left behind", c.live);
}

Test(vulkan, info_reports_block_granularity_and_a_pci_bus_id_field) {
  gpupart_device *dev = open_own(NULL);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  cr_expect_eq(info.block_granularity, info.min_alignment, "vkAllocateMemory takes any size");
  cr_expect_lt(strlen(info.pci_bus_id), sizeof info.pci_bus_id);
  if (info.pci_bus_id[0]) cr_expect_eq(strlen(info.pci_bus_id), 12, "dddd:bb:dd.f, got '%s'", info.pci_bus_id);
  close_dev(dev);
}
