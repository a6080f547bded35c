/* The shared ledger's file format (shm_format.h): the file's name, the checks it
 * must pass, the locking rules and the sums, for the library's side and for the outside
 * reader alike. The lock is a word of the file taken by compare-and-swap, so taking it
 * costs no system call; its value names the holder's attachment slot, and each attachment
 * holds an open-file-description lock (F_OFD_SETLK) on its slot's byte past the data for
 * as long as it is attached, which the kernel drops when its process dies. A waiter that
 * finds the word naming an attachment whose byte nobody holds (its process died, or the
 * word was scribbled on) takes the lock over; one whose holder lives waits until a
 * deadline. The sequence word is odd while a holder changes the file, so the next holder
 * knows when the last one died mid-update, and readers without the lock know a copy taken
 * across a change. The rule of a partition's changed figures (limit, floor) is here too,
 * one for a member's own resize and for a change from outside (shm_resize.c). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "shm.h"
#include "shm_format.h"

/* A ledger another version of the library made (its magic is ours, its version not): its
 * processes may still be using it, and its layout is not this one's. */
int gpupart__shm_other_version(int fd, const char *path) {
  struct {
    uint64_t magic;
    uint32_t version;
  } head;
  if (pread(fd, &head, sizeof head, 0) != (ssize_t)sizeof head || head.magic != SHM_MAGIC ||
      head.version == SHM_VERSION)
    return GPUPART_OK;
  return gpupart__fail(GPUPART_ECONFIG,
                       "ledger %s is a version %u ledger; this library reads version %u only: "
                       "stop the processes of the other gpupart version that still use the device, then remove "
                       "the file (or set GPUPART_LEDGER_DIR to another folder): refused",
                       path, head.version, SHM_VERSION);
}

int gpupart__shm_header_ok(const shm_header *h) {
  return h->magic == SHM_MAGIC && h->version == SHM_VERSION && h->size == sizeof *h && h->members == SHM_MEMBERS &&
         h->parts == SHM_PARTS && h->shares == SHM_SHARES && h->requests == SHM_REQUESTS;
}

uint64_t gpupart__shm_random(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    v = ((uint64_t)t.tv_nsec << 32) ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 16);
  }
  return v ? v : 1;
}

/* ---- locking ---- */

struct timespec gpupart__shm_deadline(int ms) {
  return gpupart__shm_deadline_on(CLOCK_MONOTONIC, ms);
}

struct timespec gpupart__shm_deadline_on(clockid_t clock, int ms) {
  struct timespec t;
  clock_gettime(clock, &t);
  long ns = t.tv_nsec + (long)(ms % 1000) * 1000000L;
  t.tv_sec += ms / 1000 + ns / 1000000000L;
  t.tv_nsec = ns % 1000000000L;
  return t;
}

int gpupart__shm_past(const struct timespec *deadline) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec > deadline->tv_sec || (t.tv_sec == deadline->tv_sec && t.tv_nsec >= deadline->tv_nsec);
}

static int lock_byte(int fd, short type, off_t at) {
  struct flock f = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(fd, F_OFD_SETLK, &f);
}

/* Whether another open file description holds the byte at (1 when it cannot tell). */
static int held_byte(int fd, off_t at) {
  struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  if (fcntl(fd, F_OFD_GETLK, &f) != 0) return 1; /* cannot tell: never take over on doubt */
  return f.l_type != F_UNLCK;
}

void gpupart__shm_back_off(unsigned tries) {
  if (tries < 8) {
    sched_yield();
    return;
  }
  struct timespec t = {0, (tries - 8 < 4 ? 4L << (tries - 8) : 64L) * 1000L};
  nanosleep(&t, NULL);
}

