/* The library's side of a shared ledger: what one attachment (one context's mapping of
 * one ledger file) keeps, and the calls between the files that make it up, each calling
 * only those listed below it:
 *   shm_operator.c the operator's ledger (gpupart ledger create and remove), made and
 *                        ended without a member process;
 *   shm_open.c    opening or creating the file, and gpupart__ledger_shm_create;
 *   shm.c         the ledger interface (ledger.h) over the file;
 *   shm_resize.c  changes from outside (resize.h): a partition's figures, the budget;
 *   shm_request.c give-back requests with a size and a priority (their slots in the
 *                        file);
 *   shm_wake.c    the wake word the responders sleep on, the old unsized trim request,
 *                        and the floors' shortfall;
 *   shm_lock.c    taking and dropping the ledger's lock, and what each taking checks
 *                        first (a file truncated, replaced or deleted, a holder that died
 *                        mid-update, work queued while the lock could not be taken);
 *   shm_move.c    moving every live member into a file made anew when the file was
 *                        deleted under its members;
 *   shm_queue.c   the changes that may wait for the lock (releases, removals,
 *                        leaves), made at once or by the next taking;
 *   shm_members.c members' liveness, reaping, and the holder's marks in the file;
 *   shm_guard.c   the mappings, the SIGBUS handler over them, and forked children;
 *   shm_folder.c  the folder (a user's or a group's): the file's name, the checks of its
 *                        owner and mode, making it (shm_folder.h), shared with the reader;
 *   shm_format.c  the file format (shm_format.h), shared with the reader.
 * The outside reader (snapshot.c) uses none of this: only the file format. */
#ifndef GPUPART_CORE_LEDGER_SHM_IMPL_H
#define GPUPART_CORE_LEDGER_SHM_IMPL_H

#include <pthread.h>

#include "shm_format.h"

/* The process-local handle of an entry: one share. */
typedef struct shm_entry {
  struct shm_entry *next;
  uint32_t share;
  uint64_t member;
  uint64_t queued; /* bytes released while the lock could not be taken (atomic): applied at the next lock */
  int removed;     /* removed while the lock could not be taken (atomic): its share goes at the next lock */
} shm_entry;

/* A member of another process that this attachment moved into a file made anew, holding
 * its byte there for it until the owner takes its place or dies. */
typedef struct shm_proxy {
  int fd;        /* the file where its owner holds its byte; -1 when this slot is no proxy */
  uint32_t slot; /* the owner's slot there */
  uint64_t id;
} shm_proxy;

/* A mapping of a former file that published counters may still point into. */
typedef struct shm_retired {
  struct shm_retired *next;
  void *h;
} shm_retired;

typedef struct shm_ledger {
  gpupart__ledger base; /* first, so the interface pointer is the ledger */
  const gpupart__hostmem *mem;
  /* Threads of this attachment: an OFD lock does not keep them apart (they share the open
   * file description), so this is taken first, with the same deadline. */
  pthread_mutex_t local;
  int fd;
  shm_header *h;
  uint32_t attach;            /* this attachment's slot in the file (its liveness byte; the lock word names it + 1) */
  uint64_t epoch;             /* the file's, when attached: another one means the file was made anew */
  uint64_t looked;            /* when the file's size and links were last looked at (ns, CLOCK_MONOTONIC_COARSE) */
  uint64_t way_looked;        /* and whether a reader asks the members to make way */
  uint64_t way_ignored_until; /* not before this: a reader that asked for longer than SHM_WAY_MS */
  char path[4096];
  shm_folder folder; /* what the file's folder was when it was opened (shm_folder.h) */
  int64_t pid;       /* this process as it names itself when it holds the lock */
  char command[16];
  int inherited; /* in a child forked after the attachment was made (shm_guard.c): no member */
  int lost;      /* atomic: the file was truncated or replaced under this process */
  int stalled;   /* atomic: the last wait timed out, so the next ones are short */
  int queued;    /* atomic: a handle or member slot has work queued for the next lock */
  /* Guarded by local and the file's lock: */
  uint8_t mine[SHM_MEMBERS];  /* member slots this attachment holds the lock of */
  uint64_t left[SHM_MEMBERS]; /* atomic: member ids that left while the lock could not be taken */
  shm_proxy proxy[SHM_MEMBERS];
  shm_retired *retired;
  uint32_t reaped;           /* dead members reaped since the lock was taken */
  uint64_t reaped_bytes;     /* and the bytes they held */
  struct shm_entry *handles; /* this attachment's entry handles */
  uint64_t ceiling;          /* the most bytes their shares may hold together; 0: none (set_ceiling) */
  /* Guarded by pending_lock: reaped, not yet reported (the report op). */
  gpupart__lock pending_lock;
  uint32_t pending;
  uint64_t pending_bytes;
} shm_ledger;

/* shm.c. name_members: appends "pid P (comm) N bytes (C cached)" for each share of
 * partition part but skip's, at most four, to out (lock held, or a private copy);
 * returns the bytes of them all. */
