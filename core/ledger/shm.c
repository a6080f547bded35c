/* The shared ledger: the same accounting as local.c, kept in a file of the
 * ledger folder (GPUPART_LEDGER_DIR, default /dev/shm) that every process of the user
 * (of the group, in a group folder: shm_folder.h) maps, one file per physical device, so that budgets and guarantees
 * hold across processes. The file (shm_format.h) holds partitions (name, limit, guarantee, reserved, peak) and shares:
 * one per member of a partition, with the bytes that member reserved, so that processes join a partition by name and
 * share its limit; a partition goes when its last share does. This file is the ledger interface over it; every call
 * takes the ledger's lock (shm_lock.c), which also finds dead members and repairs
 * what a holder that died left. A member is alive while its process holds an
 * open-file-description lock on the member's byte of the file, which the kernel drops
 * when the process dies (whatever its pid or namespace). What cannot be done because the
 * lock cannot be taken (a stopped holder) is never lost: a release or a removal is queued
 * and applied by the next call that takes it. A counter in the header asks the other
 * processes to trim (the OOM sequence). A child forked from a member is no member: its
 * calls read figures but change nothing of its parent's. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "error.h"
#include "shm_impl.h"

/* What find returns for a partition this process is no member of: non-NULL, and no share
 * of the file, so any operation on it is refused. */
static shm_entry foreign = {NULL, UINT32_MAX, 0, 0, 0};

static shm_ledger *shm(gpupart__ledger *l) { return (shm_ledger *)l; }
static shm_entry *handle(const gpupart__ledger_entry *e) { return (shm_entry *)(uintptr_t)e; }
static uint64_t sub0(uint64_t a, uint64_t b) { return gpupart__shm_sub0(a, b); }
static uint64_t add_sat(uint64_t a, uint64_t b) { return gpupart__shm_add(a, b); }
static uint64_t unused_of(const shm_part *p) { return gpupart__shm_unused(p); }
static shm_part *part_of(shm_ledger *L, const shm_share *s) { return &L->h->part[s->part]; }

/* For calls that only read: the lock taken, or, in a forked child (which may not take it:
 * it is no member), the file read as it is. 0 or the lock's code. */
static int read_begin(shm_ledger *L) { return L->inherited ? 0 : gpupart__shm_lock(L); }
static void read_end(shm_ledger *L) {
  if (!L->inherited) gpupart__shm_unlock(L);
}

static void queue(shm_ledger *L) { __atomic_store_n(&L->queued, 1, __ATOMIC_RELEASE); }

/* ---- the interface ---- */

static void shm_destroy(gpupart__ledger *l) {
  shm_ledger *L = shm(l);
  gpupart__shm_unguard(L, NULL);
  while (L->handles) {
    shm_entry *x = L->handles;
    L->handles = x->next;
    gpupart__host_free(L->mem, x);
  }
  while (L->retired) {
    shm_retired *r = L->retired;
    L->retired = r->next;
    munmap(r->h, sizeof(shm_header));
    gpupart__host_free(L->mem, r);
  }
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (L->proxy[i].fd >= 0) close(L->proxy[i].fd);
  munmap(L->h, sizeof *L->h);
  if (L->fd >= 0) close(L->fd); /* drops every member lock this attachment held */
  pthread_mutex_destroy(&L->local);
  gpupart__host_free(L->mem, L);
}

/* The calling thread's process name as the kernel keeps it (comm: 15 bytes and a NUL), no
 * file read under the lock; "" where prctl refuses. */
static void own_command(char out[16]) {
  char name[17] = {0};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) name[0] = '\0';
  memcpy(out, name, 16);
}

