/* The shared ledger: the same accounting as ledger_local.c, kept in a file of the
 * ledger folder (GPUPART_LEDGER_DIR, default /dev/shm) that every process of the user
 * maps, one file per physical device, so that budgets and guarantees hold across
 * processes. The file holds partitions (name, limit, guarantee, reserved, peak) and
 * shares: one per member of a partition, with the bytes that member reserved, so that
 * processes join a partition by name and share its limit; a partition goes when its last
 * share does. The file is untrusted input: it must be a regular file of this user with
 * no group or other permission bits, its header must carry the magic, version, size and
 * device identity this library writes, and every index read from it is bounds-checked.
 * A process-shared robust mutex guards it; when a holder died, the next locker finds the
 * dead members, returns their bytes and recomputes every sum from the shares. A member
 * is alive while its process holds an open-file-description lock on the member's byte of
 * the file, which the kernel drops when the process dies (whatever its pid or namespace).
 * A counter in the header asks the other processes to trim (the OOM sequence). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "ledger_shm.h"

#define SHM_MAGIC 0x3174726170757067ull /* "gpupart1" read as little-endian */
#define SHM_VERSION 3u /* 3: the shares carry their owner's counters (in use, failures, driver calls) */
#define SHM_MEMBERS 128u
#define SHM_PARTS 256u
#define SHM_SHARES 512u
#define SHM_NAME 64u
#define SHM_LOCK_BASE ((off_t)1 << 32) /* member i's lock byte: far past the data */

typedef struct shm_member {
  uint64_t id; /* 0 = free */
  int64_t pid; /* for people reading the file; liveness is the lock */
  char command[16]; /* its process's name (comm) at join, for readers in other PID namespaces; NUL-padded,
                     * not terminated when all 16 bytes are used */
} shm_member;

/* A partition; free while it has no members. Its members and reserved are the sums of its
 * shares (recomputed from them after a death). */
typedef struct shm_part {
  char name[SHM_NAME];
  uint64_t limit, guarantee, reserved, peak_reserved;
  uint32_t members, pad;
} shm_part;

/* One member's part of a partition, on a cache line of its own: its owner writes pub on
 * every allocation and free, without the lock, and no other process's share is there. */
typedef struct shm_share {
  _Alignas(64) uint64_t member; /* owner's id; 0 = free */
  uint32_t member_slot, part;
  uint64_t reserved;
  gpupart__ledger_counters pub; /* the owner's (ledger.h), written with relaxed atomic stores */
} shm_share;
_Static_assert(sizeof(shm_share) == 64, "a share is one cache line");

typedef struct shm_header {
  uint64_t magic;
  uint32_t version, size, members, parts, shares, pad;
  char identity[GPUPART__IDENTITY_MAX];
  pthread_mutex_t lock;
  uint64_t budget, guarantees, reserved, peak_reserved, unused, last_member;
  uint64_t trim_asked; /* bumped (atomically, no lock) to ask every process to trim */
  shm_member member[SHM_MEMBERS];
  shm_part part[SHM_PARTS];
  shm_share share[SHM_SHARES];
} shm_header;

typedef struct shm_ledger {
  gpupart__ledger base; /* first, so the interface pointer is the ledger */
  const gpupart__hostmem *mem;
  int fd;
  shm_header *h;
  uint8_t mine[SHM_MEMBERS]; /* member slots this attachment holds the lock of */
  uint32_t reaped;           /* dead members reaped since the lock was taken (lock held) */
  uint64_t reaped_bytes;     /* and the bytes they held */
  gpupart__lock pending_lock; /* guards pending: reaped, not yet reported (shm_report) */
  uint32_t pending;
  uint64_t pending_bytes;
  struct shm_entry *handles; /* this attachment's entry handles (guarded by the file's lock) */
} shm_ledger;

/* The process-local handle of an entry: one share. */
typedef struct shm_entry {
  struct shm_entry *next;
  uint32_t share;
  uint64_t member;
} shm_entry;

/* What find returns for a partition this process is no member of: non-NULL, and no share
 * of the file, so any operation on it is refused. */
static shm_entry foreign = {NULL, UINT32_MAX, 0};

static shm_ledger *shm(gpupart__ledger *l) { return (shm_ledger *)l; }
static shm_entry *handle(const gpupart__ledger_entry *e) { return (shm_entry *)(uintptr_t)e; }
static uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t unused_of(const shm_part *p) { return sub0(p->guarantee, p->reserved); }

/* ---- members and their liveness ---- */

static int member_lock(int fd, uint32_t slot, short type) {
  struct flock f = {.l_type = type, .l_whence = SEEK_SET, .l_start = SHM_LOCK_BASE + (off_t)slot, .l_len = 1};
  return fcntl(fd, F_OFD_SETLK, &f);
}

/* Whether another open file description holds member slot's lock (its process lives). */
static int held_elsewhere(int fd, uint32_t slot) {
  struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = SHM_LOCK_BASE + (off_t)slot, .l_len = 1};
  if (fcntl(fd, F_OFD_GETLK, &f) != 0) return 1; /* cannot tell: never reap on doubt */
  return f.l_type != F_UNLCK;
}

/* Lock held: whether share s is well formed (its member and partition in range). */
static int share_valid(const shm_header *h, const shm_share *s) {
  return s->member_slot < SHM_MEMBERS && h->member[s->member_slot].id == s->member && s->part < SHM_PARTS;
}

/* Lock held: every partition's members and reserved from the shares; a partition left
 * without members, and a share that is not well formed, is freed. */
