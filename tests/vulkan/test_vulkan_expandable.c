/* Expandable partitions on the Vulkan backend (backends/vulkan/vk_vm.c), on a lavapipe
 * with sparse binding (Mesa >= 24.2, fetched by scripts/fetch-lavapipe-sparse and
 * selected by with-fetched-lavapipe), under the validation layer (vulkan_test.h: an
 * error raises SIGTRAP and fails the test). On gpupart's own device: every allocation
 * is a range of the partition's one sparse buffer; data written there by vkCmdFillBuffer
 * or vkCmdCopyBuffer, then rewritten by a compute shader, reads back intact for every
 * allocation, most of them several granules long and many across two separately bound
 * memory objects; memory objects are made per growth of the mapped range, not per
 * allocation; trim gives back the wholly free top and, once everything is freed,
 * everything; the calls that speak of one VkDeviceMemory refuse these allocations; and
 * a range past the device's sparse address space is refused (or the partition keeps
 * growth blocks). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vulkan_base.h"
#include "vulkan_test.h"

static const uint32_t shader_spirv[] =
#include "sparse_probe.spv.h"
    ;

#define MiB (1ull << 20)
#define EXPANDABLE (GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED)
#define MAX_ALLOCS 300

/* gpupart's own device, and what the test records commands with on it. */
typedef struct rig {
  gpupart_context *ctx;
  gpupart_device *dev;
  VkDevice device;
  VkQueue queue;               /* queue 0 of gpupart's family, shared with gpupart's binds on lavapipe:
                                  this test submits from the thread that allocates, never at once; on an
                                  adopted device, the application's queue, which gpupart binds on too */
  pthread_mutex_t *queue_lock; /* adopted: held around the test's submissions, and by
                                  gpupart around its binds (sparse_queue_lock) */
  VkCommandPool pool;
  VkFence fence;
  VkBuffer staging;
  VkDeviceMemory staging_memory;
  uint8_t *host;
  vkb_compute pipe; /* sparse_probe.comp */
  VkDescriptorPool sets;
} rig;

#define VK_OK(call) cr_assert_eq((call), VK_SUCCESS, "%s", #call)

static uint32_t host_type(VkPhysicalDevice pd, uint32_t allowed) {
  VkPhysicalDeviceMemoryProperties m;
  vkGetPhysicalDeviceMemoryProperties(pd, &m);
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < m.memoryTypeCount; i++)
    if ((allowed & (1u << i)) && (m.memoryTypes[i].propertyFlags & want) == want) return i;
  cr_assert_fail("no host-visible coherent memory type");
  return 0;
}

static void make_staging(rig *r, uint64_t size) {
  VkBufferCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = size,
                           .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VK_OK(vkCreateBuffer(r->device, &ci, NULL, &r->staging));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(r->device, r->staging, &req);
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .allocationSize = req.size,
                             .memoryTypeIndex = host_type(gpupart_vulkan_physical_device(r->dev), req.memoryTypeBits)};
  VK_OK(vkAllocateMemory(r->device, &ai, NULL, &r->staging_memory));
  VK_OK(vkBindBufferMemory(r->device, r->staging, r->staging_memory, 0));
  void *p = NULL;
  VK_OK(vkMapMemory(r->device, r->staging_memory, 0, VK_WHOLE_SIZE, 0, &p));
  r->host = p;
}

static void make_pipeline(rig *r) {
  const char *call = NULL;
  cr_assert_eq(vkb_compute_create(r->device, shader_spirv, sizeof shader_spirv, 2 * sizeof(uint32_t), &r->pipe, &call),
               VK_SUCCESS, "%s", call);
  VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = MAX_ALLOCS};
  VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                   .maxSets = MAX_ALLOCS,
                                   .poolSizeCount = 1,
                                   .pPoolSizes = &ps};
  VK_OK(vkCreateDescriptorPool(r->device, &pi, NULL, &r->sets));
}

/* The rig on an open gpupart device: commands on queue 0 of family. */
static void rig_on(rig *r, uint32_t family, uint64_t staging) {
  r->device = gpupart_vulkan_device(r->dev);
  vkGetDeviceQueue(r->device, family, 0, &r->queue);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = family};
  VK_OK(vkCreateCommandPool(r->device, &pi, NULL, &r->pool));
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_OK(vkCreateFence(r->device, &fi, NULL, &r->fence));
  make_staging(r, staging);
  make_pipeline(r);
}