int gpupart__shm_attach(int fd, shm_header *h, uint32_t *slot) {
  for (uint32_t i = 0; i < SHM_ATTACHMENTS; i++) {
    if (lock_byte(fd, F_WRLCK, SHM_ATTACH_BASE + (off_t)i) != 0) continue;
    uint32_t stale = i + 1;
    __atomic_compare_exchange_n(&h->lock, &stale, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    *slot = i;
    return 0;
  }
  return -1;
}

int gpupart__shm_owner_alive(int fd, uint32_t word) {
  return word && word <= SHM_ATTACHMENTS && held_byte(fd, SHM_ATTACH_BASE + (off_t)(word - 1));
}

uint64_t gpupart__shm_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

int gpupart__shm_request_live(int fd, const shm_request *r, uint64_t now, int mine) {
  return r->ticket && r->expires_ms > now && r->expires_ms - now <= SHM_REQUEST_MAX_MS &&
         (mine || gpupart__shm_owner_alive(fd, r->attach));
}

int gpupart__shm_request_ahead(const shm_request *a, const shm_request *b) {
  return a->priority > b->priority || (a->priority == b->priority && a->ticket < b->ticket);
}

/* A word naming nobody, me, or an attachment that is gone, is free to take. The owner is
 * looked at (one system call) after a few tries and then every 64. */
static int takeable(uint32_t *w, int fd, uint32_t me, unsigned tries, uint32_t *seen) {
  *seen = __atomic_load_n(w, __ATOMIC_RELAXED);
  if (*seen == 0 || *seen == me) return 1;
  return (tries == 16 || (tries > 16 && tries % 64 == 0)) && !gpupart__shm_owner_alive(fd, *seen);
}

int gpupart__shm_lock_word(shm_header *h, int fd, uint32_t me, int timeout_ms) {
  struct timespec deadline = {0, 0};
  for (unsigned tries = 0;; tries++) {
    uint32_t seen;
    if (takeable(&h->lock, fd, me, tries, &seen) &&
        __atomic_compare_exchange_n(&h->lock, &seen, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return 0;
    if (tries == 0) deadline = gpupart__shm_deadline(timeout_ms); /* only a wait reads the clock */
    else if (gpupart__shm_past(&deadline)) return ETIMEDOUT;
    gpupart__shm_back_off(tries);
  }
}

void gpupart__shm_unlock_word(shm_header *h) { __atomic_store_n(&h->lock, 0, __ATOMIC_RELEASE); }

void gpupart__shm_ask_way(int fd, int on) { lock_byte(fd, on ? F_RDLCK : F_UNLCK, SHM_READERS); }

int gpupart__shm_way_asked(int fd) { return held_byte(fd, SHM_READERS); }

int gpupart__shm_member_lock(int fd, uint32_t slot, short type) {
  return lock_byte(fd, type, SHM_LOCK_BASE + (off_t)slot);
}

int gpupart__shm_held_elsewhere(int fd, uint32_t slot) { return held_byte(fd, SHM_LOCK_BASE + (off_t)slot); }

void gpupart__shm_describe_holder(int64_t pid, const char command[16], char *out, size_t n) {
  char comm[17];
  size_t len = strnlen(command, 16);
  for (size_t i = 0; i < len; i++) comm[i] = command[i] >= ' ' && command[i] < 0x7f ? command[i] : '?';
  comm[len] = '\0';
  if (pid == SHM_OPERATOR_PID) snprintf(out, n, "the operator's ledger (gpupart ledger create)");
  else if (pid > 0) snprintf(out, n, "pid %lld (%s)", (long long)pid, len ? comm : "?");
  else snprintf(out, n, "a process that did not say which (not a gpupart library, or one stopped before it said)");
}

/* ---- sums ---- */

int gpupart__shm_share_valid(const shm_header *h, const shm_share *s) {
  return s->member_slot < SHM_MEMBERS && h->member[s->member_slot].id == s->member && s->part < SHM_PARTS;
}

/* Every partition's members and reserved from the shares; a share that is not well
 * formed is freed. */
static void recount_parts(shm_header *h) {
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    h->part[i].members = 0;
    h->part[i].reserved = 0;
  }
  for (uint32_t i = 0; i < SHM_SHARES; i++) {
    shm_share *s = &h->share[i];
    if (!s->member) continue;
    if (!gpupart__shm_share_valid(h, s)) {
      memset(s, 0, sizeof *s);
      continue;
    }
    h->part[s->part].members++;
    h->part[s->part].reserved = gpupart__shm_add(h->part[s->part].reserved, s->reserved);
  }
}

void gpupart__shm_recompute(shm_header *h) {
  uint64_t g = 0, r = 0, u = 0;
  recount_parts(h);
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    shm_part *p = &h->part[i];
    if (!p->members) {
      memset(p, 0, sizeof *p);
      continue;
    }
    if (p->reserved > p->peak_reserved) p->peak_reserved = p->reserved;
    g = gpupart__shm_add(g, p->guarantee);
    r = gpupart__shm_add(r, p->reserved);
    u = gpupart__shm_add(u, gpupart__shm_unused(p));
  }
  h->guarantees = g;
  h->reserved = r;
  h->unused = u;
  if (r > h->peak_reserved) h->peak_reserved = r;
}

uint64_t gpupart__shm_drop_member(shm_header *h, uint32_t i) {
  uint64_t id = h->member[i].id, bytes = 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member == id) {
      bytes = gpupart__shm_add(bytes, h->share[k].reserved);
      memset(&h->share[k], 0, sizeof h->share[k]);
    }
  h->member[i] = (shm_member){0};
  return bytes;
}

/* Whether a member slot of h has id. */
static int id_taken(const shm_header *h, uint64_t id) {
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (h->member[i].id == id) return 1;
  return 0;
}

