/* Vendor libraries stay loaded, once a backend call has loaded them, for the rest of the
 * process's life.
 *
 * Driver code is not made to be unloaded, and it was: gpupart dlclosed the Vulkan loader
 * at unload, and the loader unloads its drivers when the last instance goes (gpupart's
 * own, at gpupart_context_destroy). A driver's process-wide allocations then become
 * unreachable (LeakSanitizer reports them as leaks of an unknown module), and a driver
 * whose thread-local storage was touched leaves a dynamic-TLS entry behind that
 * LeakSanitizer's tracer reads at exit: on Linux 6.18 with an AMD Zen 5 CPU the tracer
 * died of SIGSEGV in every sanitizer run of `gpupart devices`. Loading a driver again for
 * each context also costs (lavapipe brings LLVM). So around each backend call that may
 * load vendor code (load, enumerate, open) the core marks the objects loaded before, and
 * after the call opens each object loaded since again with RTLD_NOLOAD | RTLD_NODELETE
 * (glibc then never unmaps it, whoever dlcloses it) and drops that extra reference. The
 * CUDA and OpenCL loaders are also opened NODELETE by their backends; this covers what
 * any loader loads in turn. An object that another thread loads during the call is
 * pinned too, which only keeps it mapped. */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "pin.h"

/* One walk over the loaded objects (dl_iterate_phdr, in load order). */
typedef struct walk {
  size_t index, start;     /* the object's position; names are taken from start on */
  char *names;             /* NUL-separated names copied here, cap bytes; NULL: count only */
  size_t len, cap, copied; /* bytes the names take, room, bytes copied (whole names only) */
  gpupart__pin_mark seen;  /* the objects and the unloads the walk saw */
} walk;

static int visit(struct dl_phdr_info *info, size_t size, void *p) {
  walk *w = p;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) w->seen.subs = info->dlpi_subs;
  size_t i = w->index++;
  w->seen.count = w->index;
  const char *name = info->dlpi_name;
  if (i < w->start || !name || !*name) return 0;
  size_t n = strlen(name) + 1;
  if (w->names && w->copied == w->len && w->len + n <= w->cap) {
    memcpy(w->names + w->len, name, n);
    w->copied += n;
  }
  w->len += n;
  return 0;
}

void gpupart__pin_begin(gpupart__pin_mark *mark) {
  walk w = {.start = SIZE_MAX};
  dl_iterate_phdr(visit, &w);
  *mark = w.seen;
}

/* Makes the loaded object name permanent: 1, or 0 when it is not loaded (or nameless,
 * like the vDSO). */
static size_t pin(const char *name) {
  void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  if (!h) {
    dlerror(); /* leaves no stale message for the application's next dlerror() */
    return 0;
  }
  dlclose(h); /* drops the reference just taken; the object stays, NODELETE */
  return 1;
}

size_t gpupart__pin_end(const gpupart__hostmem *mem, const gpupart__pin_mark *mark) {
  walk all = {.start = 0};
  dl_iterate_phdr(visit, &all);
  /* New objects follow the marked ones; an unload since the mark moves them down by one,
   * so start that much earlier (pinning an older object too is harmless). */
  unsigned long long gone = all.seen.subs - mark->subs;
  walk w = {.start = gone < mark->count ? mark->count - (size_t)gone : 0, .cap = all.len};
  w.names = all.len ? gpupart__host_calloc(mem, 1, all.len) : NULL;
  if (!w.names) return 0;
  dl_iterate_phdr(visit, &w);
  size_t pinned = 0;
  for (size_t off = 0; off < w.copied; off += strlen(w.names + off) + 1) pinned += pin(w.names + off);
  gpupart__host_free(mem, w.names);
  return pinned;
}