static rig open_rig(uint64_t staging) {
  vkt_require_validation();
  rig r = {.ctx = test_context()};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN};
  cr_assert_eq(gpupart_device_open(r.ctx, &d, &r.dev), GPUPART_OK, "%s", gpupart_last_error());
  rig_on(&r, gpupart_vulkan_queue_family(r.dev), staging);
  return r;
}

static void close_rig(rig *r) {
  vkDestroyDescriptorPool(r->device, r->sets, NULL);
  vkb_compute_destroy(r->device, &r->pipe);
  vkDestroyBuffer(r->device, r->staging, NULL);
  vkFreeMemory(r->device, r->staging_memory, NULL);
  vkDestroyFence(r->device, r->fence, NULL);
  vkDestroyCommandPool(r->device, r->pool, NULL);
  test_check(r->dev);
  cr_expect_eq(gpupart_device_close(r->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(r->ctx), GPUPART_OK, "%s", gpupart_last_error());
}

static gpupart_partition *partition(rig *r, const char *name, uint64_t limit, uint32_t flags) {
  gpupart_partition_desc pd = {.name = name, .limit = limit, .flags = flags};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(r->dev, &pd, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static gpupart_stats stats(const gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s;
}

/* One allocation under test: where it is, how it is written, and where it is read to. */
typedef struct item {
  gpupart_allocation *a;
  uint64_t size; /* a multiple of 4 */
  VkBuffer buffer;
  VkDeviceSize offset;
  uint64_t at;   /* its bytes in the staging buffer */
  uint32_t fill; /* the fill pattern, or 0: copied in from staging */
  uint32_t seed;
} item;

static uint32_t first_word(const item *it, uint32_t k) { return it->fill ? it->fill : 0x9e3779b9u * (k + it->seed); }

static uint32_t expected_word(const item *it, uint32_t k) { return first_word(it, k) * 2u + k + it->seed; }

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags src, VkPipelineStageFlags to,
                    VkAccessFlags dst) {
  VkMemoryBarrier m = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src, .dstAccessMask = dst};
  vkCmdPipelineBarrier(cb, from, to, 0, 1, &m, 0, NULL, 0, NULL);
}

static void dispatch(rig *r, VkCommandBuffer cb, const item *it) {
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = r->sets,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &r->pipe.set_layout};
  VkDescriptorSet set;
  VK_OK(vkAllocateDescriptorSets(r->device, &ai, &set));
  VkDescriptorBufferInfo bi = {.buffer = it->buffer, .offset = it->offset, .range = it->size};
  VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                            .dstSet = set,
                            .descriptorCount = 1,
                            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                            .pBufferInfo = &bi};
  vkUpdateDescriptorSets(r->device, 1, &w, 0, NULL);
  uint32_t params[2] = {(uint32_t)(it->size / 4), it->seed};
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->pipe.layout, 0, 1, &set, 0, NULL);
  vkCmdPushConstants(cb, r->pipe.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof params, params);
  vkCmdDispatch(cb, (params[0] + 63) / 64, 1, 1);
}

/* Writes every item (fill, or copy from staging), runs the shader over each, copies each
 * back to staging; one submission, waited for. */
static void run_commands(rig *r, item *it, int n) {
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = r->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkCommandBuffer cb;
  VK_OK(vkAllocateCommandBuffers(r->device, &ai, &cb));
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VK_OK(vkBeginCommandBuffer(cb, &bi));
  for (int i = 0; i < n; i++) {
    VkBufferCopy in = {.srcOffset = it[i].at, .dstOffset = it[i].offset, .size = it[i].size};
    if (it[i].fill) vkCmdFillBuffer(cb, it[i].buffer, it[i].offset, it[i].size, it[i].fill);
    else vkCmdCopyBuffer(cb, r->staging, it[i].buffer, 1, &in);
  }
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->pipe.pipeline);
  for (int i = 0; i < n; i++) dispatch(r, cb, &it[i]);
  barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  for (int i = 0; i < n; i++) {
    VkBufferCopy out = {.srcOffset = it[i].offset, .dstOffset = it[i].at, .size = it[i].size};
    vkCmdCopyBuffer(cb, it[i].buffer, r->staging, 1, &out);
  }
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);
  VK_OK(vkEndCommandBuffer(cb));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
  if (r->queue_lock) pthread_mutex_lock(r->queue_lock);
  VkResult submitted = vkQueueSubmit(r->queue, 1, &si, r->fence);
  if (r->queue_lock) pthread_mutex_unlock(r->queue_lock);
  VK_OK(submitted);
  VK_OK(vkWaitForFences(r->device, 1, &r->fence, VK_TRUE, UINT64_MAX));
  VK_OK(vkResetFences(r->device, 1, &r->fence));
  vkFreeCommandBuffers(r->device, r->pool, 1, &cb);
  VK_OK(vkResetDescriptorPool(r->device, r->sets, 0));
}

