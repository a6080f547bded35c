/* The adapters built into this conformance suite, from the one registry of backends
 * (core/base/registry.h): the adapter of backend <name> is conformance_<name>, compiled in
 * (tests/meson.build) when the backend is built. The declarations are weak, so a backend
 * whose adapter is not written yet reads as NULL here and its tests skip, saying so. */
#include "conformance.h"
#include "registry.h"

#define CONFORMANCE_DECLARE(ID, name, rank) extern const conformance_adapter conformance_##name __attribute__((weak));
GPUPART__BACKENDS(CONFORMANCE_DECLARE)
#undef CONFORMANCE_DECLARE

const conformance_adapter *conformance_adapter_for(gpupart_backend b) {
#define CONFORMANCE_ENTRY(ID, name, rank) [GPUPART_BACKEND_##ID] = &conformance_##name,
  static const conformance_adapter *const table[GPUPART__BACKEND_COUNT] = {GPUPART__BACKENDS(CONFORMANCE_ENTRY)};
#undef CONFORMANCE_ENTRY
  return (unsigned)b < GPUPART__BACKEND_COUNT ? table[b] : NULL;
}
