/* Enumeration: the devices each backend has, one backend or every one in AUTO's order,
 * each entry copied out at the caller's own struct size. A backend is loaded through the
 * context on first use; the drivers an enumeration loads stay loaded (pin.c). */
#include "enumerate.h"

#include "context.h"
#include "error.h"
#include "extstruct.h"
#include "internal.h"
#include "pin.h"

int gpupart__enumerate_one(gpupart_context *ctx, gpupart_backend b, gpupart_device_info *infos, uint32_t cap,
                           uint32_t *found) {
  const gpupart_backend_ops *ops;
  void *state;
  int rc = gpupart__backend_get(ctx, b, &ops, &state);
  if (rc) return rc;
  uint32_t n = cap;
  gpupart__pin_mark mark;
  gpupart__pin_begin(&mark);
  rc = ops->enumerate(state, infos, &n);
  gpupart__pin_end(ctx->env.mem, &mark); /* the drivers it loaded stay loaded (core/base/pin.c) */
  if (rc == GPUPART_OK) *found = n;
  return rc;
}

static int enumerate_auto(gpupart_context *ctx, gpupart_device_info *infos, uint32_t *count) {
  gpupart_backend order[GPUPART__BACKEND_COUNT];
  unsigned n = gpupart__backend_auto_order(order, 0);
  uint32_t cap = infos ? *count : 0, total = 0;
  for (unsigned i = 0; i < n; i++) {
    uint32_t found = 0, room = cap > total ? cap - total : 0;
    if (gpupart__enumerate_one(ctx, order[i], room ? infos + total : NULL, room, &found)) continue;
    total += found;
  }
  *count = total;
  return GPUPART_OK;
}

static int enumerate_into(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos, uint32_t *count) {
  if (backend == GPUPART_BACKEND_AUTO) return enumerate_auto(ctx, infos, count);
  uint32_t found = 0;
  int rc = gpupart__enumerate_one(ctx, backend, infos, infos ? *count : 0, &found);
  if (rc == GPUPART_OK) *count = found;
  return rc;
}

/* The backends fill this library's gpupart_device_info; a caller built with another
 * sizeof gets each entry copied out at its own stride. */
static int enumerate_strided(gpupart_context *ctx, gpupart_backend backend, unsigned char *infos, size_t stride,
                             uint32_t *count) {
  uint32_t cap = *count;
  gpupart_device_info *tmp = cap ? gpupart__host_calloc(&ctx->mem, cap, sizeof *tmp) : NULL;
  if (cap && !tmp) return gpupart__fail(GPUPART_ENOMEM, "enumerate: out of host memory");
  int rc = enumerate_into(ctx, backend, tmp, count);
  for (uint32_t i = 0; rc == GPUPART_OK && i < cap && i < *count; i++)
    gpupart__copy_out(infos + i * stride, stride, &tmp[i], sizeof *tmp, GPUPART__DEVICE_INFO_SIZE_0_2, "");
  gpupart__host_free(&ctx->mem, tmp);
  return rc;
}

gpupart_result gpupart_enumerate_sized(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos,
                                       size_t info_size, uint32_t *count) {
  if (!ctx || !count) return gpupart__fail(GPUPART_EINVAL, "enumerate: ctx or count is NULL");
  if (info_size < GPUPART__DEVICE_INFO_SIZE_0_2)
    return gpupart__fail(GPUPART_EINVAL,
                         "enumerate: gpupart_device_info has %zu bytes; the smallest layout "
                         "(gpupart 0.2) has %zu",
                         info_size, (size_t)GPUPART__DEVICE_INFO_SIZE_0_2);
  if (infos && info_size != sizeof *infos)
    return enumerate_strided(ctx, backend, (unsigned char *)infos, info_size, count);
  return enumerate_into(ctx, backend, infos, count);
}