/* Places items in their allocations' buffers, writes the copied ones' words into staging,
 * runs the commands and checks every word. */
static void write_and_check(rig *r, item *it, int n) {
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    cr_assert_eq(gpupart_vulkan_buffer_range(it[i].a, &it[i].buffer, &it[i].offset), GPUPART_OK, "%s",
                 gpupart_last_error());
    it[i].at = at;
    at += it[i].size;
    uint32_t *w = (uint32_t *)(r->host + it[i].at);
    for (uint32_t k = 0; !it[i].fill && k < it[i].size / 4; k++) w[k] = first_word(&it[i], k);
  }
  run_commands(r, it, n);
  for (int i = 0; i < n; i++) {
    const uint32_t *w = (const uint32_t *)(r->host + it[i].at);
    for (uint32_t k = 0; k < it[i].size / 4; k++)
      if (w[k] != expected_word(&it[i], k))
        cr_assert_fail("allocation %d (%llu bytes at %llu): word %u is 0x%x, not 0x%x", i,
                       (unsigned long long)it[i].size, (unsigned long long)it[i].offset, k, w[k],
                       expected_word(&it[i], k));
  }
}

static item new_item(gpupart_partition *p, uint64_t size, uint32_t seed) {
  item it = {.size = size, .seed = seed, .fill = seed % 2 ? 0 : 0x01010101u * (seed % 200 + 1)};
  cr_assert_eq(gpupart_alloc(p, size, 0, &it.a), GPUPART_OK, "%s", gpupart_last_error());
  return it;
}

