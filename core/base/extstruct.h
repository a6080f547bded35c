/* Extensible public structs (the ABI rule of docs/api.md): every public struct travels
 * with the size its caller was compiled with, and these helpers are the one place that
 * turns a caller's struct of any size into the library's own and back. A smaller input
 * struct gets its missing tail as zeroes (defaults), a larger one must have a zero tail;
 * an output struct gets min(its size, the caller's) bytes and a zeroed tail. Below each
 * struct's 0.2 size (its first published layout) is GPUPART_EINVAL.
 *
 * Each struct's sizes are recorded here: *_SIZE_0_2 is where its last 0.2 field ends and
 * never changes (the smallest size accepted); the library's own size is the struct's
 * sizeof, so fields appended later are copied with no change here. Its trailing padding
 * is never checked (programs copy structs by assignment, which leaves padding
 * undefined), hence the rule for later versions: a new field starts at or after the
 * previous version's sizeof (fill the padding with a named reserved field first). */
#ifndef GPUPART_CORE_EXTSTRUCT_H
#define GPUPART_CORE_EXTSTRUCT_H

#include <stddef.h>
#include <stdint.h>

#include "gpupart.h"

#define GPUPART__END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* The 0.1 layouts (gpupart 0.1 had no sizes in its calls): only the versioned 0.1
 * symbols (abi_0_1.c) use them, for programs built against 0.1's header. */
#define GPUPART__DEVICE_DESC_SIZE_0_1 GPUPART__END(gpupart_device_desc, flags)
#define GPUPART__DEVICE_INFO_SIZE_0_1 GPUPART__END(gpupart_device_info, min_alignment)
#define GPUPART__STATS_SIZE_0_1 GPUPART__END(gpupart_stats, largest_free)

/* Inputs: 0.2 layouts, and the library's own. */
#define GPUPART__CONTEXT_DESC_SIZE_0_2 GPUPART__END(gpupart_context_desc, host_user)
#define GPUPART__CONTEXT_DESC_SIZE sizeof(gpupart_context_desc)
#define GPUPART__DEVICE_DESC_SIZE_0_2 GPUPART__END(gpupart_device_desc, backend_desc_size)
#define GPUPART__DEVICE_DESC_SIZE sizeof(gpupart_device_desc)
#define GPUPART__PARTITION_DESC_SIZE_0_2 GPUPART__END(gpupart_partition_desc, reclaim_user)
#define GPUPART__PARTITION_DESC_SIZE sizeof(gpupart_partition_desc)
#define GPUPART__ALLOC_DESC_SIZE_0_2 GPUPART__END(gpupart_alloc_desc, tag)
#define GPUPART__ALLOC_DESC_SIZE sizeof(gpupart_alloc_desc)

/* Outputs: 0.2 layouts; the current size is the struct's sizeof. */
#define GPUPART__DEVICE_INFO_SIZE_0_2 GPUPART__END(gpupart_device_info, pci_bus_id)
#define GPUPART__STATS_SIZE_0_2 GPUPART__END(gpupart_stats, double_frees)
#define GPUPART__ALLOCATION_INFO_SIZE_0_2 GPUPART__END(gpupart_allocation_info, native_block)

/* Copies the caller's input struct src (src_size bytes as compiled; NULL = all
 * defaults) into dst, of which the library knows dst_size bytes: dst gets
 * min(src_size, dst_size) bytes and zeroes after them. EINVAL when src_size is below
 * min_size, or when a byte of src beyond dst_size is not zero (the message names what,
 * both sizes and the first such byte: a struct from a newer gpupart header). */
gpupart_result gpupart__copy_in(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                                const char *what);

/* Writes the library's output struct src (src_size bytes) into the caller's dst
 * (dst_size bytes as compiled): min(src_size, dst_size) bytes, and zeroes in the rest of
 * dst. EINVAL (dst untouched) when dst_size is below min_size. */
gpupart_result gpupart__copy_out(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                                 const char *what);

/* A backend's open: copies the caller's backend descriptor (desc, size bytes as compiled;
 * NULL = defaults) into the backend's own struct dst (dst_size bytes) by the input rule,
 * a size of 0 standing for min_size (the backend struct's 0.2 size). The core has proven
 * that desc is this backend's (gpupart_device_desc.backend_desc_type); only the backend
 * knows its struct's sizes, so the size checks happen here. */
gpupart_result gpupart__backend_desc_in(void *dst, size_t dst_size, const void *desc, size_t size, size_t min_size,
                                        const char *what);

#endif
