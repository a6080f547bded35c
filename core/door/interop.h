/* What the native interop functions of a backend (gpupart_opencl_buffer,
 * gpupart_vulkan_memory, gpupart_cuda_ptr, ...) may ask of the core: the backend's own
 * device object behind a public handle, an allocation's placement, and a per-allocation
 * "view" (an OpenCL sub-buffer, a VkBuffer) that is created on first use, cached with the
 * allocation, and released through the backend's view_release when the allocation is
 * freed. Backends include this and core/base/backend.h, nothing else of the core. Each
 * takes fn, the public function asking without its gpupart_ prefix ("cuda_ptr"), which
 * its messages name first, as the rest of the API does ("cuda_ptr: allocation is NULL"). */
#ifndef GPUPART_CORE_INTEROP_H
#define GPUPART_CORE_INTEROP_H

#include "gpupart.h"

/* The backend device object (what ops->open returned) when dev was opened through
 * backend b; NULL (with the thread's message set) otherwise. */
void *gpupart__device_native(const char *fn, const gpupart_device *dev, gpupart_backend b);

/* The backend device object of the device that allocation a belongs to, when it was
 * opened through backend b; NULL (message set) for NULL, freed, or another backend. */
void *gpupart__allocation_device(const char *fn, const gpupart_allocation *a, gpupart_backend b);

/* Where live allocation a of backend b is (what gpupart_allocation_get_info says), and
 * whether it lies in an expandable partition's reserved range (*in_range 1: info's
 * native_block is what vm_reserve made) or in a block (0). EINVAL (message set) for NULL,
 * freed, or another backend. */
int gpupart__allocation_place(const char *fn, const gpupart_allocation *a, gpupart_backend b,
                              gpupart_allocation_info *info, int *in_range);

/* Builds a view of a live allocation. Runs with no gpupart lock held (it may block in the
 * driver) but must not call back into gpupart; two threads may build a view of the same
 * allocation at once, and the one not kept is released through the backend's
 * view_release. Returns NULL (message set) on failure. */
typedef void *(*gpupart__view_fn)(void *backend_dev, const gpupart_allocation_info *info, void *user);

/* The allocation's cached view, made with make on first use. NULL (message set) when a
 * is NULL or freed, belongs to a device of another backend than b, or make fails. */
void *gpupart__allocation_view(const char *fn, const gpupart_allocation *a, gpupart_backend b, gpupart__view_fn make,
                               void *user);

#endif