static void recount_parts_locked(shm_header *h) {
  for (uint32_t i = 0; i < SHM_PARTS; i++) h->part[i].members = 0, h->part[i].reserved = 0;
  for (uint32_t i = 0; i < SHM_SHARES; i++) {
    shm_share *s = &h->share[i];
    if (!s->member) continue;
    if (!share_valid(h, s)) {
      memset(s, 0, sizeof *s);
      continue;
    }
    h->part[s->part].members++;
    h->part[s->part].reserved = add_sat(h->part[s->part].reserved, s->reserved);
  }
}

/* Lock held: every sum again from the shares, as after a holder died mid-update. */
static void recompute_locked(shm_header *h) {
  uint64_t g = 0, r = 0, u = 0;
  recount_parts_locked(h);
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    shm_part *p = &h->part[i];
    if (!p->members) {
      memset(p, 0, sizeof *p);
      continue;
    }
    if (p->reserved > p->peak_reserved) p->peak_reserved = p->reserved;
    g = add_sat(g, p->guarantee), r = add_sat(r, p->reserved), u = add_sat(u, unused_of(p));
  }
  h->guarantees = g, h->reserved = r, h->unused = u;
  if (r > h->peak_reserved) h->peak_reserved = r;
}

/* Lock held: frees member slot i and its shares (recompute_locked then frees the
 * partitions left without members); returns the bytes its shares held. */
static uint64_t drop_member_locked(shm_header *h, uint32_t i) {
  uint64_t id = h->member[i].id, bytes = 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member == id) {
      bytes = add_sat(bytes, h->share[k].reserved);
      memset(&h->share[k], 0, sizeof h->share[k]);
    }
  h->member[i] = (shm_member){0};
  return bytes;
}

/* Lock held: returns the bytes of members whose process is gone (counted in L->reaped
 * and reaped_bytes, which unlock_ledger reports once the lock is released). */
static int reap_locked(shm_ledger *L) {
  int reaped = 0;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    if (!L->h->member[i].id || L->mine[i] || held_elsewhere(L->fd, i)) continue;
    L->reaped_bytes = add_sat(L->reaped_bytes, drop_member_locked(L->h, i));
    L->reaped++;
    reaped = 1;
  }
  if (reaped) recompute_locked(L->h);
  return reaped;
}

/* rc from locking: EOWNERDEAD (a holder died) is recovered from, and becomes 0. */
static int recover_if_owner_died(shm_ledger *L, int rc) {
  if (rc == EOWNERDEAD) {
    reap_locked(L);
    recompute_locked(L->h);
    pthread_mutex_consistent(&L->h->lock);
    rc = 0;
  }
  return rc;
}

/* Locks, waiting at most timeout_ms: ETIMEDOUT when the holder keeps it. */
static int lock_within(shm_ledger *L, int timeout_ms) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  long ns = t.tv_nsec + (long)(timeout_ms % 1000) * 1000000L;
  t.tv_sec += timeout_ms / 1000 + ns / 1000000000L;
  t.tv_nsec = ns % 1000000000L;
  return recover_if_owner_died(L, pthread_mutex_timedlock(&L->h->lock, &t));
}

/* A holder keeps the lock for microseconds; one that keeps it for SHM_LOCK_WAIT_MS is
 * stopped, or the mutex's bytes were scribbled on: the call fails (its caller reports the
 * ledger's lock as unusable) instead of hanging. */
#define SHM_LOCK_WAIT_MS 10000
static int lock_ledger(shm_ledger *L) {
  int rc = lock_within(L, SHM_LOCK_WAIT_MS);
  if (rc == ETIMEDOUT)
    gpupart__fail(GPUPART_EBUSY, "ledger: its lock was held for %d ms (a stopped process, or a damaged ledger)",
                  SHM_LOCK_WAIT_MS);
  return rc;
}

/* Unlocks, keeping the dead members this holding of the lock reaped for shm_report: the
 * ledger never calls out, and its callers may hold the device's or the context's lock. */
static void unlock_ledger(shm_ledger *L) {
  uint32_t members = L->reaped;
  uint64_t bytes = L->reaped_bytes;
  L->reaped = 0, L->reaped_bytes = 0;
  pthread_mutex_unlock(&L->h->lock);
  if (!members) return;
  gpupart__lock_acquire(&L->pending_lock);
  L->pending += members, L->pending_bytes = add_sat(L->pending_bytes, bytes);
  gpupart__lock_release(&L->pending_lock);
}

/* No gpupart lock held: one event for every member reaped since the last report. */
static void shm_report(gpupart__ledger *l) {
  shm_ledger *L = shm(l);
  gpupart__lock_acquire(&L->pending_lock);
  uint32_t members = L->pending;
  uint64_t bytes = L->pending_bytes;
  L->pending = 0, L->pending_bytes = 0;
  gpupart__lock_release(&L->pending_lock);
  if (members && L->base.on_reaped) L->base.on_reaped(&L->base, members, bytes);
}

/* Lock held: the share of a live entry handle, or NULL when the file no longer has it. */
static shm_share *share_of(shm_ledger *L, const gpupart__ledger_entry *e) {
  const shm_entry *x = handle(e);
  if (x->share >= SHM_SHARES) return NULL;
  shm_share *s = &L->h->share[x->share];
  return s->member == x->member && share_valid(L->h, s) ? s : NULL;
}

static shm_part *part_of(shm_ledger *L, const shm_share *s) { return &L->h->part[s->part]; }

/* ---- the interface ---- */

