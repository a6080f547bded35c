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
  /* memory_fraction and memory_limit as asked, where an operator's ceiling
   * (memory_fraction_max, memory_limit_max) lowered them: clipped[i] is 1 then. */
  gpupart__value asked[2];
  int clipped[2];
  const gpupart__share *share; /* the orchestrator share that set memory_limit, or NULL */
} gpupart__settings;

#define GPUPART__CLIP_FRACTION 0
#define GPUPART__CLIP_LIMIT 1

/* The physical device index and the backend preference of a device_open. The
 * descriptor's index is a program index, mapped through the visible-device list
 * (GPUPART_DEVICE) when one is configured: ENODEV past its end. exact: the descriptor's
 * index is physical and the list is not applied. A descriptor backend wins. */
int gpupart__settings_target(const gpupart_context *ctx, const gpupart_device_desc *d, int exact,
                              gpupart__settings *s);
/* Every other option for backend b, the descriptor's non-zero fields first. */
void gpupart__settings_resolve(const gpupart_context *ctx, const gpupart_device_desc *d, gpupart_backend b,
                               gpupart__settings *s);
/* dev->budget from the device's total and its settings, after the orchestrator's share
 * (for a memory_limit nothing else set) and the operator's ceilings have been applied to
 * them; a budget below the granularity
 * fails naming the input that takes it there and that input's source (EINVAL for a
 * descriptor field, ECONFIG for a variable or the file). */
int gpupart__settings_budget(gpupart_device *dev);
/* The folder of the device's shared ledger: the ledger_dir option, or its default (the
 * options table's) when a descriptor set it to "". */
const char *gpupart__settings_ledger_dir(const gpupart__settings *s);
/* One log line: to the context's log function, else to stderr when verbose is set. */
void gpupart__settings_log(gpupart_context *ctx, gpupart_log_level level, int verbose, const char *line);
/* Warns (GPUPART_LOG_WARN) when known GPUPART_* variables changed after the context read
 * them (the context keeps what it read), and for each orchestrator value that was ignored
 * because it does not parse. */
void gpupart__settings_warn_env(gpupart_device *dev);
/* Logs what the configuration sets that does not do what it may seem to: initial_block
 * above max_block (GPUPART_LOG_WARN), and allow_growth = false from a variable or the
 * file with no partition configured for the device, so nothing is preallocated at open
 * (GPUPART_LOG_INFO). */
void gpupart__settings_notes(gpupart_device *dev);
/* Creates the partitions configuration declares for dev, in order. ECONFIG (or the
 * driver's EDEVMEM, or ENOMEM) naming the source; the caller closes the device on failure. */
int gpupart__settings_create_partitions(gpupart_device *dev);
/* "clipped by the ceiling: descriptor asked 8589934592" when a ceiling lowered option o
 * (memory_fraction or memory_limit), else "". */
void gpupart__settings_clip_note(const gpupart__settings *s, gpupart__opt o, char *buf, size_t n);
/* The effective configuration, one line per option with its source, to the context's log
 * or else stderr. */
void gpupart__settings_print(gpupart_device *dev);

#endif
