/* The driver's side of an expandable partition: one address range reserved once, and the
 * chunks of physical memory mapped into it from offset 0 upwards. The arena decides how
 * much to map and when to give it back; this file only keeps the stack of chunks and
 * calls the backend's vm_* entries (core/base/backend.h) in the order a driver needs:
 * reserve before any map, unmap every chunk (top first) before the range goes. */
#include "vmspace.h"

#include <string.h>

#include "error.h"

static int has_vm(const gpupart_backend_ops *ops) {
  return (ops->caps & GPUPART__CAP_VM) && GPUPART__BACKEND_OP(ops, vm_granule) &&
         GPUPART__BACKEND_OP(ops, vm_reserve) && GPUPART__BACKEND_OP(ops, vm_unreserve) &&
         GPUPART__BACKEND_OP(ops, vm_map) && GPUPART__BACKEND_OP(ops, vm_unmap);
}

int gpupart__vm_granule(const gpupart_backend_ops *ops, void *bdev, uint64_t *granule) {
  if (!has_vm(ops)) return gpupart__fail(GPUPART_ENOTSUP, "backend '%s' has no virtual memory", ops->name);
  uint64_t g = 0;
  int rc = ops->vm_granule(bdev, &g);
  if (rc) return rc;
  if (!g || (g & (g - 1)))
    return gpupart__fail(GPUPART_EBACKEND, "backend '%s' reports a virtual memory granule of %llu", ops->name,
                         (unsigned long long)g);
  *granule = g;
  return GPUPART_OK;
}

int gpupart__vm_open(gpupart__vmspace *vs, const gpupart_backend_ops *ops, void *bdev, const gpupart__hostmem *mem,
                     uint64_t size) {
  *vs = (gpupart__vmspace){.ops = ops, .bdev = bdev, .mem = mem};
  int rc = gpupart__vm_granule(ops, bdev, &vs->granule);
  if (rc) return rc;
  uint64_t g = vs->granule, rounded;
  if (!size || __builtin_add_overflow(size, g - 1, &rounded))
    return gpupart__fail(GPUPART_EINVAL, "virtual memory: a range of %llu bytes", (unsigned long long)size);
  return ops->vm_reserve(bdev, rounded & ~(g - 1), &vs->range);
}

/* Room for one more chunk, taken before the driver is called. */
static int make_room(gpupart__vmspace *vs) {
  if (vs->count < vs->cap) return GPUPART_OK;
  uint32_t cap = vs->cap ? vs->cap * 2 : 16;
  gpupart__vm_chunk *c = gpupart__host_calloc(vs->mem, cap, sizeof *c);
  if (!c) return gpupart__fail(GPUPART_ENOMEM, "virtual memory: out of host memory");
  if (vs->count) memcpy(c, vs->chunks, vs->count * sizeof *c);
  gpupart__host_free(vs->mem, vs->chunks);
  vs->chunks = c;
  vs->cap = cap;
  return GPUPART_OK;
}

int gpupart__vm_map(gpupart__vmspace *vs, uint64_t bytes) {
  if (!bytes || bytes & (vs->granule - 1) || bytes > vs->range.size - vs->mapped)
    return gpupart__fail(GPUPART_EINVAL, "virtual memory: cannot map %llu bytes at %llu of a %llu-byte range",
                         (unsigned long long)bytes, (unsigned long long)vs->mapped, (unsigned long long)vs->range.size);
  int rc = make_room(vs);
  void *handle = NULL;
  if (rc == GPUPART_OK) rc = vs->ops->vm_map(vs->bdev, &vs->range, vs->mapped, bytes, &handle);
  if (rc) return rc;
  vs->chunks[vs->count++] = (gpupart__vm_chunk){vs->mapped, bytes, handle};
  vs->mapped += bytes;
  vs->maps++;
  return GPUPART_OK;
}

const gpupart__vm_chunk *gpupart__vm_top(const gpupart__vmspace *vs) {
  return vs->count ? &vs->chunks[vs->count - 1] : NULL;
}

void gpupart__vm_unmap_top(gpupart__vmspace *vs) {
  if (!vs->count) return;
  gpupart__vm_chunk c = vs->chunks[--vs->count];
  vs->ops->vm_unmap(vs->bdev, &vs->range, c.offset, c.size, c.handle);
  vs->mapped = c.offset;
  vs->unmaps++;
}

void gpupart__vm_close(gpupart__vmspace *vs) {
  if (!vs->ops) return;
  while (vs->count) gpupart__vm_unmap_top(vs);
  if (vs->range.size) vs->ops->vm_unreserve(vs->bdev, &vs->range);
  gpupart__host_free(vs->mem, vs->chunks);
  *vs = (gpupart__vmspace){0};
}
