/* The backend contract: the small, flat table of operations that every driver family
 * implements (sim, opencl, vulkan, cuda). Backends hand out and take back large blocks
 * and answer queries; every policy lives in core/. A backend includes this header and
 * its vendor's, never another backend's. The table is versioned twice: abi_version must
 * equal GPUPART__BACKEND_ABI (the meaning of the required entries), and struct_size says
 * how much of the table the backend was built with, so optional entries appended later
 * read as NULL for an older backend (GPUPART__BACKEND_OP). See docs/design.md, "The
 * backend contract". */
#ifndef GPUPART_CORE_BACKEND_H
#define GPUPART_CORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpupart.h"
#include "hostmem.h"

#define GPUPART__BACKEND_ABI 2u

/* What the core lends a backend at load: the context's host allocator. Every host
 * allocation a backend makes (device objects, block bookkeeping, name strings) goes
 * through env->mem (gpupart__host_calloc / gpupart__host_free), never malloc. The
 * pointer stays valid until unload. */
typedef struct gpupart__backend_env {
  const gpupart__hostmem *mem;
  uint64_t sim_total; /* the sim_total option (GPUPART_SIM_TOTAL, or the file's key), as the
                         context's configuration resolved it: the sim backend's size of a
                         device whose descriptor leaves total_bytes 0 (the core never reads
                         a backend's descriptor, so the default is applied there) */
} gpupart__backend_env;

/* Capability bits of a backend table (ops->caps). */
#define GPUPART__CAP_FREE_MEMORY 0x01u    /* mem_info reports the driver's free bytes */
#define GPUPART__CAP_DEVICE_ADDRESS 0x02u /* blocks carry a device address */
#define GPUPART__CAP_HOST_POINTER 0x04u   /* some blocks are host-mapped (block.host_pointer) */
#define GPUPART__CAP_VIEWS 0x08u          /* per-allocation views; view_release is set */
#define GPUPART__CAP_IDENTITY 0x10u       /* info.uuid (or pci_bus_id) names the physical GPU */
#define GPUPART__CAP_VM 0x20u             /* the vm_* entries are set: expandable partitions */

/* One driver allocation. block_alloc fills it; block_free receives it back unchanged. */
typedef struct gpupart_block {
  uint64_t size;           /* bytes the driver actually allocated (>= asked); the core
                              accounts this size, not the size it asked for */
  uint64_t device_address; /* address of byte 0 where the backend has one, else 0 */
  void *native;            /* CUdeviceptr base, VkDeviceMemory, cl_mem, or sim base */
  void *host_pointer;      /* host mapping of byte 0, or NULL */
  void *backend_data;      /* the backend's own bookkeeping for this block */
} gpupart_block;

/* Lock rules (which core lock is held when the core calls each entry):
 *   load                            the context lock (once per context and backend)
 *   unload                          none (the context is being destroyed)
 *   enumerate, open, close, info    none (the backend locks what it shares itself)
 *   block_alloc, block_free, trim   the device's slow (sleeping) lock; NEVER a partition
 *                                   spinlock: other threads keep allocating from the
 *                                   partition's held blocks meanwhile
 *   mem_info                        none (may run concurrently with anything)
 *   vm_granule                      none
 *   vm_reserve, vm_unreserve,
 *   vm_map, vm_unmap                the device's slow lock, never a partition spinlock
 *   view construction (the make function given to gpupart__allocation_view) and
 *   view_release                    none (view_release runs after the allocation was
 *                                   unlinked, or for the loser of two concurrent makes)
 * A backend may block in any call; it must not call back into gpupart. */
