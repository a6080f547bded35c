/* Conformance adapter of the CUDA backend. Under meson test the driver is the test double
 * (tests/cuda/cuda_double.c, named by GPUPART_TEST_CUDA_DOUBLE), which the suite's
 * contexts load through their config_text; without it (scripts/gpu-check on a GPU) the
 * system's libcuda.so.1. Bytes move through the driver (cuMemcpyHtoD_v2 / DtoH_v2 at
 * gpupart_cuda_ptr, the device's context pushed); the adopt round trip uses a context the
 * adapter creates with cuCtxCreate_v2; the instrumented driver is the double itself (its
 * GPUPART_TEST_CUDA_MAX_LIVE knob and its count of live bytes), so a real driver skips
 * those tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/cuda_test.h"
#include "conformance.h"
#include "gpupart_cuda.h"

static const char *cu_config(void) { return cuda_test_config(NULL); }

static gpupart_result cu_open(gpupart_context *ctx, const gpupart_device_desc *base, gpupart_device **out) {
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_CUDA;
  return gpupart_device_open(ctx, &d, out);
}

static int cu_write(gpupart_device *dev, const gpupart_allocation *a, const void *data, uint64_t size) {
  return cuda_test_copy(dev, a, (void *)data, (size_t)size, 1);
}

static int cu_read(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size) {
  return cuda_test_copy(dev, a, data, (size_t)size, 0);
}

/* Partition, allocation, bytes through the adopted context, close. */
static int use_adopted(gpupart_context *ctx, CUcontext cctx, char *why, size_t n) {
  gpupart_cuda_desc cd = {cctx};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA, .backend_desc = &cd};
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL;
  unsigned char in[4096], out[4096] = {0};
  for (size_t i = 0; i < sizeof in; i++) in[i] = (unsigned char)(i * 13 + 1);
  int rc = gpupart_device_open(ctx, &d, &dev) || gpupart_partition_create(dev, NULL, &p) ||
           gpupart_alloc(p, sizeof in, 0, &a);
  if (rc) snprintf(why, n, "adopting: %s", gpupart_last_error());
  if (!rc && gpupart_cuda_context(dev) != cctx)
    rc = -1, snprintf(why, n, "gpupart_cuda_context is not the adopted one");
  if (!rc && (cu_write(dev, a, in, sizeof in) || cu_read(dev, a, out, sizeof out) || memcmp(in, out, sizeof in)))
    rc = -1, snprintf(why, n, "bytes written through the adopted context were not read back");
  gpupart_free(a);
  if (dev && gpupart_device_close(dev)) rc = -1, snprintf(why, n, "close: %s", gpupart_last_error());
  return rc;
}

static int cu_adopt_roundtrip(gpupart_context *ctx, char *why, size_t n) {
  const cuda_test_api *cu = cuda_test_api_get(why, n);
  CUcontext cctx = NULL, popped = NULL;
  if (!cu) return -1;
  if (cu->ctx_create(&cctx, 0, 0) != CUDA_SUCCESS) return snprintf(why, n, "cuCtxCreate_v2 failed"), -1;
  cu->ctx_pop(&popped); /* made current by the create: gpupart must not need that */
  int rc = use_adopted(ctx, cctx, why, n);
  if (rc == 0 && (cu->ctx_push(cctx) != CUDA_SUCCESS || cu->ctx_pop(&popped) != CUDA_SUCCESS || popped != cctx))
    rc = -1, snprintf(why, n, "the adopted context no longer works after close");
  if (cu->ctx_destroy(cctx) != CUDA_SUCCESS && rc == 0) rc = -1, snprintf(why, n, "cuCtxDestroy_v2 failed");
  return rc;
}

static gpupart_result cu_open_instrumented(gpupart_context **ctx, const gpupart_device_desc *base,
                                           uint64_t max_live_blocks, gpupart_device **out, char *why, size_t n) {
  *out = NULL;
  if (!cuda_test_double_path() || !cuda_test_api_get(why, n) || !cuda_test_api_get(why, n)->stats)
    return snprintf(why, n, "instrumenting needs the driver test double"), GPUPART_ENOTSUP;
  char live[32];
  snprintf(live, sizeof live, "%llu", (unsigned long long)max_live_blocks);
  setenv("GPUPART_TEST_CUDA_MAX_LIVE", live, 1);
  *ctx = cuda_test_context(NULL);
  if (!*ctx) return snprintf(why, n, "context: %s", gpupart_last_error()), GPUPART_EINVAL;
  gpupart_result rc = cu_open(*ctx, base, out);
  if (rc) snprintf(why, n, "%s", gpupart_last_error());
  return rc;
}

static int cu_driver_bytes(gpupart_device *dev, uint64_t *bytes) {
  (void)dev;
  const cuda_test_api *cu = cuda_test_api_get(NULL, 0);
  if (!cu || !cu->stats) return -1;
  *bytes = cu->stats->live_bytes;
  return 0;
}

const conformance_adapter conformance_cuda = {.backend = GPUPART_BACKEND_CUDA,
                                              .open = cu_open,
                                              .write = cu_write,
                                              .read = cu_read,
                                              .adopt_roundtrip = cu_adopt_roundtrip,
                                              .open_instrumented = cu_open_instrumented,
                                              .driver_bytes = cu_driver_bytes,
                                              .context_config = cu_config,
                                              .refusal_code = CUDA_ERROR_OUT_OF_MEMORY,
                                              .refusal_name = "CUDA_ERROR_OUT_OF_MEMORY"};
