/* A standalone probe of Vulkan sparse binding, the mechanism of the Vulkan backend's
 * expandable partitions (issue 26): one sparse VkBuffer whose pages are bound to
 * separately allocated VkDeviceMemory with vkQueueBindSparse, unbound (memory
 * VK_NULL_HANDLE) and rebound, while transfer commands and a compute shader use the
 * buffer's bound ranges, every byte checked on the host. It uses neither gpupart nor
 * Criterion: it runs on whatever Vulkan driver the loader is given, under the
 * validation layer with errors fatal (tests/vk_layer_settings.txt makes each one raise
 * SIGTRAP; a debug messenger counts them too).
 *
 * Buffer pages (P = the sparse block size, the buffer's memory alignment):
 *   [0,2)  memory A        [2,4)  memory D, later replaced by D2 without unbinding
 *   [4,6)  memory B, unbound and freed, then memory E     [8,10) memory C at offset 2P
 *   the rest never bound (readable, undefined, with sparseResidencyBuffer)
 *
 * Exit status: 0 every check passed; 1 a failure (printed); 77 (skipped) when no device
 * here has sparse binding, unless GPUPART_TEST_SPARSE_ICD names an ICD file that exists:
 * then the fetched lavapipe (scripts/fetch-lavapipe-sparse) was meant to run, and its
 * absence of sparse binding is a failure. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "vulkan_base.h"

static const uint32_t probe_spirv[] =
#include "sparse_probe.spv.h"
    ;

#define PAGES 16
#define SEED 1000u
#define FILL_A 7u
#define FILL_B 0xb0b0b0b0u
#define FILL_C 0xc1c1c1c1u
#define FILL_E 0xe0e0e0e0u
#define FILL_D2 5u

typedef struct probe {
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  VkPhysicalDevice physical;
  VkDevice device;
  uint32_t family; /* sparse binding, compute and transfer */
  VkQueue queue;
  VkCommandPool pool;
  VkFence fence;
  VkBuffer sparse, staging;
  VkDeviceMemory staging_memory, a, b, c, d, d2, e;
  uint32_t *host;    /* the staging buffer, mapped */
  VkDeviceSize page; /* the sparse block size */
  uint32_t type;     /* the memory type bound to the sparse buffer */
  int host_visible;  /* ... which the host can map */
  int errors;        /* validation errors counted by the messenger */
} probe;

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sparse binding probe: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

#define CHECK(call)                                         \
  do {                                                      \
    VkResult r_ = (call);                                   \
    if (r_ != VK_SUCCESS) return fail("%s: %d", #call, r_); \
  } while (0)

/* ---- instance, device ----------------------------------------------------------------- */

/* 0 made, 77 no driver here, 1 failure. */
static int make_instance(probe *p) {
  if (!vkb_has_validation()) return fail(VKB_VALIDATION " is not installed (Debian: vulkan-validationlayers)");
  const char *call = NULL;
  VkResult r = vkb_instance_create("gpupart sparse probe", &p->errors, &p->instance, &p->messenger, &call);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return 77;
  return r == VK_SUCCESS ? 0 : fail("%s: %d", call, r);
}

/* The family with sparse binding and compute (transfer is implied), or UINT32_MAX. A
 * device whose sparse queue has no compute would need a second queue, a semaphore
 * between the bind and the use, and a VK_SHARING_MODE_CONCURRENT buffer. */
static uint32_t sparse_family(VkPhysicalDevice pd) {
  VkQueueFamilyProperties q[16];
  uint32_t n = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
  VkQueueFlags want = VK_QUEUE_SPARSE_BINDING_BIT | VK_QUEUE_COMPUTE_BIT;
  for (uint32_t i = 0; i < n; i++)
    if ((q[i].queueFlags & want) == want) return i;
  return UINT32_MAX;
}

static int has_sparse(VkPhysicalDevice pd) {
  VkPhysicalDeviceFeatures f;
  vkGetPhysicalDeviceFeatures(pd, &f);
  return f.sparseBinding && f.sparseResidencyBuffer && sparse_family(pd) != UINT32_MAX;
}

static void describe(VkPhysicalDevice pd) {
  VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &drv};
  vkGetPhysicalDeviceProperties2(pd, &pr);
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  const VkPhysicalDeviceLimits *l = &pr.properties.limits;
  printf("device: %s (%s %s)\n", pr.properties.deviceName, drv.driverName, drv.driverInfo);
  printf("sparseAddressSpaceSize %llu, residencyNonResidentStrict %u, maxStorageBufferRange %u, "
         "minStorageBufferOffsetAlignment %llu\n",
         (unsigned long long)l->sparseAddressSpaceSize, pr.properties.sparseProperties.residencyNonResidentStrict,
         l->maxStorageBufferRange, (unsigned long long)l->minStorageBufferOffsetAlignment);
  for (uint32_t i = 0; i < mem.memoryHeapCount; i++)
    printf("heap %u: %llu bytes, flags 0x%x\n", i, (unsigned long long)mem.memoryHeaps[i].size,
           mem.memoryHeaps[i].flags);
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++)
    printf("memory type %u: heap %u, flags 0x%x\n", i, mem.memoryTypes[i].heapIndex, mem.memoryTypes[i].propertyFlags);
}