extern const gpupart__ledger_ops gpupart__shm_ops;
uint64_t gpupart__shm_name_members(const shm_header *h, uint32_t part, const shm_share *skip, char *out, size_t n);

/* shm_wake.c: the ask_trim, wait_asked, wake_seen, wake_local and shortfall ops. */
void gpupart__shm_ask_trim(gpupart__ledger *l);
int gpupart__shm_wait_asked(gpupart__ledger *l, uint32_t *seen, int timeout_ms);
uint32_t gpupart__shm_wake_seen(gpupart__ledger *l);
void gpupart__shm_wake_local(gpupart__ledger *l);
int64_t gpupart__shm_shortfall(gpupart__ledger *l);
/* Bumps the wake word and wakes every responder of the file (no request of its own). */
void gpupart__shm_wake_all(shm_ledger *L);

/* shm_request.c: the post, withdraw, lack, lack_all and posted ops (ledger.h). */
int gpupart__shm_post(gpupart__ledger *l, uint64_t need, uint32_t priority, int ttl_ms, uint64_t *ticket);
void gpupart__shm_withdraw(gpupart__ledger *l, uint64_t ticket);
int64_t gpupart__shm_lack(gpupart__ledger *l, uint64_t ticket);
int64_t gpupart__shm_lack_all(gpupart__ledger *l);
int gpupart__shm_posted(gpupart__ledger *l, uint64_t *seen);

/* shm_lock.c. lock: 0, or the code with the message set (EBUSY: held past the
 * wait, naming the holder; ECORRUPT: the file is lost; EINVAL: a forked child). The
 * file's size and link count are looked at (fstat) at most every SHM_LOOK_MS: a
 * truncation is caught without it (the SIGBUS handler, the epoch), and a deletion
 * noticed that much later is repaired all the same. */
#define SHM_LOOK_MS 50
/* A reader that asks the members to make way (it cannot copy the file between two
 * changes) is looked for at most every tick of the coarse clock; a member that finds one
 * waits, up to SHM_WAY_MS, until it has its copy. */
#define SHM_WAY_MS 5
int gpupart__shm_lock(shm_ledger *L);
void gpupart__shm_unlock(shm_ledger *L);
/* The message of a lost file; ECORRUPT. */
int gpupart__shm_lost(const shm_ledger *L);

/* shm_move.c. Lock held, the file unlinked: moves every live member into the file
 * now at L->path (made anew, or a newcomer's), and L with them: L->fd and L->h are then the
 * new file's, its lock held. Where that cannot be done, L stays on the old file. */
void gpupart__shm_move(shm_ledger *L);

/* shm_queue.c, lock held. share_of: the share of a live entry handle, or NULL when
 * the file no longer has it. set_reserved: share s (of partition p) holds reserved bytes
 * now. release: e's share holds bytes fewer. remove: e's share goes, and e's handle with
 * it. leave_slot: member slot i leaves (its shares are gone already or go with it).
 * apply_queued: the releases, removals and leaves queued while the lock could not be
 * taken. */
shm_share *gpupart__shm_share_of(shm_ledger *L, const gpupart__ledger_entry *e);
void gpupart__shm_set_reserved_locked(shm_header *h, shm_part *p, shm_share *s, uint64_t reserved);
void gpupart__shm_release_locked(shm_ledger *L, const gpupart__ledger_entry *e, uint64_t bytes);
void gpupart__shm_remove_locked(shm_ledger *L, shm_entry *x);
void gpupart__shm_leave_slot_locked(shm_ledger *L, uint32_t i, uint64_t id);
void gpupart__shm_apply_queued(shm_ledger *L);

/* shm_members.c, lock held. alive: whether member slot i's process lives; reap:
 * takes back the bytes of the dead members (nonzero when there were some); end_proxy:
 * this attachment no longer holds slot i for another process. */
int gpupart__shm_alive(shm_ledger *L, uint32_t i);
int gpupart__shm_reap(shm_ledger *L);
void gpupart__shm_end_proxy(shm_ledger *L, uint32_t i);
/* This process names itself in h (its file's lock held) as changing it (the sequence
 * word odd); and no longer (even). */
void gpupart__shm_mark_held(const shm_ledger *L, shm_header *h);
void gpupart__shm_mark_released(shm_header *h);

/* shm_guard.c. map: the file's mapping. guard: h (a mapping of the file) joins
 * the ranges the SIGBUS handler replaces with anonymous memory (marking L lost) when the
 * file was truncated; the handler is installed with the first range. ENOMEM when the
 * table is full. unguard: range h of L goes (NULL: every range of L); the handler goes
 * with the last one. bury: replaces L's mapping at once and marks L lost. */
int gpupart__shm_map(int fd, const char *path, shm_header **out);
int gpupart__shm_guard(shm_ledger *L, void *h);
void gpupart__shm_unguard(shm_ledger *L, const void *h);
void gpupart__shm_bury(shm_ledger *L);

#endif