/* Lock held: a free member slot whose lock this attachment could take. */
static int join_locked(shm_ledger *L, gpupart__ledger_member *out) {
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
      if (L->h->member[i].id || gpupart__shm_member_lock(L->fd, i, F_WRLCK) != 0) continue;
      L->h->member[i] = (shm_member){.id = gpupart__shm_new_member_id(L->h), .pid = getpid()};
      own_command(L->h->member[i].command);
      L->mine[i] = 1;
      *out = L->h->member[i].id;
      return GPUPART_OK;
    }
    if (!gpupart__shm_reap(L)) break;
  }
  return gpupart__fail(GPUPART_EBUSY, "ledger %s: all %u member slots are taken by live device handles", L->path,
                       SHM_MEMBERS);
}

static int shm_join(gpupart__ledger *l, gpupart__ledger_member *out) {
  shm_ledger *L = shm(l);
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  rc = join_locked(L, out);
  gpupart__shm_unlock(L);
  return rc;
}

/* Lock held: member id's slot if this attachment holds it, else SHM_MEMBERS. */
static uint32_t my_member_slot(const shm_ledger *L, gpupart__ledger_member id) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (L->mine[i] && L->h->member[i].id == id) return i;
  return SHM_MEMBERS;
}

/* A member that cannot take the lock still leaves: its byte is dropped now (so every
 * other process reaps it) and its slot is freed by this attachment's next lock. */
static void shm_leave(gpupart__ledger *l, gpupart__ledger_member id) {
  shm_ledger *L = shm(l);
  if (L->inherited) return;
  if (gpupart__shm_lock(L) == 0) {
    uint32_t i = my_member_slot(L, id);
    if (i < SHM_MEMBERS) gpupart__shm_leave_slot_locked(L, i, id);
    gpupart__shm_unlock(L);
    return;
  }
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (__atomic_load_n(&L->h->member[i].id, __ATOMIC_RELAXED) == id &&
        gpupart__shm_member_lock(L->fd, i, F_UNLCK) == 0)
      __atomic_store_n(&L->left[i], id, __ATOMIC_RELEASE);
  queue(L);
}

/* Lock held: whether member has a share of partition part. */
static int has_share_locked(const shm_header *h, uint64_t member, uint32_t part) {
  for (uint32_t i = 0; i < SHM_SHARES; i++)
    if (h->share[i].member == member && h->share[i].part == part) return 1;
  return 0;
}

static uint32_t free_share_locked(const shm_header *h) {
  uint32_t i = 0;
  while (i < SHM_SHARES && h->share[i].member) i++;
  return i;
}

/* Lock held: the message of a full share table: how many, and the member that holds most. */
static int shares_full(const shm_ledger *L) {
  uint32_t count[SHM_MEMBERS] = {0}, top = 0;
  for (uint32_t i = 0; i < SHM_SHARES; i++)
    if (L->h->share[i].member_slot < SHM_MEMBERS) count[L->h->share[i].member_slot]++;
  for (uint32_t i = 1; i < SHM_MEMBERS; i++)
    if (count[i] > count[top]) top = i;
  char who[160];
  gpupart__shm_describe_holder(L->h->member[top].pid, L->h->member[top].command, who, sizeof who);
  return gpupart__fail(GPUPART_ENOMEM,
                       "ledger %s: its share table is full: all %u shares (one per member of each "
                       "partition) are taken, %u of them by %s; destroy partitions or close device handles",
                       L->path, SHM_SHARES, count[top], who);
}

/* Lock held: a new partition (no members yet: the caller adds the first share). */
static int new_part_locked(shm_ledger *L, const char *name, const gpupart__ledger_size *size, uint32_t *part) {
  shm_header *h = L->h;
  uint64_t limit = size->limit, guarantee = size->guarantee;
  if (limit > h->budget || guarantee > sub0(h->budget, h->guarantees)) return GPUPART_ELIMIT;
  for (*part = 0; *part < SHM_PARTS; (*part)++)
    if (!h->part[*part].members) break;
  if (*part == SHM_PARTS)
    return gpupart__fail(GPUPART_ENOMEM, "ledger %s: its partition table is full: all %u partitions are taken", L->path,
                         SHM_PARTS);
  h->part[*part] = gpupart__shm_part_sized(size);
  memcpy(h->part[*part].name, name, strlen(name) + 1);
  h->guarantees += guarantee;
  h->unused += guarantee;
  return GPUPART_OK;
}