/* 0 found, 77 none, 1 failure. */
static int pick_device(probe *p) {
  VkPhysicalDevice pds[8];
  uint32_t n = 8;
  VkResult r = vkEnumeratePhysicalDevices(p->instance, &n, pds);
  if (r < VK_SUCCESS) return fail("vkEnumeratePhysicalDevices: %d", r);
  for (uint32_t i = 0; i < n; i++) {
    describe(pds[i]);
    if (!has_sparse(pds[i])) continue;
    p->physical = pds[i];
    p->family = sparse_family(pds[i]);
    return 0;
  }
  return 77;
}

static int make_device(probe *p) {
  float priority = 1.0f;
  VkPhysicalDeviceFeatures f = {.sparseBinding = VK_TRUE, .sparseResidencyBuffer = VK_TRUE};
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                               .queueFamilyIndex = p->family,
                               .queueCount = 1,
                               .pQueuePriorities = &priority};
  VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                           .queueCreateInfoCount = 1,
                           .pQueueCreateInfos = &q,
                           .pEnabledFeatures = &f};
  CHECK(vkCreateDevice(p->physical, &ci, NULL, &p->device));
  vkGetDeviceQueue(p->device, p->family, 0, &p->queue);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = p->family};
  CHECK(vkCreateCommandPool(p->device, &pi, NULL, &p->pool));
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  CHECK(vkCreateFence(p->device, &fi, NULL, &p->fence));
  return 0;
}

/* ---- buffers and memory --------------------------------------------------------------- */

/* The memory type for the sparse pages: device-local where allowed (then host-visible
 * too where there is such a type: lavapipe's only type is both, so the test can read
 * the pages through vkMapMemory as well). */
static int pick_type(probe *p, uint32_t allowed) {
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(p->physical, &mem);
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = mem.memoryTypes[i].propertyFlags;
    int score = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? 2 : 0) + (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT ? 1 : 0);
    if ((allowed & (1u << i)) && !(f & VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT) && score > best_score) {
      best = (int)i;
      best_score = score;
    }
  }
  if (best < 0) return fail("no memory type in the sparse buffer's memoryTypeBits 0x%x", allowed);
  p->type = (uint32_t)best;
  p->host_visible = (mem.memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
                    (mem.memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  return 0;
}

/* The sparse buffer: its page is the memory alignment it reports, its size PAGES pages
 * (created once to learn the page, again at the size). */
static int make_sparse_buffer(probe *p) {
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .flags = VK_BUFFER_CREATE_SPARSE_BINDING_BIT | VK_BUFFER_CREATE_SPARSE_RESIDENCY_BIT,
                           .size = 1,
                           .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
                                    VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkMemoryRequirements req;
  CHECK(vkCreateBuffer(p->device, &bi, NULL, &p->sparse));
  vkGetBufferMemoryRequirements(p->device, p->sparse, &req);
  vkDestroyBuffer(p->device, p->sparse, NULL);
  p->page = req.alignment;
  bi.size = PAGES * p->page;
  CHECK(vkCreateBuffer(p->device, &bi, NULL, &p->sparse));
  vkGetBufferMemoryRequirements(p->device, p->sparse, &req);
  printf("sparse buffer of %llu bytes: alignment (sparse block size) %llu, size %llu, memoryTypeBits 0x%x\n",
         (unsigned long long)bi.size, (unsigned long long)req.alignment, (unsigned long long)req.size,
         req.memoryTypeBits);
  if (req.alignment != p->page || req.size != bi.size) return fail("the block size changed with the buffer's size");
  return pick_type(p, req.memoryTypeBits);
}

static int allocate(probe *p, VkDeviceSize pages, VkDeviceMemory *m) {
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = pages * p->page, .memoryTypeIndex = p->type};
  CHECK(vkAllocateMemory(p->device, &ai, NULL, m));
  return 0;
}