static void shm_destroy(gpupart__ledger *l) {
  shm_ledger *L = shm(l);
  while (L->handles) {
    shm_entry *x = L->handles;
    L->handles = x->next;
    gpupart__host_free(L->mem, x);
  }
  munmap(L->h, sizeof *L->h);
  close(L->fd); /* drops every member lock this attachment held */
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
      if (L->h->member[i].id || member_lock(L->fd, i, F_WRLCK) != 0) continue;
      L->h->member[i] = (shm_member){.id = ++L->h->last_member, .pid = getpid()};
      own_command(L->h->member[i].command);
      L->mine[i] = 1;
      *out = L->h->member[i].id;
      return GPUPART_OK;
    }
    if (!reap_locked(L)) break;
  }
  return gpupart__fail(GPUPART_EBUSY, "ledger: all %u member slots of the shared ledger are taken", SHM_MEMBERS);
}

static int shm_join(gpupart__ledger *l, gpupart__ledger_member *out) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return gpupart__fail(GPUPART_ECORRUPT, "ledger: the shared ledger's lock is unusable");
  int rc = join_locked(L, out);
  unlock_ledger(L);
  return rc;
}

static void shm_leave(gpupart__ledger *l, gpupart__ledger_member id) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    if (!L->mine[i] || L->h->member[i].id != id) continue;
    (void)drop_member_locked(L->h, i);
    recompute_locked(L->h);
    L->mine[i] = 0;
    member_lock(L->fd, i, F_UNLCK);
  }
  unlock_ledger(L);
}

/* Lock held: member id's slot if this attachment holds it, else SHM_MEMBERS. */
static uint32_t my_member_slot(const shm_ledger *L, gpupart__ledger_member id) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (L->mine[i] && L->h->member[i].id == id) return i;
  return SHM_MEMBERS;
}

/* Lock held: the partition named name, or -1. */
static int find_locked(const shm_header *h, const char *name) {
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (h->part[i].members && strncmp(h->part[i].name, name, SHM_NAME) == 0) return (int)i;
  return -1;
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

/* Lock held: a new partition (no members yet: the caller adds the first share). */
static int new_part_locked(shm_header *h, const char *name, uint64_t limit, uint64_t guarantee, uint32_t *part) {
  if (limit > h->budget || guarantee > sub0(h->budget, h->guarantees)) return GPUPART_ELIMIT;
  for (*part = 0; *part < SHM_PARTS; (*part)++)
    if (!h->part[*part].members) break;
  if (*part == SHM_PARTS) return GPUPART_ENOMEM;
  h->part[*part] = (shm_part){.limit = limit, .guarantee = guarantee};
  memcpy(h->part[*part].name, name, strlen(name) + 1);
  h->guarantees += guarantee, h->unused += guarantee;
  return GPUPART_OK;
}

/* Lock held: member m (in slot ms) takes a share of part, with handle x. */
static void add_share_locked(shm_ledger *L, uint64_t m, uint32_t ms, uint32_t part, uint32_t share, shm_entry *x) {
  L->h->share[share] = (shm_share){.member = m, .member_slot = ms, .part = part};
  L->h->part[part].members++;
  *x = (shm_entry){L->handles, share, m};
  L->handles = x;
}

/* Lock held: the code add returns. join: adopt the figures of an existing partition
 * (else an existing one must have limit and guarantee). */
static int admit_locked(shm_ledger *L, uint64_t m, const char *name, uint64_t limit, uint64_t guarantee, int join,
                        shm_entry *x) {
  shm_header *h = L->h;
  uint32_t ms = my_member_slot(L, m), share = free_share_locked(h), part = 0;
  if (ms == SHM_MEMBERS) return GPUPART_EINVAL;
  if (share == SHM_SHARES) return GPUPART_ENOMEM;
  int i = find_locked(h, name);
  if (i >= 0 && (has_share_locked(h, m, (uint32_t)i) ||
                 (!join && (h->part[i].limit != limit || h->part[i].guarantee != guarantee))))
    return GPUPART_EEXIST;
  if (i < 0 && join) return GPUPART_OK; /* no partition to join: x stays unused */
  int rc = i >= 0 ? GPUPART_OK : new_part_locked(h, name, limit, guarantee, &part);
  if (rc == GPUPART_OK) add_share_locked(L, m, ms, i >= 0 ? (uint32_t)i : part, share, x);
  return rc;
}

static int add_or_join(gpupart__ledger *l, gpupart__ledger_member m, const char *name, uint64_t limit,
                       uint64_t guarantee, int join, gpupart__ledger_entry **out) {
  shm_ledger *L = shm(l);
  *out = NULL;
  if (strlen(name) >= SHM_NAME) return GPUPART_EINVAL;
  shm_entry *x = gpupart__host_calloc(L->mem, 1, sizeof *x);
  if (!x) return GPUPART_ENOMEM;
  if (lock_ledger(L)) return gpupart__host_free(L->mem, x), GPUPART_ECORRUPT;
  x->share = UINT32_MAX;
  int rc = admit_locked(L, m, name, limit, guarantee, join, x);
  unlock_ledger(L);
  if (rc || x->share == UINT32_MAX) gpupart__host_free(L->mem, x);
  else *out = (gpupart__ledger_entry *)(void *)x;
  return rc;
}

static int shm_add(gpupart__ledger *l, gpupart__ledger_member m, const char *name, uint64_t limit,
                   uint64_t guarantee, gpupart__ledger_entry **out) {
  return add_or_join(l, m, name, limit, guarantee, 0, out);
}

static int shm_join_named(gpupart__ledger *l, gpupart__ledger_member m, const char *name, gpupart__ledger_entry **out) {
  return add_or_join(l, m, name, 0, 0, 1, out);
}

static void shm_remove(gpupart__ledger *l, gpupart__ledger_entry *e) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L) == 0) {
    shm_share *s = share_of(L, e);
    if (s) memset(s, 0, sizeof *s), recompute_locked(L->h);
    for (shm_entry **p = &L->handles; *p; p = &(*p)->next)
      if (*p == handle(e)) {
        *p = handle(e)->next;
        break;
      }
    unlock_ledger(L);
  }
  gpupart__host_free(L->mem, handle(e));
}