typedef struct gpupart_backend_ops {
  uint32_t abi_version; /* GPUPART__BACKEND_ABI; checked at registration */
  uint32_t struct_size; /* sizeof(gpupart_backend_ops) the backend was built with: entries
                           past it are treated as NULL (versioned optional operations) */
  const char *name;     /* "sim", "opencl", "vulkan", "cuda" */
  gpupart_backend id;   /* GPUPART_BACKEND_* */
  uint32_t caps;        /* GPUPART__CAP_* */
  /* --- required --- */
  /* dlopen + symbol lookup. library: the path the user named (GPUPART_<BACKEND>_LIBRARY),
   * or NULL for the system's. ENOBACKEND (message names the library and dlerror()). */
  int (*load)(const gpupart__backend_env *env, const char *library, void **state);
  void (*unload)(void *state);
  /* *count in: capacity of out (ignored when out is NULL); out: devices present. Each
   * entry fully written (every field of gpupart_device_info of this library's version). */
  int (*enumerate)(void *state, gpupart_device_info *out, uint32_t *count);
  /* native_desc/native_size: the backend's own descriptor (already proven to be this
   * backend's by the core) and its size as the caller compiled it
   * (gpupart_device_desc.backend_desc_size; 0 = the backend's 0.2 size of it). NULL desc
   * = defaults. Only the backend knows its struct's sizes, so it copies the descriptor in
   * with gpupart__backend_desc_in (core/base/extstruct.h): min(native_size, sizeof its
   * struct), the rest as zero, EINVAL for a nonzero tail beyond its struct or a size
   * below its 0.2 layout. */
  int (*open)(void *state, uint32_t index, const void *native_desc, size_t native_size, void **dev);
  void (*close)(void *dev);
  /* The device's info as enumerate reports it, including block_granularity (every block
   * size is a multiple of it; the core rounds up before calling block_alloc) and identity. */
  int (*info)(void *dev, gpupart_device_info *out);
  /* size is a multiple of max(min_alignment, block_granularity). EDEVMEM when the driver
   * refuses memory, EBACKEND for other driver failures; both through
   * gpupart__fail_native so the driver's own code travels with the message. */
  int (*block_alloc)(void *dev, uint64_t size, gpupart_block *out);
  void (*block_free)(void *dev, gpupart_block *block);
  /* --- optional (NULL = not offered; the core never special-cases a backend) --- */
  /* Budget query: free_bytes UINT64_MAX when the driver cannot tell. NULL = the core uses
   * info.total_bytes and reports free as unknown. */
  int (*mem_info)(void *dev, uint64_t *free_bytes, uint64_t *total_bytes);
  /* Releases a per-allocation view made through gpupart__allocation_view (core/door/interop.h)
   * when its allocation is freed; runs with no gpupart lock held. A backend that leaves it
   * NULL cannot make views (gpupart__allocation_view refuses, ENOTSUP). */
  void (*view_release)(void *dev, void *view);
  /* Gives back driver-side caches the backend keeps (called by gpupart_partition_trim and
   * the OOM sequence after blocks were released). */
  int (*trim)(void *dev);
  /* Opens as `open` does, for a program built against gpupart 0.1 (the versioned
   * gpupart_device_open@GPUPART_0.1): native_desc (not NULL) is laid out, and means,
   * what 0.1 published for this backend's descriptor, which carried no size. NULL = the
   * descriptor is the same since 0.1, or came later (no 0.1 program has one): `open`
   * gets it with native_size 0. */
  int (*open_0_1)(void *state, uint32_t index, const void *native_desc, void **dev);
  /* --- optional: virtual memory (GPUPART__CAP_VM; all four set, or none) ---
   * An expandable partition is one reserved address range that grows by mapping physical
   * memory at its end and shrinks, at trim, by unmapping it (docs/design.md, "The
   * expandable arena"). The core never asks for these piece by piece: creating physical
   * memory, mapping it and granting access are one entry (vm_map), waiting for the
   * device, unmapping and releasing another (vm_unmap), so a backend keeps its driver's
   * order of calls to itself. */
  /* The granule of physical memory and of mapping offsets on this device (a power of two,
   * a multiple of info.min_alignment), or ENOTSUP, with a message saying why (no virtual
   * memory on this device or driver). */
  int (*vm_granule)(void *dev, uint64_t *granule);
  /* Reserves an address range of size bytes (a multiple of the granule) with nothing
   * mapped: out->native names it for the interop functions (a CUdeviceptr, a sparse
   * VkBuffer), out->device_address its byte 0 (or 0), out->size = size. EDEVMEM when the
   * driver has no room for it. */
  int (*vm_reserve)(void *dev, uint64_t size, gpupart_block *out);
  /* Gives back a range that vm_reserve made, once nothing in it is mapped. */
  void (*vm_unreserve)(void *dev, gpupart_block *range);
  /* Creates size bytes of physical memory (a multiple of the granule) and maps it at
   * offset (a multiple of the granule) of range, readable and writable by the device
   * (and the peers the backend knows of): *handle is the backend's record of it.
   * EDEVMEM when the driver refuses the memory; nothing is left behind on failure. */
  int (*vm_map)(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void **handle);
  /* Waits for the device's work on range, unmaps what vm_map mapped at offset and
   * releases its memory. */
  void (*vm_unmap)(void *dev, gpupart_block *range, uint64_t offset, uint64_t size, void *handle);
} gpupart_backend_ops;

/* Size of the table up to and including its last required entry: a backend's
 * struct_size must be at least this. */
#define GPUPART__BACKEND_OPS_MIN_SIZE \
  (offsetof(gpupart_backend_ops, block_free) + sizeof(((gpupart_backend_ops *)0)->block_free))

/* Entry `field` of ops, or NULL where the backend leaves it NULL or was built with a
 * table too short to have it. Use it for every optional entry. */
#define GPUPART__BACKEND_OP(ops, field) \
  ((ops)->struct_size >= offsetof(gpupart_backend_ops, field) + sizeof((ops)->field) ? (ops)->field : NULL)

/* The table of backend b that this build contains; NULL for one that was not built
 * (backends/built.c, from the GPUPART__BACKENDS list of registry.h). */
const gpupart_backend_ops *gpupart__backend_ops(gpupart_backend b);

#endif
