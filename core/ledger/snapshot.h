/* Reading shared ledgers from outside (snapshot.c), as gpupart top, metrics and the
 * exporter do: each ledger file of a folder copied whole (never torn) and checked, the
 * figures of its live members summed again. The reader shares the file format
 * (shm_format.h) with the library's side of the ledger and nothing else: it never maps,
 * writes or joins a ledger. */
#ifndef GPUPART_CORE_SNAPSHOT_H
#define GPUPART_CORE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "ledger.h"

#define GPUPART__SNAPSHOT_MEMBERS 128u /* a ledger's member slots */
#define GPUPART__SNAPSHOT_ENTRIES 256u /* a ledger's partition slots */
#define GPUPART__SNAPSHOT_SHARES 512u  /* a ledger's share slots (member x partition) */
#define GPUPART__SNAPSHOT_FILES 256u   /* ledgers read from one folder at most */
#define GPUPART__SNAPSHOT_REQUESTS 32u /* a ledger's give-back request slots */

/* A member of a shared ledger: one device handle of one process. A member whose process
 * is gone (not reaped yet: reaping is for the members' own calls) is listed as not alive,
 * with none of the bytes, shares or counters it left: the driver freed them with it. */
typedef struct gpupart__ledger_snapshot_member {
  uint64_t id;
  int64_t pid;       /* as the member's process saw itself (its PID namespace) */
  int alive;         /* its process still holds the member's lock */
  char command[17];  /* its process's name (comm) when it joined, as it wrote it: NUL-terminated, any bytes */
  uint32_t entries;  /* partitions it is a member of */
  uint64_t reserved; /* the bytes it reserved in them */
  gpupart__ledger_counters sum; /* its shares' counters, summed (ledger.h) */
} gpupart__ledger_snapshot_member;

/* One member's part of one partition, with the counters its owner published. */
typedef struct gpupart__ledger_snapshot_share {
  uint32_t member, entry; /* indexes into the snapshot's member[] and entry[] */
  uint64_t reserved;
  gpupart__ledger_counters c;
} gpupart__ledger_snapshot_share;

/* A partition of a shared ledger, with its partition-wide figures over its live members
 * (a partition whose members are all dead is not listed); member and pid name the first
 * of them. */
typedef struct gpupart__ledger_snapshot_entry {
  char name[GPUPART__LEDGER_NAME_MAX];
  uint64_t member; /* its member's id */
  int64_t pid;     /* its member's pid; 0 when it names no member (see consistent) */
  gpupart__ledger_figures figures;
  uint64_t in_use; /* bytes in live allocations, summed over its members */
  /* Since 0.3: the workload that made it (a Kubernetes DRA claim, its namespace, the
   * pod), "" when none; labels the file held that were not terminated printable ASCII
   * (gpupart__ledger_labels_ok) are left out, and labels_refused says so. */
  gpupart__ledger_labels labels;
  int labels_refused;
  /* The fractions of the budget its limit and guarantee follow ((0, 1]), 0 for bytes;
   * a value in the file that is no fraction (NaN, outside (0, 1]) reads as 0, as the
   * library treats it (shm_format.h). */
  double limit_fraction, guarantee_fraction;
} gpupart__ledger_snapshot_entry;

/* Since 0.3: a pending give-back request (issue 25): a process that needs need bytes free
 * in the budget (a floor waiting, a growth the budget refused) and asked the others to give
 * back their cached memory. Listed only where the library itself would serve it: its
 * ticket set, its time not over, its poster's attachment alive when the copy was taken. */
typedef struct gpupart__ledger_snapshot_request {
  uint64_t ticket;
  int64_t pid;       /* the poster, as it saw itself */
  char command[17];  /* its comm as it wrote it: NUL-terminated, any bytes */
  uint64_t need;     /* bytes asked (0: only that the floors lack nothing) */
  uint32_t priority; /* higher served first */
  uint64_t ms_left;  /* until it expires, when read */
} gpupart__ledger_snapshot_request;

/* One ledger file as read at one moment, under its lock: never a torn mix of two states
 * (but for the counters, which their owners publish without the lock: each is whole, and
 * at most one allocation or free behind). The figures are the live members': the bytes
 * of dead members that no live member has reaped yet are left out of every sum (and
 * counted in dead_members and dead_reserved), so the view is right even when every
 * member was killed and nobody is left to reap. */
typedef struct gpupart__ledger_snapshot {
  char file[256];                       /* its name in the folder */
  char identity[GPUPART__IDENTITY_MAX]; /* the device key (identity.h); "" when unread */
  int status;     /* GPUPART_OK; EBUSY (its lock was held past the timeout, or it is being set up);
                   * ECORRUPT (not a ledger, or not the one its name says); ECONFIG (unreadable,
                   * not what its folder allows (shm_folder.h: this user's and 0600, or
                   * in a group folder the group's and 0660), or of another version) */
  int consistent; /* status OK and every invariant of the ledger holds (else why says which) */
  char why[256];  /* the failure or the broken invariant; "" */
  uint64_t budget, guarantees, reserved, peak_reserved;
  uint32_t dead_members;             /* members whose process is gone, not reaped yet */
  uint64_t dead_reserved;            /* the bytes their shares still record, counted nowhere else */
  uint32_t members, entries, shares; /* how many of member[], entry[] and share[] are filled */
  gpupart__ledger_snapshot_member member[GPUPART__SNAPSHOT_MEMBERS];
  gpupart__ledger_snapshot_entry entry[GPUPART__SNAPSHOT_ENTRIES];
  gpupart__ledger_snapshot_share share[GPUPART__SNAPSHOT_SHARES];
  uint32_t requests;  /* how many of request[] are filled, in the order they are served */
  uint64_t requested; /* their needs, summed (saturating) */
  gpupart__ledger_snapshot_request request[GPUPART__SNAPSHOT_REQUESTS];
} gpupart__ledger_snapshot;

/* Reads file (a name, no '/') of folder dir into out, validating it as the library does
 * before attaching (owner, mode, size, header) and that its header names the device its
 * file name does. The file is opened read-only and never mapped or written: the copy is
 * read with pread under the ledger's lock taken for reading (waited on for at most
 * timeout_ms), so any bytes, a truncation or a read-only folder only make the read fail.
 * What a holder that died mid-update left is recomputed in the copy. Returns out->status. */
int gpupart__ledger_shm_read(const char *dir, const char *file, int timeout_ms, gpupart__ledger_snapshot *out);
/* Every ledger of this user in dir (a folder: never NULL or empty), or in a group folder
 * every ledger of the group (shm_folder.h), each read as above, sorted by file name: *out
 * (free() it) holds *n of them, at most GPUPART__SNAPSHOT_FILES. ECONFIG (the message
 * names the folder) when dir cannot be listed or is a group folder refused (others may
 * write it, or this process is not in its group); ENOMEM. */
int gpupart__ledger_shm_scan(const char *dir, int timeout_ms, gpupart__ledger_snapshot **out, uint32_t *n);
/* The same, and into *unread the ledger files of dir past GPUPART__SNAPSHOT_FILES that were
 * not read (0 when every one was): a folder holding more (stale files, or a member of a
 * group folder filling it) would otherwise hide ledgers from the readers without a word. */
int gpupart__ledger_shm_scan_all(const char *dir, int timeout_ms, gpupart__ledger_snapshot **out, uint32_t *n,
                                 uint32_t *unread);

#endif