/* This process's handle of the partition named name; one it has no share of is `foreign`. */
static gpupart__ledger_entry *shm_find(gpupart__ledger *l, const char *name) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return NULL;
  int i = find_locked(L->h, name);
  shm_entry *x = i < 0 ? NULL : &foreign;
  for (shm_entry *h = L->handles; h && i >= 0; h = h->next) {
    const shm_share *s = h->share < SHM_SHARES ? &L->h->share[h->share] : NULL;
    if (s && s->member == h->member && s->part == (uint32_t)i) x = h;
  }
  unlock_ledger(L);
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
    if (s->member != m || !share_valid(h, s)) continue;
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
  if (lock_ledger(L)) return 0;
  reap_locked(L);
  uint32_t n = m ? list_member_locked(L->h, m, out, cap) : list_all_locked(L->h, out, cap);
  unlock_ledger(L);
  return n;
}

/* Lock held: what p may still take (as ledger_local.c's grantable_locked). */
static uint64_t grantable_locked(const shm_header *h, const shm_part *p, gpupart__refusal *bound) {
  uint64_t own = sub0(p->limit, p->reserved);
  uint64_t taken = add_sat(h->reserved, sub0(h->unused, unused_of(p)));
  uint64_t device = sub0(h->budget, taken);
  *bound = own <= device ? GPUPART__REFUSED_LIMIT : GPUPART__REFUSED_BUDGET;
  return own <= device ? own : device;
}

/* Lock held: share s (of partition p) holds reserved bytes now. */
static void set_reserved_locked(shm_header *h, shm_part *p, shm_share *s, uint64_t reserved) {
  h->unused = sub0(h->unused, unused_of(p));
  h->reserved = add_sat(sub0(h->reserved, s->reserved), reserved);
  p->reserved = add_sat(sub0(p->reserved, s->reserved), reserved);
  s->reserved = reserved;
  h->unused = add_sat(h->unused, unused_of(p));
  if (p->reserved > p->peak_reserved) p->peak_reserved = p->reserved;
  if (h->reserved > h->peak_reserved) h->peak_reserved = h->reserved;
}

/* Lock held: grants bytes to s if they fit; a refusal first returns dead members' bytes
 * (which may free s's partition's other shares, never s). */
static gpupart__refusal reserve_locked(shm_ledger *L, shm_share *s, uint64_t bytes) {
  gpupart__refusal bound;
  shm_part *p = part_of(L, s);
  if (bytes > grantable_locked(L->h, p, &bound) && !(reap_locked(L) && bytes <= grantable_locked(L->h, p, &bound)))
    return bound;
  set_reserved_locked(L->h, p, s, add_sat(s->reserved, bytes));
  return GPUPART__GRANTED;
}

static gpupart__refusal shm_reserve(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return GPUPART__REFUSED_BUDGET;
  shm_share *s = share_of(L, e);
  gpupart__refusal r = s ? reserve_locked(L, s, bytes) : GPUPART__REFUSED_BUDGET;
  unlock_ledger(L);
  return r;
}

static void shm_release(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return;
  shm_share *s = share_of(L, e);
  if (s) set_reserved_locked(L->h, part_of(L, s), s, sub0(s->reserved, bytes));
  unlock_ledger(L);
}

/* Lock held: whether other members' bytes bound what s can grow by (through the budget,
 * or through its partition's limit when others share it): only then can a dead member
 * be what is in the way. */
static int others_bound(shm_ledger *L, const shm_share *s, gpupart__refusal bound) {
  return bound == GPUPART__REFUSED_BUDGET || part_of(L, s)->reserved > s->reserved;
}

static uint64_t shm_grantable(gpupart__ledger *l, gpupart__ledger_entry *e, gpupart__refusal *bound) {
  shm_ledger *L = shm(l);
  *bound = GPUPART__REFUSED_BUDGET;
  if (lock_ledger(L)) return 0;
  shm_share *s = share_of(L, e);
  uint64_t can = s ? grantable_locked(L->h, part_of(L, s), bound) : 0;
  if (s && others_bound(L, s, *bound) && reap_locked(L)) can = grantable_locked(L->h, part_of(L, s), bound);
  unlock_ledger(L);
  return can;
}

static int shm_set_limit(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t new_limit) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return GPUPART_ECORRUPT;
  shm_share *s = share_of(L, e);
  shm_part *p = s ? part_of(L, s) : NULL;
  int rc = !p ? GPUPART_ECORRUPT : new_limit > L->h->budget ? GPUPART_ELIMIT
           : p->reserved > new_limit ? GPUPART_EBUSY : GPUPART_OK;
  if (rc == GPUPART_OK) {
    p->limit = new_limit;
    if (p->guarantee > new_limit) p->guarantee = new_limit, recompute_locked(L->h);
  }
  unlock_ledger(L);
  return rc;
}

static void shm_get(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out) {
  shm_ledger *L = shm(l);
  *out = (gpupart__ledger_figures){0};
  if (lock_ledger(L)) return;
  const shm_share *s = share_of(L, e);
  if (s) *out = figures_of(part_of(L, s), s->reserved);
  unlock_ledger(L);
}

