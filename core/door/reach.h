/* Configuration that can never apply on this machine (reach.c): device selectors of the
 * context's configuration whose backend is missing or leaves the device out. */
#ifndef GPUPART_CORE_REACH_H
#define GPUPART_CORE_REACH_H

#include "config.h"

/* One configured device that no open on this machine can reach, and why. */
typedef struct gpupart__unreachable {
  gpupart__source src;               /* the first value, or the partition, that names it */
  gpupart__selector sel;             /* the device as written */
  char what[GPUPART__NAME_MAX + 96]; /* "[device cuda:0]", "GPUPART_MEMORY_LIMIT's entry 1",
                                        "partition 'train' on cuda:0" */
  char why[GPUPART__MSG_MAX];        /* "cuda: cannot load ...", "vulkan: 1 device", ... */
} gpupart__unreachable;

typedef void (*gpupart__unreachable_fn)(const gpupart__unreachable *u, void *user);

/* Calls fn (may be NULL) for each [device] section, per-device variable entry and
 * partition device of ctx's configuration that can never apply here: a backend not
 * built, whose driver cannot be loaded or that the configured backend list leaves out,
 * or a device index the backend (for an index alone: every backend a device open would
 * try) does not have. Loads and enumerates the backends named, through ctx (so a
 * library path the configuration gives is used); with loaded_only, loads none and
 * judges only by backends ctx has tried already (a device open: it never loads a driver
 * library only to warn). Returns how many were found. */
uint32_t gpupart__config_unreachable(struct gpupart_context *ctx, int loaded_only, gpupart__unreachable_fn fn,
                                     void *user);

#endif
