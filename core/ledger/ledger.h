/* The ledger: the device-wide accounting of partition limits, guarantees and reserved
 * bytes. One physical device has one ledger in a context, keyed by its identity
 * (identity.h), whichever backend or index opened it; every device handle that uses it is
 * a member, and each account (entry) is named and belongs to the member that added it.
 * It is an internal interface with an implementation per kind of sharing (in-process:
 * local.c; across processes: shm.c), so that sharing changes no policy
 * code: names, members, lookup by name, enumeration and the consistency check are all
 * behind it. Every ledger call is thread-safe and takes only the ledger's own lock, which
 * is the innermost lock of the library: callers may hold partition and device locks, and
 * the ledger never calls out while holding it. */
#ifndef GPUPART_CORE_LEDGER_H
#define GPUPART_CORE_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "hostmem.h"
#include "identity.h"
#include "ratelimit.h"

typedef struct gpupart__ledger gpupart__ledger;
typedef struct gpupart__ledger_entry gpupart__ledger_entry; /* one partition's account */

/* An opaque member id: in-process, one per device handle; in a shared ledger, one per
 * process and handle. 0 is never a member. */
typedef uint64_t gpupart__ledger_member;

#define GPUPART__LEDGER_NAME_MAX 64     /* bytes of a name in an entry listing, NUL included */
#define GPUPART__LEDGER_KEEP UINT64_MAX /* a guarantee left as it is (clamped down to a new limit) */

/* Why a reservation was refused: one of these, or a negative gpupart_result when the
 * ledger could not be used at all (a shared ledger whose lock is held past the wait:
 * EBUSY; whose file is lost: ECORRUPT; in a forked child, which is no member: EINVAL),
 * with the thread's message saying why. */
typedef int gpupart__refusal;
enum {
  GPUPART__GRANTED = 0,
  GPUPART__REFUSED_LIMIT,  /* the partition's own limit */
  GPUPART__REFUSED_BUDGET, /* the device budget, less other partitions' unused guarantees */
  /* Since 0.3: this process's ceiling on the device (a shared ledger's set_ceiling: the
   * memory_limit_max / memory_fraction_max the process started with), whatever the
   * shared budget leaves */
  GPUPART__REFUSED_CEILING,
};

/* An entry's figures. In a shared ledger a partition can have several members (processes
 * that joined it by name): limit, guarantee, reserved and peak_reserved are then the
 * partition's, across them all, and own_reserved is the part of reserved that the entry's
 * member holds (in-process, own_reserved = reserved). */
typedef struct gpupart__ledger_figures {
  uint64_t limit, guarantee, reserved, peak_reserved, own_reserved;
} gpupart__ledger_figures;

/* One entry as the ledger lists it: a copy, valid after the ledger's lock is gone. */
typedef struct gpupart__ledger_entry_info {
  char name[GPUPART__LEDGER_NAME_MAX]; /* truncated to fit */
  gpupart__ledger_member member;       /* who added it */
  gpupart__ledger_figures figures;
} gpupart__ledger_entry_info;

/* What names a partition's workload to the people reading the metrics: the Kubernetes
 * DRA claim it was made from, the claim's namespace and the pod (shared ledgers keep them
 * in the file, shm_format.h; "" when not known). Each value is GPUPART__LEDGER_LABEL_MAX
 * bytes at most, NUL included, of printable ASCII only (gpupart__ledger_labels_ok). */
#define GPUPART__LEDGER_LABEL_MAX 256 /* a Kubernetes name (253 bytes), its NUL, rounded */
typedef struct gpupart__ledger_labels {
  char claim[GPUPART__LEDGER_LABEL_MAX];
  char namespace[GPUPART__LEDGER_LABEL_MAX];
  char pod[GPUPART__LEDGER_LABEL_MAX];
} gpupart__ledger_labels;

/* Whether value (n bytes, as read from anywhere) is a label value: NUL-terminated
 * within its n bytes, every byte before the NUL printable ASCII (0x20 to 0x7e). */
