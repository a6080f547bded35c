/* Attaching to a shared ledger (shm_impl.h): the file is opened (made with O_NOFOLLOW
 * when there is none: 0600, or 0660 in a group folder, shm_folder.h) under an flock, so
 * that one process sets a new file up while the others wait; it must be a regular file
 * its folder allows (this user's with no group or other permission bits, or in a group
 * folder the group's with none for others), and either empty (this process sizes it
 * with posix_fallocate, so a full folder is a clear ECONFIG, and writes the header, the
 * magic last) or exactly a ledger of this version for this device. A ledger that no live
 * process uses is this process's to size: the file outlives its processes, and the
 * budget of a run long gone must not bind this one. Each mapping is guarded against
 * truncation (shm_guard.c) from the moment it exists. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "error.h"
#include "shm.h"
#include "shm_impl.h"

/* Maps L's file and guards the mapping. */
static int map_guarded(shm_ledger *L) {
  int rc = gpupart__shm_map(L->fd, L->path, &L->h);
  if (rc == GPUPART_OK) rc = gpupart__shm_guard(L, L->h);
  return rc;
}

/* A new file: sized (a full folder is a clear error), then the header. */
static int create_file(shm_ledger *L, const char *dir, uint64_t budget) {
  int err = posix_fallocate(L->fd, 0, sizeof(shm_header));
  if (err)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger %s: cannot reserve %zu bytes in %s (%s); free space there or set "
                         "GPUPART_LEDGER_DIR to another folder",
                         L->path, sizeof(shm_header), dir, strerror(err));
  int rc = map_guarded(L);
  if (rc == GPUPART_OK) gpupart__shm_init_header(L->h, &L->base.id, budget);
  return rc;
}

/* An existing file of st's size: its size and header must be this library's, for this
 * device. */
static int attach_file(shm_ledger *L, const struct stat *st) {
  int rc = gpupart__shm_other_version(L->fd, L->path);
  if (rc) return rc;
  if ((uint64_t)st->st_size != sizeof(shm_header))
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s has %lld bytes, not the %zu of a gpupart ledger: refused",
                         L->path, (long long)st->st_size, sizeof(shm_header));
  if ((rc = map_guarded(L))) return rc;
  if (!gpupart__shm_header_ok(L->h))
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: not a gpupart %u ledger (bad magic, version or size): refused",
                         L->path, SHM_VERSION);
  if (strncmp(L->h->identity, L->base.id.key, sizeof L->h->identity))
    return gpupart__fail(GPUPART_ECORRUPT,
                         "ledger %s is not the ledger of %s (its header names device '%.*s'): "
                         "refused",
                         L->path, L->base.id.key, (int)strnlen(L->h->identity, sizeof L->h->identity), L->h->identity);
  L->epoch = L->h->epoch;
  return GPUPART_OK;
}

static int open_file(shm_ledger *L, const char *dir, uint64_t budget) {
  struct stat st;
  int rc = gpupart__shm_folder(dir, &L->folder);
  if (rc) return rc;
  gpupart__ledger_shm_path(dir, &L->folder, &L->base.id, L->path, sizeof L->path);
  L->fd = gpupart__shm_open_file(L->path, &L->folder);
  if (L->fd < 0)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger %s: %s (the folder is ledger_dir: GPUPART_LEDGER_DIR, the file's "
                         "ledger_dir or /dev/shm)",
                         L->path, strerror(errno));
  flock(L->fd, LOCK_EX); /* one process sets a new file up; the others wait for it */
  rc = gpupart__shm_check_owner(L->fd, L->path, &L->folder, &st);
  if (rc == GPUPART_OK && st.st_size == 0) {
    rc = create_file(L, dir, budget);
    L->epoch = L->h ? L->h->epoch : 0;
  } else if (rc == GPUPART_OK) {
    rc = attach_file(L, &st);
  }
  if (rc == GPUPART_OK && gpupart__shm_attach(L->fd, L->h, &L->attach))
    rc = gpupart__fail(GPUPART_EBUSY, "ledger %s: all %u attachment slots are taken by live processes", L->path,
                       SHM_ATTACHMENTS);
  flock(L->fd, LOCK_UN);
  return rc;
}

/* Lock held: whether any member's process lives (stops at the first: O(1) when processes
 * start while others run, so a crowd of starts scans nothing; dead ones are reaped
 * lazily, by the calls that read the ledger). */
static int any_live_locked(shm_ledger *L, uint32_t *live) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (L->h->member[i].id && gpupart__shm_alive(L, i)) {
      *live = i;
      return 1;
    }
  return 0;
}

/* Lock held: a budget of 0 bytes is never written by a gpupart process. */
static int zero_budget(const shm_ledger *L, uint32_t live) {
  char who[160];
  gpupart__shm_describe_holder(L->h->member[live].pid, L->h->member[live].command, who, sizeof who);
  return gpupart__fail(GPUPART_ECORRUPT,
                       "ledger %s records a budget of 0 bytes, which no gpupart process writes: "
                       "the file is damaged; stop the processes that use it (%s among them), then remove it",
                       L->path, who);
}

static int claim_if_unused(shm_ledger *L, uint64_t budget) {
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  uint32_t live = 0;
  if (!any_live_locked(L, &live)) {
    memset(L->h->member, 0, sizeof L->h->member);
    memset(L->h->part, 0, sizeof L->h->part);
    memset(L->h->share, 0, sizeof L->h->share);
    L->h->budget = budget;
    L->h->peak_reserved = 0;
    gpupart__shm_recompute(L->h);
  }
  if (!L->h->budget) rc = zero_budget(L, live);
  gpupart__shm_unlock(L);
  return rc;
}

static void discard(shm_ledger *L) {
  gpupart__shm_unguard(L, NULL);
  if (L->h) munmap(L->h, sizeof *L->h);
  if (L->fd >= 0) close(L->fd);
  pthread_mutex_destroy(&L->local);
  gpupart__host_free(L->mem, L);
}

/* This process as it names itself when it holds the lock. */
static void name_self(shm_ledger *L) {
  char name[17] = {0};
  L->pid = getpid();
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) name[0] = '\0';
  memcpy(L->command, name, sizeof L->command);
}

int gpupart__ledger_shm_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                               const char *dir, gpupart__ledger **out) {
  *out = NULL;
  if (!dir || !*dir) return gpupart__fail(GPUPART_EINVAL, "device_open: no ledger folder given");
  shm_ledger *L = gpupart__host_calloc(mem, 1, sizeof *L);
  if (!L) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  L->base.ops = &gpupart__shm_ops;
  L->base.id = *id;
  L->base.shared = 1;
  L->mem = mem;
  L->fd = -1;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) L->proxy[i].fd = -1;
  gpupart__lock_init(&L->pending_lock, 0);
  pthread_mutex_init(&L->local, NULL);
  name_self(L);
  int rc = open_file(L, dir, budget);
  if (rc == GPUPART_OK) rc = claim_if_unused(L, budget);
  if (rc) {
    discard(L);
    return rc;
  }
  *out = &L->base;
  return GPUPART_OK;
}
