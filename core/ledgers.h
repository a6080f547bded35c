/* The context's ledgers, one per physical device (ledgers.c). */
#ifndef GPUPART_CORE_LEDGERS_H
#define GPUPART_CORE_LEDGERS_H

#include "internal.h"

/* The context's ledger of device id (created with budget when the device is not open in
 * the context yet; its budget stays the first open's), joined as a new member; released
 * by each member, destroyed with the last. shared_dir: NULL for the in-process ledger,
 * else the folder of the shared one. ENOMEM, EINVAL (the device is open in the context
 * with the other kind of ledger), and the shared ledger's codes (ledger_shm.h). */
int gpupart__ledger_acquire(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget, const char *shared_dir,
                            gpupart__ledger **out, gpupart__ledger_member *member);
void gpupart__ledger_release(gpupart_context *ctx, gpupart__ledger *l, gpupart__ledger_member member);

#endif
