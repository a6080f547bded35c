/* Changing a shared ledger from outside (shm_resize.c), as `gpupart resize` and an
 * operator's controller do: a partition's limit and guarantee, or the device's budget,
 * rewritten in the ledger file under its lock by a process that never joins it as a
 * member. The members read their partitions' limits and the budget from the file on
 * every reservation, so the new figures bind them at once; a shrink below what the
 * members hold first asks them to give back (the responders of core/trim.c, woken as for
 * a floor), and is refused, naming the holders, when they still hold too much once the
 * wait is over. */
#ifndef GPUPART_CORE_LEDGER_RESIZE_H
#define GPUPART_CORE_LEDGER_RESIZE_H

#include <stdint.h>

#include "ledger.h" /* GPUPART__LEDGER_KEEP */

/* One change. partition NULL: the budget becomes limit (guarantee unused). */
typedef struct gpupart__ledger_change {
  const char *partition;
  uint64_t limit;     /* the partition's new limit, or the new budget; never 0 */
  uint64_t guarantee; /* the partition's new guarantee, or GPUPART__LEDGER_KEEP */
  int wait_ms;        /* how long the holders get to give back bytes above a shrink (0 to 60000) */
} gpupart__ledger_change;

/* Applies c to the ledger file at path (an existing, set-up ledger of this user). OK;
 * EINVAL (a figure of 0, a guarantee above the limit, no partition of that name, the
 * budget below a partition's limit); ELIMIT (a limit above the budget, guarantees summing
 * past it); EBUSY (the members still hold more than the new figure after the wait, or
 * the ledger's lock is held past its wait: the message names the holders); ECONFIG or
 * ECORRUPT (the file cannot be used). The thread's message (gpupart_last_error) says
 * why. */
int gpupart__ledger_change_file(const char *path, const gpupart__ledger_change *c);

#endif