/* Lock held: member m (in slot ms) takes a share of part, with handle x. */
static void add_share_locked(shm_ledger *L, uint64_t m, uint32_t ms, uint32_t part, uint32_t share, shm_entry *x) {
  L->h->share[share] = (shm_share){.member = m, .member_slot = ms, .part = part};
  L->h->part[part].members++;
  *x = (shm_entry){L->handles, share, m, 0, 0};
  L->handles = x;
}

/* Lock held: the code add returns. join: adopt the figures of an existing partition
 * (else an existing one must have limit and guarantee). */
static int admit_locked(shm_ledger *L, uint64_t m, const char *name, const gpupart__ledger_size *size, int join,
                        shm_entry *x) {
  shm_header *h = L->h;
  uint32_t ms = my_member_slot(L, m), share = free_share_locked(h), part = 0;
  if (ms == SHM_MEMBERS) return GPUPART_EINVAL;
  int i = gpupart__shm_find_part(h, name);
  /* the operator's partition, and one resized from outside, is joined with its figures
   * whatever the member asked (the caller compares and warns) */
  int differs = i >= 0 && (h->part[i].limit != size->limit || h->part[i].guarantee != size->guarantee);
  if (i >= 0 && (has_share_locked(h, m, (uint32_t)i) || (!join && differs && !(h->part[i].flags & SHM_PART_RESIZED) &&
                                                         !gpupart__shm_part_operator(h, (uint32_t)i))))
    return GPUPART_EEXIST;
  if (i < 0 && join) return GPUPART_OK; /* no partition to join: x stays unused */
  if (share == SHM_SHARES) return shares_full(L);
  int rc = i >= 0 ? GPUPART_OK : new_part_locked(L, name, size, &part);
  if (rc == GPUPART_OK) add_share_locked(L, m, ms, i >= 0 ? (uint32_t)i : part, share, x);
  return rc;
}

static int add_or_join(gpupart__ledger *l, gpupart__ledger_member m, const char *name, const gpupart__ledger_size *size,
                       int join, gpupart__ledger_entry **out) {
  shm_ledger *L = shm(l);
  *out = NULL;
  if (strlen(name) >= SHM_NAME)
    return gpupart__fail(GPUPART_EINVAL, "'%s' is too long a name for a shared ledger (%u bytes at most)", name,
                         SHM_NAME - 1);
  shm_entry *x = gpupart__host_calloc(L->mem, 1, sizeof *x);
  if (!x) return gpupart__fail(GPUPART_ENOMEM, "ledger: out of host memory");
  int rc = gpupart__shm_lock(L);
  if (rc) {
    gpupart__host_free(L->mem, x);
    return rc;
  }
  x->share = UINT32_MAX;
  rc = admit_locked(L, m, name, size, join, x);
  gpupart__shm_unlock(L);
  if (rc || x->share == UINT32_MAX) gpupart__host_free(L->mem, x);
  else *out = (gpupart__ledger_entry *)(void *)x;
  return rc;
}

static int shm_add(gpupart__ledger *l, gpupart__ledger_member m, const char *name, const gpupart__ledger_size *size,
                   gpupart__ledger_entry **out) {
  return add_or_join(l, m, name, size, 0, out);
}

static int shm_join_named(gpupart__ledger *l, gpupart__ledger_member m, const char *name, gpupart__ledger_entry **out) {
  static const gpupart__ledger_size none = {0};
  return add_or_join(l, m, name, &none, 1, out);
}

/* A removal that cannot take the lock leaves the handle listed, marked: the next call
 * that takes the lock removes the share (a forked child's never: the share is its
 * parent's). */