static void shm_totals(gpupart__ledger *l, gpupart__ledger_figures *out) {
  shm_ledger *L = shm(l);
  *out = (gpupart__ledger_figures){0};
  if (lock_ledger(L)) return;
  reap_locked(L);
  *out = (gpupart__ledger_figures){L->h->budget, L->h->guarantees, L->h->reserved, L->h->peak_reserved, 0};
  unlock_ledger(L);
}

static void shm_reset_peak(gpupart__ledger *l, gpupart__ledger_entry *e) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return;
  shm_share *s = share_of(L, e);
  if (s) part_of(L, s)->peak_reserved = part_of(L, s)->reserved;
  unlock_ledger(L);
}

/* Lock held: one partition against its limits and its shares. */
/* Where e's owner publishes (ledger.h); the share is this process's, so it stays while e
 * does. A handle the file no longer has writes to a sink. */
static gpupart__ledger_counters *shm_counters(gpupart__ledger *l, gpupart__ledger_entry *e) {
  static gpupart__ledger_counters sink;
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return &sink;
  shm_share *s = share_of(L, e);
  unlock_ledger(L);
  return s ? &s->pub : &sink;
}

static int check_part(const shm_header *h, uint32_t i, char *why, uint64_t n) {
  const shm_part *p = &h->part[i];
  uint64_t r = 0;
  uint32_t members = 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member && h->share[k].part == i) members++, r = add_sat(r, h->share[k].reserved);
  if (strnlen(p->name, SHM_NAME) == SHM_NAME) return snprintf(why, n, "a shared partition's name is unterminated"), -1;
  if (p->reserved > p->limit || p->guarantee > p->limit)
    return snprintf(why, n, "shared partition '%s' exceeds its limit", p->name), -1;
  if (members != p->members || r != p->reserved)
    return snprintf(why, n, "shared partition '%s' differs from its members' shares", p->name), -1;
  return 0;
}

static int check_shares(const shm_header *h, char *why, uint64_t n) {
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member && (!share_valid(h, &h->share[k]) || !h->part[h->share[k].part].members))
      return snprintf(why, n, "a share of the shared ledger belongs to no member or partition"), -1;
  return 0;
}

/* Names, member ids and shares (a member's part of a partition) are each there once. */
static int check_unique(const shm_header *h, char *why, uint64_t n) {
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    for (uint32_t k = i + 1; k < SHM_PARTS && h->part[i].members; k++)
      if (h->part[k].members && strncmp(h->part[i].name, h->part[k].name, SHM_NAME) == 0)
        return snprintf(why, n, "two shared partitions have one name"), -1;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    for (uint32_t k = i + 1; k < SHM_MEMBERS && h->member[i].id; k++)
      if (h->member[k].id == h->member[i].id)
        return snprintf(why, n, "two members of the shared ledger have one id"), -1;
  for (uint32_t i = 0; i < SHM_SHARES; i++)
    for (uint32_t k = i + 1; k < SHM_SHARES && h->share[i].member; k++)
      if (h->share[k].member == h->share[i].member && h->share[k].part == h->share[i].part)
        return snprintf(why, n, "a member has two shares of one shared partition"), -1;
  return 0;
}

static int check_locked(const shm_header *h, char *why, uint64_t n) {
  uint64_t g = 0, r = 0, u = 0;
  if (check_shares(h, why, n) || check_unique(h, why, n)) return -1;
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    const shm_part *p = &h->part[i];
    if (!p->members) continue;
    if (check_part(h, i, why, n)) return -1;
    g = add_sat(g, p->guarantee), r = add_sat(r, p->reserved), u = add_sat(u, unused_of(p));
  }
  if (g != h->guarantees || r != h->reserved || u != h->unused)
    return snprintf(why, n, "shared ledger sums differ from its partitions"), -1;
  if (g > h->budget || r > h->budget) return snprintf(why, n, "the shared ledger is past its budget"), -1;
  return 0;
}

static int shm_check(gpupart__ledger *l, char *why, uint64_t why_len) {
  shm_ledger *L = shm(l);
  if (lock_ledger(L)) return snprintf(why, why_len, "the shared ledger's lock is unusable"), -1;
  reap_locked(L);
  int rc = check_locked(L->h, why, why_len);
  unlock_ledger(L);
  return rc;
}

static void shm_ask_trim(gpupart__ledger *l) { __atomic_add_fetch(&shm(l)->h->trim_asked, 1, __ATOMIC_RELEASE); }

static int shm_trim_asked(gpupart__ledger *l, uint64_t *seen) {
  uint64_t now = __atomic_load_n(&shm(l)->h->trim_asked, __ATOMIC_ACQUIRE);
  if (now == *seen) return 0;
  *seen = now;
  return 1;
}

static const gpupart__ledger_ops shm_ops = {
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
    .set_limit = shm_set_limit,
    .get = shm_get,
    .totals = shm_totals,
    .reset_peak = shm_reset_peak,
    .counters = shm_counters,
    .report = shm_report,
    .check = shm_check,
    .join_named = shm_join_named,
    .ask_trim = shm_ask_trim,
    .trim_asked = shm_trim_asked,
};

/* ---- opening the file ---- */

void gpupart__ledger_shm_path(const char *dir, const gpupart__identity *id, char *out, size_t n) {
  char key[GPUPART__IDENTITY_MAX];
  size_t i = 0;
  for (; id->key[i] && i + 1 < sizeof key; i++) {
    char c = id->key[i];
    int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    key[i] = plain ? c : '_';
  }
  key[i] = '\0';
  snprintf(out, n, "%s/gpupart-%u-%s.ledger", dir, (unsigned)geteuid(), key);
}

