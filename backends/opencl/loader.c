/* Loading the OpenCL ICD loader at run time: dlopen("libOpenCL.so.1") (or the library
 * that GPUPART_OPENCL_LIBRARY names), then every entry point the backend calls, so one
 * build runs on machines with or without OpenCL and a missing driver is ENOBACKEND, not
 * a link error. Also the names of OpenCL's error codes, for messages. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "opencl.h"

/* RTLD_NODELETE: the ICD loader and the vendor drivers it loads keep process-wide state
 * (platform lists, driver threads) that is not made to be unloaded, and the application
 * itself may use OpenCL too; closing our handle must not unmap them. */
#define CL_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)

static int open_library(const char *library, gpupart__cl_state *s) {
  static const char *const system_names[] = {"libOpenCL.so.1", "libOpenCL.so"};
  if (library) {
    s->library = dlopen(library, CL_DLOPEN_FLAGS);
    snprintf(s->path, sizeof s->path, "%s", library);
  }
  for (size_t i = 0; !library && !s->library && i < sizeof system_names / sizeof system_names[0]; i++) {
    s->library = dlopen(system_names[i], CL_DLOPEN_FLAGS);
    snprintf(s->path, sizeof s->path, "%s", system_names[i]);
  }
  if (s->library) return GPUPART_OK;
  const char *why = dlerror();
  return gpupart__fail(GPUPART_ENOBACKEND, "opencl: cannot load %s%s: %s", library ? "GPUPART_OPENCL_LIBRARY=" : "",
                       library ? library : "libOpenCL.so.1", why ? why : "unknown dlopen error");
}

/* Stores the address of symbol name in *slot (a function pointer's storage); copying the
 * bytes is the conversion POSIX sanctions for dlsym's result. */
static int resolve(gpupart__cl_state *s, const char *name, void *slot, int required) {
  void *sym = dlsym(s->library, name);
  memcpy(slot, &sym, sizeof sym);
  if (sym || !required) return GPUPART_OK;
  return gpupart__fail(GPUPART_ENOBACKEND, "opencl: %s has no %s: not an OpenCL ICD loader", s->path, name);
}

static int resolve_all(gpupart__cl_state *s) {
  int rc = GPUPART_OK;
#define GPUPART__CL_RESOLVE_REQUIRED(name, ret, params) \
  if (rc == GPUPART_OK) rc = resolve(s, #name, (void *)&s->cl.name, 1);
#define GPUPART__CL_RESOLVE_OPTIONAL(name, ret, params) \
  if (rc == GPUPART_OK) rc = resolve(s, #name, (void *)&s->cl.name, 0);
  GPUPART__CL_REQUIRED(GPUPART__CL_RESOLVE_REQUIRED)
  GPUPART__CL_OPTIONAL(GPUPART__CL_RESOLVE_OPTIONAL)
#undef GPUPART__CL_RESOLVE_REQUIRED
#undef GPUPART__CL_RESOLVE_OPTIONAL
  return rc;
}

int gpupart__cl_load(const gpupart__hostmem *mem, const char *library, gpupart__cl_state **out) {
  gpupart__cl_state *s = gpupart__host_calloc(mem, 1, sizeof *s);
  if (!s) return gpupart__fail(GPUPART_ENOMEM, "opencl: out of host memory");
  s->cl.mem = mem;
  int rc = open_library(library, s);
  if (rc == GPUPART_OK) rc = resolve_all(s);
  if (rc) {
    gpupart__cl_unload(s);
    return rc;
  }
  *out = s;
  return GPUPART_OK;
}

void gpupart__cl_unload(gpupart__cl_state *s) {
  if (!s) return;
  if (s->library) dlclose(s->library);
  gpupart__host_free(s->cl.mem, s);
}

const char *gpupart__cl_error_name(cl_int code) {
  static const struct {
    cl_int code;
    const char *name;
  } names[] = {
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_DEVICE_NOT_AVAILABLE, "CL_DEVICE_NOT_AVAILABLE"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
      {CL_MISALIGNED_SUB_BUFFER_OFFSET, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_INVALID_PLATFORM, "CL_INVALID_PLATFORM"},
      {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
      {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
      {CL_INVALID_QUEUE_PROPERTIES, "CL_INVALID_QUEUE_PROPERTIES"},
      {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
      {CL_INVALID_HOST_PTR, "CL_INVALID_HOST_PTR"},
      {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
      {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
      {CL_INVALID_OPERATION, "CL_INVALID_OPERATION"},
      {CL_INVALID_PROPERTY, "CL_INVALID_PROPERTY"},
      {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].code == code) return names[i].name;
  return "an OpenCL error";
}

int gpupart__cl_fail(int code, const char *what, cl_int err) {
  return gpupart__fail_native(code, err, "opencl: %s failed: %s (%d)", what, gpupart__cl_error_name(err), (int)err);
}
