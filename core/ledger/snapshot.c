/* Reading shared ledgers from outside: gpupart top, metrics and the exporter
 * (shm.h). It shares the file format (shm_format.h) with the library's
 * side and nothing else: it joins no member, takes no lock, opens the file read-only and
 * never maps or writes it. The copy is read with pread between two reads of the sequence
 * word, as a seqlock reader does, and taken again while a live holder changes the file
 * (waited on for at most the timeout), so it is never torn; a truncated file is a short
 * read, not a SIGBUS; and readers never hold up the members. Then, in the private copy
 * only, what a holder that died mid-update left is recomputed, and dead members that no
 * live member has reaped yet are taken out, so that the figures are the live processes'
 * even when every member was killed and nobody is left to reap. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "error.h"
#include "snapshot.h"
#include "shm_format.h"

_Static_assert(SHM_MEMBERS == GPUPART__SNAPSHOT_MEMBERS && SHM_PARTS == GPUPART__SNAPSHOT_ENTRIES,
               "a snapshot holds every slot of a ledger");
_Static_assert(SHM_NAME == GPUPART__LEDGER_NAME_MAX, "a snapshot holds every name whole");
_Static_assert(SHM_SHARES == GPUPART__SNAPSHOT_SHARES, "a snapshot holds every share");
_Static_assert(SHM_REQUESTS == GPUPART__SNAPSHOT_REQUESTS, "a snapshot holds every request");

static uint64_t add_sat(uint64_t a, uint64_t b) { return gpupart__shm_add(a, b); }

/* One file being read: its descriptor, the private copy, and who was alive when it was taken. */
typedef struct reading {
  const char *path;
  shm_folder folder;
  int fd;
  shm_header *h;
  uint8_t alive[SHM_MEMBERS];
  uint8_t requesting[SHM_REQUESTS]; /* slots the library would serve, as judged just after the copy */
  uint64_t now_ms;                  /* when (CLOCK_MONOTONIC) */
} reading;

/* ---- taking the copy ---- */

