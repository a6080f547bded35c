/* The shared ledger (shm*.c, shm_impl.h): the ledger interface over a file that every
 * process of the user (or, in a group folder, of the group: shm_folder.h) maps, so that one physical device's budget
 * and guarantees hold across processes (GPUPART_DEVICE_SHARED, GPUPART_SHARED=1). Its outside reader, which shares only
 * the file format, is snapshot.h. */
#ifndef GPUPART_CORE_LEDGER_SHM_H
#define GPUPART_CORE_LEDGER_SHM_H

#include <stddef.h>

#include "ledger.h"
#include "shm_format.h"

/* Attaches to the shared ledger of device id in folder dir (never NULL or empty: the
 * ledger_dir option's default is the configuration's, not the ledger's), creating it
 * with budget when there is none; an existing ledger keeps its budget. ECONFIG (cannot open or create it, owned by
 * another user or permissions other than 0600, or in a group folder not the group's, not
 * 0660, a folder others may write or this process not in its group; the folder full,
 * another version's), ECORRUPT (not a ledger of this
 * library and device, or a damaged one), EBUSY (its lock held past the wait), ENOMEM; the message names the file. */
int gpupart__ledger_shm_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                               const char *dir, gpupart__ledger **out);

/* Attaches to the existing ledger file at path without creating, claiming or joining it
 * (resize.h): its device is the one the header names. The codes of
 * gpupart__ledger_shm_create, and ECONFIG for a missing or empty file. */
int gpupart__ledger_shm_attach_file(const gpupart__hostmem *mem, const char *path, gpupart__ledger **out);

/* One partition the operator declares: its name, its limit and guarantee in bytes and
 * the fractions of the budget they were given as (the ledger keeps them: ledger.h's
 * gpupart__ledger_size). */
typedef struct gpupart__operator_part {
  char name[GPUPART__LEDGER_NAME_MAX];
  gpupart__ledger_size size;
} gpupart__operator_part;

/* The operator's ledger of device id in dir (shm_operator.c): made before any job, with
 * budget and the n partitions, kept without a member process; path (path_len bytes) gets
 * the file's name. EEXIST when the file is the operator's already, EBUSY when jobs use
 * it, ELIMIT/EINVAL when the figures do not fit, and the codes of
 * gpupart__ledger_shm_create; the message says which. */
int gpupart__ledger_shm_operator_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                                        const char *dir, const gpupart__operator_part *parts, uint32_t n, char *path,
                                        size_t path_len);
/* Ends it: the operator's member goes and the file is unlinked. EINVAL when there is no
 * such file or it is no operator's; EBUSY naming the live members that hold bytes, unless
 * force (they then move to a file of their own, shm_move.c). */
int gpupart__ledger_shm_operator_remove(const gpupart__hostmem *mem, const gpupart__identity *id, const char *dir,
                                        int force, char *path, size_t path_len);

/* Whether l is a shared ledger that is the operator's (and, name not NULL, whether the
 * operator declared the partition of that name): 1 with its file's name in path. */
int gpupart__ledger_shm_operator_of(gpupart__ledger *l, const char *name, char *path, size_t n);

/* For tests: takes the ledger lock of the file at path as a member does (waiting at most
 * timeout_ms), marks the file as being changed by this process, named command, and keeps
 * the lock until the returned descriptor is closed or the process dies; -1 on failure. */
int gpupart__ledger_shm_hold(const char *path, int timeout_ms, const char *command);
/* For tests: where a header field lies in the file ("identity", "epoch", "seq",
 * "holder_pid", "budget", "reserved"); SIZE_MAX for another name. */
size_t gpupart__ledger_shm_field(const char *name);

#endif
