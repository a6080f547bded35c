/* Vendor libraries stay loaded (core/base/pin.c): what a context's backends load (loaders,
 * drivers, what those need) is still mapped after the context is destroyed, so no driver
 * code is unmapped under its own allocations and thread-local storage (the sanitizer
 * builds' LeakSanitizer reads both at exit); and pinning takes only what was loaded
 * since the mark. */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hostmem.h"
#include "pin.h"

#define MAX_OBJECTS 1024

typedef struct objects {
  char *name[MAX_OBJECTS];
  size_t n;
} objects;

static int add_object(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  objects *o = p;
  if (info->dlpi_name && info->dlpi_name[0] && o->n < MAX_OBJECTS) o->name[o->n++] = strdup(info->dlpi_name);
  return 0;
}

static objects loaded(void) {
  objects o = {.n = 0};
  dl_iterate_phdr(add_object, &o);
  return o;
}

static int holds(const objects *o, const char *name) {
  for (size_t i = 0; i < o->n; i++)
    if (strcmp(o->name[i], name) == 0) return 1;
  return 0;
}

static void release(objects *o) {
  for (size_t i = 0; i < o->n; i++) free(o->name[i]);
  o->n = 0;
}

/* Opens (and closes) a device of every backend that has one: each loads its vendor code. */
static uint32_t open_every_device(gpupart_context *ctx) {
  gpupart_device_info info[16];
  uint32_t n = 16, real = 0;
  cr_assert_eq(gpupart_enumerate(ctx, GPUPART_BACKEND_AUTO, info, &n), GPUPART_OK, "%s", gpupart_last_error());
  for (uint32_t i = 0; i < n && i < 16; i++) {
    gpupart_device_desc d = {.backend = info[i].backend, .index = info[i].index};
    gpupart_device *dev = NULL;
    cr_expect_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
    gpupart_device_close(dev);
    real += info[i].backend != GPUPART_BACKEND_SIM;
  }
  return real;
}

Test(pin, vendor_libraries_stay_loaded_after_the_context_is_destroyed) {
  objects before = loaded();
  gpupart_context *ctx = test_context();
  uint32_t real = open_every_device(ctx);
  objects alive = loaded();
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  objects after = loaded();
  size_t fresh = 0;
  for (size_t i = 0; i < alive.n; i++) {
    if (holds(&before, alive.name[i])) continue;
    fresh++;
    cr_expect(holds(&after, alive.name[i]), "%s, loaded by the context's backends, was unloaded with it",
              alive.name[i]);
  }
  if (real) cr_expect_gt(fresh, 0, "%u devices of real backends were opened, yet nothing was loaded", real);
  else cr_log_warn("no device of a real backend here: only the sim backend was checked\n");
  release(&before);
  release(&alive);
  release(&after);
}

Test(pin, only_what_was_loaded_since_the_mark_is_pinned) {
  const char *lib = getenv("GPUPART_TEST_SHARED_LIBRARY");
  cr_assert(lib && *lib, "GPUPART_TEST_SHARED_LIBRARY names a shared library this test has not loaded");
  const gpupart__hostmem *mem = gpupart__hostmem_default();
  gpupart__pin_mark mark;
  gpupart__pin_begin(&mark);
  cr_expect_eq(gpupart__pin_end(mem, &mark), 0, "nothing was loaded since the mark");
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "%s", dlerror());
  gpupart__pin_begin(&mark);
  cr_expect_eq(gpupart__pin_end(mem, &mark), 0, "it was loaded before this mark: not pinned");
  dlclose(h);
  cr_expect_null(dlopen(lib, RTLD_NOW | RTLD_NOLOAD), "unpinned, it is unloaded by its last dlclose");
  gpupart__pin_begin(&mark);
  h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "%s", dlerror());
  cr_expect_geq(gpupart__pin_end(mem, &mark), 1, "loaded since the mark: pinned");
  dlclose(h);
  cr_expect_not_null(dlopen(lib, RTLD_NOW | RTLD_NOLOAD), "pinned, it stays after its last dlclose");
}
