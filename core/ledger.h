/* The ledger: the device-wide accounting of partition limits, guarantees and reserved
 * bytes. It is an internal interface with an implementation per kind of sharing (the
 * in-process one is ledger_local.c), so that a shared-memory ledger for partitions that
 * span processes changes no policy code. Every ledger call is thread-safe and takes only
 * the ledger's own lock, which is the innermost lock of the library: callers may hold
 * partition and device locks, and the ledger never calls out while holding it. */
#ifndef GPUPART_CORE_LEDGER_H
#define GPUPART_CORE_LEDGER_H

#include <stdint.h>

#include "hostmem.h"

typedef struct gpupart__ledger gpupart__ledger;
typedef struct gpupart__ledger_entry gpupart__ledger_entry; /* one partition's account */

/* Why a reservation was refused. */
typedef enum gpupart__refusal {
  GPUPART__GRANTED = 0,
  GPUPART__REFUSED_LIMIT,  /* the partition's own limit */
  GPUPART__REFUSED_BUDGET, /* the device budget, less other partitions' unused guarantees */
} gpupart__refusal;

typedef struct gpupart__ledger_figures {
  uint64_t limit, guarantee, reserved, peak_reserved;
} gpupart__ledger_figures;

typedef struct gpupart__ledger_ops {
  void (*destroy)(gpupart__ledger *l);
  /* ELIMIT when the guarantees would sum past the budget, or limit exceeds the budget. */
  int (*add)(gpupart__ledger *l, uint64_t limit, uint64_t guarantee, gpupart__ledger_entry **out);
  void (*remove)(gpupart__ledger *l, gpupart__ledger_entry *e); /* e->reserved must be 0 */
  gpupart__refusal (*reserve)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes);
  void (*release)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes);
  /* The most bytes e could reserve now, and which rule bounds it. */
  uint64_t (*grantable)(gpupart__ledger *l, gpupart__ledger_entry *e, gpupart__refusal *bound);
  /* ELIMIT (nothing changed) when growing past the budget; EBUSY when reserved exceeds
   * new_limit. Clamps the guarantee down to the new limit. */
  int (*set_limit)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t new_limit);
  void (*get)(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out);
  /* Device-wide: limit = budget, guarantee = sum of guarantees, reserved, peak_reserved. */
  void (*totals)(gpupart__ledger *l, gpupart__ledger_figures *out);
  void (*reset_peak)(gpupart__ledger *l, gpupart__ledger_entry *e);
  /* 0, or -1 with the first broken invariant written to why. */
  int (*check)(gpupart__ledger *l, char *why, uint64_t why_len);
} gpupart__ledger_ops;

struct gpupart__ledger {
  const gpupart__ledger_ops *ops;
};

/* The in-process ledger. NULL when out of host memory. */
gpupart__ledger *gpupart__ledger_local_create(const gpupart__hostmem *mem, uint64_t budget);

#endif
