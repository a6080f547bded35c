/* The core's side of the native interop headers: mapping public handles to the backend's
 * own objects, and the per-allocation view cache (see interop.h). */
#include "interop.h"

#include "alloc.h"
#include "error.h"
#include "internal.h"

void *gpupart__device_native(const char *fn, const gpupart_device *dev, gpupart_backend b) {
  if (!dev) {
    gpupart__fail(GPUPART_EINVAL, "%s: device is NULL", fn);
    return NULL;
  }
  if (dev->info.backend != b) {
    gpupart__fail(GPUPART_EINVAL, "%s: device is a %s device, not %s", fn, gpupart_backend_name(dev->info.backend),
                  gpupart_backend_name(b));
    return NULL;
  }
  return dev->bdev;
}

/* The partition of a live allocation of backend b, locked; NULL (message set) otherwise. */
static gpupart_partition *lock_live(const char *fn, const gpupart_allocation *a, gpupart_backend b) {
  if (!a) {
    gpupart__fail(GPUPART_EINVAL, "%s: allocation is NULL", fn);
    return NULL;
  }
  gpupart_partition *p = gpupart__partition_of(a);
  if (!gpupart__device_native(fn, p->dev, b)) return NULL;
  gpupart__lock_acquire(&p->lock);
  if (gpupart__handle_live(a)) return p;
  gpupart__lock_release(&p->lock);
  gpupart__fail(GPUPART_EINVAL, "%s: allocation %p was freed", fn, (const void *)a);
  return NULL;
}

void *gpupart__allocation_device(const char *fn, const gpupart_allocation *a, gpupart_backend b) {
  gpupart_partition *p = lock_live(fn, a, b);
  if (!p) return NULL;
  gpupart__lock_release(&p->lock);
  return p->dev->bdev;
}

int gpupart__allocation_place(const char *fn, const gpupart_allocation *a, gpupart_backend b,
                              gpupart_allocation_info *info, int *in_range) {
  gpupart_partition *p = lock_live(fn, a, b);
  if (!p) return GPUPART_EINVAL;
  gpupart__range_info(p, gpupart__range_of(a), info);
  *in_range = p->arena.vm != NULL;
  gpupart__lock_release(&p->lock);
  return GPUPART_OK;
}

/* Installs made on a's range unless a was freed meanwhile (the handle's generation tells)
 * or another thread installed one first; returns the view a now has, NULL when freed.
 * A view that lost is released, with no lock held. */
static void *install_view(const char *fn, gpupart_partition *p, const gpupart_allocation *a, void *made) {
  gpupart__lock_acquire(&p->lock);
  int live = gpupart__handle_live(a);
  gpupart__range *r = gpupart__range_of(a);
  if (live && !r->user_ext) r->user_ext = made;
  void *view = live ? r->user_ext : NULL;
  gpupart__lock_release(&p->lock);
  if (view != made) p->dev->ops->view_release(p->dev->bdev, made);
  if (!live) {
    gpupart__fail(GPUPART_EINVAL, "%s: allocation %p was freed while its view was made", fn, (const void *)a);
    return NULL;
  }
  return view;
}

/* The view is built with no gpupart lock held (an OpenCL sub-buffer or a VkBuffer is a
 * driver call) and installed under the partition lock after a recheck; of two threads
 * that built one at once, the loser's view is released. A backend without view_release
 * cannot make views: one it could not release would leak (ENOTSUP). */
void *gpupart__allocation_view(const char *fn, const gpupart_allocation *a, gpupart_backend b, gpupart__view_fn make,
                               void *user) {
  gpupart_partition *p = lock_live(fn, a, b);
  if (!p) return NULL;
  gpupart__range *r = gpupart__range_of(a);
  void *view = r->user_ext;
  gpupart_allocation_info info;
  if (!view) gpupart__range_info(p, r, &info);
  gpupart__lock_release(&p->lock);
  if (view) return view;
  if (!GPUPART__BACKEND_OP(p->dev->ops, view_release)) {
    gpupart__fail(GPUPART_ENOTSUP, "%s: backend '%s' makes no views (no view_release)", fn, p->dev->ops->name);
    return NULL;
  }
  void *made = make(p->dev->bdev, &info, user);
  return made ? install_view(fn, p, a, made) : NULL;
}
