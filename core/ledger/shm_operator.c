/* The operator's ledger (shm_impl.h; `gpupart ledger create` and `gpupart ledger remove`):
 * a shared ledger made before any job, with the operator's budget and partitions, by a
 * process that does not stay a member. The operator is one member slot of the file
 * marked with SHM_OPERATOR_PID: no process holds its byte, liveness counts it alive, and
 * it has one share of each partition the operator declared, holding no bytes. So the
 * partitions stay in the file while no job is a member of them, their unused guarantees
 * count in the ledger's sums (a floor is held before its job starts), and the budget is
 * never claimed anew by the first job (claim_if_unused finds a live member). Jobs join
 * those partitions with the operator's figures whatever they asked (shm.c's admission).
 * Removing it drops the operator's member and unlinks the file; the live members that
 * remain (only with --force when they hold bytes) move into a file made anew with their
 * own figures, as after any deletion (shm_move.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "shm.h"
#include "shm_impl.h"

/* The file of device id's ledger in folder dir (a user's or a group's, shm_folder.h);
 * path holds the folder's name when it cannot be looked at (ECONFIG, the message says). */
static int path_of(const char *dir, const gpupart__identity *id, char *path, size_t n) {
  shm_folder f;
  snprintf(path, n, "%s", dir ? dir : "");
  int rc = gpupart__shm_folder(dir ? dir : "", &f);
  if (rc == GPUPART_OK) gpupart__ledger_shm_path(dir, &f, id, path, n);
  return rc;
}

/* Lock held: the operator's member slot, or SHM_MEMBERS. */
static uint32_t operator_slot(const shm_header *h) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (gpupart__shm_is_operator(&h->member[i])) return i;
  return SHM_MEMBERS;
}

/* Lock held: "pid P (comm) N bytes, ..." for the live members other than the operator
 * (only those holding bytes when holding); how many there are. */
static uint32_t name_live(shm_ledger *L, int holding, char *out, size_t n) {
  uint32_t count = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    const shm_member *m = &L->h->member[i];
    if (!m->id || gpupart__shm_is_operator(m) || !gpupart__shm_alive(L, i)) continue;
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < SHM_SHARES; k++)
      if (L->h->share[k].member == m->id) bytes = gpupart__shm_add(bytes, L->h->share[k].reserved);
    if (holding && !bytes) continue;
    char who[160];
    size_t len = strlen(out);
    gpupart__shm_describe_holder(m->pid, m->command, who, sizeof who);
    if (count++ < 4)
      snprintf(out + len, n - len, "%s%s %llu bytes", count > 1 ? ", " : "", who, (unsigned long long)bytes);
  }
  return count;
}

/* Lock held: the operator's member, with one empty share of each partition. */
static int declare_locked(shm_ledger *L, uint64_t budget, const gpupart__operator_part *parts, uint32_t n) {
  shm_header *h = L->h;
  uint32_t slot = 0;
  while (slot < SHM_MEMBERS && h->member[slot].id) slot++;
  if (slot == SHM_MEMBERS || n > SHM_PARTS || n > SHM_SHARES)
    return gpupart__fail(GPUPART_ENOMEM, "ledger %s: no room for the operator's member and %u partitions", L->path, n);
  memset(h->part, 0, sizeof h->part);
  memset(h->share, 0, sizeof h->share);
  h->budget = budget;
  h->member[slot] = (shm_member){.id = gpupart__shm_new_member_id(h), .pid = SHM_OPERATOR_PID, .command = "operator"};
  for (uint32_t k = 0; k < n; k++) {
    h->part[k] = gpupart__shm_part_sized(&parts[k].size);
    snprintf(h->part[k].name, SHM_NAME, "%s", parts[k].name);
    h->share[k] = (shm_share){.member = h->member[slot].id, .member_slot = slot, .part = k};
  }
  gpupart__shm_recompute(h);
  return GPUPART_OK;
}

/* Whether the operator's figures fit: each limit within the budget, the floors' sum too,
 * names unique and short enough. */
static int figures_fit(const char *path, uint64_t budget, const gpupart__operator_part *parts, uint32_t n) {
  uint64_t floors = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (strlen(parts[k].name) >= SHM_NAME || !parts[k].name[0])
      return gpupart__fail(GPUPART_EINVAL, "ledger %s: partition name '%s' is empty or longer than %u bytes", path,
                           parts[k].name, SHM_NAME - 1);
    for (uint32_t j = 0; j < k; j++)
      if (strcmp(parts[j].name, parts[k].name) == 0)
        return gpupart__fail(GPUPART_EINVAL, "ledger %s: partition '%s' is declared twice", path, parts[k].name);
    if (parts[k].size.limit > budget || parts[k].size.guarantee > parts[k].size.limit)
      return gpupart__fail(GPUPART_ELIMIT,
                           "ledger %s: partition '%s' (limit %llu, guarantee %llu) exceeds the budget %llu", path,
                           parts[k].name, (unsigned long long)parts[k].size.limit,
                           (unsigned long long)parts[k].size.guarantee, (unsigned long long)budget);
    floors = gpupart__shm_add(floors, parts[k].size.guarantee);
  }
  if (floors > budget)
    return gpupart__fail(GPUPART_ELIMIT, "ledger %s: the partitions' guarantees (%llu bytes) exceed the budget %llu",
                         path, (unsigned long long)floors, (unsigned long long)budget);
  return GPUPART_OK;
}

