/* The backends this build contains, from the one list in registry.h. Each is compiled
 * only when meson found its headers (GPUPART_HAVE_<ID>); its driver library is still
 * loaded at run time, so a built backend may be absent. */
#include "registry.h"

#include "backend.h"

#define GPUPART__DECLARE(ID, name, rank) extern const gpupart_backend_ops gpupart__##name##_ops;
GPUPART__BACKENDS(GPUPART__DECLARE)
#undef GPUPART__DECLARE

#define GPUPART__TABLE(ID, name, rank) [GPUPART_BACKEND_##ID] = GPUPART__IF_BUILT(ID, &gpupart__##name##_ops, NULL),
static const gpupart_backend_ops *const tables[GPUPART__BACKEND_COUNT] = {GPUPART__BACKENDS(GPUPART__TABLE)};
#undef GPUPART__TABLE

#define GPUPART__RANK(ID, name, rank) [GPUPART_BACKEND_##ID] = rank,
static const int ranks[GPUPART__BACKEND_COUNT] = {[GPUPART_BACKEND_AUTO] = -1, GPUPART__BACKENDS(GPUPART__RANK)};
#undef GPUPART__RANK

const gpupart_backend_ops *gpupart__backend_ops(gpupart_backend b) {
  return (unsigned)b < GPUPART__BACKEND_COUNT ? tables[b] : NULL;
}

unsigned gpupart__backend_auto_order(gpupart_backend *out, int last_resort) {
  int top = 0;
  for (int b = 0; b < GPUPART__BACKEND_COUNT; b++)
    if (ranks[b] > top) top = ranks[b];
  unsigned n = 0;
  for (int r = top; r >= (last_resort ? 0 : 1); r--)
    for (int b = 1; b < GPUPART__BACKEND_COUNT; b++)
      if (ranks[b] == r) out[n++] = (gpupart_backend)b;
  return n;
}