uint64_t gpupart__shm_new_member_id(shm_header *h) {
  uint64_t id = h->last_member;
  for (uint32_t tries = 0; tries <= SHM_MEMBERS; tries++)
    if (++id && !id_taken(h, id)) break; /* at most SHM_MEMBERS ids are taken: this ends */
  h->last_member = id;
  return id;
}

int gpupart__shm_operator_alive(const shm_header *h, uint32_t i) {
  if (i >= SHM_MEMBERS || !gpupart__shm_is_operator(&h->member[i])) return 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member == h->member[i].id && h->share[k].reserved) return 0;
  return 1;
}

int gpupart__shm_part_operator(const shm_header *h, uint32_t part) {
  for (uint32_t k = 0; k < SHM_SHARES; k++) {
    const shm_share *s = &h->share[k];
    if (s->member && s->part == part && gpupart__shm_share_valid(h, s) &&
        gpupart__shm_is_operator(&h->member[s->member_slot]))
      return 1;
  }
  return 0;
}

int gpupart__shm_find_part(const shm_header *h, const char *name) {
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    if (h->part[i].members && strncmp(h->part[i].name, name, SHM_NAME) == 0) return (int)i;
  return -1;
}

/* One partition against its limits and its shares. */
static int check_part(const shm_header *h, uint32_t i, char *why, uint64_t n) {
  const shm_part *p = &h->part[i];
  uint64_t r = 0;
  uint32_t members = 0;
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member && h->share[k].part == i) {
      members++;
      r = gpupart__shm_add(r, h->share[k].reserved);
    }
  if (strnlen(p->name, SHM_NAME) == SHM_NAME) return gpupart__say(why, n, "a shared partition's name is unterminated");
  if (p->reserved > p->limit || p->guarantee > p->limit)
    return gpupart__say(why, n, "shared partition '%s' exceeds its limit", p->name);
  if (members != p->members || r != p->reserved)
    return gpupart__say(why, n, "shared partition '%s' differs from its members' shares", p->name);
  return 0;
}

static int check_shares(const shm_header *h, char *why, uint64_t n) {
  for (uint32_t k = 0; k < SHM_SHARES; k++)
    if (h->share[k].member && (!gpupart__shm_share_valid(h, &h->share[k]) || !h->part[h->share[k].part].members))
      return gpupart__say(why, n, "a share of the shared ledger belongs to no member or partition");
  return 0;
}

/* Names, member ids and shares (a member's part of a partition) are each there once. */
static int check_unique(const shm_header *h, char *why, uint64_t n) {
  for (uint32_t i = 0; i < SHM_PARTS; i++)
    for (uint32_t k = i + 1; k < SHM_PARTS && h->part[i].members; k++)
      if (h->part[k].members && strncmp(h->part[i].name, h->part[k].name, SHM_NAME) == 0)
        return gpupart__say(why, n, "two shared partitions have one name");
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    for (uint32_t k = i + 1; k < SHM_MEMBERS && h->member[i].id; k++)
      if (h->member[k].id == h->member[i].id)
        return gpupart__say(why, n, "two members of the shared ledger have one id");
  for (uint32_t i = 0; i < SHM_SHARES; i++)
    for (uint32_t k = i + 1; k < SHM_SHARES && h->share[i].member; k++)
      if (h->share[k].member == h->share[i].member && h->share[k].part == h->share[i].part)
        return gpupart__say(why, n, "a member has two shares of one shared partition");
  return 0;
}

int gpupart__shm_check(const shm_header *h, char *why, uint64_t n) {
  uint64_t g = 0, r = 0, u = 0;
  if (check_shares(h, why, n) || check_unique(h, why, n)) return -1;
  for (uint32_t i = 0; i < SHM_PARTS; i++) {
    const shm_part *p = &h->part[i];
    if (!p->members) continue;
    if (check_part(h, i, why, n)) return -1;
    g = gpupart__shm_add(g, p->guarantee);
    r = gpupart__shm_add(r, p->reserved);
    u = gpupart__shm_add(u, gpupart__shm_unused(p));
  }
  if (g != h->guarantees || r != h->reserved || u != h->unused)
    return gpupart__say(why, n, "shared ledger sums differ from its partitions");
  if (g > h->budget || r > h->budget) return gpupart__say(why, n, "the shared ledger is past its budget");
  return 0;
}

/* ---- for tests ---- */

int gpupart__ledger_shm_hold(const char *path, int timeout_ms, const char *command) {
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  uint32_t slot = 0;
  shm_header *h = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED || gpupart__shm_attach(fd, h, &slot) || gpupart__shm_lock_word(h, fd, slot + 1, timeout_ms)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  __atomic_store_n(&h->seq, h->seq | 1, __ATOMIC_RELAXED); /* changing it, as a member does */
  __atomic_store_n(&h->holder_pid, (int64_t)getpid(), __ATOMIC_RELAXED);
  snprintf(h->holder_command, sizeof h->holder_command, "%s", command);
  return fd; /* the mapping stays, with the lock, until the process ends */
}