static inline int gpupart__ledger_label_ok(const char *value, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)value[i];
    if (!c) return 1;
    if (c < 0x20 || c > 0x7e) return 0;
  }
  return 0;
}
static inline int gpupart__ledger_labels_ok(const gpupart__ledger_labels *l) {
  return gpupart__ledger_label_ok(l->claim, sizeof l->claim) &&
         gpupart__ledger_label_ok(l->namespace, sizeof l->namespace) && gpupart__ledger_label_ok(l->pod, sizeof l->pod);
}

/* What an entry's member publishes of its own use of the partition, for gpupart top and
 * metrics (in a shared ledger they live in the file; in-process in the entry). Only the
 * entry's owner writes them, without the ledger's lock, each field with a relaxed 64-bit
 * atomic store (gpupart__ledger_publish) where its partition's counter changes; a reader
 * loads each field atomically: one field may be newer than another, none is ever torn. */
typedef struct gpupart__ledger_counters {
  uint64_t in_use;        /* bytes in the member's live allocations of the partition */
  uint64_t failures;      /* allocations refused with ELIMIT or EDEVMEM */
  uint64_t driver_allocs; /* blocks obtained from the backend */
  uint64_t driver_frees;  /* blocks given back to it */
} gpupart__ledger_counters;

/* Publishes v into a field of gpupart__ledger_counters: one relaxed store, no lock. */
static inline void gpupart__ledger_publish(uint64_t *field, uint64_t v) {
  __atomic_store_n(field, v, __ATOMIC_RELAXED);
}

/* A reader's load of such a field. */
static inline uint64_t gpupart__ledger_read(const uint64_t *field) { return __atomic_load_n(field, __ATOMIC_RELAXED); }

/* publish.c. What a publisher writes before it has an entry (a failed creation's
 * preallocation), or in a child forked after it was set up: a sink nothing reads. */
extern gpupart__ledger_counters gpupart__unpublished;

/* One publisher (a partition): where its counters go now. A publisher inherited across a
 * fork must not publish into the share its parent's member owns (the child maps the
 * parent's ledger), so every publisher with a place is on a list, and a pthread_atfork
 * child handler points each at the sink while the child runs alone: publishing itself
 * checks nothing. */
typedef struct gpupart__ledger_publisher {
  gpupart__ledger_counters *to; /* never NULL: &gpupart__unpublished until added */
  struct gpupart__ledger_publisher *prev, *next;
  int listed;
} gpupart__ledger_publisher;
/* Publishes pub's counters to `to` from now on (its owner's lock held, or unreachable). */
void gpupart__ledger_publisher_add(gpupart__ledger_publisher *pub, gpupart__ledger_counters *to);
/* Takes pub off the list (a no-op for one never added); pub then publishes to the sink. */
void gpupart__ledger_publisher_remove(gpupart__ledger_publisher *pub);

/* Told, after the ledger's lock is released, that dead members were found and their
 * bytes returned (shared ledgers only). */
typedef void (*gpupart__ledger_reaped_fn)(gpupart__ledger *l, uint32_t members, uint64_t bytes);

