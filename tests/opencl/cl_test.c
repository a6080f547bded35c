/* The test suites' side of cl_test.h: the system's OpenCL entry points, loaded once per
 * test process, and the helpers that route a context through the driver shim. */
#include "cl_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static cl_test_api api;
static int api_state; /* 0 = not tried, 1 = loaded, -1 = absent */

static int load_api(void) {
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) return -1;
  void *sym;
#define CL_TEST_LOAD(name, ret, params)      \
  if (!(sym = dlsym(lib, #name))) return -1; \
  memcpy(&api.name, &sym, sizeof sym);
  CL_TEST_FUNCTIONS(CL_TEST_LOAD)
#undef CL_TEST_LOAD
  return 1;
}

const cl_test_api *cl_test_api_get(void) {
  if (api_state == 0) api_state = load_api();
  return api_state == 1 ? &api : NULL;
}

const char *cl_shim_path(void) {
  const char *p = getenv("GPUPART_TEST_OPENCL_SHIM");
  return p && *p ? p : NULL;
}

cl_shim_state *cl_shim_state_get(char *why, size_t why_len) {
  const char *path = cl_shim_path();
  if (!path) return snprintf(why, why_len, "GPUPART_TEST_OPENCL_SHIM is not set (run the suite with meson test)"), NULL;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) return snprintf(why, why_len, "cannot load the shim: %s", dlerror()), NULL;
  void *sym = dlsym(lib, "gpupart_test_cl_shim_state");
  cl_shim_state *(*get)(void);
  memcpy(&get, &sym, sizeof sym);
  if (!sym) return snprintf(why, why_len, "%s has no gpupart_test_cl_shim_state", path), NULL;
  return get();
}

void cl_test_scrub_env(void) {
  for (int again = 1; again;) { /* unsetenv changes environ: rescan after each removal */
    again = 0;
    for (char **e = environ; *e && !again; e++) {
      if (strncmp(*e, "GPUPART_", 8) != 0) continue;
      char name[128];
      size_t n = strcspn(*e, "=");
      snprintf(name, sizeof name, "%.*s", (int)n, *e);
      unsetenv(name);
      again = 1;
    }
  }
}

int cl_shim_route_library(char *why, size_t why_len) {
  const char *path = cl_shim_path();
  if (!path) return snprintf(why, why_len, "GPUPART_TEST_OPENCL_SHIM is not set (run the suite with meson test)"), -1;
  char *keep = strdup(path);
  cl_test_scrub_env();
  setenv("GPUPART_TEST_OPENCL_SHIM", keep, 1);
  setenv("GPUPART_OPENCL_LIBRARY", keep, 1);
  free(keep);
  return 0;
}

gpupart_result cl_shim_open(gpupart_context *ctx, const gpupart_device_desc *base, uint64_t max_live_blocks,
                            gpupart_device **out, char *why, size_t why_len) {
  *out = NULL;
  cl_shim_state *s = cl_shim_state_get(why, why_len);
  if (!s) return GPUPART_EINVAL;
  *s = (cl_shim_state){.max_live_blocks = max_live_blocks};
  gpupart_device_desc d = base ? *base : (gpupart_device_desc){0};
  d.backend = GPUPART_BACKEND_OPENCL;
  gpupart_result rc = gpupart_device_open(ctx, &d, out);
  if (rc) snprintf(why, why_len, "%s", gpupart_last_error());
  return rc;
}

gpupart_result cl_shim_context(gpupart_context **out, char *why, size_t why_len) {
  *out = NULL;
  if (cl_shim_route_library(why, why_len)) return GPUPART_EINVAL;
  gpupart_result rc = gpupart_context_create(NULL, out);
  if (rc) snprintf(why, why_len, "%s", gpupart_last_error());
  return rc;
}
