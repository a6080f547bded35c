/* The introspect door (core/introspect.c): what the gpupart command may ask of the library
 * beyond the public API, as plain values of the configuration room, never a handle's
 * fields. `gpupart config` shows the settings a device was opened with and where each
 * value came from, the orchestrator shares, the other frameworks' variables and the
 * configured partitions; top, metrics and the exporter find the ledger folder a program
 * would use. Everything here is read-only and valid while the handle it came from is. */
#ifndef GPUPART_CORE_INTROSPECT_H
#define GPUPART_CORE_INTROSPECT_H

#include "gpupart.h"
#include "settings.h"

/* gpupart_device_open as the command runs it: exact = 1 opens desc->index as a physical
 * index (its --device; GPUPART_DEVICE's visible list is not applied), and the open says
 * nothing of configuration that can never apply (the command says it itself, having
 * asked every backend: gpupart__config_unreachable, reach.h). */
gpupart_result gpupart__introspect_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
                                        gpupart_device **out);

/* The settings dev was opened with: every option's value and source, the configured
 * partitions, what a ceiling clipped, the orchestrator share applied. */
const gpupart__settings *gpupart__introspect_settings(const gpupart_device *dev);

/* The configuration ctx loaded: the orchestrator shares (and the values ignored), and the
 * other frameworks' variables seen. */
const gpupart__config *gpupart__introspect_config(const gpupart_context *ctx);

/* Configured partition i of dev (i < its settings' nparts, in declaration order). */
typedef struct gpupart__introspect_partition {
  gpupart_partition *handle;  /* the device's partition i (made first, in order), or NULL */
  const gpupart__pspec *spec; /* as declared, with its source */
  int preallocated;           /* takes its limit at creation (growth off) */
} gpupart__introspect_partition;
/* EINVAL when i is past the configured partitions. */
int gpupart__introspect_configured(gpupart_device *dev, uint32_t i, gpupart__introspect_partition *out);

/* The folder of the shared ledgers a device opened with ctx's configuration uses (the
 * ledger_dir option, or its default), copied to out. ctx's descriptor's ledger_dir
 * counts, as it does for a device open. */
void gpupart__introspect_ledger_dir(const gpupart_context *ctx, char *out, size_t n);

/* Whether dev's backend and device offer the virtual memory expandable partitions need:
 * 1 with the granule in *granule, or 0 with why into why (n bytes); expandable partitions
 * then keep growth blocks. */
int gpupart__introspect_vm(gpupart_device *dev, uint64_t *granule, char *why, size_t n);

/* Whether ctx's configuration names backend b (its backend list, or its library path). */
int gpupart__introspect_backend_named(const gpupart_context *ctx, gpupart_backend b);

/* The operator's ledger (gpupart ledger create): the device of desc (exact as for
 * gpupart__introspect_open) opened with ctx's configuration without its shared ledger,
 * then its shared ledger made in the configured folder with that budget and the
 * configured partitions' limits and guarantees, kept without a member process. path gets
 * the file, budget and nparts what was declared, shared whether the configuration says
 * shared (jobs of it use the ledger). The codes of gpupart__ledger_shm_operator_create
 * (EEXIST: it is there already; EBUSY: jobs use it). */
int gpupart__introspect_ledger_create(gpupart_context *ctx, const gpupart_device_desc *desc, int exact, char *path,
                                      size_t n, uint64_t *budget, uint32_t *nparts, int *shared);
/* Ends it (gpupart ledger remove): EBUSY naming the live members that hold bytes unless
 * force; EINVAL when there is none. */
int gpupart__introspect_ledger_remove(gpupart_context *ctx, const gpupart_device_desc *desc, int exact, int force,
                                      char *path, size_t n);
/* Whether dev's figures come from the operator's ledger: its budget (name NULL), or the
 * partition named name. 1 with "ledger PATH" in out (n bytes), the source gpupart config
 * shows; else 0. */
int gpupart__introspect_ledger_source(gpupart_device *dev, const char *name, char *out, size_t n);

#endif