size_t gpupart__ledger_shm_field(const char *name) {
  static const struct {
    const char *name;
    size_t at;
  } fields[] = {{"identity", offsetof(shm_header, identity)}, {"epoch", offsetof(shm_header, epoch)},
                {"seq", offsetof(shm_header, seq)},           {"holder_pid", offsetof(shm_header, holder_pid)},
                {"budget", offsetof(shm_header, budget)},     {"reserved", offsetof(shm_header, reserved)},
                {"request", offsetof(shm_header, request)}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (strcmp(fields[i].name, name) == 0) return fields[i].at;
  return SIZE_MAX;
}

void gpupart__shm_init_header(shm_header *h, const gpupart__identity *id, uint64_t budget) {
  memset(h, 0, sizeof *h);
  h->version = SHM_VERSION;
  h->size = (uint32_t)sizeof *h;
  h->members = SHM_MEMBERS;
  h->parts = SHM_PARTS;
  h->shares = SHM_SHARES;
  h->requests = SHM_REQUESTS;
  memcpy(h->identity, id->key, sizeof h->identity);
  h->budget = budget;
  h->epoch = gpupart__shm_random();
  h->last_member = gpupart__shm_random() << 24; /* member ids of two files never meet (shm_move.c) */
  __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
}

/* ---- a partition's figures changed (a member's set_figures, gpupart resize) ---- */

/* Lock held: what a change leaves partition p, each figure with the fraction it follows
 * (0: bytes); a kept guarantee clamped down to the limit becomes bytes. */
typedef struct new_figures {
  uint64_t limit, guarantee;
  double limit_fraction, guarantee_fraction;
} new_figures;

static new_figures figures_of_change(const shm_header *h, const shm_part *p, const gpupart__ledger_size *size) {
  uint64_t granule = gpupart__shm_part_granule(p);
  new_figures n = {.limit = size->limit};
  if (gpupart__ledger_fraction_ok(size->limit_fraction)) {
    n.limit_fraction = size->limit_fraction;
    n.limit = gpupart__ledger_fraction_of(h->budget, n.limit_fraction, granule);
  }
  if (size->guarantee != GPUPART__LEDGER_KEEP) {
    n.guarantee = size->guarantee;
    if (gpupart__ledger_fraction_ok(size->guarantee_fraction)) {
      n.guarantee_fraction = size->guarantee_fraction;
      n.guarantee = gpupart__ledger_fraction_of(h->budget, n.guarantee_fraction, granule);
    }
  } else if (p->guarantee <= n.limit) {
    n.guarantee = p->guarantee;
    n.guarantee_fraction = gpupart__shm_part_fraction(p, 1);
  } else {
    n.guarantee = n.limit;
  }
  return n;
}

int gpupart__shm_set_figures_locked(shm_header *h, uint32_t i, const gpupart__ledger_size *size) {
  shm_part *p = &h->part[i];
  int len = (int)strnlen(p->name, SHM_NAME);
  new_figures n = figures_of_change(h, p, size);
  uint64_t limit = n.limit, g = n.guarantee, others = gpupart__shm_sub0(h->guarantees, p->guarantee);
  if (!limit) return gpupart__fail(GPUPART_EINVAL, "resize '%.*s': the limit rounds down to 0 bytes", len, p->name);
  if (g > limit)
    return gpupart__fail(GPUPART_EINVAL, "resize '%.*s': guarantee %llu exceeds the limit %llu", len, p->name,
                         (unsigned long long)(g), (unsigned long long)(limit));
  if (limit > h->budget)
    return gpupart__fail(GPUPART_ELIMIT, "resize '%.*s': limit %llu exceeds the device budget %llu (raise it first)",
                         len, p->name, (unsigned long long)(limit), (unsigned long long)(h->budget));
  if (g > gpupart__shm_sub0(h->budget, others))
    return gpupart__fail(GPUPART_ELIMIT,
                         "resize '%.*s': guarantee %llu would take the guarantees past the budget %llu (the other "
                         "partitions' sum to %llu)",
                         len, p->name, (unsigned long long)(g), (unsigned long long)(h->budget),
                         (unsigned long long)(others));
  if (p->reserved > limit) return GPUPART__SHM_ABOVE;
  p->limit = limit;
  p->guarantee = g;
  p->limit_fraction = n.limit_fraction;
  p->guarantee_fraction = n.guarantee_fraction;
  p->flags |= SHM_PART_RESIZED;
  gpupart__shm_recompute(h);
  return GPUPART_OK;
}
