/* Enumeration (enumerate.c): gpupart_enumerate, and one backend's devices for the choice
 * of a device open. */
#ifndef GPUPART_CORE_ENUMERATE_H
#define GPUPART_CORE_ENUMERATE_H

#include "gpupart.h"

/* Backend b's devices through ctx (loading it on first use): *found of them, the first
 * cap written to infos (NULL when cap is 0). The backend's load or enumeration error. */
int gpupart__enumerate_one(gpupart_context *ctx, gpupart_backend b, gpupart_device_info *infos, uint32_t cap,
                           uint32_t *found);

#endif
