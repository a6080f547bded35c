/* The shared ledger's file (version 5): its layout, the checks a file must pass before
 * anything of it is trusted, the rules for locking it, and the sums every figure is
 * recomputed from. Shared by the library's side (shm.c and its helpers) and the
 * outside reader (snapshot.c); nothing here keeps state. Every byte of the file is
 * hostile input: each index read from it is bounds-checked, each sum saturates, and every
 * value of the lock word is legal (it names an attachment whose liveness is an
 * open-file-description lock the kernel drops when its process dies), so no value
 * written into the file can crash a process that locks or reads it, or wedge it for more
 * than the bounded wait. */
#ifndef GPUPART_CORE_LEDGER_SHM_FORMAT_H
#define GPUPART_CORE_LEDGER_SHM_FORMAT_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "identity.h"
#include "ledger.h"
#include "shm_folder.h"

#define SHM_MAGIC 0x3174726170757067ull /* "gpupart1" read as little-endian */
/* 5: give-back requests (their slots, a ticket counter and a posted counter), each
 * partition's workload labels (a DRA claim, namespace, pod) and the fractions of the
 * budget its limit and guarantee were made from; 4: no mutex in the file (a
 * lock word naming an attachment instead), an epoch, a sequence word and the lock
 * holder's pid and command; 3: the shares carry their owner's counters */
#define SHM_VERSION 5u
#define SHM_MEMBERS 128u
#define SHM_PARTS 256u
#define SHM_SHARES 512u
#define SHM_NAME 64u
#define SHM_REQUESTS 32u               /* give-back requests at once (shm_request.c) */
#define SHM_REQUEST_MAX_MS 60000u      /* a request's longest life: a slot set to expire later is hostile, freed */
#define SHM_LOCK_BASE ((off_t)1 << 32) /* member i's liveness byte: far past the data */
#define SHM_ATTACH_BASE (SHM_LOCK_BASE + 65536) /* attachment a's liveness byte */
#define SHM_READERS (SHM_LOCK_BASE - 1)         /* held for reading by readers asking the members to make way */
#define SHM_ATTACHMENTS 1024u                   /* attachments (one per context and file) at once */
/* The pid a member slot carries when it is the operator's (gpupart ledger create,
 * shm_operator.c): no process holds its byte, it is alive until `gpupart ledger remove`,
 * and its shares hold no bytes: they keep the operator's partitions, with their limits
 * and floors, in the file while no job is a member of them. */
#define SHM_OPERATOR_PID ((int64_t)-1)

typedef struct shm_member {
  uint64_t id;      /* 0 = free; unique across files (a random base at creation) */
  int64_t pid;      /* for people reading the file; liveness is the lock */
  char command[16]; /* its process's name (comm) at join, for readers in other PID namespaces; NUL-padded,
                     * not terminated when all 16 bytes are used */
} shm_member;

/* A partition; free while it has no members. Its members and reserved are the sums of its
 * shares (recomputed from them after a death). flags: SHM_PART_RESIZED once its figures
 * were changed after its creation (by a member or from outside, resize.h): a later
 * creation with other figures then joins it, the ledger's figures applying, rather than
 * being refused (EEXIST); other bits are ignored. limit_fraction and guarantee_fraction:
 * the fractions of the budget the maker gave (the configuration's "30%", `gpupart resize
 * --limit 50%`), 0 for bytes; a budget change recomputes those figures from the new budget,
 * rounded down to granule (shm_resize.c), and leaves the others' bytes. Hostile input: a
 * reader trusts them only through gpupart__shm_part_fraction and gpupart__shm_part_granule.
 * labels: written once, by the member that makes the partition
 * (or the first member that has any), ledger.h's label op; all "" when none; a reader
 * trusts them only when gpupart__ledger_labels_ok (printable ASCII, terminated). */