/* The file must be this user's regular file with no group or other permissions. */
static int check_owner(int fd, const char *path, struct stat *st) {
  if (fstat(fd, st) != 0) return gpupart__fail(GPUPART_ECONFIG, "ledger %s: %s", path, strerror(errno));
  if (!S_ISREG(st->st_mode)) return gpupart__fail(GPUPART_ECONFIG, "ledger %s is not a regular file", path);
  if (st->st_uid != geteuid())
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s belongs to uid %u, not to this user (%u): refused", path,
                         (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & 077)
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s has mode %03o; a ledger must be 0600: refused", path,
                         (unsigned)(st->st_mode & 0777));
  return GPUPART_OK;
}

static int init_mutex(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return rc;
}

/* A new file: sized (a full folder is a clear error), then the header, magic last. */
static int create_file(shm_ledger *L, const char *path, const char *dir, uint64_t budget) {
  int err = posix_fallocate(L->fd, 0, sizeof *L->h);
  if (err)
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s: cannot reserve %zu bytes in %s (%s); free space there or set "
                         "GPUPART_LEDGER_DIR to another folder", path, sizeof *L->h, dir, strerror(err));
  L->h = mmap(NULL, sizeof *L->h, PROT_READ | PROT_WRITE, MAP_SHARED, L->fd, 0);
  if (L->h == MAP_FAILED) return L->h = NULL, gpupart__fail(GPUPART_ECONFIG, "ledger %s: mmap: %s", path, strerror(errno));
  shm_header *h = L->h;
  memset(h, 0, sizeof *h);
  h->version = SHM_VERSION, h->size = (uint32_t)sizeof *h, h->members = SHM_MEMBERS, h->parts = SHM_PARTS;
  h->shares = SHM_SHARES;
  memcpy(h->identity, L->base.id.key, sizeof h->identity);
  h->budget = budget;
  if (init_mutex(&h->lock)) return gpupart__fail(GPUPART_ECONFIG, "ledger %s: cannot make its lock", path);
  __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  return GPUPART_OK;
}

/* A ledger another version of the library made (its magic is ours, its version not): its
 * processes may still be using it, and its layout is not this one's. */
static int other_version(int fd, const char *path) {
  struct {
    uint64_t magic;
    uint32_t version;
  } head;
  if (pread(fd, &head, sizeof head, 0) != (ssize_t)sizeof head || head.magic != SHM_MAGIC ||
      head.version == SHM_VERSION)
    return GPUPART_OK;
  return gpupart__fail(GPUPART_ECONFIG, "ledger %s is a version %u ledger; this library reads version %u only: "
                       "stop the processes of the other gpupart version that still use the device, then remove "
                       "the file (or set GPUPART_LEDGER_DIR to another folder): refused",
                       path, head.version, SHM_VERSION);
}

/* An existing file of st's size mapped into L->h, if its size and header are this
 * library's (any device's). */
static int map_checked(shm_ledger *L, const char *path, const struct stat *st) {
  int rc = other_version(L->fd, path);
  if (rc) return rc;
  if ((uint64_t)st->st_size != sizeof *L->h)
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s has %lld bytes, not the %zu of a gpupart ledger: refused", path,
                         (long long)st->st_size, sizeof *L->h);
  L->h = mmap(NULL, sizeof *L->h, PROT_READ | PROT_WRITE, MAP_SHARED, L->fd, 0);
  if (L->h == MAP_FAILED) return L->h = NULL, gpupart__fail(GPUPART_ECONFIG, "ledger %s: mmap: %s", path, strerror(errno));
  const shm_header *h = L->h;
  if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->size != sizeof *h || h->members != SHM_MEMBERS ||
      h->parts != SHM_PARTS || h->shares != SHM_SHARES)
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: not a gpupart %u ledger (bad magic, version or size): refused",
                         path, SHM_VERSION);
  return GPUPART_OK;
}

/* An existing file: its header must be this library's, for this device. */
static int attach_file(shm_ledger *L, const char *path, const struct stat *st) {
  int rc = map_checked(L, path, st);
  if (rc) return rc;
  const shm_header *h = L->h;
  if (strncmp(h->identity, L->base.id.key, sizeof h->identity) || !h->budget)
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s is not the ledger of %s: refused", path, L->base.id.key);
  return GPUPART_OK;
}

static int open_file(shm_ledger *L, const char *dir, uint64_t budget) {
  char path[4096];
  struct stat st;
  gpupart__ledger_shm_path(dir, &L->base.id, path, sizeof path);
  L->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (L->fd < 0)
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s: %s (the folder is ledger_dir: GPUPART_LEDGER_DIR, the file's ledger_dir or /dev/shm)",
                         path, strerror(errno));
  flock(L->fd, LOCK_EX); /* one process sets a new file up; the others wait for it */
  int rc = check_owner(L->fd, path, &st);
  if (rc == GPUPART_OK) rc = st.st_size == 0 ? create_file(L, path, dir, budget) : attach_file(L, path, &st);
  flock(L->fd, LOCK_UN);
  return rc;
}

/* Lock held: whether any member's process lives (stops at the first: O(1) when processes
 * start while others run, so a crowd of starts scans nothing; dead ones are reaped
 * lazily, by the calls that read the ledger). */
static int any_live_locked(const shm_ledger *L) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (L->h->member[i].id && (L->mine[i] || held_elsewhere(L->fd, i))) return 1;
  return 0;
}

/* A ledger no live process uses is this one's to size: the file outlives its processes,
 * and the budget of a run long gone must not bind this one. */