Test(vulkan_expandable, data_written_by_fill_copy_and_a_shader_at_every_allocation_is_intact) {
  rig r = open_rig(32 * MiB);
  uint64_t granule = 0;
  gpupart_partition *p = partition(&r, "x", 64 * MiB, EXPANDABLE);
  static item it[40];
  uint64_t total = 0;
  int across = 0; /* allocations across the end of what was mapped before them: two memory objects */
  for (int i = 0; i < 40; i++) {
    uint64_t size = i % 7 == 3 ? 3 * MiB + 4 * (uint64_t)i : 4 * (1 + ((uint64_t)i * i * 7919) % 60000);
    uint64_t mapped = stats(p).reserved; /* the mapped prefix [0, mapped) of the range */
    it[i] = new_item(p, size, (uint32_t)i + 1);
    VkBuffer b;
    VkDeviceSize off;
    cr_assert_eq(gpupart_vulkan_buffer_range(it[i].a, &b, &off), GPUPART_OK);
    across += mapped && off < mapped && off + size > mapped;
    total += size;
    if (i == 0) {
      VkBuffer b0;
      VkDeviceSize off0;
      cr_assert_eq(gpupart_vulkan_buffer_range(it[0].a, &b0, &off0), GPUPART_OK);
      VkMemoryRequirements req;
      vkGetBufferMemoryRequirements(r.device, b0, &req);
      granule = req.alignment;
    }
  }
  cr_assert_lt(total, 32 * MiB);
  write_and_check(&r, it, 40);
  int several = 0;
  for (int i = 0; i < 40; i++) {
    several += it[i].size > 2 * granule;
    cr_expect_eq(it[i].buffer, it[0].buffer, "one sparse buffer for the partition");
  }
  cr_expect_geq(several, 20, "most allocations span several granules (granule %llu)", (unsigned long long)granule);
  cr_expect_geq(across, 3, "allocations across two memory objects: %d", across);
  gpupart_stats s = stats(p);
  cr_expect_gt(s.driver_allocs, 1, "the range grew several times");
  cr_expect_lt(s.driver_allocs, 40, "memory objects per growth, not per allocation");
  cr_expect_leq(s.reserved, s.in_use + s.in_use / 16 + 40 * 256 + granule, "reserved %llu for %llu in use",
                (unsigned long long)s.reserved, (unsigned long long)s.in_use);
  for (int i = 0; i < 40; i++) gpupart_free(it[i].a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  close_rig(&r);
}

Test(vulkan_expandable, small_allocations_share_memory_objects) {
  rig r = open_rig(1 * MiB);
  gpupart_partition *p = partition(&r, "x", 64 * MiB, EXPANDABLE);
  static item it[256];
  for (int i = 0; i < 256; i++) it[i] = new_item(p, 256, (uint32_t)i);
  gpupart_stats s = stats(p);
  cr_expect_leq(s.driver_allocs, 32, "%llu memory objects for 256 allocations", (unsigned long long)s.driver_allocs);
  write_and_check(&r, it, 256);
  for (int i = 0; i < 256; i++) gpupart_free(it[i].a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  close_rig(&r);
}

Test(vulkan_expandable, trim_returns_the_free_top_and_nothing_is_held_after_everything_is_freed) {
  rig r = open_rig(16 * MiB);
  gpupart_partition *p = partition(&r, "x", 64 * MiB, EXPANDABLE);
  static item it[12];
  for (int i = 0; i < 12; i++) it[i] = new_item(p, 1 * MiB, (uint32_t)i + 40);
  write_and_check(&r, it, 12);
  uint64_t before = stats(p).reserved;
  cr_assert_geq(before, 12 * MiB);
  for (int i = 6; i < 12; i++) gpupart_free(it[i].a);
  cr_expect_eq(stats(p).reserved, before, "a free unmaps nothing");
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_stats s = stats(p);
  cr_expect_lt(s.reserved, before, "the free top went back");
  cr_expect_geq(s.reserved, 6 * MiB);
  cr_expect_leq(s.reserved, 8 * MiB, "reserved %llu after trim", (unsigned long long)s.reserved);
  write_and_check(&r, it, 6); /* the pages kept are still bound, and new work runs there */
  for (int i = 0; i < 6; i++) gpupart_free(it[i].a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK, "%s", gpupart_last_error());
  s = stats(p);
  cr_expect_eq(s.reserved, 0, "nothing mapped");
  cr_expect_eq(s.driver_frees, s.driver_allocs, "every memory object freed");
  it[0] = new_item(p, 2 * MiB, 7); /* and the range grows again */
  write_and_check(&r, it, 1);
  gpupart_free(it[0].a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  close_rig(&r);
}

Test(vulkan_expandable, calls_of_one_memory_object_refuse_and_buffer_range_serves_both_kinds) {
  rig r = open_rig(1 * MiB);
  gpupart_partition *p = partition(&r, "x", 64 * MiB, EXPANDABLE);
  gpupart_partition *q = partition(&r, "blocks", 64 * MiB, 0);
  item e = new_item(p, 4096, 1), b = new_item(q, 4096, 2);
  VkDeviceMemory m = (VkDeviceMemory)1;
  VkDeviceSize off = 1;
  cr_expect_eq(gpupart_vulkan_memory(e.a, &m, &off), GPUPART_ENOTSUP);
  cr_expect_not_null(strstr(gpupart_last_error(), "gpupart_vulkan_buffer_range"), "%s", gpupart_last_error());
  cr_expect_eq(m, VK_NULL_HANDLE);
  cr_expect_eq(off, 0);
  VkBuffer buf = (VkBuffer)1;
  cr_expect_eq(gpupart_vulkan_create_buffer(e.a, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &buf), GPUPART_ENOTSUP);
  cr_expect_eq(buf, VK_NULL_HANDLE);
  cr_expect_null(gpupart_vulkan_host_pointer(e.a));
  cr_expect_eq(gpupart_vulkan_memory(b.a, &m, &off), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_vulkan_buffer_range(NULL, &buf, &off), GPUPART_EINVAL);
  cr_expect_eq(gpupart_vulkan_buffer_range(e.a, NULL, &off), GPUPART_EINVAL);
  cr_expect_eq(gpupart_vulkan_buffer_range(e.a, &buf, NULL), GPUPART_EINVAL);
  item both[2] = {e, b};
  write_and_check(&r, both, 2);
  cr_expect_eq(both[1].offset, 0, "a block's allocation: its own buffer");
  cr_expect_neq(both[0].buffer, both[1].buffer);
  gpupart_allocation_info info;
  cr_assert_eq(gpupart_allocation_get_info(e.a, &info), GPUPART_OK);
  cr_expect_eq(info.offset, both[0].offset);
  if (info.device_address) {
    VkBufferDeviceAddressInfo ai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = both[0].buffer};
    cr_expect_eq(vkGetBufferDeviceAddress(r.device, &ai) + both[0].offset, info.device_address);
  }
  gpupart_free(e.a);
  gpupart_free(b.a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_destroy(q), GPUPART_OK, "%s", gpupart_last_error());
  close_rig(&r);
}

Test(vulkan_expandable, ranges_past_the_sparse_address_space_are_refused_or_keep_blocks) {
  rig r = open_rig(1 * MiB);
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(gpupart_vulkan_physical_device(r.dev), &props);
  uint64_t space = props.limits.sparseAddressSpaceSize, limit = space / 2 + space / 8;
  cr_assert_gt(space, 64 * MiB);
  gpupart_partition *p = partition(&r, "x", limit, EXPANDABLE);
  gpupart_partition_desc pd = {.name = "y", .limit = limit, .flags = EXPANDABLE};
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create(r.dev, &pd, &q), GPUPART_ENOTSUP);
  cr_expect_not_null(strstr(gpupart_last_error(), "sparseAddressSpaceSize"), "%s", gpupart_last_error());
  cr_expect_null(q);
  q = partition(&r, "y", limit, GPUPART_PARTITION_EXPANDABLE); /* not required: growth blocks */
  item b = new_item(q, 4096, 2);
  VkDeviceMemory m;
  VkDeviceSize off;
  cr_expect_eq(gpupart_vulkan_memory(b.a, &m, &off), GPUPART_OK, "a block: %s", gpupart_last_error());
  gpupart_free(b.a);
  cr_expect_eq(gpupart_partition_destroy(q), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  q = partition(&r, "y", limit, EXPANDABLE); /* the space was given back */
  cr_expect_eq(gpupart_partition_destroy(q), GPUPART_OK, "%s", gpupart_last_error());
  close_rig(&r);
}

/* ---- an adopted device: the application's queue (gpupart_vulkan_desc.sparse_queue, 0.3) ---- */

/* The application's lock of its queue, as sparse_queue_lock takes it. */
typedef struct app_queue {
  pthread_mutex_t mutex;
  int held;            /* by a gpupart bind */
  unsigned binds;      /* lock = 1 calls */
  unsigned unbalanced; /* an unlock without a lock, or a lock while held */
} app_queue;

static void app_queue_lock(void *user, int lock) {
  app_queue *q = user;
  if (lock) {
    pthread_mutex_lock(&q->mutex);
    q->unbalanced += (unsigned)q->held;
    q->held = 1;
    q->binds++;
    return;
  }
  q->unbalanced += (unsigned)!q->held;
  q->held = 0;
  pthread_mutex_unlock(&q->mutex);
}

typedef struct adopted {
  vkt_env env;
  app_queue q;
} adopted;

/* The test's own instance and device (sparseBinding and sparseResidencyBuffer enabled, one
 * queue), adopted with that queue as sparse_queue and, with_lock, the application's lock. */
static gpupart_vulkan_desc adopt_desc(adopted *ad, int with_lock) {
  vkt_require_validation();
  char why[256] = "";
  cr_assert_eq(vkt_env_create_sparse(&ad->env, why, sizeof why), 0, "the test's sparse device: %s", why);
  VkQueueFamilyProperties fam[16];
  uint32_t n = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(ad->env.physical, &n, fam);
  cr_assert(ad->env.family < n && (fam[ad->env.family].queueFlags & VK_QUEUE_SPARSE_BINDING_BIT));
  pthread_mutex_init(&ad->q.mutex, NULL);
  gpupart_vulkan_desc v = vkt_desc(&ad->env);
  v.sparse_queue = ad->env.queue;
  v.sparse_queue_family = ad->env.family;
  if (with_lock) v.sparse_queue_lock = app_queue_lock, v.sparse_queue_user = &ad->q;
  return v;
}

static rig open_adopted(adopted *ad, const gpupart_vulkan_desc *v, uint64_t staging) {
  rig r = {.ctx = test_context(), .queue_lock = v->sparse_queue_lock ? &ad->q.mutex : NULL};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_VULKAN, .backend_desc = v, .backend_desc_size = sizeof *v};
  cr_assert_eq(gpupart_device_open(r.ctx, &d, &r.dev), GPUPART_OK, "%s", gpupart_last_error());
  rig_on(&r, ad->env.family, staging);
  return r;
}

static void close_adopted(adopted *ad, rig *r) {
  close_rig(r);
  cr_expect_eq(vkt_env_destroy(&ad->env), 0, "validation errors");
  cr_expect_eq(ad->q.unbalanced, 0);
  pthread_mutex_destroy(&ad->q.mutex);
}

/* Grows and trims an expandable partition of the adopted device while the test's thread
 * submits work on the same queue: gpupart's binds go through the application's lock. */
typedef struct churner {
  gpupart_partition *p;
  int rounds;
  int failures;
} churner;

static void *churn_binds(void *arg) {
  churner *c = arg;
  for (int i = 0; i < c->rounds; i++) {
    gpupart_allocation *a[4] = {0};
    for (int k = 0; k < 4; k++) c->failures += gpupart_alloc(c->p, (uint64_t)(k + 1) * 3 * MiB, 0, &a[k]) != 0;
    for (int k = 0; k < 4; k++) gpupart_free(a[k]);
    c->failures += gpupart_partition_trim(c->p) != GPUPART_OK;
  }
  return NULL;
}

Test(vulkan_expandable, an_adopted_device_with_a_sparse_queue_grows_in_place_through_the_applications_lock) {
  static adopted ad;
  gpupart_vulkan_desc v = adopt_desc(&ad, 1);
  rig r = open_adopted(&ad, &v, 32 * MiB);
  gpupart_partition *p = partition(&r, "x", 128 * MiB, EXPANDABLE);
  static item it[24];
  for (int i = 0; i < 24; i++)
    it[i] = new_item(p, i % 5 == 2 ? 2 * MiB + 4 * (uint64_t)i : 4 * (1 + ((uint64_t)i * 7919) % 90000), (uint32_t)i);
  write_and_check(&r, it, 24);
  for (int i = 1; i < 24; i++) cr_expect_eq(it[i].buffer, it[0].buffer, "one sparse buffer for the partition");
  gpupart_stats s = stats(p);
  cr_expect_gt(s.driver_allocs, 1, "the range grew several times");
  cr_expect_lt(s.driver_allocs, 24, "memory objects per growth, not per allocation");
  cr_expect_eq(ad.q.binds, s.driver_allocs, "one bind per growth, each inside the application's lock");
  /* Concurrent use of the queue: binds on another thread, submissions here. */
  gpupart_partition *q = partition(&r, "churn", 64 * MiB, EXPANDABLE);
  churner c = {.p = q, .rounds = 12};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, churn_binds, &c), 0);
  for (int k = 0; k < 6; k++) write_and_check(&r, it, 24);
  pthread_join(t, NULL);
  cr_expect_eq(c.failures, 0);
  gpupart_stats sq = stats(q);
  cr_expect_eq(sq.reserved, 0, "trimmed");
  for (int i = 12; i < 24; i++) gpupart_free(it[i].a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK, "%s", gpupart_last_error());
  write_and_check(&r, it, 12); /* the pages kept are still bound */
  for (int i = 0; i < 12; i++) gpupart_free(it[i].a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK, "%s", gpupart_last_error());
  s = stats(p);
  cr_expect_eq(s.reserved, 0, "nothing mapped");
  cr_expect_eq(s.driver_frees, s.driver_allocs, "every memory object freed");
  cr_expect_eq(ad.q.binds, s.driver_allocs + s.driver_frees + sq.driver_allocs + sq.driver_frees,
               "every bind and unbind inside the application's lock");
  cr_expect_eq(gpupart_partition_destroy(q), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  close_adopted(&ad, &r);
}