static void shm_remove(gpupart__ledger *l, gpupart__ledger_entry *e) {
  shm_ledger *L = shm(l);
  if (!L->inherited && gpupart__shm_lock(L) == 0) {
    shm_entry *x = handle(e);
    uint64_t bytes = __atomic_exchange_n(&x->queued, 0, __ATOMIC_ACQ_REL);
    if (bytes) gpupart__shm_release_locked(L, e, bytes);
    gpupart__shm_remove_locked(L, x);
    gpupart__shm_unlock(L);
    return;
  }
  __atomic_store_n(&handle(e)->removed, 1, __ATOMIC_RELEASE);
  if (!L->inherited) queue(L);
}

/* This process's handle of the partition named name; one it has no share of is `foreign`. */
static gpupart__ledger_entry *shm_find(gpupart__ledger *l, const char *name) {
  shm_ledger *L = shm(l);
  if (read_begin(L)) return NULL;
  int i = gpupart__shm_find_part(L->h, name);
  shm_entry *x = i < 0 ? NULL : &foreign;
  for (shm_entry *h = L->handles; h && i >= 0; h = h->next) {
    const shm_share *s = h->share < SHM_SHARES ? &L->h->share[h->share] : NULL;
    if (s && !h->removed && s->member == h->member && s->part == (uint32_t)i) x = h;
  }
  read_end(L);
  return (gpupart__ledger_entry *)(void *)x;
}

static gpupart__ledger_figures figures_of(const shm_part *p, uint64_t own) {
  return (gpupart__ledger_figures){p->limit, p->guarantee, p->reserved, p->peak_reserved, own};
}

static void describe(const shm_part *p, uint64_t member, uint64_t own, gpupart__ledger_entry_info *out) {
  snprintf(out->name, sizeof out->name, "%.*s", (int)strnlen(p->name, SHM_NAME), p->name);
  out->member = member;
  out->figures = figures_of(p, own);
}

/* Lock held: the shares of member m. */
static uint32_t list_member_locked(shm_header *h, uint64_t m, gpupart__ledger_entry_info *out, uint32_t cap) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < SHM_SHARES; i++) {
    const shm_share *s = &h->share[i];
    if (s->member != m || !gpupart__shm_share_valid(h, s)) continue;
    if (n < cap) describe(&h->part[s->part], m, s->reserved, &out[n]);
    n++;
  }
  return n;
}

/* Lock held: every partition, each with the member of its first share. */
static uint32_t list_all_locked(shm_header *h, gpupart__ledger_entry_info *out, uint32_t cap) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    if (!h->part[i].members) continue;
    uint64_t member = 0;
    for (uint32_t k = 0; k < SHM_SHARES && !member; k++)
      if (h->share[k].member && h->share[k].part == i) member = h->share[k].member;
    if (n < cap) describe(&h->part[i], member, 0, &out[n]);
    n++;
  }
  return n;
}

static uint32_t shm_list(gpupart__ledger *l, gpupart__ledger_member m, gpupart__ledger_entry_info *out, uint32_t cap) {
  shm_ledger *L = shm(l);
  if (read_begin(L)) return 0;
  if (!L->inherited) gpupart__shm_reap(L);
  uint32_t n = m ? list_member_locked(L->h, m, out, cap) : list_all_locked(L->h, out, cap);
  read_end(L);
  return n;
}

/* Lock held: what p may still take (as local.c's grantable_locked). */
static uint64_t grantable_locked(const shm_header *h, const shm_part *p, gpupart__refusal *bound) {
  uint64_t own = sub0(p->limit, p->reserved);
  uint64_t taken = add_sat(h->reserved, sub0(h->unused, unused_of(p)));
  uint64_t device = sub0(h->budget, taken);
  *bound = own <= device ? GPUPART__REFUSED_LIMIT : GPUPART__REFUSED_BUDGET;
  return own <= device ? own : device;
}

/* Lock held: the bytes this attachment's live shares hold together. */
static uint64_t own_locked(shm_ledger *L) {
  uint64_t own = 0;
  for (shm_entry *x = L->handles; x; x = x->next) {
    const shm_share *s = x->removed ? NULL : gpupart__shm_share_of(L, (gpupart__ledger_entry *)(void *)x);
    if (s) own = add_sat(own, s->reserved);
  }
  return own;
}

