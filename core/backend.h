/* The backend contract: the small, flat table of operations that every driver family
 * implements (sim, opencl, vulkan, cuda). Backends hand out and take back large blocks
 * and answer queries; every policy lives in core/. A backend includes this header and
 * its vendor's, never another backend's. The table is versioned: the core refuses a table
 * whose abi_version differs from GPUPART__BACKEND_ABI. */
#ifndef GPUPART_CORE_BACKEND_H
#define GPUPART_CORE_BACKEND_H

#include <stdint.h>

#include "gpupart.h"

#define GPUPART__BACKEND_ABI 1u

/* One driver allocation. The backend fills it in block_alloc and receives it back,
 * unchanged, in block_free. */
typedef struct gpupart_block {
  uint64_t size;           /* bytes actually allocated (>= the size asked for) */
  uint64_t device_address; /* address of byte 0 where the backend has one, else 0 */
  void *native;            /* CUdeviceptr base, VkDeviceMemory, cl_mem, or sim base */
  void *backend_data;      /* the backend's own bookkeeping for this block */
} gpupart_block;

/* Lock rules (which core lock is held when the core calls each entry):
 *   load                            the context lock (once per context and backend)
 *   unload                          none (the context is being destroyed)
 *   enumerate, open, close, info    none (the backend locks what it shares itself)
 *   block_alloc, block_free         the device's slow (sleeping) lock; NEVER a partition
 *                                   spinlock: other threads keep allocating from the
 *                                   partition's held blocks meanwhile
 *   mem_info                        none (may run concurrently with anything)
 *   view construction (the make function given to gpupart__allocation_view) and
 *   view_release                    none (view_release runs after the allocation was
 *                                   unlinked, or for the loser of two concurrent makes)
 * A backend may block in any call; it must not call back into gpupart. */
typedef struct gpupart_backend_ops {
  uint32_t abi_version; /* first field, checked at registration */
  const char *name;     /* "sim", "opencl", "vulkan", "cuda" */
  /* dlopen + symbol lookup. library: the path the user named (GPUPART_<BACKEND>_LIBRARY),
   * or NULL for the system's library (e.g. "libOpenCL.so.1", then "libOpenCL.so").
   * ENOBACKEND (the message names the library and dlerror()) if it cannot be loaded. */
  int (*load)(const char *library, void **state);
  void (*unload)(void *state);
  /* *count in: capacity of out (ignored when out is NULL); out: devices present. */
  int (*enumerate)(void *state, gpupart_device_info *out, uint32_t *count);
  /* native_desc: the backend's own descriptor (gpupart_sim_desc, adopted handles), or NULL. */
  int (*open)(void *state, uint32_t index, const void *native_desc, void **dev);
  void (*close)(void *dev);
  /* The device's info as enumerate reports it. */
  int (*info)(void *dev, gpupart_device_info *out);
  /* free_bytes may be UINT64_MAX when the driver cannot tell. */
  int (*mem_info)(void *dev, uint64_t *free_bytes, uint64_t *total_bytes);
  /* size is a multiple of the device's min_alignment. EDEVMEM when the driver refuses
   * memory, EBACKEND for other driver failures; the message carries the driver's code. */
  int (*block_alloc)(void *dev, uint64_t size, gpupart_block *out);
  void (*block_free)(void *dev, gpupart_block *block);
  /* Optional (NULL = the backend makes no views): releases a per-allocation view made
   * through gpupart__allocation_view (core/interop.h) when its allocation is freed. Runs
   * with no gpupart lock held. */
  void (*view_release)(void *dev, void *view);
} gpupart_backend_ops;

/* The tables of the backends this build contains; NULL for one that was not built. */
const gpupart_backend_ops *gpupart__backend_ops(gpupart_backend b);

#endif