static int claim_if_unused(shm_ledger *L, uint64_t budget) {
  if (lock_ledger(L)) return gpupart__fail(GPUPART_ECORRUPT, "ledger: the shared ledger's lock is unusable");
  if (!any_live_locked(L)) {
    memset(L->h->member, 0, sizeof L->h->member);
    memset(L->h->part, 0, sizeof L->h->part);
    memset(L->h->share, 0, sizeof L->h->share);
    L->h->budget = budget, L->h->peak_reserved = 0;
    recompute_locked(L->h);
  }
  unlock_ledger(L);
  return GPUPART_OK;
}

int gpupart__ledger_shm_create(const gpupart__hostmem *mem, const gpupart__identity *id, uint64_t budget,
                               const char *dir, gpupart__ledger **out) {
  *out = NULL;
  shm_ledger *L = gpupart__host_calloc(mem, 1, sizeof *L);
  if (!L) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  L->base.ops = &shm_ops;
  L->base.id = *id;
  gpupart__lock_init(&L->pending_lock);
  L->base.shared = 1;
  L->mem = mem;
  int rc = open_file(L, dir && *dir ? dir : "/dev/shm", budget);
  if (rc == GPUPART_OK) rc = claim_if_unused(L, budget);
  if (rc) {
    if (L->h) munmap(L->h, sizeof *L->h);
    if (L->fd >= 0) close(L->fd);
    gpupart__host_free(mem, L);
    return rc;
  }
  *out = &L->base;
  return GPUPART_OK;
}

/* ---- reading a ledger from outside: gpupart top, metrics and the exporter ---- */

_Static_assert(SHM_MEMBERS == GPUPART__SNAPSHOT_MEMBERS && SHM_PARTS == GPUPART__SNAPSHOT_ENTRIES,
               "a snapshot holds every slot of a ledger");
_Static_assert(SHM_NAME == GPUPART__LEDGER_NAME_MAX, "a snapshot holds every name whole");
_Static_assert(SHM_SHARES == GPUPART__SNAPSHOT_SHARES, "a snapshot holds every share");

/* A share's counters as its owner last published them, each field loaded whole. */
static gpupart__ledger_counters read_counters(const gpupart__ledger_counters *c) {
  return (gpupart__ledger_counters){gpupart__ledger_read(&c->in_use), gpupart__ledger_read(&c->failures),
                                    gpupart__ledger_read(&c->driver_allocs), gpupart__ledger_read(&c->driver_frees)};
}

static void add_counters(gpupart__ledger_counters *into, const gpupart__ledger_counters *c) {
  into->in_use = add_sat(into->in_use, c->in_use), into->failures = add_sat(into->failures, c->failures);
  into->driver_allocs = add_sat(into->driver_allocs, c->driver_allocs);
  into->driver_frees = add_sat(into->driver_frees, c->driver_frees);
}

size_t gpupart__ledger_shm_lock_offset(void) { return offsetof(shm_header, lock); }


/* Lock held: member slot i (its shares are added to it by copy_share_locked). */
static void copy_member_locked(shm_ledger *L, uint32_t i, gpupart__ledger_snapshot *out) {
  const shm_member *m = &L->h->member[i];
  gpupart__ledger_snapshot_member *o = &out->member[out->members++];
  *o = (gpupart__ledger_snapshot_member){.id = m->id, .pid = m->pid, .alive = held_elsewhere(L->fd, i)};
  memcpy(o->command, m->command, sizeof m->command); /* o->command[16] stays the NUL */
}

/* Where copy_within put each member slot and partition slot in the snapshot. */
typedef struct snapshot_index {
  uint32_t member[SHM_MEMBERS], entry[SHM_PARTS];
} snapshot_index;

/* Lock held: share k, counted into its member and partition (a share that names no
 * copied member or partition is left out: the check reports it). */
static void copy_share_locked(const shm_header *h, uint32_t k, const snapshot_index *ix,
                              gpupart__ledger_snapshot *out) {
  const shm_share *s = &h->share[k];
  if (!s->member || !share_valid(h, s) || ix->member[s->member_slot] == UINT32_MAX || ix->entry[s->part] == UINT32_MAX)
    return;
  gpupart__ledger_snapshot_share *o = &out->share[out->shares++];
  *o = (gpupart__ledger_snapshot_share){ix->member[s->member_slot], ix->entry[s->part], s->reserved,
                                        read_counters(&s->pub)};
  gpupart__ledger_snapshot_member *m = &out->member[o->member];
  m->entries++, m->reserved = add_sat(m->reserved, s->reserved);
  add_counters(&m->sum, &o->c);
  out->entry[o->entry].in_use = add_sat(out->entry[o->entry].in_use, o->c.in_use);
}

/* Lock held: the first valid share of partition k names its member and pid (a partition
 * several processes joined is shown once, under the first of them). */
static void first_member_locked(const shm_header *h, uint32_t k, gpupart__ledger_snapshot_entry *o) {
  for (uint32_t j = 0; j < SHM_SHARES; j++) {
    const shm_share *s = &h->share[j];
    if (!s->member || s->part != k || !share_valid(h, s)) continue;
    o->member = s->member;
    if (s->member_slot < SHM_MEMBERS && h->member[s->member_slot].id == s->member) o->pid = h->member[s->member_slot].pid;
    return;
  }
}

/* Lock held: partition slot k, its name bounded (the file may not terminate it); its
 * figures are partition-wide, over every member. */
static void copy_entry_locked(const shm_header *h, uint32_t k, gpupart__ledger_snapshot *out) {
  const shm_part *pt = &h->part[k];
  gpupart__ledger_snapshot_entry *o = &out->entry[out->entries++];
  snprintf(o->name, sizeof o->name, "%.*s", (int)strnlen(pt->name, SHM_NAME - 1), pt->name);
  o->figures = (gpupart__ledger_figures){.limit = pt->limit, .guarantee = pt->guarantee, .reserved = pt->reserved,
                                         .peak_reserved = pt->peak_reserved};
  first_member_locked(h, k, o);
}

