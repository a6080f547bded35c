/* Opening devices (device.c), for the callers that need more than gpupart_device_open. */
#ifndef GPUPART_CORE_DEVICE_H
#define GPUPART_CORE_DEVICE_H

#include "gpupart.h"

/* gpupart_device_open, with exact = 1 to open desc->index even when it is 0 (the gpupart
 * command's --device), where the public call lets configuration choose. */
gpupart_result gpupart__device_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
                                    gpupart_device **out);
/* gpupart_device_open for a program built against gpupart 0.1 (abi_0_1.c): desc (NULL =
 * defaults) has the 0.1 layout of gpupart_device_desc, without backend_desc_type and
 * backend_desc_size, and its backend_desc the 0.1 layout of that backend's struct. */
gpupart_result gpupart__device_open_0_1(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out);

#endif
