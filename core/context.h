/* The context's backends (context.c): each loaded on first use under the context lock,
 * its result kept, so a missing driver costs one dlopen per context. */
#ifndef GPUPART_CORE_CONTEXT_H
#define GPUPART_CORE_CONTEXT_H

#include "internal.h"

/* Backend b of ctx, loaded on first use: its table and state, or the first load's error. */
int gpupart__backend_get(gpupart_context *ctx, gpupart_backend b, const gpupart_backend_ops **ops, void **state);
/* Whether the load of backend b is already decided in ctx (not built, or tried), so
 * asking for it costs no driver library load. */
int gpupart__backend_known(gpupart_context *ctx, gpupart_backend b);
/* Whether the configuration names backend b: its backend list (GPUPART_BACKEND,
 * `backend =`) lists it, or its library path (GPUPART_<B>_LIBRARY) is set. */
int gpupart__backend_named(const gpupart_context *ctx, gpupart_backend b);

#endif