/* Lock held: what p may still take, within this process's ceiling too. */
static uint64_t grant_locked(shm_ledger *L, const shm_part *p, gpupart__refusal *bound) {
  uint64_t can = grantable_locked(L->h, p, bound);
  if (!L->ceiling) return can;
  uint64_t room = sub0(L->ceiling, own_locked(L));
  if (room < can) *bound = GPUPART__REFUSED_CEILING;
  return room < can ? room : can;
}

static void shm_set_ceiling(gpupart__ledger *l, uint64_t bytes) {
  shm_ledger *L = shm(l);
  if (!bytes || gpupart__shm_lock(L)) return;
  if (!L->ceiling || bytes < L->ceiling) L->ceiling = bytes;
  gpupart__shm_unlock(L);
}

/* Lock held: grants bytes to s if they fit; a refusal first returns dead members' bytes
 * (which may free s's partition's other shares, never s). */
static gpupart__refusal reserve_locked(shm_ledger *L, shm_share *s, uint64_t bytes) {
  gpupart__refusal bound;
  shm_part *p = part_of(L, s);
  if (bytes > grant_locked(L, p, &bound) && !(gpupart__shm_reap(L) && bytes <= grant_locked(L, p, &bound)))
    return bound;
  gpupart__shm_set_reserved_locked(L->h, p, s, add_sat(s->reserved, bytes));
  return GPUPART__GRANTED;
}

static gpupart__refusal gone(const shm_ledger *L) {
  return gpupart__fail(GPUPART_ECORRUPT,
                       "ledger %s no longer has this partition's share (its file was damaged, "
                       "or this process was reaped as dead)",
                       L->path);
}

static gpupart__refusal shm_reserve(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  shm_ledger *L = shm(l);
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  shm_share *s = gpupart__shm_share_of(L, e);
  gpupart__refusal r = s ? reserve_locked(L, s, bytes) : gone(L);
  gpupart__shm_unlock(L);
  return r;
}

/* A release is never lost: one that cannot take the lock is queued on its handle and
 * applied by the next call that takes it (a forked child's is dropped: the bytes are its
 * parent's). */
static void shm_release(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  shm_ledger *L = shm(l);
  if (L->inherited) return;
  if (gpupart__shm_lock(L) == 0) {
    gpupart__shm_release_locked(L, e, bytes);
    gpupart__shm_unlock(L);
    return;
  }
  __atomic_add_fetch(&handle(e)->queued, bytes, __ATOMIC_ACQ_REL);
  queue(L);
}

/* Lock held: whether other members' bytes bound what s can grow by (through the budget,
 * or through its partition's limit when others share it): only then can a dead member
 * be what is in the way. */
static int others_bound(shm_ledger *L, const shm_share *s, gpupart__refusal bound) {
  return bound == GPUPART__REFUSED_BUDGET || part_of(L, s)->reserved > s->reserved;
}

static uint64_t shm_grantable(gpupart__ledger *l, gpupart__ledger_entry *e, gpupart__refusal *bound) {
  shm_ledger *L = shm(l);
  int rc = gpupart__shm_lock(L);
  *bound = rc;
  if (rc) return 0;
  shm_share *s = gpupart__shm_share_of(L, e);
  uint64_t can = s ? grant_locked(L, part_of(L, s), bound) : 0;
  if (!s) *bound = gone(L);
  if (s && others_bound(L, s, *bound) && gpupart__shm_reap(L)) can = grant_locked(L, part_of(L, s), bound);
  gpupart__shm_unlock(L);
  return can;
}