/* Lock held: the operator's ledger made in L's file, unless one is there or jobs use it. */
static int create_locked(shm_ledger *L, uint64_t budget, const gpupart__operator_part *parts, uint32_t n) {
  char who[768];
  gpupart__shm_reap(L);
  if (operator_slot(L->h) < SHM_MEMBERS)
    return gpupart__fail(GPUPART_EEXIST,
                         "ledger %s is already the operator's (budget %llu bytes): run gpupart ledger remove "
                         "first to change it",
                         L->path, (unsigned long long)L->h->budget);
  if (name_live(L, 0, who, sizeof who))
    return gpupart__fail(GPUPART_EBUSY,
                         "ledger %s is in use by jobs with their own figures (%s): create the operator's ledger "
                         "before any job starts",
                         L->path, who);
  return declare_locked(L, budget, parts, n);
}

int gpupart__ledger_shm_operator_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                                        const char *dir, const gpupart__operator_part *parts, uint32_t n, char *path,
                                        size_t path_len) {
  gpupart__ledger *l = NULL;
  int rc = path_of(dir, id, path, path_len);
  if (rc) return rc;
  if (!budget) return gpupart__fail(GPUPART_EINVAL, "ledger %s: a budget of 0 bytes", path);
  rc = figures_fit(path, budget, parts, n);
  if (rc == GPUPART_OK) rc = gpupart__ledger_shm_create(mem, id, budget, dir, &l);
  if (rc) return rc;
  shm_ledger *L = (shm_ledger *)l;
  if ((rc = gpupart__shm_lock(L)) == GPUPART_OK) {
    rc = create_locked(L, budget, parts, n);
    gpupart__shm_unlock(L);
  }
  l->ops->destroy(l);
  return rc;
}

/* Lock held: ends the operator's ledger in L's file (see the file's comment). */
static int remove_locked(shm_ledger *L, int force) {
  char who[768];
  gpupart__shm_reap(L);
  uint32_t slot = operator_slot(L->h);
  if (slot == SHM_MEMBERS)
    return gpupart__fail(GPUPART_EINVAL, "ledger %s is not an operator's ledger (gpupart ledger create made none)",
                         L->path);
  if (!force && name_live(L, 1, who, sizeof who))
    return gpupart__fail(GPUPART_EBUSY, "ledger %s: live jobs hold bytes in it (%s): stop them, or pass --force",
                         L->path, who);
  (void)gpupart__shm_drop_member(L->h, slot);
  gpupart__shm_recompute(L->h);
  if (unlink(L->path) != 0)
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s: cannot remove it: %s", L->path, strerror(errno));
  return GPUPART_OK;
}

/* Whether the file at path looks like an operator's ledger, read without attaching (an
 * attachment to a ledger no live process uses would claim it anew): the lock-held check
 * that follows decides. */
static int looks_operator(const gpupart__hostmem *mem, const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), yes = 0;
  shm_header *h = fd < 0 ? NULL : gpupart__host_calloc(mem, 1, sizeof *h);
  if (h && pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h && gpupart__shm_header_ok(h))
    yes = operator_slot(h) < SHM_MEMBERS;
  gpupart__host_free(mem, h);
  if (fd >= 0) close(fd);
  return yes;
}

int gpupart__ledger_shm_operator_remove(const gpupart__hostmem *mem, const gpupart__identity *id, const char *dir,
                                        int force, char *path, size_t path_len) {
  struct stat st;
  gpupart__ledger *l = NULL;
  int rc = path_of(dir, id, path, path_len);
  if (rc) return rc;
  if (lstat(path, &st) != 0) return gpupart__fail(GPUPART_EINVAL, "ledger %s: %s", path, strerror(errno));
  if (!looks_operator(mem, path))
    return gpupart__fail(GPUPART_EINVAL, "ledger %s is not an operator's ledger (gpupart ledger create made none)",
                         path);
  rc = gpupart__ledger_shm_create(mem, id, 1, dir, &l);
  if (rc) return rc;
  shm_ledger *L = (shm_ledger *)l;
  if ((rc = gpupart__shm_lock(L)) == GPUPART_OK) {
    rc = remove_locked(L, force);
    gpupart__shm_unlock(L);
  }
  l->ops->destroy(l);
  return rc;
}

int gpupart__ledger_shm_operator_of(gpupart__ledger *l, const char *name, char *path, size_t n) {
  if (!l || !l->shared) return 0;
  shm_ledger *L = (shm_ledger *)l;
  if (L->inherited || gpupart__shm_lock(L)) return 0;
  int part = name ? gpupart__shm_find_part(L->h, name) : 0;
  int yes =
      operator_slot(L->h) < SHM_MEMBERS && part >= 0 && (!name || gpupart__shm_part_operator(L->h, (uint32_t)part));
  gpupart__shm_unlock(L);
  if (yes) snprintf(path, n, "%s", L->path);
  return yes;
}