static int make_staging(probe *p) {
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = PAGES * p->page,
                           .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT};
  CHECK(vkCreateBuffer(p->device, &bi, NULL, &p->staging));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(p->device, p->staging, &req);
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(p->physical, &mem);
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < mem.memoryTypeCount && type == UINT32_MAX; i++)
    if ((req.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) type = i;
  if (type == UINT32_MAX) return fail("no host-visible coherent memory for the staging buffer");
  VkMemoryAllocateInfo ai = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
  CHECK(vkAllocateMemory(p->device, &ai, NULL, &p->staging_memory));
  CHECK(vkBindBufferMemory(p->device, p->staging, p->staging_memory, 0));
  CHECK(vkMapMemory(p->device, p->staging_memory, 0, VK_WHOLE_SIZE, 0, (void **)&p->host));
  return 0;
}

/* ---- binding -------------------------------------------------------------------------- */

typedef struct bind {
  VkDeviceSize page, pages; /* in the buffer */
  VkDeviceMemory memory;    /* VK_NULL_HANDLE unbinds */
  VkDeviceSize memory_page; /* in the memory */
} bind;

/* Binds (or unbinds) on the sparse queue and waits: sparse binds are not ordered with
 * command buffer submissions, so the fence (or a semaphore) is what orders them. */
static int bind_pages(probe *p, const bind *list, uint32_t n) {
  VkSparseMemoryBind binds[8];
  for (uint32_t i = 0; i < n && i < 8; i++)
    binds[i] = (VkSparseMemoryBind){.resourceOffset = list[i].page * p->page,
                                    .size = list[i].pages * p->page,
                                    .memory = list[i].memory,
                                    .memoryOffset = list[i].memory_page * p->page};
  VkSparseBufferMemoryBindInfo sb = {.buffer = p->sparse, .bindCount = n, .pBinds = binds};
  VkBindSparseInfo info = {.sType = VK_STRUCTURE_TYPE_BIND_SPARSE_INFO, .bufferBindCount = 1, .pBufferBinds = &sb};
  CHECK(vkQueueBindSparse(p->queue, 1, &info, p->fence));
  CHECK(vkWaitForFences(p->device, 1, &p->fence, VK_TRUE, UINT64_MAX));
  CHECK(vkResetFences(p->device, 1, &p->fence));
  return 0;
}

/* ---- commands ------------------------------------------------------------------------- */

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags src, VkPipelineStageFlags to,
                    VkAccessFlags dst) {
  VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src, .dstAccessMask = dst};
  vkCmdPipelineBarrier(cb, from, to, 0, 1, &b, 0, NULL, 0, NULL);
}

static int begin(probe *p, VkCommandBuffer *cb) {
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = p->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  CHECK(vkAllocateCommandBuffers(p->device, &ai, cb));
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  CHECK(vkBeginCommandBuffer(*cb, &bi));
  return 0;
}

/* Copies the whole sparse buffer (its unbound pages read as undefined, which
 * sparseResidencyBuffer allows) to the staging buffer, submits and waits. */
static int finish(probe *p, VkCommandBuffer cb) {
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT);
  VkBufferCopy all = {.size = PAGES * p->page};
  vkCmdCopyBuffer(cb, p->sparse, p->staging, 1, &all);
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);
  CHECK(vkEndCommandBuffer(cb));
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
  CHECK(vkQueueSubmit(p->queue, 1, &si, p->fence));
  CHECK(vkWaitForFences(p->device, 1, &p->fence, VK_TRUE, UINT64_MAX));
  CHECK(vkResetFences(p->device, 1, &p->fence));
  vkFreeCommandBuffers(p->device, p->pool, 1, &cb);
  return 0;
}

static void fill(probe *p, VkCommandBuffer cb, VkDeviceSize page, VkDeviceSize pages, uint32_t value) {
  vkCmdFillBuffer(cb, p->sparse, page * p->page, pages * p->page, value);
}

/* The compute pipeline that runs sparse_probe.comp over one descriptor range. */
typedef struct compute {
  vkb_compute pipe;
  VkDescriptorPool pool;
  VkDescriptorSet set;
} compute;

static int make_pipeline(probe *p, compute *c) {
  const char *call = NULL;
  VkResult r = vkb_compute_create(p->device, probe_spirv, sizeof probe_spirv, 2 * sizeof(uint32_t), &c->pipe, &call);
  return r == VK_SUCCESS ? 0 : fail("%s: %d", call, r);
}

