/* Moving a shared ledger's members into a file made anew (shm_impl.h). A ledger
 * file deleted under its running members (by hand, or by systemd-logind's RemoveIPC,
 * which removes a user's files from /dev/shm when the user's last session ends) would let
 * the next process start a second ledger of the device that knows nothing of the bytes
 * the survivors hold. So every taking of the lock looks at the file's link count, and the
 * first member to find it 0 opens the name again as a newcomer would (making the file when
 * there is none) and moves every live member of the old file into it, each with its
 * shares and their partitions: its own members under its own lock bytes, the other
 * processes' under bytes it holds for them (proxies) for as long as their owners hold
 * theirs in the old file. An owner finds the file gone at its own next lock, moves itself
 * over (its own figures are the word: they replace what a proxy copied), taking a slot of
 * its own; the proxy lets go of its byte when it sees that. A newcomer that made the new
 * file before any survivor noticed gets the survivors' figures merged in, partitions of
 * one name joined: from then on the survivors' bytes count against the budget and the
 * partition's limit again (before, the newcomer could not know them). Shares keep their
 * index where it is free, so that the new file can be mapped where the old one was and
 * the counters that the partitions publish land in the new file. */
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_impl.h"

typedef struct move {
  shm_ledger *L;
  shm_header *o, *n; /* the old file and the new one */
  int fd;            /* the new one's */
  uint32_t attach;   /* this attachment's slot in it */
  uint8_t mine[SHM_MEMBERS];
  shm_proxy proxy[SHM_MEMBERS];
  uint32_t share[SHM_SHARES]; /* where each old share went (UINT32_MAX: nowhere) */
} move;

/* ---- the new file ---- */

/* Members of a file this attachment holds no byte of yet whose byte nobody holds. */
static void reap_dead(shm_header *n, int fd) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (n->member[i].id && !gpupart__shm_held_elsewhere(fd, i)) (void)gpupart__shm_drop_member(n, i);
  gpupart__shm_recompute(n);
}

static int make_successor(shm_ledger *L, int fd, shm_header **n) {
  if (posix_fallocate(fd, 0, sizeof **n) || gpupart__shm_map(fd, L->path, n)) return -1;
  gpupart__shm_init_header(*n, &L->base.id, L->h->budget);
  (*n)->peak_reserved = L->h->peak_reserved;
  return 0;
}

static int adopt_successor(shm_ledger *L, int fd, const struct stat *st, shm_header **n) {
  if ((uint64_t)st->st_size != sizeof **n || gpupart__shm_other_version(fd, L->path) ||
      gpupart__shm_map(fd, L->path, n))
    return -1;
  return gpupart__shm_header_ok(*n) && (*n)->budget &&
                 strncmp((*n)->identity, L->base.id.key, sizeof(*n)->identity) == 0
             ? 0
             : -1;
}

static int lock_successor(move *m) {
  if (gpupart__shm_attach(m->fd, m->n, &m->attach) ||
      gpupart__shm_lock_word(m->n, m->fd, m->attach + 1, SHM_LOCK_WAIT_MS))
    return -1;
  if (__atomic_load_n(&m->n->seq, __ATOMIC_ACQUIRE) & 1) reap_dead(m->n, m->fd); /* a holder died mid-update */
  gpupart__shm_mark_held(m->L, m->n);
  return 0;
}

/* The file now at L's name, mapped (guarded) and locked: made anew, or a newcomer's; -1
 * when there is none to move to (the folder is gone, the file is foreign or deleted
 * again): the members stay on the old file, whose limits still hold among them. */
static int open_successor(move *m) {
  shm_ledger *L = m->L;
  struct stat st;
  m->fd = gpupart__shm_open_file(L->path, &L->folder);
  if (m->fd < 0) return -1;
  flock(m->fd, LOCK_EX);
  int ok = gpupart__shm_check_owner(m->fd, L->path, &L->folder, &st) == GPUPART_OK && st.st_nlink > 0 &&
           (st.st_size == 0 ? make_successor(L, m->fd, &m->n) : adopt_successor(L, m->fd, &st, &m->n)) == 0 &&
           gpupart__shm_guard(L, m->n) == GPUPART_OK && lock_successor(m) == 0;
  flock(m->fd, LOCK_UN);
  if (ok) return 0;
  if (m->n) gpupart__shm_unguard(L, m->n);
  if (m->n) munmap(m->n, sizeof *m->n);
  close(m->fd);
  return -1;
}

/* ---- moving ---- */

static uint32_t slot_of(const shm_header *h, uint64_t id) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (h->member[i].id == id) return i;
  return SHM_MEMBERS;
}

/* A slot of the new file whose byte this attachment takes: the old index when it can. */
static uint32_t take_slot(move *m, uint32_t want) {
  if (!m->n->member[want].id && gpupart__shm_member_lock(m->fd, want, F_WRLCK) == 0) return want;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (!m->n->member[i].id && gpupart__shm_member_lock(m->fd, i, F_WRLCK) == 0) return i;
  return SHM_MEMBERS;
}

/* The new file's partition of op's name, made with op's figures when it has none. */
static uint32_t part_in(move *m, const shm_part *op) {
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (m->n->part[i].members && strncmp(m->n->part[i].name, op->name, SHM_NAME) == 0) return i;
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (!m->n->part[i].members) {
      m->n->part[i] = *op;
      m->n->part[i].members = 1; /* taken; gpupart__shm_recompute counts it again */
      return i;
    }
  return SHM_PARTS;
}

