/* The settings of one open device: every option's effective value with its source, after
 * the descriptor has had its say, the partitions configuration declares for it, and the
 * granularity and budget that follow from them and from the device. One pure function
 * computes them (gpupart__settings_compute); a device keeps them for its life, so
 * verbose output and `gpupart config` show exactly what the device was opened with. */
#ifndef GPUPART_CORE_SETTINGS_H
#define GPUPART_CORE_SETTINGS_H

#include "config.h"

typedef struct gpupart__settings {
  gpupart_backend backend; /* the one chosen from v[GPUPART__OPT_BACKEND] */
  uint32_t index;          /* the physical index: v[GPUPART__OPT_DEVICE] mapped through its visible list */
  gpupart__value v[GPUPART__OPT_COUNT];
  const gpupart__pspec *parts[GPUPART__MAX_PARTS]; /* owned by the context's configuration */
  uint32_t nparts;
  /* memory_fraction and memory_limit as asked, where an operator's ceiling
   * (memory_fraction_max, memory_limit_max) lowered them: clipped[i] is 1 then. */
  gpupart__value asked[2];
  int clipped[2];
  const gpupart__share *share; /* the orchestrator share that set memory_limit, or NULL */
  /* With the device known (gpupart__settings_in.info): */
  uint64_t granularity; /* the granularity option, raised to the driver's block granularity */
  uint64_t budget;      /* min(total * fraction, limit) - headroom, rounded down to the granularity */
} gpupart__settings;

#define GPUPART__CLIP_FRACTION 0
#define GPUPART__CLIP_LIMIT 1

/* What a device open brings to its settings besides the configuration. */
typedef struct gpupart__settings_in {
  const gpupart_device_desc *desc; /* the program's, copied in and checked (never NULL) */
  int exact;                       /* desc->index is physical (the gpupart command's --device) */
  /* The context descriptor's config_path and ledger_dir (NULL: not given), and whether it
   * set GPUPART_CONTEXT_IGNORE_ENV. */
  const char *config_path, *ledger_dir;
  int ignore_env;
  gpupart_backend backend;         /* the backend chosen (AUTO before one is) */
  const gpupart_device_info *info; /* the device as its backend reports it; NULL before it is open */
} gpupart__settings_in;

/* The physical device index and the backend preference of a device open, before a backend
 * is chosen: s->index and s->v[GPUPART__OPT_DEVICE] and [GPUPART__OPT_BACKEND] (the
 * descriptor's backend wins). The descriptor's index is a program index, mapped through
 * the visible-device list (GPUPART_DEVICE) when one is configured: ENODEV past its end;
 * with in->exact it is physical and the list is not applied. */
int gpupart__settings_target(const gpupart__config *c, const gpupart__settings_in *in, gpupart__settings *s);

/* The settings of the open, from nothing but its arguments: the target as above, every
 * other option for in->backend (the descriptor's non-zero fields first) and the
 * partitions declared for the device; then, when in->info is given, the orchestrator's
 * share (for a memory_limit nothing else set), the operator's ceilings, the granularity
 * and the budget. A budget below the granularity fails naming the input that takes it
 * there and that input's source (EINVAL for a descriptor field, ECONFIG for a variable or
 * the file); the message is the thread's, as every failure's. */
int gpupart__settings_compute(const gpupart__config *c, const gpupart__settings_in *in, gpupart__settings *s);

/* The folder of the device's shared ledger: the ledger_dir option, or its default (the
 * options table's) when a descriptor set it to "". */
const char *gpupart__settings_ledger_dir(const gpupart__settings *s);

/* "clipped by the ceiling: descriptor asked 8589934592" when a ceiling lowered option o
 * (memory_fraction or memory_limit), else "". */
void gpupart__settings_clip_note(const gpupart__settings *s, gpupart__opt o, char *buf, size_t n);

#endif
