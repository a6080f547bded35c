/* The test suites' side of cuda_test.h. */
#include "cuda_test.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "gpupart_cuda.h"

static cuda_test_api api;
static int api_state; /* 0 = not tried, 1 = loaded, -1 = absent */
static char api_error[256];

const char *cuda_test_double_path(void) {
  const char *real = getenv("GPUPART_TEST_CUDA_REAL");
  if (real && *real && strcmp(real, "0")) return NULL; /* scripts/gpu-check: the real driver */
  const char *p = getenv("GPUPART_TEST_CUDA_DOUBLE");
  return p && *p ? p : NULL;
}

static int take(void *lib, const char *name, void *slot) {
  void *sym = dlsym(lib, name);
  memcpy(slot, &sym, sizeof sym);
  if (!sym) snprintf(api_error, sizeof api_error, "the driver has no %s", name);
  return sym ? 0 : -1;
}

static int load(void) {
  const char *path = cuda_test_double_path();
  void *lib = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) return snprintf(api_error, sizeof api_error, "cannot load the driver: %s", dlerror()), -1;
  if (take(lib, "cuInit", &api.init) || take(lib, "cuCtxCreate_v2", &api.ctx_create) ||
      take(lib, "cuCtxDestroy_v2", &api.ctx_destroy) || take(lib, "cuCtxPushCurrent_v2", &api.ctx_push) ||
      take(lib, "cuCtxPopCurrent_v2", &api.ctx_pop) || take(lib, "cuCtxGetCurrent", &api.ctx_get_current) ||
      take(lib, "cuDevicePrimaryCtxRetain", &api.primary_retain) ||
      take(lib, "cuDevicePrimaryCtxRelease_v2", &api.primary_release) || take(lib, "cuMemcpyHtoD_v2", &api.htod) ||
      take(lib, "cuMemcpyDtoH_v2", &api.dtoh))
    return -1;
  cuda_double_stats_fn stats = NULL;
  void *sym = dlsym(lib, "cuda_double_stats");
  memcpy(&stats, &sym, sizeof sym);
  api.stats = sym ? stats() : NULL;
  cuda_double_vmm_stats_fn vmm_stats = NULL;
  sym = dlsym(lib, "cuda_double_vmm_stats");
  memcpy(&vmm_stats, &sym, sizeof sym);
  api.vmm_stats = sym ? vmm_stats() : NULL;
  if (api.init(0) != CUDA_SUCCESS) return snprintf(api_error, sizeof api_error, "cuInit failed"), -1;
  return 1;
}

const cuda_test_api *cuda_test_api_get(char *why, size_t why_len) {
  if (api_state == 0) api_state = load();
  if (api_state != 1 && why) snprintf(why, why_len, "%s", api_error);
  return api_state == 1 ? &api : NULL;
}

const char *cuda_test_config(const char *library) {
  static char text[1024];
  if (!library) library = cuda_test_double_path();
  if (!library) return NULL;
  snprintf(text, sizeof text, "[gpupart]\ncuda_library = %s\n", library);
  return text;
}

gpupart_context *cuda_test_context(const char *library) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = cuda_test_config(library)};
  gpupart_context *ctx = NULL;
  return gpupart_context_create(&cd, &ctx) == GPUPART_OK ? ctx : NULL;
}

int cuda_test_copy(gpupart_device *dev, const gpupart_allocation *a, void *data, size_t size, int to_device) {
  const cuda_test_api *cu = cuda_test_api_get(NULL, 0);
  CUdeviceptr p = gpupart_cuda_ptr(a);
  CUcontext ctx = gpupart_cuda_context(dev), popped;
  if (!cu || !p || !ctx || cu->ctx_push(ctx) != CUDA_SUCCESS) return -1;
  CUresult r = to_device ? cu->htod(p, data, size) : cu->dtoh(data, p, size);
  cu->ctx_pop(&popped);
  return r == CUDA_SUCCESS && popped == ctx ? 0 : -1;
}