static int open_checked(reading *r) {
  struct stat st;
  r->fd = open(r->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (r->fd < 0) return gpupart__fail(GPUPART_ECONFIG, "ledger %s: %s", r->path, strerror(errno));
  return gpupart__shm_check_owner(r->fd, r->path, &r->folder, &st);
}

/* The file's setup lock held: its size and version must be this library's. */
static int sized(const reading *r) {
  struct stat st;
  int rc = gpupart__shm_other_version(r->fd, r->path);
  if (rc == GPUPART_OK && fstat(r->fd, &st) == 0 && (uint64_t)st.st_size != sizeof(shm_header))
    rc = gpupart__fail(GPUPART_ECORRUPT, "ledger %s has %lld bytes, not the %zu of a gpupart ledger: refused", r->path,
                       (long long)st.st_size, sizeof(shm_header));
  return rc;
}

static int busy(const reading *r, int timeout_ms) {
  char who[160];
  gpupart__shm_describe_holder(r->h->holder_pid, r->h->holder_command, who, sizeof who);
  return gpupart__fail(GPUPART_EBUSY, "ledger %s: its lock was held past %d ms by %s", r->path, timeout_ms, who);
}

static uint64_t seq_of(const reading *r) {
  uint64_t seq = 1;
  if (pread(r->fd, &seq, sizeof seq, offsetof(shm_header, seq)) != (ssize_t)sizeof seq) seq = 1;
  return seq;
}

/* One copy between two reads of the sequence word: 1 when no holder changed the file
 * meanwhile, or when the one that was changing it is dead (its copy is then recomputed);
 * 0 to try again; -1 when the file is shorter than a ledger. */
static int copy_once(reading *r) {
  uint64_t before = seq_of(r);
  if (pread(r->fd, r->h, sizeof *r->h, 0) != (ssize_t)sizeof *r->h) return -1;
  uint64_t after = seq_of(r);
  if (before != after) return 0;
  return !(before & 1) || !gpupart__shm_owner_alive(r->fd, r->h->lock);
}

/* The copy, read without the lock (readers never hold up the members), and each member's
 * liveness just after it. A file being set up by its creator holds its flock: busy. */
static int take_copy(reading *r, int timeout_ms) {
  if (flock(r->fd, LOCK_SH | LOCK_NB) != 0)
    return gpupart__fail(GPUPART_EBUSY, "ledger %s is being set up by another process", r->path);
  struct timespec deadline = gpupart__shm_deadline(timeout_ms);
  int rc = sized(r), got = 0;
  for (unsigned tries = 0; rc == GPUPART_OK && !(got = copy_once(r)); tries++) {
    if (tries == 4) gpupart__shm_ask_way(r->fd, 1); /* busy members: they make way at their next lock */
    if (gpupart__shm_past(&deadline)) rc = busy(r, timeout_ms);
    else gpupart__shm_back_off(tries);
  }
  gpupart__shm_ask_way(r->fd, 0);
  if (rc == GPUPART_OK && got < 0)
    rc = gpupart__fail(GPUPART_ECORRUPT, "ledger %s: shorter than a ledger when read (truncated?)", r->path);
  flock(r->fd, LOCK_UN);
  for (uint32_t i = 0; rc == GPUPART_OK && i < SHM_MEMBERS; i++)
    r->alive[i] = r->h->member[i].id && (gpupart__shm_operator_alive(r->h, i) || gpupart__shm_held_elsewhere(r->fd, i));
  uint64_t now = gpupart__shm_now_ms();
  for (uint32_t i = 0; rc == GPUPART_OK && i < SHM_REQUESTS; i++)
    r->requesting[i] = (uint8_t)gpupart__shm_request_live(r->fd, &r->h->request[i], now, 0);
  r->now_ms = now;
  return rc;
}

/* The header must be this version's and name the device its file name does. */
static int header_matches(const reading *r, const char *file, gpupart__ledger_snapshot *out) {
  const shm_header *h = r->h;
  if (!gpupart__shm_header_ok(h))
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: not a gpupart %u ledger (bad magic, version or size): refused",
                         r->path, SHM_VERSION);
  gpupart__identity id = {{0}};
  char want[sizeof out->file + 2];
  snprintf(id.key, sizeof id.key, "%.*s", (int)strnlen(h->identity, sizeof id.key - 1), h->identity);
  gpupart__ledger_shm_path("", &r->folder, &id, want, sizeof want);
  if (strcmp(want + 1, file) != 0)
    return gpupart__fail(GPUPART_ECORRUPT, "ledger %s: its header names device '%s', not its file name's: refused",
                         r->path, id.key);
  if (!h->budget)
    return gpupart__fail(GPUPART_ECORRUPT,
                         "ledger %s records a budget of 0 bytes, which no gpupart process writes: "
                         "the file is damaged",
                         r->path);
  memcpy(out->identity, id.key, sizeof out->identity);
  return GPUPART_OK;
}

/* ---- the snapshot, from the copy ---- */

/* A share's counters as its owner last published them. */
static void add_counters(gpupart__ledger_counters *into, const gpupart__ledger_counters *c) {
  into->in_use = add_sat(into->in_use, c->in_use);
  into->failures = add_sat(into->failures, c->failures);
  into->driver_allocs = add_sat(into->driver_allocs, c->driver_allocs);
  into->driver_frees = add_sat(into->driver_frees, c->driver_frees);
}

/* Where each member slot and partition slot went in the snapshot. */
typedef struct snapshot_index {
  uint32_t member[SHM_MEMBERS], entry[SHM_PARTS];
} snapshot_index;

/* Member slot i; a dead one's bytes are counted as dead and its shares leave the copy. */
static void copy_member(reading *r, uint32_t i, snapshot_index *ix, gpupart__ledger_snapshot *out) {
  const shm_member *m = &r->h->member[i];
  ix->member[i] = out->members;
  gpupart__ledger_snapshot_member *o = &out->member[out->members++];
  *o = (gpupart__ledger_snapshot_member){.id = m->id, .pid = m->pid, .alive = r->alive[i]};
  memcpy(o->command, m->command, sizeof m->command); /* o->command[16] stays the NUL */
  if (r->alive[i]) return;
  out->dead_members++;
  out->dead_reserved = add_sat(out->dead_reserved, gpupart__shm_drop_member(r->h, i));
}