typedef struct gpupart__ledger_ops {
  /* Frees the ledger and every entry left in it. */
  void (*destroy)(gpupart__ledger *l);
  /* A new member id in *out. ENOMEM. */
  int (*join)(gpupart__ledger *l, gpupart__ledger_member *out);
  /* The member leaves; entries it still has are removed and their bytes returned (their
   * handles become invalid). */
  void (*leave)(gpupart__ledger *l, gpupart__ledger_member m);
  /* An entry named name (copied) for member m. EEXIST when the ledger has that name;
   * ELIMIT when the guarantees would sum past the budget, or limit exceeds the budget;
   * EINVAL when m is not a member; ENOMEM. */
  int (*add)(gpupart__ledger *l, gpupart__ledger_member m, const char *name, uint64_t limit, uint64_t guarantee,
             gpupart__ledger_entry **out);
  void (*remove)(gpupart__ledger *l, gpupart__ledger_entry *e); /* e->reserved must be 0 */
  /* The entry named name, of any member, or NULL. In a shared ledger an entry of another
   * process has no handle here: it is reported as a non-NULL handle that every other
   * operation refuses (compare it, never use it). */
  gpupart__ledger_entry *(*find)(gpupart__ledger *l, const char *name);
  /* The entries of member m (0 = of every member), in no set order: writes at most cap of
   * them to out (NULL when cap is 0) and returns how many there are. */
  uint32_t (*list)(gpupart__ledger *l, gpupart__ledger_member m, gpupart__ledger_entry_info *out, uint32_t cap);
  gpupart__refusal (*reserve)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes);
  /* Never lost: a shared ledger that cannot take its lock queues it for its next call
   * that can (remove and leave likewise). */
  void (*release)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t bytes);
  /* The most bytes e could reserve now, and which rule bounds it (a negative code when
   * the ledger could not be used: see gpupart__refusal). */
  uint64_t (*grantable)(gpupart__ledger *l, gpupart__ledger_entry *e, gpupart__refusal *bound);
  /* e's partition takes limit and guarantee (GPUPART__LEDGER_KEEP: its guarantee, clamped
   * down to the new limit), under the same rule as a change from outside (resize.h; a
   * shared ledger's is one function for both): EINVAL (nothing changed) for a guarantee
   * above the limit; ELIMIT when the limit exceeds the budget or the guarantees would sum
   * past it; EBUSY when reserved exceeds the limit. A raised floor over others' bytes
   * asks them to give back. */
  int (*set_figures)(gpupart__ledger *l, gpupart__ledger_entry *e, uint64_t limit, uint64_t guarantee);
  void (*get)(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__ledger_figures *out);
  /* Device-wide: limit = budget, guarantee = sum of guarantees, reserved, peak_reserved. */
  void (*totals)(gpupart__ledger *l, gpupart__ledger_figures *out);
  void (*reset_peak)(gpupart__ledger *l, gpupart__ledger_entry *e);
  /* Where e's owner publishes its counters: valid while e is, never NULL (an entry the
   * ledger no longer has gets a sink that nothing reads). An implementation may leave it
   * NULL: its partitions then publish nowhere. */
  gpupart__ledger_counters *(*counters)(gpupart__ledger *l, gpupart__ledger_entry *e);
  /* No gpupart lock held: tells on_reaped of the dead members reaped since the last call
   * (the reaping ran under the ledger's lock, maybe under the device's or the context's
   * too, where the log callback must not run). NULL where nothing is reaped. */
  void (*report)(gpupart__ledger *l);
  /* Who holds the bytes that bound e, for a refusal's message: one line in out ("" when
   * there is nothing to say). bound LIMIT: the other members of e's partition in a shared
   * ledger ("pid P (command) N bytes, ..."); BUDGET: the other partitions with their bytes
   * and unused guarantees (and, shared, their members). */
  void (*holders)(gpupart__ledger *l, const gpupart__ledger_entry *e, gpupart__refusal bound, char *out, size_t n);
  /* Every invariant: entry figures within limits, sums equal to the entries', guarantees
   * and reservations within the budget, names unique, every entry owned by a member.
   * 0, or -1 with the first broken invariant written to why. */
  int (*check)(gpupart__ledger *l, char *why, uint64_t why_len);
  /* The bytes the floors lack: what is reserved plus every partition's unused guarantee,
   * less the budget (0 when every guarantee can be had at once). Admission never makes it
   * positive; a guarantee added over bytes others already hold does, until they give them
   * back. A negative result is the code of a ledger that could not be used (see
   * gpupart__refusal). */
  int64_t (*shortfall)(gpupart__ledger *l);
  /* --- shared ledgers only (NULL in-process) --- */
  /* Member m joins the partition named name that another member made, adopting its limit
   * and guarantee: OK with *out its new entry, or OK with *out NULL when the ledger has
   * no partition of that name; EEXIST when m is a member of it already; EINVAL when m is
   * not a member; ENOMEM. (add joins it too, when its limit and guarantee are the
   * partition's; else add is EEXIST.) */
  int (*join_named)(gpupart__ledger *l, gpupart__ledger_member m, const char *name, gpupart__ledger_entry **out);
  /* Asks every other process of the ledger to trim at its next call (the OOM sequence). */
  void (*ask_trim)(gpupart__ledger *l);
  /* Whether a trim was asked since *seen (then *seen is brought up to date): one atomic
   * load, no lock. */
  int (*trim_asked)(gpupart__ledger *l, uint64_t *seen);
  /* The responder's wait (shm_wake.c): sleeps on the file's wake word (a process-shared
   * futex) until ask_trim moves it past *seen, or timeout_ms pass, or wake_local. 1 with
   * *seen brought up to date when a request came, else 0. Start from wake_seen. */
  int (*wait_asked)(gpupart__ledger *l, uint32_t *seen, int timeout_ms);
  uint32_t (*wake_seen)(gpupart__ledger *l);
  /* Wakes the responders sleeping on the file without a request (a responder being
   * stopped looks at its stop flag). */
  void (*wake_local)(gpupart__ledger *l);
  /* Caps the bytes this process's shares of the ledger (its attachment) may hold
   * together at bytes, the lowest of the ceilings asked for (0 asks for none): reserve
   * refuses past it (GPUPART__REFUSED_CEILING) and grantable counts it, whatever the
   * shared budget leaves. */
  void (*set_ceiling)(gpupart__ledger *l, uint64_t bytes);
  /* Give-back requests with a size and a priority (shm_request.c). post: asks for need
   * bytes free beyond every unused guarantee (0: only that the floors lack nothing), at
   * priority (GPUPART__PRIORITY_*), served for at most ttl_ms, and wakes every
   * responder: OK with *ticket; EBUSY when every slot is taken (the unsized ask_trim was
   * made instead, *ticket 0); or the ledger's code. withdraw: the request ends. lack:
   * what ticket still lacks, counting the requests served before it (higher priority,
   * then lower ticket): 0 once the budget has it all free; a ticket that is gone counts
   * no need. lack_all: what every live request lacks together (the floors' shortfall
   * when none), which is what the responders give back. Both negative: the ledger's
   * code. posted: whether a request was posted since *seen (one atomic load). */
  int (*post)(gpupart__ledger *l, uint64_t need, uint32_t priority, int ttl_ms, uint64_t *ticket);
  void (*withdraw)(gpupart__ledger *l, uint64_t ticket);
  int64_t (*lack)(gpupart__ledger *l, uint64_t ticket);
  int64_t (*lack_all)(gpupart__ledger *l);
  int (*posted)(gpupart__ledger *l, uint64_t *seen);
  /* Since 0.3: writes labels (gpupart__ledger_labels_ok, else EINVAL) into e's partition
   * in the file when it carries none yet (its maker's, or the first labelled member's):
   * OK (written, or the partition keeps the labels it had); EBUSY/ECORRUPT when the
   * ledger could not be used. */
  int (*label)(gpupart__ledger *l, gpupart__ledger_entry *e, const gpupart__ledger_labels *labels);
} gpupart__ledger_ops;

