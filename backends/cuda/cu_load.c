/* Loading the CUDA driver at run time: dlopen("libcuda.so.1") (or the library that
 * GPUPART_CUDA_LIBRARY names), then every entry point the backend calls, resolved the way
 * the driver intends: cuGetProcAddress_v2 (CUDA >= 12) asked for each symbol at a pinned
 * CUDA version, falling back to dlsym of the versioned exported name. A driver that lacks
 * an entry point is ENOBACKEND naming the symbol and the driver's version, so one build
 * runs on machines with or without an NVIDIA driver. Also the failure helper that turns a
 * CUresult into gpupart's code and message. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

/* RTLD_NODELETE: the driver keeps process-wide state (its threads, the primary contexts
 * the application and the CUDA runtime share) that is not made to be unmapped, and the
 * application itself may be using it; closing our handle must leave it loaded. */
#define CU_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*driver_version_fn)(int *);

/* One entry of GPUPART__CU_ENTRIES as data, with the offset of its slot in the api. */
typedef struct entry {
  const char *query, *exported;
  int version, required;
  size_t offset;
} entry;

static const entry entries[] = {
#define GPUPART__CU_ENTRY(field, query, version, exported, required, params) \
  {query, exported, version, required, offsetof(gpupart__cu_api, field)},
    GPUPART__CU_ENTRIES(GPUPART__CU_ENTRY)
#undef GPUPART__CU_ENTRY
};

/* dlsym's result; callers copy its bytes into a function pointer, the conversion POSIX
 * sanctions. */
static void *symbol(void *library, const char *name) { return dlsym(library, name); }

static int open_library(const char *library, gpupart__cu_state *s) {
  const char *name = library ? library : "libcuda.so.1";
  snprintf(s->path, sizeof s->path, "%s", name);
  s->library = dlopen(name, CU_DLOPEN_FLAGS);
  if (s->library) return GPUPART_OK;
  const char *why = dlerror();
  return gpupart__fail(GPUPART_ENOBACKEND, "cuda: cannot load %s%s: %s", library ? "GPUPART_CUDA_LIBRARY=" : "", name,
                       why ? why : "unknown dlopen error");
}

static void driver_version(gpupart__cu_state *s) {
  void *sym = symbol(s->library, "cuDriverGetVersion");
  driver_version_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  if (!sym || fn(&s->driver_version) != CUDA_SUCCESS) s->driver_version = 0;
}

/* cuGetProcAddress_v2 may fail for a version the driver does not know, or succeed and
 * still give NULL (seen on some drivers for symbols they do not export): both fall back. */
static void *resolve(gpupart__cu_state *s, get_proc_fn get_proc, const entry *e) {
  void *p = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get_proc && get_proc(e->query, &p, e->version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
      status == CU_GET_PROC_ADDRESS_SUCCESS && p) {
    s->proc_lookups++;
    return p;
  }
  return symbol(s->library, e->exported);
}

static int missing(const gpupart__cu_state *s, const entry *e) {
  char have[32] = "unknown";
  if (s->driver_version) snprintf(have, sizeof have, "%d.%d", s->driver_version / 1000, s->driver_version % 1000 / 10);
  return gpupart__fail(GPUPART_ENOBACKEND,
                       "cuda: the driver %s (CUDA version %s) has no %s (CUDA %d.%d or later): the driver is too old "
                       "or not an NVIDIA driver",
                       s->path, have, e->exported, e->version / 1000, e->version % 1000 / 10);
}

static int resolve_all(gpupart__cu_state *s) {
  void *sym = symbol(s->library, "cuGetProcAddress_v2"); /* never the 4-argument cuGetProcAddress */
  get_proc_fn get_proc;
  memcpy(&get_proc, &sym, sizeof get_proc);
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void *p = resolve(s, get_proc, &entries[i]);
    if (!p && entries[i].required) return missing(s, &entries[i]);
    memcpy((char *)&s->cu + entries[i].offset, &p, sizeof p);
  }
  return GPUPART_OK;
}

/* CUDA_ERROR_NO_DEVICE is a driver with zero devices, not a missing backend. */
static int init(gpupart__cu_state *s) {
  CUresult r = s->cu.init(0);
  if (r == CUDA_SUCCESS) return GPUPART_OK;
  if (r == CUDA_ERROR_NO_DEVICE) return s->no_device = 1, GPUPART_OK;
  gpupart__cu_fail(s, GPUPART_ENOBACKEND, r, "cuInit");
  gpupart__error_append(" (driver %s)", s->path);
  return GPUPART_ENOBACKEND;
}

int gpupart__cu_load(const gpupart__hostmem *mem, const char *library, gpupart__cu_state **out) {
  gpupart__cu_state *s = gpupart__host_calloc(mem, 1, sizeof *s);
  if (!s) return gpupart__fail(GPUPART_ENOMEM, "cuda: out of host memory");
  s->mem = mem;
  int rc = open_library(library, s);
  if (rc == GPUPART_OK) driver_version(s), rc = resolve_all(s);
  if (rc == GPUPART_OK) rc = init(s);
  if (rc) {
    gpupart__cu_unload(s);
    return rc;
  }
  *out = s;
  return GPUPART_OK;
}

void gpupart__cu_unload(gpupart__cu_state *s) {
  if (!s) return;
  if (s->library) dlclose(s->library);
  gpupart__host_free(s->mem, s);
}

const char *gpupart__cu_error_name(const gpupart__cu_state *s, CUresult r) {
  const char *name = NULL;
  if (s->cu.get_error_name && s->cu.get_error_name(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUDA error";
}

int gpupart__cu_fail(const gpupart__cu_state *s, int code, CUresult r, const char *what) {
  return gpupart__fail_native(code, (int64_t)r, "cuda: %s failed: %s (%d)", what, gpupart__cu_error_name(s, r), (int)r);
}