Test(vulkan_expandable, an_adopted_device_without_a_lock_binds_on_the_promise) {
  static adopted ad;
  gpupart_vulkan_desc v = adopt_desc(&ad, 0);
  rig r = open_adopted(&ad, &v, 8 * MiB);
  gpupart_partition *p = partition(&r, "x", 64 * MiB, EXPANDABLE);
  static item it[6];
  for (int i = 0; i < 6; i++) it[i] = new_item(p, MiB + 4 * (uint64_t)i, (uint32_t)i + 3);
  write_and_check(&r, it, 6);
  for (int i = 0; i < 6; i++) gpupart_free(it[i].a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(ad.q.binds, 0);
  close_adopted(&ad, &r);
}

/* Without sparse_queue (a 0.2 descriptor, or the field left NULL) an adopted device keeps
 * growth blocks, and a required expandable partition is refused naming the field; a
 * queue that cannot be used is refused at open. */
Test(vulkan_expandable, an_adopted_device_without_a_sparse_queue_says_why_and_bad_queues_are_refused) {
  static adopted ad;
  gpupart_vulkan_desc v = adopt_desc(&ad, 1), plain = v;
  plain.sparse_queue = VK_NULL_HANDLE;
  plain.sparse_queue_lock = NULL;
  plain.sparse_queue_user = NULL;
  rig r = open_adopted(&ad, &plain, 1 * MiB);
  gpupart_partition_desc pd = {.name = "x", .limit = 64 * MiB, .flags = EXPANDABLE};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(r.dev, &pd, &p), GPUPART_ENOTSUP);
  cr_expect_not_null(strstr(gpupart_last_error(), "sparse_queue"), "%s", gpupart_last_error());
  p = partition(&r, "y", 64 * MiB, GPUPART_PARTITION_EXPANDABLE); /* not required: growth blocks */
  item b = new_item(p, 4096, 2);
  VkDeviceMemory m;
  VkDeviceSize off;
  cr_expect_eq(gpupart_vulkan_memory(b.a, &m, &off), GPUPART_OK, "a block: %s", gpupart_last_error());
  write_and_check(&r, &b, 1);
  gpupart_free(b.a);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK, "%s", gpupart_last_error());
  /* A 0.2-sized descriptor: the 0.3 fields are not read, whatever they hold. */
  gpupart_device_desc d02 = {.backend = GPUPART_BACKEND_VULKAN,
                             .backend_desc = &v,
                             .backend_desc_size = offsetof(gpupart_vulkan_desc, reserved)};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(r.ctx, &d02, &dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd2 = {.name = "z", .limit = 64 * MiB, .flags = EXPANDABLE};
  p = NULL;
  if (dev) cr_expect_eq(gpupart_partition_create(dev, &pd2, &p), GPUPART_ENOTSUP);
  if (dev) gpupart_device_close(dev);
  struct {
    const char *what, *says;
    gpupart_vulkan_desc v;
  } bad[4] = {{"a family out of range", "sparse_queue_family", v},
              {"user without lock", "sparse_queue_user", v},
              {"lock without queue", "without sparse_queue", v},
              {"no instance (gpupart's own device)", "adopted device only", v}};
  bad[0].v.sparse_queue_family = 99;
  bad[1].v.sparse_queue_lock = NULL;
  bad[2].v.sparse_queue = VK_NULL_HANDLE;
  bad[3].v.instance = VK_NULL_HANDLE;
  bad[3].v.physical_device = VK_NULL_HANDLE;
  bad[3].v.device = VK_NULL_HANDLE;
  for (int i = 0; i < 4; i++) {
    gpupart_device_desc d = {
        .backend = GPUPART_BACKEND_VULKAN, .backend_desc = &bad[i].v, .backend_desc_size = sizeof bad[i].v};
    dev = (gpupart_device *)1;
    cr_expect_eq(gpupart_device_open(r.ctx, &d, &dev), GPUPART_EINVAL, "%s", bad[i].what);
    cr_expect_null(dev, "%s", bad[i].what);
    cr_expect_not_null(strstr(gpupart_last_error(), bad[i].says), "%s: %s", bad[i].what, gpupart_last_error());
  }
  close_adopted(&ad, &r);
}