/* One descriptor on [offset, offset + range) of the sparse buffer. */
static int make_set(probe *p, compute *c, VkDeviceSize offset, VkDeviceSize range) {
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1};
  VkDescriptorPoolCreateInfo pi = {
      .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &size};
  CHECK(vkCreateDescriptorPool(p->device, &pi, NULL, &c->pool));
  VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                    .descriptorPool = c->pool,
                                    .descriptorSetCount = 1,
                                    .pSetLayouts = &c->pipe.set_layout};
  CHECK(vkAllocateDescriptorSets(p->device, &ai, &c->set));
  VkDescriptorBufferInfo info = {.buffer = p->sparse, .offset = offset, .range = range};
  VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                            .dstSet = c->set,
                            .descriptorCount = 1,
                            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                            .pBufferInfo = &info};
  vkUpdateDescriptorSets(p->device, 1, &w, 0, NULL);
  return 0;
}

static void destroy_compute(probe *p, compute *c) {
  vkDestroyDescriptorPool(p->device, c->pool, NULL);
  vkb_compute_destroy(p->device, &c->pipe);
}

/* ---- checks --------------------------------------------------------------------------- */

/* Whether the staging copy holds value in every word of pages [page, page + pages). */
static int expect_pages(probe *p, VkDeviceSize page, VkDeviceSize pages, uint32_t value, const char *what) {
  size_t words = (size_t)(p->page / 4);
  for (size_t i = (size_t)page * words; i < (size_t)(page + pages) * words; i++)
    if (p->host[i] != value) return fail("%s: word %zu is 0x%x, not 0x%x", what, i, p->host[i], value);
  return 0;
}

/* Whether words [first, first + count) of memory m (mapped by the host) hold what the
 * shader wrote at buffer word base + i: the bytes really live in that memory object. */
static int expect_memory(probe *p, VkDeviceMemory m, VkDeviceSize memory_page, size_t base, size_t count,
                         const char *what) {
  if (!p->host_visible) return 0;
  uint32_t *w = NULL;
  CHECK(vkMapMemory(p->device, m, memory_page * p->page, count * 4, 0, (void **)&w));
  int rc = 0;
  for (size_t i = 0; i < count && rc == 0; i++)
    if (w[i] != p->host[base + i])
      rc = fail("%s: memory word %zu is 0x%x, the buffer's 0x%x", what, i, w[i], p->host[base + i]);
  vkUnmapMemory(p->device, m);
  return rc;
}

/* ---- the probe ------------------------------------------------------------------------ */

/* Binds A, D, B and C; fills, copies and runs the shader over [P, 3P), across the border
 * between A and D; checks the buffer and the memory objects. */
static int first_pass(probe *p) {
  if (allocate(p, 2, &p->a) || allocate(p, 2, &p->b) || allocate(p, 4, &p->c) || allocate(p, 2, &p->d)) return 1;
  bind binds[] = {{0, 2, p->a, 0}, {2, 2, p->d, 0}, {4, 2, p->b, 0}, {8, 2, p->c, 2}};
  if (bind_pages(p, binds, 4)) return 1;
  compute c = {0};
  VkCommandBuffer cb;
  if (make_pipeline(p, &c) || make_set(p, &c, p->page, 2 * p->page) || begin(p, &cb)) return 1;
  fill(p, cb, 0, 4, FILL_A);
  fill(p, cb, 4, 2, FILL_B);
  fill(p, cb, 9, 1, FILL_C);
  barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  VkBufferCopy first = {.srcOffset = 0, .dstOffset = 8 * p->page, .size = p->page};
  vkCmdCopyBuffer(cb, p->sparse, p->sparse, 1, &first);
  uint32_t push[2] = {(uint32_t)(2 * p->page / 4), SEED};
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipe.pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipe.layout, 0, 1, &c.set, 0, NULL);
  vkCmdPushConstants(cb, c.pipe.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, push);
  vkCmdDispatch(cb, (push[0] + 63) / 64, 1, 1);
  int rc = finish(p, cb);
  destroy_compute(p, &c);
  size_t words = (size_t)(p->page / 4);
  for (size_t i = 0; rc == 0 && i < 2 * words; i++)
    if (p->host[words + i] != FILL_A * 2 + (uint32_t)i + SEED)
      rc = fail("shader: word %zu is %u, not %u", words + i, p->host[words + i], FILL_A * 2 + (uint32_t)i + SEED);
  if (rc == 0) rc = expect_pages(p, 0, 1, FILL_A, "fill before the shader's range");
  if (rc == 0) rc = expect_pages(p, 3, 1, FILL_A, "fill after the shader's range");
  if (rc == 0) rc = expect_pages(p, 4, 2, FILL_B, "fill of B");
  if (rc == 0) rc = expect_pages(p, 8, 1, FILL_A, "copy into C");
  if (rc == 0) rc = expect_pages(p, 9, 1, FILL_C, "fill of C");
  if (rc == 0) rc = expect_memory(p, p->d, 0, 2 * words, words, "memory D holds buffer page 2");
  if (rc == 0) rc = expect_memory(p, p->c, 2, 8 * words, 2 * words, "memory C at its page 2 holds buffer page 8");
  return rc;
}