/* The rule of a change from outside (shm_resize.c), for a member's own partition. */
static int shm_set_figures(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t limit, uint64_t guarantee) {
  shm_ledger *L = shm(l);
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  shm_share *s = gpupart__shm_share_of(L, e);
  gpupart__ledger_size size = {.limit = limit, .guarantee = guarantee}; /* bytes: its fractions go */
  rc = !s ? gone(L) : gpupart__shm_set_figures_locked(L->h, s->part, &size);
  gpupart__shm_unlock(L);
  if (rc == GPUPART__SHM_ABOVE) return GPUPART_EBUSY;
  if (rc == GPUPART_OK && guarantee != GPUPART__LEDGER_KEEP && gpupart__shm_shortfall(l) > 0)
    gpupart__shm_ask_trim(l); /* a raised floor over others' cached bytes */
  return rc;
}

/* The partition's labels are its maker's: written only while it has none. */
static int shm_label(gpupart__ledger *l, gpupart__ledger_entry *e, const gpupart__ledger_labels *labels) {
  shm_ledger *L = shm(l);
  if (!gpupart__ledger_labels_ok(labels))
    return gpupart__fail(GPUPART_EINVAL, "ledger %s: a label is too long or not printable ASCII", L->path);
  int rc = gpupart__shm_lock(L);
  if (rc) return rc;
  shm_share *s = gpupart__shm_share_of(L, e);
  shm_part *p = s ? part_of(L, s) : NULL;
  if (!p) rc = gone(L);
  else if (!p->labels.claim[0] && !p->labels.namespace[0] && !p->labels.pod[0]) p->labels = *labels;
  gpupart__shm_unlock(L);
  return rc;
}

static void shm_get(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out) {
  shm_ledger *L = shm(l);
  *out = (gpupart__ledger_figures){0};
  if (read_begin(L)) return;
  const shm_share *s = gpupart__shm_share_of(L, e);
  if (s) *out = figures_of(part_of(L, s), s->reserved);
  read_end(L);
}

static void shm_totals(gpupart__ledger *l, gpupart__ledger_figures *out) {
  shm_ledger *L = shm(l);
  *out = (gpupart__ledger_figures){0};
  if (read_begin(L)) return;
  if (!L->inherited) gpupart__shm_reap(L);
  *out = (gpupart__ledger_figures){L->h->budget, L->h->guarantees, L->h->reserved, L->h->peak_reserved, 0};
  read_end(L);
}

static void shm_reset_peak(gpupart__ledger *l, gpupart__ledger_entry *e) {
  shm_ledger *L = shm(l);
  if (gpupart__shm_lock(L)) return;
  shm_share *s = gpupart__shm_share_of(L, e);
  if (s) part_of(L, s)->peak_reserved = part_of(L, s)->reserved;
  gpupart__shm_unlock(L);
}

/* Where e's owner publishes (ledger.h); the share is this process's, so it stays while e
 * does. A handle the file no longer has, and a forked child, write to a sink. */
static gpupart__ledger_counters *shm_counters(gpupart__ledger *l, gpupart__ledger_entry *e) {
  static gpupart__ledger_counters sink;
  shm_ledger *L = shm(l);
  if (L->inherited || gpupart__shm_lock(L)) return &sink;
  shm_share *s = gpupart__shm_share_of(L, e);
  gpupart__shm_unlock(L);
  return s ? &s->pub : &sink;
}

static int shm_check(gpupart__ledger *l, char *why, uint64_t why_len) {
  shm_ledger *L = shm(l);
  if (read_begin(L)) return gpupart__say(why, why_len, "%s", gpupart_last_error());
  if (!L->inherited) gpupart__shm_reap(L);
  int rc = gpupart__shm_check(L->h, why, why_len);
  read_end(L);
  return rc;
}

static int shm_trim_asked(gpupart__ledger *l, uint64_t *seen) {
  uint64_t now = __atomic_load_n(&shm(l)->h->trim_asked, __ATOMIC_ACQUIRE);
  if (now == *seen) return 0;
  *seen = now;
  return 1;
}

/* No gpupart lock held: one event for every member reaped since the last report. */
static void shm_report(gpupart__ledger *l) {
  shm_ledger *L = shm(l);
  gpupart__lock_acquire(&L->pending_lock);
  uint32_t members = L->pending;
  uint64_t bytes = L->pending_bytes;
  L->pending = 0;
  L->pending_bytes = 0;
  gpupart__lock_release(&L->pending_lock);
  if (members && L->base.on_reaped) L->base.on_reaped(&L->base, members, bytes);
}

