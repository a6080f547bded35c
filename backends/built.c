/* The backends this build contains: the one place that names each backend's table, from
 * the one list in core/base/registry.h. A backend is compiled only where meson found its
 * vendor headers (backends/meson.build defines GPUPART_HAVE_<ID> then); its driver
 * library is still loaded at run time, so a built backend may be absent. */
#include "backend.h"
#include "registry.h"

#define GPUPART__DECLARE(ID, name, rank) extern const gpupart_backend_ops gpupart__##name##_ops;
GPUPART__BACKENDS(GPUPART__DECLARE)
#undef GPUPART__DECLARE

#define GPUPART__TABLE(ID, name, rank) [GPUPART_BACKEND_##ID] = GPUPART__IF_BUILT(ID, &gpupart__##name##_ops, NULL),
static const gpupart_backend_ops *const tables[GPUPART__BACKEND_COUNT] = {GPUPART__BACKENDS(GPUPART__TABLE)};
#undef GPUPART__TABLE

const gpupart_backend_ops *gpupart__backend_ops(gpupart_backend b) {
  return (unsigned)b < GPUPART__BACKEND_COUNT ? tables[b] : NULL;
}