/* Share k, counted into its member and partition. */
static void copy_share(const shm_header *h, uint32_t k, const snapshot_index *ix, gpupart__ledger_snapshot *out) {
  const shm_share *s = &h->share[k];
  if (!s->member || !gpupart__shm_share_valid(h, s) || ix->member[s->member_slot] == UINT32_MAX ||
      ix->entry[s->part] == UINT32_MAX)
    return;
  gpupart__ledger_snapshot_share *o = &out->share[out->shares++];
  *o = (gpupart__ledger_snapshot_share){ix->member[s->member_slot], ix->entry[s->part], s->reserved, s->pub};
  gpupart__ledger_snapshot_member *m = &out->member[o->member];
  m->entries++;
  m->reserved = add_sat(m->reserved, s->reserved);
  add_counters(&m->sum, &o->c);
  out->entry[o->entry].in_use = add_sat(out->entry[o->entry].in_use, o->c.in_use);
}

/* The first valid share of partition k names its member and pid (a partition several
 * processes joined is shown once, under the first of them). */
static void first_member(const shm_header *h, uint32_t k, gpupart__ledger_snapshot_entry *o) {
  for (uint32_t j = 0; j < SHM_SHARES; j++) {
    const shm_share *s = &h->share[j];
    if (!s->member || s->part != k || !gpupart__shm_share_valid(h, s)) continue;
    o->member = s->member;
    o->pid = h->member[s->member_slot].pid;
    return;
  }
}

/* Partition slot k, its name bounded (the file may not terminate it). */
static void copy_entry(const shm_header *h, uint32_t k, snapshot_index *ix, gpupart__ledger_snapshot *out) {
  const shm_part *pt = &h->part[k];
  ix->entry[k] = out->entries;
  gpupart__ledger_snapshot_entry *o = &out->entry[out->entries++];
  snprintf(o->name, sizeof o->name, "%.*s", (int)strnlen(pt->name, SHM_NAME - 1), pt->name);
  o->figures = (gpupart__ledger_figures){
      .limit = pt->limit, .guarantee = pt->guarantee, .reserved = pt->reserved, .peak_reserved = pt->peak_reserved};
  o->limit_fraction = gpupart__shm_part_fraction(pt, 0); /* any bytes, until checked */
  o->guarantee_fraction = gpupart__shm_part_fraction(pt, 1);
  if (gpupart__ledger_labels_ok(&pt->labels)) o->labels = pt->labels; /* any bytes, until checked */
  else o->labels_refused = 1;
  first_member(h, k, o);
}

/* The live requests, in the order the library serves them (insertion by
 * gpupart__shm_request_ahead: at most SHM_REQUESTS of them). */
static void copy_requests(const reading *r, gpupart__ledger_snapshot *out) {
  const shm_request *order[SHM_REQUESTS];
  uint32_t n = 0;
  for (uint32_t i = 0; i < SHM_REQUESTS; i++) {
    if (!r->requesting[i]) continue;
    uint32_t j = n++;
    for (; j > 0 && gpupart__shm_request_ahead(&r->h->request[i], order[j - 1]); j--) order[j] = order[j - 1];
    order[j] = &r->h->request[i];
  }
  for (uint32_t k = 0; k < n; k++) {
    const shm_request *q = order[k];
    gpupart__ledger_snapshot_request *o = &out->request[k];
    *o = (gpupart__ledger_snapshot_request){.ticket = q->ticket,
                                            .pid = q->pid,
                                            .need = q->need,
                                            .priority = q->priority,
                                            .ms_left = q->expires_ms - r->now_ms};
    memcpy(o->command, q->command, sizeof q->command); /* o->command[16] stays the NUL */
    out->requested = add_sat(out->requested, q->need);
  }
  out->requests = n;
}

static void build(reading *r, gpupart__ledger_snapshot *out) {
  shm_header *h = r->h;
  snapshot_index ix;
  memset(&ix, 0xff, sizeof ix);
  if (h->seq & 1) gpupart__shm_recompute(h); /* its last holder died changing it */
  out->consistent = gpupart__shm_check(h, out->why, sizeof out->why) == 0;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++)
    if (h->member[i].id) copy_member(r, i, &ix, out);
  gpupart__shm_recompute(h); /* without the dead: the live members' figures */
  for (uint32_t k = 0; k < SHM_PARTS; k++)
    if (h->part[k].members) copy_entry(h, k, &ix, out);
  for (uint32_t k = 0; k < SHM_SHARES; k++) copy_share(h, k, &ix, out);
  copy_requests(r, out);
  out->budget = h->budget;
  out->guarantees = h->guarantees;
  out->reserved = h->reserved;
  out->peak_reserved = h->peak_reserved;
}

