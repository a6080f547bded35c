/* The gpupart 0.1 ABI, kept for programs built against 0.1's header (commit 5e448af),
 * which call the plain names with 0.1's struct layouts and no sizes. libgpupart.so.0
 * versions its symbols (core/libgpupart.map): a reference without a version, as every
 * 0.1 program has, binds to a symbol's oldest version, GPUPART_0.1, and these are the
 * GPUPART_0.1 versions of the five calls whose structs grew in 0.2 (gpupart_device_info
 * by 40 bytes, gpupart_stats by 8, gpupart_device_desc by its backend_desc_type and
 * backend_desc_size, and the sim and Vulkan backend descriptors). Each reads and writes
 * exactly the 0.1 layout. Programs linked since take the default versions
 * (GPUPART_0.2: the 0.2 layouts, core/unsized.c), and so does dlsym. docs/api.md, "ABI
 * policy". */
#include <string.h>

#include "device.h"
#include "error.h"
#include "extstruct.h"
#include "internal.h"

/* Exported only under the versioned name the .symver gives it: the version script keeps
 * the gpupart__v0_1_* name itself local. */
#define GPUPART__ABI_0_1 __attribute__((visibility("default")))
#define GPUPART__SYMVER_0_1(impl, name) __asm__(".symver " #impl ", " #name "@GPUPART_0.1")

_Static_assert(GPUPART__DEVICE_INFO_SIZE_0_1 % _Alignof(gpupart_device_info) == 0,
               "0.1's gpupart_device_info had no tail padding: its size is the stride of enumerate's array");

GPUPART__ABI_0_1 gpupart_result gpupart__v0_1_enumerate(gpupart_context *ctx, gpupart_backend backend,
                                                        gpupart_device_info *infos, uint32_t *count);
GPUPART__ABI_0_1 gpupart_result gpupart__v0_1_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                                          gpupart_device **out);
GPUPART__ABI_0_1 gpupart_result gpupart__v0_1_device_get_info(const gpupart_device *dev, gpupart_device_info *out);
GPUPART__ABI_0_1 gpupart_result gpupart__v0_1_partition_get_stats(const gpupart_partition *p, gpupart_stats *out);
GPUPART__ABI_0_1 gpupart_result gpupart__v0_1_device_get_stats(const gpupart_device *dev, gpupart_stats *out);

GPUPART__SYMVER_0_1(gpupart__v0_1_enumerate, gpupart_enumerate);
GPUPART__SYMVER_0_1(gpupart__v0_1_device_open, gpupart_device_open);
GPUPART__SYMVER_0_1(gpupart__v0_1_device_get_info, gpupart_device_get_info);
GPUPART__SYMVER_0_1(gpupart__v0_1_partition_get_stats, gpupart_partition_get_stats);
GPUPART__SYMVER_0_1(gpupart__v0_1_device_get_stats, gpupart_device_get_stats);

/* The entries are listed into a buffer of this library's layout, then each entry's 0.1
 * part is copied out at 0.1's stride. */
gpupart_result gpupart__v0_1_enumerate(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos,
                                       uint32_t *count) {
  if (!ctx || !count || !infos || !*count) /* nothing is written: the sizes do not matter */
    return gpupart_enumerate_sized(ctx, backend, infos, sizeof *infos, count);
  uint32_t cap = *count;
  gpupart_device_info *all = gpupart__host_calloc(&ctx->mem, cap, sizeof *all);
  if (!all) return gpupart__fail(GPUPART_ENOMEM, "enumerate: out of host memory");
  gpupart_result rc = gpupart_enumerate_sized(ctx, backend, all, sizeof *all, count);
  for (uint32_t i = 0; rc == GPUPART_OK && i < cap && i < *count; i++)
    memcpy((unsigned char *)infos + (size_t)i * GPUPART__DEVICE_INFO_SIZE_0_1, &all[i], GPUPART__DEVICE_INFO_SIZE_0_1);
  gpupart__host_free(&ctx->mem, all);
  return rc;
}

gpupart_result gpupart__v0_1_device_open(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out) {
  return gpupart__device_open_0_1(ctx, desc, out);
}

gpupart_result gpupart__v0_1_device_get_info(const gpupart_device *dev, gpupart_device_info *out) {
  gpupart_device_info info;
  gpupart_result rc = gpupart_device_get_info_sized(dev, out ? &info : NULL, sizeof info);
  if (rc == GPUPART_OK) memcpy(out, &info, GPUPART__DEVICE_INFO_SIZE_0_1);
  return rc;
}

gpupart_result gpupart__v0_1_partition_get_stats(const gpupart_partition *p, gpupart_stats *out) {
  gpupart_stats st;
  gpupart_result rc = gpupart_partition_get_stats_sized(p, out ? &st : NULL, sizeof st);
  if (rc == GPUPART_OK) memcpy(out, &st, GPUPART__STATS_SIZE_0_1);
  return rc;
}

gpupart_result gpupart__v0_1_device_get_stats(const gpupart_device *dev, gpupart_stats *out) {
  gpupart_stats st;
  gpupart_result rc = gpupart_device_get_stats_sized(dev, out ? &st : NULL, sizeof st);
  if (rc == GPUPART_OK) memcpy(out, &st, GPUPART__STATS_SIZE_0_1);
  return rc;
}
