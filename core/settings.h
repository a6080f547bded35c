/* The settings of one open device: every option's effective value with its source, after
 * the descriptor has had its say, and the partitions configuration declares for it. A
 * device keeps them for its life, so verbose output and `gpupart config` show exactly
 * what the device was opened with. */
#ifndef GPUPART_CORE_SETTINGS_H
#define GPUPART_CORE_SETTINGS_H

#include "config.h"

typedef struct gpupart__settings {
  gpupart_backend backend; /* the one chosen from v[GPUPART__OPT_BACKEND] */
  uint32_t index;          /* v[GPUPART__OPT_DEVICE].u */
  gpupart__value v[GPUPART__OPT_COUNT];
  const gpupart__pspec *parts[GPUPART__MAX_PARTS]; /* owned by the context's configuration */
  uint32_t nparts;
} gpupart__settings;

/* The device index and the backend preference of a device_open: a non-zero descriptor
 * field, else the configuration. exact: the descriptor's index holds even when it is 0. */
void gpupart__settings_target(const gpupart_context *ctx, const gpupart_device_desc *d, int exact,
                              gpupart__settings *s);
/* Every other option for backend b, the descriptor's non-zero fields first. */
void gpupart__settings_resolve(const gpupart_context *ctx, const gpupart_device_desc *d, gpupart_backend b,
                               gpupart__settings *s);
/* Creates the partitions configuration declares for dev, in order. ECONFIG (or the
 * driver's EDEVMEM, or ENOMEM) naming the source; the caller closes the device on failure. */
int gpupart__settings_create_partitions(gpupart_device *dev);
/* The effective configuration, one line per option with its source, to the context's log
 * or else stderr. */
void gpupart__settings_print(gpupart_device *dev);

#endif