/* File of folder dir, which f describes, into out. */
static int read_in(const char *dir, const shm_folder *f, const char *file, int timeout_ms,
                   gpupart__ledger_snapshot *out) {
  char path[4096];
  memset(out, 0, sizeof *out);
  snprintf(out->file, sizeof out->file, "%s", file);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  reading r = {.path = path, .folder = *f, .fd = -1, .h = malloc(sizeof(shm_header))};
  if (!r.h) out->status = gpupart__fail(GPUPART_ENOMEM, "ledger snapshot: out of host memory");
  else if (strchr(file, '/')) out->status = gpupart__fail(GPUPART_EINVAL, "ledger %s: not a file name", file);
  else out->status = open_checked(&r);
  if (out->status == GPUPART_OK) out->status = take_copy(&r, timeout_ms);
  if (out->status == GPUPART_OK) out->status = header_matches(&r, file, out);
  if (out->status == GPUPART_OK) build(&r, out);
  if (out->status) snprintf(out->why, sizeof out->why, "%s", gpupart_last_error());
  if (r.fd >= 0) close(r.fd);
  free(r.h);
  return out->status;
}

int gpupart__ledger_shm_read(const char *dir, const char *file, int timeout_ms, gpupart__ledger_snapshot *out) {
  shm_folder f;
  int rc = gpupart__shm_folder(dir, &f);
  if (rc == GPUPART_OK) return read_in(dir, &f, file, timeout_ms, out);
  memset(out, 0, sizeof *out);
  snprintf(out->file, sizeof out->file, "%s", file);
  snprintf(out->why, sizeof out->why, "%s", gpupart_last_error());
  out->status = rc;
  return rc;
}

/* Whether name is a ledger file name of the folder (gpupart-<uid>-<key>.ledger of this
 * user, or in a group folder gpupart-<key>.ledger of anyone) that a snapshot can hold. */
static int is_ledger(const shm_folder *f, const char *name) {
  return gpupart__shm_is_ledger_name(f, name) && strlen(name) < sizeof((gpupart__ledger_snapshot *)0)->file;
}

static int by_file(const void *a, const void *b) {
  return strcmp(((const gpupart__ledger_snapshot *)a)->file, ((const gpupart__ledger_snapshot *)b)->file);
}

int gpupart__ledger_shm_scan(const char *dir, int timeout_ms, gpupart__ledger_snapshot **out, uint32_t *n) {
  uint32_t unread;
  return gpupart__ledger_shm_scan_all(dir, timeout_ms, out, n, &unread);
}

/* The ledger files of the folder dh lists: every one, and the first cap of them read into s. */
static uint32_t read_all(DIR *dh, const char *dir, const shm_folder *f, int timeout_ms, gpupart__ledger_snapshot *s,
                         uint32_t cap, uint32_t *n) {
  uint32_t seen = 0;
  for (struct dirent *e; (e = readdir(dh));) {
    if (!is_ledger(f, e->d_name)) continue;
    if (seen++ < cap) read_in(dir, f, e->d_name, timeout_ms, &s[(*n)++]);
  }
  return seen;
}

int gpupart__ledger_shm_scan_all(const char *dir, int timeout_ms, gpupart__ledger_snapshot **out, uint32_t *n,
                                 uint32_t *unread) {
  *out = NULL;
  *n = 0;
  *unread = 0;
  if (!dir || !*dir) return gpupart__fail(GPUPART_EINVAL, "ledger snapshot: no ledger folder given");
  shm_folder f;
  int rc = gpupart__shm_folder(dir, &f);
  if (rc) return rc;
  DIR *dh = opendir(dir);
  if (!dh) return gpupart__fail(GPUPART_ECONFIG, "ledger folder %s: %s", dir, strerror(errno));
  uint32_t cap = 0; /* the files there now: a snapshot is large (every slot of a ledger) */
  for (struct dirent *e; cap < GPUPART__SNAPSHOT_FILES && (e = readdir(dh));) cap += is_ledger(&f, e->d_name);
  rewinddir(dh);
  gpupart__ledger_snapshot *s = calloc(cap ? cap : 1, sizeof *s);
  if (!s) {
    closedir(dh);
    return gpupart__fail(GPUPART_ENOMEM, "ledger snapshot: out of host memory");
  }
  uint32_t seen = read_all(dh, dir, &f, timeout_ms, s, cap, n);
  *unread = seen - *n; /* as the second listing counts them */
  closedir(dh);
  qsort(s, *n, sizeof *s, by_file);
  *out = s;
  return GPUPART_OK;
}
