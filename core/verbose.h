/* What a device open says besides its result (verbose.c), once the device is set up; no
 * gpupart lock held. */
#ifndef GPUPART_CORE_VERBOSE_H
#define GPUPART_CORE_VERBOSE_H

#include "gpupart.h"

/* The effective configuration, one line per option with its source, then the configured
 * partitions and the other frameworks' variables seen, to the context's log or else
 * stderr (GPUPART_VERBOSE=1). */
void gpupart__verbose_print(gpupart_device *dev);
/* Warns (GPUPART_LOG_WARN) when known GPUPART_* variables changed after the context read
 * them (the context keeps what it read), and for each orchestrator value that was ignored
 * because it does not parse. */
void gpupart__verbose_warn_env(gpupart_device *dev);
/* Logs what the configuration sets that does not do what it may seem to: initial_block
 * above max_block (GPUPART_LOG_WARN), and allow_growth = false from a variable or the
 * file with no partition configured for the device, so nothing is preallocated at open
 * (GPUPART_LOG_INFO). */
void gpupart__verbose_notes(gpupart_device *dev);

/* GPUPART_LOG_WARN, once per context (its first device open; a context whose
 * unreachable_said is already set says nothing) and only where someone listens: the
 * configuration that can never apply on this machine (gpupart__config_unreachable),
 * judged by the backends the context has tried, none loaded for it, in one line. */
void gpupart__verbose_unreachable(gpupart_device *dev);

#endif