/* ---- who holds the bytes, for refusal messages ---- */

uint64_t gpupart__shm_name_members(const shm_header *h, uint32_t part, const shm_share *skip, char *out, size_t n) {
  uint64_t total = 0;
  uint32_t named = 0, more = 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++) {
    const shm_share *s = &h->share[k];
    if (s == skip || !s->member || s->part != part || !gpupart__shm_share_valid(h, s)) continue;
    total = add_sat(total, s->reserved);
    if (named == 4) {
      more++;
      continue;
    }
    char who[160];
    size_t len = strlen(out);
    gpupart__shm_describe_holder(h->member[s->member_slot].pid, h->member[s->member_slot].command, who, sizeof who);
    uint64_t cached = sub0(s->reserved, gpupart__ledger_read(&s->pub.in_use)); /* empty blocks it keeps */
    snprintf(out + len, n - len, "%s%s %llu bytes (%llu cached)", named++ ? ", " : "", who,
             (unsigned long long)s->reserved, (unsigned long long)cached);
  }
  size_t len = strlen(out);
  if (more) snprintf(out + len, n - len, " and %u more", more);
  return total;
}

/* Lock held: the other partitions that hold bytes or keep an unused guarantee. */
static void name_partitions(const shm_header *h, uint32_t own, char *out, size_t n) {
  uint32_t named = 0;
  for (uint32_t i = 0; i < SHM_PARTS && named < 6; i++) {
    const shm_part *p = &h->part[i];
    if (i == own || !p->members || (!p->reserved && !unused_of(p))) continue;
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%spartition '%.*s' holds %llu bytes and keeps %llu more as its guarantee (",
             named++ ? "; " : "", (int)strnlen(p->name, SHM_NAME), p->name, (unsigned long long)p->reserved,
             (unsigned long long)unused_of(p));
    gpupart__shm_name_members(h, i, NULL, out, n);
    len = strlen(out);
    snprintf(out + len, n - len, ")");
  }
  if (!named) snprintf(out, n, "no other partition holds bytes");
}

static void shm_holders(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__refusal bound, char *out,
                        size_t n) {
  shm_ledger *L = shm(l);
  out[0] = '\0';
  if (read_begin(L)) return;
  const shm_share *s = gpupart__shm_share_of(L, e);
  if (s && bound == GPUPART__REFUSED_LIMIT) {
    gpupart__shm_name_members(L->h, s->part, s, out, n);
  } else if (s) {
    name_partitions(L->h, s->part, out, n);
  }
  read_end(L);
}

const gpupart__ledger_ops gpupart__shm_ops = {
    .destroy = shm_destroy,
    .join = shm_join,
    .leave = shm_leave,
    .add = shm_add,
    .remove = shm_remove,
    .find = shm_find,
    .list = shm_list,
    .reserve = shm_reserve,
    .release = shm_release,
    .grantable = shm_grantable,
    .set_figures = shm_set_figures,
    .get = shm_get,
    .totals = shm_totals,
    .reset_peak = shm_reset_peak,
    .counters = shm_counters,
    .report = shm_report,
    .check = shm_check,
    .holders = shm_holders,
    .join_named = shm_join_named,
    .ask_trim = gpupart__shm_ask_trim,
    .trim_asked = shm_trim_asked,
    .shortfall = gpupart__shm_shortfall,
    .post = gpupart__shm_post,
    .withdraw = gpupart__shm_withdraw,
    .lack = gpupart__shm_lack,
    .lack_all = gpupart__shm_lack_all,
    .posted = gpupart__shm_posted,
    .wait_asked = gpupart__shm_wait_asked,
    .wake_seen = gpupart__shm_wake_seen,
    .wake_local = gpupart__shm_wake_local,
    .set_ceiling = shm_set_ceiling,
    .label = shm_label,
};
