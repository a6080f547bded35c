/* Accounting for the interposers (interpose/): the layers never write device memory
 * themselves and add no policy; they turn each driver allocation they intercept into a
 * gpupart allocation of the same size on a partition of a *mirror* device, a simulated
 * gpupart device (the sim backend, nothing behind it) as large as the real one. The
 * partition's limit, the device budget, the configuration (GPUPART_* variables and the
 * file) and the shared ledger (GPUPART_SHARED=1) are then gpupart's own, through the
 * public API only, as in any application. docs/unmodified.md says why a mirror and what
 * it means for the shared ledger. */
#ifndef GPUPART_INTERPOSE_ACCOUNT_H
#define GPUPART_INTERPOSE_ACCOUNT_H

#include <stdint.h>

#include "gpupart.h"

/* The mirror partition of real device `key` (a number the layer derives from the
 * device's position, the same in every process) whose total is `total` bytes: opened on
 * first use, then cached. NULL when gpupart refused the configuration or the device
 * (said once on stderr): the layer then passes calls through unaccounted. */
gpupart_partition *gpupart__ip_partition(uint32_t key, uint64_t total);
/* The partition's limit in bytes (what the layer reports as the device's size). */
uint64_t gpupart__ip_limit(gpupart_partition *p);
/* The bytes the partition's live allocations hold (what this process uses). */
uint64_t gpupart__ip_in_use(gpupart_partition *p);
/* Accounts size bytes: 0 with *out set (NULL when gpupart cannot account the size at
 * all, e.g. more than the device holds: the driver then answers as it would without the
 * layer), or -1 when the partition or the budget refuses it (ELIMIT, EDEVMEM). */
int gpupart__ip_account(gpupart_partition *p, uint64_t size, gpupart_allocation **out);
/* Gives back what gpupart__ip_account took; NULL is a no-op. */
void gpupart__ip_unaccount(gpupart_allocation *a);

/* In a forked child (a pthread_atfork handler, single-threaded): forgets the parent's
 * context and mirrors without closing them (closing would take the parent's share from a
 * shared ledger); the child's next gpupart__ip_partition opens its own. */
void gpupart__ip_forget(void);

#endif