/* Unbinds B (memory VK_NULL_HANDLE) and frees it, binds E there; binds D2 over D without
 * unbinding it; fills both and checks that the bytes went to E and D2, not to D. */
static int second_pass(probe *p) {
  bind unbind = {4, 2, VK_NULL_HANDLE, 0};
  if (bind_pages(p, &unbind, 1)) return 1;
  vkFreeMemory(p->device, p->b, NULL);
  p->b = VK_NULL_HANDLE;
  if (allocate(p, 2, &p->e) || allocate(p, 2, &p->d2)) return 1;
  bind rebinds[] = {{4, 2, p->e, 0}, {2, 2, p->d2, 0}};
  VkCommandBuffer cb;
  if (bind_pages(p, rebinds, 2) || begin(p, &cb)) return 1;
  fill(p, cb, 4, 2, FILL_E);
  fill(p, cb, 2, 2, FILL_D2);
  if (finish(p, cb)) return 1;
  int rc = expect_pages(p, 4, 2, FILL_E, "fill of E, bound where B was");
  if (rc == 0) rc = expect_pages(p, 2, 2, FILL_D2, "fill of D2, bound over D");
  if (rc == 0) rc = expect_pages(p, 8, 1, FILL_A, "C untouched");
  if (rc == 0) rc = expect_memory(p, p->d2, 0, 2 * (size_t)(p->page / 4), 2 * (size_t)(p->page / 4), "memory D2");
  uint32_t *w = NULL;
  if (rc == 0 && p->host_visible) { /* D keeps the shader's results: the fill went elsewhere */
    CHECK(vkMapMemory(p->device, p->d, 0, 4, 0, (void **)&w));
    if (*w != FILL_A * 2 + (uint32_t)(p->page / 4) + SEED) rc = fail("memory D was written after D2 replaced it");
    vkUnmapMemory(p->device, p->d);
  }
  return rc;
}

static void teardown(probe *p) {
  if (p->device) {
    vkDeviceWaitIdle(p->device);
    vkDestroyBuffer(p->device, p->sparse, NULL);
    vkDestroyBuffer(p->device, p->staging, NULL);
    VkDeviceMemory all[] = {p->staging_memory, p->a, p->b, p->c, p->d, p->d2, p->e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) vkFreeMemory(p->device, all[i], NULL);
    vkDestroyFence(p->device, p->fence, NULL);
    vkDestroyCommandPool(p->device, p->pool, NULL);
    vkDestroyDevice(p->device, NULL);
  }
  vkb_instance_destroy(p->instance, p->messenger);
}

/* Where a fetched driver was meant to run, not finding sparse binding is a failure. */
static int none_here(void) {
  const char *icd = getenv("GPUPART_TEST_SPARSE_ICD");
  if (icd && *icd && access(icd, R_OK) == 0)
    return fail("%s was fetched for its sparse binding, and no device here has it", icd);
  printf("no Vulkan device here has sparseBinding, sparseResidencyBuffer and a sparse-binding compute queue%s%s\n",
         icd && *icd ? ": run scripts/fetch-lavapipe-sparse to make " : "", icd && *icd ? icd : "");
  return 77;
}

int main(void) {
  probe p = {0};
  int rc = make_instance(&p);
  if (rc == 0) rc = pick_device(&p);
  if (rc == 77) rc = none_here();
  if (rc == 0) rc = make_device(&p);
  if (rc == 0) rc = make_sparse_buffer(&p);
  if (rc == 0) rc = make_staging(&p);
  if (rc == 0) rc = first_pass(&p);
  if (rc == 0) rc = second_pass(&p);
  teardown(&p);
  if (p.errors) rc = fail("%d validation errors", p.errors);
  if (rc == 0)
    printf("sparse binding probe: every check passed (page %llu bytes, memory type %u%s)\n", (unsigned long long)p.page,
           p.type, p.host_visible ? ", host-visible" : "");
  return rc;
}