static uint32_t free_share(const shm_header *h, uint32_t want) {
  if (!h->share[want].member) return want;
  for (uint32_t i = 0; i < SHM_SHARES; i++)
    if (!h->share[i].member) return i;
  return SHM_SHARES;
}

/* The owner's counters are published without the lock: each field is read whole. */
static void copy_share(shm_share *to, const shm_share *from, uint32_t slot, uint32_t part) {
  *to = (shm_share){.member = from->member, .member_slot = slot, .part = part, .reserved = from->reserved};
  to->pub.in_use = gpupart__ledger_read(&from->pub.in_use);
  to->pub.failures = gpupart__ledger_read(&from->pub.failures);
  to->pub.driver_allocs = gpupart__ledger_read(&from->pub.driver_allocs);
  to->pub.driver_frees = gpupart__ledger_read(&from->pub.driver_frees);
}

/* Member id's shares, now of slot in the new file (a share with no room there goes
 * unaccounted, which only a full table can cause). */
static void move_shares(move *m, uint64_t id, uint32_t slot) {
  for (uint32_t j = 0; j < SHM_SHARES; j++) {
    const shm_share *s = &m->o->share[j];
    if (s->member != id || !gpupart__shm_share_valid(m->o, s)) continue;
    uint32_t part = part_in(m, &m->o->part[s->part]), t = free_share(m->n, j);
    if (part == SHM_PARTS || t == SHM_SHARES) continue;
    copy_share(&m->n->share[t], s, slot, part);
    m->share[j] = t;
  }
}

/* Old member slot i (this attachment's own when own) into the new file; -1 when it had
 * to stay behind. Another process's member that moved itself already is left alone;
 * this process's own replaces whatever a proxy copied of it. */
static int move_member(move *m, uint32_t i, int own) {
  shm_ledger *L = m->L;
  uint64_t id = m->o->member[i].id;
  uint32_t k = slot_of(m->n, id);
  if (k < SHM_MEMBERS && !own) return 0;
  if (k < SHM_MEMBERS) (void)gpupart__shm_drop_member(m->n, k);
  k = take_slot(m, i);
  int owner = own ? -1 : dup(L->proxy[i].fd >= 0 ? L->proxy[i].fd : L->fd);
  if (k == SHM_MEMBERS || (!own && owner < 0)) {
    if (owner >= 0) close(owner);
    return -1;
  }
  m->n->member[k] = m->o->member[i];
  if (own) m->mine[k] = 1;
  else m->proxy[k] = (shm_proxy){owner, L->proxy[i].fd >= 0 ? L->proxy[i].slot : i, id};
  move_shares(m, id, k);
  return 0;
}

static int move_members(move *m) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) {
    if (!m->o->member[i].id) continue;
    int own = m->L->mine[i];
    if (!own && !gpupart__shm_alive(m->L, i)) continue;
    if (move_member(m, i, own) && own) return -1;
  }
  gpupart__shm_recompute(m->n);
  return 0;
}

/* ---- switching over ---- */

/* The handles follow their shares; whether any share changed its index. */
static int follow(shm_ledger *L, const move *m) {
  int relocated = 0;
  for (shm_entry *x = L->handles; x; x = x->next) {
    if (x->share >= SHM_SHARES) continue;
    relocated |= m->share[x->share] != x->share;
    x->share = m->share[x->share];
  }
  return relocated;
}

/* The old mapping stays (published counters may point into it) until the ledger goes. */
static void retire(shm_ledger *L) {
  shm_retired *r = gpupart__host_calloc(L->mem, 1, sizeof *r);
  if (!r) return; /* leaked rather than unmapped under a partition's counters */
  r->h = L->h;
  r->next = L->retired;
  L->retired = r;
}

static void switch_to(shm_ledger *L, move *m) {
  int relocated = follow(L, m);
  gpupart__shm_mark_released(L->h);
  gpupart__shm_unlock_word(L->h);
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) gpupart__shm_end_proxy(L, i);
  close(L->fd);
  if (!relocated && mmap(L->h, sizeof *L->h, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd, 0) != MAP_FAILED) {
    gpupart__shm_unguard(L, m->n);
    munmap(m->n, sizeof *m->n);
  } else {
    retire(L);
    L->h = m->n;
  }
  L->fd = m->fd;
  L->attach = m->attach;
  L->epoch = L->h->epoch;
  memcpy(L->mine, m->mine, sizeof L->mine);
  memcpy(L->proxy, m->proxy, sizeof L->proxy);
}

/* Gives up a move: what this attachment put in the new file dies with its bytes (its
 * sequence word stays odd, so its next locker reaps them, after taking over the lock word
 * that names this attachment's slot, which is free once the file is closed). */
static void abandon(move *m) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (m->proxy[i].fd >= 0) close(m->proxy[i].fd);
  gpupart__shm_unguard(m->L, m->n);
  munmap(m->n, sizeof *m->n);
  close(m->fd); /* drops its lock and every byte taken in it */
}

void gpupart__shm_move(shm_ledger *L) {
  move m = {.L = L, .o = L->h, .fd = -1};
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) m.proxy[i].fd = -1;
  memset(m.share, 0xff, sizeof m.share);
  if (open_successor(&m)) return;
  if (move_members(&m)) abandon(&m);
  else switch_to(L, &m);
}
