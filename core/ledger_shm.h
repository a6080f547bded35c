/* The shared ledger (ledger_shm.c): the ledger interface over a file that every process
 * of the user maps, so that one physical device's budget and guarantees hold across
 * processes (GPUPART_DEVICE_SHARED, GPUPART_SHARED=1). */
#ifndef GPUPART_CORE_LEDGER_SHM_H
#define GPUPART_CORE_LEDGER_SHM_H

#include <stddef.h>

#include "ledger.h"

/* Attaches to the shared ledger of device id in folder dir (NULL or "" = /dev/shm),
 * creating it with budget when there is none; an existing ledger keeps its budget.
 * ECONFIG (cannot open or create it, owned by another user, permissions other than 0600,
 * the folder full), ECORRUPT (not a ledger of this library and device), ENOMEM; the
 * message names the file. */
int gpupart__ledger_shm_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                               const char *dir, gpupart__ledger **out);
/* The file of device id's ledger in dir: dir/gpupart-<uid>-<identity>.ledger. */
void gpupart__ledger_shm_path(const char *dir, const gpupart__identity *id, char *out, size_t n);

#endif
