/* The core's side of the native interop headers: mapping public handles to the backend's
 * own objects, and the per-allocation view cache (see interop.h). */
#include "interop.h"

#include "internal.h"

void *gpupart__device_native(const gpupart_device *dev, gpupart_backend b) {
  if (!dev) return gpupart__fail(GPUPART_EINVAL, "device is NULL"), NULL;
  if (dev->info.backend != b)
    return gpupart__fail(GPUPART_EINVAL, "device is a %s device, not %s", gpupart_backend_name(dev->info.backend),
                         gpupart_backend_name(b)), NULL;
  return dev->bdev;
}

/* The partition of a live allocation of backend b, locked; NULL (message set) otherwise. */
static gpupart_partition *lock_live(const gpupart_allocation *a, gpupart_backend b) {
  if (!a) return gpupart__fail(GPUPART_EINVAL, "allocation is NULL"), NULL;
  gpupart_partition *p = gpupart__partition_of(a);
  if (!gpupart__device_native(p->dev, b)) return NULL;
  gpupart__lock_acquire(&p->lock);
  if (gpupart__handle_live(a)) return p;
  gpupart__lock_release(&p->lock);
  return gpupart__fail(GPUPART_EINVAL, "allocation %p was freed", (const void *)a), NULL;
}

void *gpupart__allocation_device(const gpupart_allocation *a, gpupart_backend b) {
  gpupart_partition *p = lock_live(a, b);
  if (!p) return NULL;
  gpupart__lock_release(&p->lock);
  return p->dev->bdev;
}

void *gpupart__allocation_view(const gpupart_allocation *a, gpupart_backend b, gpupart__view_fn make, void *user) {
  gpupart_partition *p = lock_live(a, b);
  if (!p) return NULL;
  gpupart__range *r = gpupart__range_of(a);
  if (!r->user_ext && !GPUPART__BACKEND_OP(p->dev->ops, view_release)) {
    gpupart__lock_release(&p->lock); /* a view it could not release would leak */
    return gpupart__fail(GPUPART_ENOTSUP, "backend '%s' makes no views (no view_release)", p->dev->ops->name), NULL;
  }
  if (!r->user_ext) {
    gpupart_allocation_info info;
    gpupart__range_info(p, r, &info);
    r->user_ext = make(p->dev->bdev, &info, user);
  }
  void *view = r->user_ext;
  gpupart__lock_release(&p->lock);
  return view;
}
