/* The plain-named entry points (gpupart_context_create, gpupart_device_open, ...) as
 * real exported functions. In gpupart.h each plain name is a macro over an inline
 * function that calls its `_sized` twin with the caller's sizeof; these functions are for
 * code that takes a function's address or finds it with dlsym (harnesses, loaders, other
 * languages), which the macro cannot serve. They take and fill the 0.2 layouts: a caller
 * built against a later header gets what 0.2 knew, never an over-read. The names are
 * parenthesised so that the function-like macros do not expand here.
 *
 * Five of them changed layouts in 0.2 and have a 0.1 twin under the same name
 * (core/abi_0_1.c): these five are defined under internal names and exported as
 * name@@GPUPART_0.2, the default version (core/libgpupart.map), by .symver. */
#include "extstruct.h"
#include "gpupart.h"

/* Exported only as name@@GPUPART_0.2: the version script keeps the gpupart__v0_2_* name
 * itself local. */
#define GPUPART__ABI_0_2 __attribute__((visibility("default")))
#define GPUPART__SYMVER_0_2(impl, name) __asm__(".symver " #impl ", " #name "@@GPUPART_0.2")

GPUPART__ABI_0_2 gpupart_result gpupart__v0_2_enumerate(gpupart_context *ctx, gpupart_backend backend,
                                                        gpupart_device_info *infos, uint32_t *count);
GPUPART__ABI_0_2 gpupart_result gpupart__v0_2_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                                          gpupart_device **out);
GPUPART__ABI_0_2 gpupart_result gpupart__v0_2_device_get_info(const gpupart_device *dev, gpupart_device_info *out);
GPUPART__ABI_0_2 gpupart_result gpupart__v0_2_partition_get_stats(const gpupart_partition *p, gpupart_stats *out);
GPUPART__ABI_0_2 gpupart_result gpupart__v0_2_device_get_stats(const gpupart_device *dev, gpupart_stats *out);

GPUPART__SYMVER_0_2(gpupart__v0_2_enumerate, gpupart_enumerate);
GPUPART__SYMVER_0_2(gpupart__v0_2_device_open, gpupart_device_open);
GPUPART__SYMVER_0_2(gpupart__v0_2_device_get_info, gpupart_device_get_info);
GPUPART__SYMVER_0_2(gpupart__v0_2_partition_get_stats, gpupart_partition_get_stats);
GPUPART__SYMVER_0_2(gpupart__v0_2_device_get_stats, gpupart_device_get_stats);

gpupart_result(gpupart_context_create)(const gpupart_context_desc *desc, gpupart_context **out) {
  return gpupart_context_create_sized(desc, GPUPART__CONTEXT_DESC_SIZE_0_2, out);
}

gpupart_result gpupart__v0_2_enumerate(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos,
                                       uint32_t *count) {
  return gpupart_enumerate_sized(ctx, backend, infos, GPUPART__DEVICE_INFO_SIZE_0_2, count);
}

gpupart_result gpupart__v0_2_device_open(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out) {
  return gpupart_device_open_sized(ctx, desc, GPUPART__DEVICE_DESC_SIZE_0_2, out);
}

gpupart_result gpupart__v0_2_device_get_info(const gpupart_device *dev, gpupart_device_info *out) {
  return gpupart_device_get_info_sized(dev, out, GPUPART__DEVICE_INFO_SIZE_0_2);
}

gpupart_result(gpupart_partition_create)(gpupart_device *dev, const gpupart_partition_desc *desc,
                                         gpupart_partition **out) {
  return gpupart_partition_create_sized(dev, desc, GPUPART__PARTITION_DESC_SIZE_0_2, out);
}

gpupart_result(gpupart_alloc_ex)(gpupart_partition *p, const gpupart_alloc_desc *desc, gpupart_allocation **out) {
  return gpupart_alloc_ex_sized(p, desc, GPUPART__ALLOC_DESC_SIZE_0_2, out);
}

gpupart_result(gpupart_allocation_get_info)(const gpupart_allocation *a, gpupart_allocation_info *out) {
  return gpupart_allocation_get_info_sized(a, out, GPUPART__ALLOCATION_INFO_SIZE_0_2);
}

gpupart_result(gpupart_alloc_info)(gpupart_partition *p, const gpupart_alloc_desc *desc, gpupart_allocation **out,
                                   gpupart_allocation_info *info) {
  return gpupart_alloc_info_sized(p, desc, GPUPART__ALLOC_DESC_SIZE_0_2, out, info, GPUPART__ALLOCATION_INFO_SIZE_0_2);
}

gpupart_result gpupart__v0_2_partition_get_stats(const gpupart_partition *p, gpupart_stats *out) {
  return gpupart_partition_get_stats_sized(p, out, GPUPART__STATS_SIZE_0_2);
}

gpupart_result gpupart__v0_2_device_get_stats(const gpupart_device *dev, gpupart_stats *out) {
  return gpupart_device_get_stats_sized(dev, out, GPUPART__STATS_SIZE_0_2);
}