static int copy_within(shm_ledger *L, int timeout_ms, const char *path, gpupart__ledger_snapshot *out) {
  int rc = lock_within(L, timeout_ms);
  if (rc == ETIMEDOUT) return gpupart__fail(GPUPART_EBUSY, "ledger %s: its lock was held past %d ms", path, timeout_ms);
  if (rc) return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: its lock is unusable (%s)", path, strerror(rc));
  const shm_header *h = L->h;
  out->budget = h->budget, out->guarantees = h->guarantees, out->reserved = h->reserved;
  out->peak_reserved = h->peak_reserved;
  snapshot_index ix;
  memset(&ix, 0xff, sizeof ix);
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (h->member[i].id) ix.member[i] = out->members, copy_member_locked(L, i, out);
  for (uint32_t k = 0; k < SHM_PARTS; k++)
    if (h->part[k].members) ix.entry[k] = out->entries, copy_entry_locked(h, k, out);
  for (uint32_t k = 0; k < SHM_SHARES; k++) copy_share_locked(h, k, &ix, out);
  out->consistent = check_locked(h, out->why, sizeof out->why) == 0;
  unlock_ledger(L);
  return GPUPART_OK;
}

/* Lock of file setup held, file mapped: its header must name the device its name does. */
static int name_matches(const shm_ledger *L, const char *path, const char *file, gpupart__ledger_snapshot *out) {
  gpupart__identity id = {{0}};
  char want[sizeof out->file + 2];
  snprintf(id.key, sizeof id.key, "%.*s", (int)strnlen(L->h->identity, sizeof id.key - 1), L->h->identity);
  gpupart__ledger_shm_path("", &id, want, sizeof want);
  if (strcmp(want + 1, file) != 0 || !L->h->budget)
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: its header names device '%s', not its file name's: refused",
                         path, id.key);
  memcpy(out->identity, id.key, sizeof out->identity);
  return GPUPART_OK;
}

/* Opens, checks and maps path as attaching would; a file being set up is EBUSY. */
static int map_for_reading(shm_ledger *L, const char *path, const char *file, gpupart__ledger_snapshot *out) {
  struct stat st;
  L->fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (L->fd < 0) return gpupart__fail(GPUPART_ECONFIG, "ledger %s: %s", path, strerror(errno));
  int rc = check_owner(L->fd, path, &st);
  if (rc) return rc;
  if (flock(L->fd, LOCK_SH | LOCK_NB) != 0)
    return gpupart__fail(GPUPART_EBUSY, "ledger %s is being set up by another process", path);
  rc = map_checked(L, path, &st);
  if (rc == GPUPART_OK) rc = name_matches(L, path, file, out);
  flock(L->fd, LOCK_UN);
  return rc;
}

int gpupart__ledger_shm_read(const char *dir, const char *file, int timeout_ms, gpupart__ledger_snapshot *out) {
  char path[4096];
  memset(out, 0, sizeof *out);
  snprintf(out->file, sizeof out->file, "%s", file);
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/dev/shm", file);
  shm_ledger L = {.fd = -1};
  out->status = strchr(file, '/') ? gpupart__fail(GPUPART_EINVAL, "ledger %s: not a file name", file)
                                  : map_for_reading(&L, path, file, out);
  if (out->status == GPUPART_OK) out->status = copy_within(&L, timeout_ms, path, out);
  if (out->status) snprintf(out->why, sizeof out->why, "%s", gpupart_last_error());
  if (L.h) munmap(L.h, sizeof *L.h);
  if (L.fd >= 0) close(L.fd);
  return out->status;
}

/* Whether name is a ledger file name of this user: gpupart-<uid>-<key>.ledger. */
static int is_my_ledger(const char *name) {
  char prefix[64];
  int n = snprintf(prefix, sizeof prefix, "gpupart-%u-", (unsigned)geteuid());
  size_t len = strlen(name);
  return strncmp(name, prefix, (size_t)n) == 0 && len > (size_t)n + 7 && strcmp(name + len - 7, ".ledger") == 0 &&
         len < sizeof ((gpupart__ledger_snapshot *)0)->file;
}

static int by_file(const void *a, const void *b) {
  return strcmp(((const gpupart__ledger_snapshot *)a)->file, ((const gpupart__ledger_snapshot *)b)->file);
}

int gpupart__ledger_shm_scan(const char *dir, int timeout_ms, gpupart__ledger_snapshot **out, uint32_t *n) {
  const char *d = dir && *dir ? dir : "/dev/shm";
  *out = NULL, *n = 0;
  DIR *dh = opendir(d);
  if (!dh) return gpupart__fail(GPUPART_ECONFIG, "ledger folder %s: %s", d, strerror(errno));
  gpupart__ledger_snapshot *s = calloc(GPUPART__SNAPSHOT_FILES, sizeof *s);
  if (!s) return closedir(dh), gpupart__fail(GPUPART_ENOMEM, "ledger snapshot: out of host memory");
  for (struct dirent *e; *n < GPUPART__SNAPSHOT_FILES && (e = readdir(dh));)
    if (is_my_ledger(e->d_name)) gpupart__ledger_shm_read(d, e->d_name, timeout_ms, &s[(*n)++]);
  closedir(dh);
  qsort(s, *n, sizeof *s, by_file);
  *out = s;
  return GPUPART_OK;
}