/* The priorities of give-back requests: a higher one is served first. The configuration
 * has no priority of its own for a partition or a process, so the rule is the
 * guarantees': a floor (a new guarantee made room for, or a partition growing within its
 * guarantee) outranks growth past a guarantee (best effort). */
#define GPUPART__PRIORITY_GROWTH 1u
#define GPUPART__PRIORITY_FLOOR 2u

struct gpupart__ledger {
  const gpupart__ledger_ops *ops;
  gpupart__identity id; /* the device it accounts */
  int shared;           /* across processes (shm.c) */
  /* Shared ledgers: told of dead members' reclaims (events.c);
   * verbose: some device of it logs to stderr without a log callback. Set at creation. */
  gpupart__ledger_reaped_fn on_reaped;
  void *event_user;
  int verbose;
  gpupart__ratelimit events; /* of this ledger's events: dead members, budget mismatches */
};

/* No gpupart lock held: the ledger's pending events reach the log (its report op). */
static inline void gpupart__ledger_report(gpupart__ledger *l) {
  if (l && l->ops->report) l->ops->report(l);
}

/* The in-process ledger of device id with budget bytes. NULL when out of host memory. */
gpupart__ledger *gpupart__ledger_local_create(const gpupart__hostmem *mem, const gpupart__identity *id,
                                              uint64_t budget);

#endif
