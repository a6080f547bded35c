/* The plain-named entry points (gpupart_context_create, gpupart_device_open, ...) as
 * real exported functions. In gpupart.h each plain name is a macro over its `_sized`
 * twin, passing the caller's sizeof; these functions are for code that takes a
 * function's address or finds it with dlsym (harnesses, loaders, other languages), which
 * the macro cannot serve. They take and fill the 0.2 layouts: a caller built against a
 * later header gets what 0.2 knew, never an over-read. The names are parenthesised so
 * that the function-like macros do not expand here. */
#include "extstruct.h"
#include "gpupart.h"

gpupart_result(gpupart_context_create)(const gpupart_context_desc *desc, gpupart_context **out) {
  return gpupart_context_create_sized(desc, GPUPART__CONTEXT_DESC_SIZE_0_2, out);
}

gpupart_result(gpupart_enumerate)(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos,
                                  uint32_t *count) {
  return gpupart_enumerate_sized(ctx, backend, infos, GPUPART__DEVICE_INFO_SIZE_0_2, count);
}

gpupart_result(gpupart_device_open)(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out) {
  return gpupart_device_open_sized(ctx, desc, GPUPART__DEVICE_DESC_SIZE_0_2, out);
}

gpupart_result(gpupart_device_get_info)(const gpupart_device *dev, gpupart_device_info *out) {
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

gpupart_result(gpupart_partition_get_stats)(const gpupart_partition *p, gpupart_stats *out) {
  return gpupart_partition_get_stats_sized(p, out, GPUPART__STATS_SIZE_0_2);
}

gpupart_result(gpupart_device_get_stats)(const gpupart_device *dev, gpupart_stats *out) {
  return gpupart_device_get_stats_sized(dev, out, GPUPART__STATS_SIZE_0_2);
}