#define SHM_PART_RESIZED 1u
typedef struct shm_part {
  char name[SHM_NAME];
  uint64_t limit, guarantee, reserved, peak_reserved;
  uint32_t members, flags;
  double limit_fraction, guarantee_fraction; /* (0, 1], or 0 = bytes */
  uint64_t granule;                          /* the maker's device granularity */
  gpupart__ledger_labels labels;
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

/* A give-back request (shm_request.c): its poster needs need bytes free in the budget
 * once every unused guarantee is counted, ahead of every request of a lower priority
 * (then of a higher ticket). Every field is hostile input: a slot is served only while
 * its ticket is set, its attachment (attach - 1) lives and expires_ms lies in the next
 * SHM_REQUEST_MAX_MS; any need and priority are legal (sums saturate). */
typedef struct shm_request {
  uint64_t ticket;     /* 0 = free; the header's last_ticket when posted */
  uint64_t need;       /* bytes; 0: only that the floors lack nothing */
  uint64_t expires_ms; /* CLOCK_MONOTONIC, in ms: no longer served after it */
  int64_t pid;         /* the poster, for messages */
  uint32_t priority;   /* higher first (GPUPART__PRIORITY_*, ledger.h) */
  uint32_t attach;     /* the poster's attachment slot + 1: its liveness byte */
  char command[16];    /* the poster's comm, NUL-padded */
} shm_request;

typedef struct shm_header {
  uint64_t magic;
  uint32_t version, size, members, parts, shares, requests;
  char identity[GPUPART__IDENTITY_MAX];
  uint64_t epoch;          /* random, written at creation: a file made anew under the name has another */
  uint32_t lock;           /* 0, or the holder's attachment slot + 1 (taken by compare-and-swap) */
  uint32_t wake;           /* bumped with trim_asked; the responders (shm_wake.c) sleep on it (a futex word) */
  uint64_t seq;            /* even: as its last holder left it; odd: a holder is changing it (or died doing so) */
  int64_t holder_pid;      /* the lock's holder as it wrote itself (0 = none said), for messages */
  char holder_command[16]; /* and its comm, NUL-padded */
  uint64_t budget, guarantees, reserved, peak_reserved, unused, last_member;
  uint64_t trim_asked; /* bumped (atomically, no lock) to ask every process to trim */
  shm_member member[SHM_MEMBERS];
  shm_part part[SHM_PARTS];
  shm_share share[SHM_SHARES];
  uint64_t last_ticket; /* the last request's ticket (lock held) */
  uint64_t posted;      /* bumped (atomically) at every request posted: a handle's next slow path compares it */
  shm_request request[SHM_REQUESTS];
} shm_header;

static inline uint64_t gpupart__shm_sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static inline uint64_t gpupart__shm_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static inline uint64_t gpupart__shm_unused(const shm_part *p) { return gpupart__shm_sub0(p->guarantee, p->reserved); }
/* The fraction of the budget partition p's limit (guarantee 0) or guarantee (1) follows, as
 * the file says: 0 (bytes) unless it is one (gpupart__ledger_fraction_ok: never NaN, never
 * outside (0, 1]). */
static inline double gpupart__shm_part_fraction(const shm_part *p, int guarantee) {
  double f = guarantee ? p->guarantee_fraction : p->limit_fraction;
  return gpupart__ledger_fraction_ok(f) ? f : 0;
}
/* A new partition of its maker's size (nameless, no members yet): the bytes, and each
 * fraction only where it is one. */
static inline shm_part gpupart__shm_part_sized(const gpupart__ledger_size *z) {
  return (shm_part){.limit = z->limit,
                    .guarantee = z->guarantee,
                    .limit_fraction = gpupart__ledger_fraction_ok(z->limit_fraction) ? z->limit_fraction : 0,
                    .guarantee_fraction =
                        gpupart__ledger_fraction_ok(z->guarantee_fraction) ? z->guarantee_fraction : 0,
                    .granule = z->granule};
}
/* What p's fractions are rounded down to: its granule when that is a power of two of at
 * most 1 GiB, else 1 (any value in the file is legal, none is trusted). */
static inline uint64_t gpupart__shm_part_granule(const shm_part *p) {
  uint64_t g = p->granule;
  return g && g <= (1ull << 30) && !(g & (g - 1)) ? g : 1;
}

/* ---- the file ---- */

/* The file's name and the checks of its owner and mode: shm_folder.h. */
/* A new file's header: this version's sizes, the device and budget, a random epoch and
 * member base; the magic is stored last (release), so a reader never trusts a half-made
 * header. */
void gpupart__shm_init_header(shm_header *h, const gpupart__identity *id, uint64_t budget);
/* ECONFIG when the file carries the magic of a gpupart ledger of another version. */
int gpupart__shm_other_version(int fd, const char *path);
/* Whether the header's magic, version, size and table sizes are this library's. */
int gpupart__shm_header_ok(const shm_header *h);
/* A random 64-bit value (an epoch, a base of member ids). */
uint64_t gpupart__shm_random(void);

/* ---- locking: the lock word, and the liveness bytes ---- */

/* A holder keeps the lock for microseconds; one that keeps it for this long is stopped
 * (or hostile): a member's call then fails instead of hanging. */
#define SHM_LOCK_WAIT_MS 10000

/* A deadline ms milliseconds from now (CLOCK_MONOTONIC). */
struct timespec gpupart__shm_deadline(int ms);
/* The same on another clock (CLOCK_REALTIME for pthread_mutex_timedlock). */
struct timespec gpupart__shm_deadline_on(clockid_t clock, int ms);
int gpupart__shm_past(const struct timespec *deadline);
/* Between two tries of a wait: yields, then sleeps (4 us doubling to 64 us). */
void gpupart__shm_back_off(unsigned tries);
/* Takes the first attachment slot of fd's file whose byte nobody holds into *slot (kept
 * until fd closes); a lock word naming that slot is stale (its owner is dead) and is
 * cleared. -1 when every slot is taken. */
int gpupart__shm_attach(int fd, shm_header *h, uint32_t *slot);
/* Whether the attachment a lock word names lives (held by another open file description). */
int gpupart__shm_owner_alive(int fd, uint32_t word);
/* Takes h's lock word for attachment slot me (through fd, whose file h maps), waiting at
 * most timeout_ms: a word that names a dead attachment, or me, is taken over. 0 or
 * ETIMEDOUT. */
int gpupart__shm_lock_word(shm_header *h, int fd, uint32_t me, int timeout_ms);
void gpupart__shm_unlock_word(shm_header *h);
/* A reader without the lock that cannot get a copy between two changes asks the members
 * to make way (on: a shared lock on the readers' byte; off: drops it); whether one asks. */
void gpupart__shm_ask_way(int fd, int on);
int gpupart__shm_way_asked(int fd);
/* Takes (F_WRLCK) or drops (F_UNLCK) member slot's byte: 0 or -1. */
int gpupart__shm_member_lock(int fd, uint32_t slot, short type);
/* Whether another open file description holds member slot's byte (its process lives);
 * 1 when it cannot tell. */
int gpupart__shm_held_elsewhere(int fd, uint32_t slot);
/* "pid 123 (python3)" for the lock's holder as the header names it; "a process that did
 * not say which" when it names none. */
void gpupart__shm_describe_holder(int64_t pid, const char command[16], char *out, size_t n);
/* CLOCK_MONOTONIC in milliseconds, the clock of a request's expires_ms. */
uint64_t gpupart__shm_now_ms(void);
/* Whether request slot r (any bytes: from the file, or a copy of it read through fd) is
 * one the library serves at now: its ticket set, its expiry in the next
 * SHM_REQUEST_MAX_MS, and its poster's attachment alive (mine: the caller's own, whose
 * byte looks free to its own open file description). The one rule for the members
 * (shm_request.c) and the outside reader (snapshot.c). */
int gpupart__shm_request_live(int fd, const shm_request *r, uint64_t now, int mine);
/* Whether request a is served before b: a higher priority, then an earlier ticket. */
int gpupart__shm_request_ahead(const shm_request *a, const shm_request *b);

/* ---- sums (lock held, or on a private copy) ---- */

/* Whether share s is well formed (its member and partition in range, its member there). */
int gpupart__shm_share_valid(const shm_header *h, const shm_share *s);
/* Every sum again from the shares, as after a holder died mid-update: partitions left
 * without members and shares that are not well formed are freed. */
void gpupart__shm_recompute(shm_header *h);
/* Frees member slot i and its shares (gpupart__shm_recompute then frees the partitions
 * left without members); returns the bytes its shares held. */
uint64_t gpupart__shm_drop_member(shm_header *h, uint32_t i);
/* Lock held: a new member's id, counted on from the header's last_member (hostile: it may
 * be about to wrap, or be scribbled to just below a live member's id): never 0 (a free
 * slot's) nor an id a member slot has. */
uint64_t gpupart__shm_new_member_id(shm_header *h);
/* Every invariant: 0, or -1 with the first broken one written to why. */
int gpupart__shm_check(const shm_header *h, char *why, uint64_t n);
/* Whether member slot m is the operator's (SHM_OPERATOR_PID). */
static inline int gpupart__shm_is_operator(const shm_member *m) { return m->id && m->pid == SHM_OPERATOR_PID; }
/* Whether member slot i is the operator's and alive as such: the operator never reserves,
 * so a slot marked so whose shares hold bytes (a dead member's pid scribbled over) is
 * judged by its lock byte like any other, and its bytes are still reaped. */
int gpupart__shm_operator_alive(const shm_header *h, uint32_t i);
/* Whether partition part is one the operator declared (the operator's member has a share
 * of it). */
int gpupart__shm_part_operator(const shm_header *h, uint32_t part);
/* Lock held (or a private copy): partition slot i takes size's limit and guarantee
 * (guarantee GPUPART__LEDGER_KEEP: its own, clamped down to the limit), each computed from
 * the budget when size gives it as a fraction (rounded down to the partition's granule;
 * size's granule is not used) and kept as that fraction, else bytes; checked against the
 * budget and the other partitions' guarantees as admission does, and marked resized: the
 * one rule of a member's set_figures (bytes) and of a change from outside (gpupart
 * resize). OK; EINVAL, ELIMIT (the message set); GPUPART__SHM_ABOVE when the members hold
 * more than the limit (nothing changed, no message). */
#define GPUPART__SHM_ABOVE 1 /* not a gpupart_result (those are 0 or negative) */
int gpupart__shm_set_figures_locked(shm_header *h, uint32_t i, const gpupart__ledger_size *size);

/* The partition named name (compared over SHM_NAME bytes), or -1. */
int gpupart__shm_find_part(const shm_header *h, const char *name);

#endif
