/* The structs behind the public handles (context, device, partition) and the lock order
 * between them; each core file's own calls are in its own header. Lock order, outermost first (never take an outer
 * lock while holding an inner one):
 *   1. context lock (backend loading, device count, the registry of ledgers)
 *   2. device slow lock, a sleeping mutex (growth, block release, the OOM sequence, the
 *      partition list, create/destroy/resize/trim): every block_alloc, block_free and
 *      trim runs under it, and under no partition lock
 *   3. partition lock, a spinlock (its arena and counters; the allocation fast path takes
 *      only this): held for bookkeeping only, never across a driver or backend call
 *   4. ledger lock (inside the ledger): a leaf
 * Reclaim callbacks, view construction and view_release run with none of them held. */
#ifndef GPUPART_CORE_INTERNAL_H
#define GPUPART_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "backend.h"
#include "gpupart.h"
#include "hostmem.h"
#include "identity.h"
#include "ledger.h"
#include "lock.h"
#include "ratelimit.h"
#include "registry.h"
#include "settings.h"
#include "slots.h"
#include "tlsf.h"
#include "trace.h"

typedef struct gpupart__ledger_ref gpupart__ledger_ref; /* ledgers.c */
typedef struct gpupart__vmspace gpupart__vmspace;       /* vm/vmspace.h */

typedef struct gpupart__loaded_backend {
  const gpupart_backend_ops *ops; /* NULL when not built */
  void *state;
  int tried;      /* load attempted */
  int result;     /* load's result */
  int64_t native; /* and its driver code */
  char error[256];
} gpupart__loaded_backend;

struct gpupart_context {
  gpupart__hostmem mem;
  gpupart__backend_env env; /* lent to every backend at load: env.mem = &mem */
  uint32_t flags;
  gpupart_log_fn log;
  void *log_user;
  char *config_path, *config_text, *ledger_dir;
  gpupart__config *cfg; /* loaded and validated at creation; read-only afterwards */
  pthread_mutex_t lock; /* guards backends[], open_devices and ledgers */
  gpupart__loaded_backend backends[GPUPART__BACKEND_COUNT];
  uint32_t open_devices;
  gpupart__ledger_ref *ledgers; /* one per physical device open in the context */
  gpupart__trace *trace;        /* GPUPART_TRACE: the recording, or NULL (trace.c) */
  int local_only;               /* introspect.c: the operator's command opens devices without their shared ledger */
  atomic_int unreachable_said;  /* verbose.c: configuration that cannot apply here was looked for */
};

/* Counters of a partition (or retired into its device when a partition is destroyed). */
typedef struct gpupart__counters {
  uint64_t in_use, peak_in_use;
  uint64_t live_allocations, total_allocations; /* frees: total_allocations - live_allocations */
  uint64_t driver_allocs, driver_frees, failed_allocations;
  uint64_t double_frees;
} gpupart__counters;

/* One driver block held by an arena. */
typedef struct gpupart__block {
  gpupart_block drv;
  uint64_t size;                      /* bytes reserved in the ledger and managed by the tlsf */
  struct gpupart__block *prev, *next; /* the arena's block list */
  gpupart__tlsf_block *home;          /* the sub-allocator's record of it (its first range) */
  int prealloc;                       /* reserved at creation; released only at destroy */
  struct gpupart__block *chain;       /* a private list of blocks being taken or released */
} gpupart__block;

/* Growth parameters, defaults applied (partition.c). */
typedef struct gpupart__growth {
  int prealloc;
  uint64_t initial_block, max_block;
  uint64_t prealloc_block; /* block size of preallocation (and its resize) */
  double factor;
  uint64_t release_threshold;
  int expandable; /* 1 asked for, 2 required: one reserved range growing by mapped granules (arena.c) */
} gpupart__growth;

/* The blocks a partition holds and the sub-allocator over them (arena.c). */
typedef struct gpupart__arena {
  gpupart__tlsf *tlsf;
  gpupart__block *blocks;
  uint64_t reserved;      /* bytes of blocks held */
  uint64_t charged;       /* bytes of live charges (gpupart_partition_charge): ledger bytes no block holds */
  uint64_t charged_count; /* and how many: live allocations that are no range */
  uint64_t peak_reserved; /* the most of reserved + charged at once */
  uint64_t releasing;     /* bytes of detached blocks the driver has not had back yet */
  uint64_t last_block;    /* size of the last growth block (geometric sequence) */
  /* Expandable: the reserved range and its mapped chunks, and the USED range of the
   * sub-allocator that covers what is not mapped (the range's top); NULL for blocks. */
  gpupart__vmspace *vm;
  gpupart__range *tail;
} gpupart__arena;

struct gpupart_partition {
  char pad_head[64]; /* the lock and counters share no cache line with a neighbour */
  gpupart_device *dev;
  char *name;
  gpupart__trace *trace; /* its context's trace or NULL: read by the allocation paths (trace.h) */
  uint64_t fast_size;    /* gpupart_alloc's fused path: sizes up to this need no further check; 0 while a trace records
                            (alloc.c) */
  uint64_t fast_align;   /* and alignments up to this one, the device's */
  gpupart__lock lock;    /* guards arena and counters */
  gpupart__arena arena;
  gpupart__counters c;
  gpupart__growth growth;
  uint64_t prealloc_tried; /* a preallocated partition's limit grown from outside, tried once (partition.c); slow */
  gpupart__ledger_entry *account;
  gpupart__ledger_publisher pub; /* where its counters are published for gpupart top (ledger.h) */
  gpupart__slots charges;        /* its live charges' records (alloc.c); guarded by the device's slow lock */
  gpupart_reclaim_fn reclaim;
  void *reclaim_user;
  atomic_flag reclaim_busy;
  /* allocations in the slow path (OOM sequence, reclaim) and frees still releasing a view
   * or block outside the lock: destroy is EBUSY */
  atomic_uint allocating;
  uint64_t charge; /* >= c.in_use, a multiple of the granularity: its share of the device's peak (peak.c);
                     UINT64_MAX while it is its device's solo partition */
  uint64_t peak_crossings, peak_visits; /* raises of the charge, and partitions each one read (peak.c) */
  int peak_fresh;                       /* its peak_in_use started after its device's peak last did (slow lock) */
  int configured; /* made by configuration at device open, not yet handed to a program's create (slow lock) */
  double limit_fraction, guarantee_fraction; /* the budget's fractions it was created with (0: bytes), which
                                                gpupart ledger create writes into the operator's ledger */
  char pad_tail[64];
};

struct gpupart_device {
  gpupart_context *ctx;
  const gpupart_backend_ops *ops;
  void *bdev;
  gpupart_device_info info;
  uint64_t budget, granularity, alignment;
  uint64_t ceiling; /* shared ledger: the most this process may hold on the device (memory_limit_max,
                     * memory_fraction_max), whatever the shared budget; 0: none */
  int growth;
  uint64_t release_threshold;        /* default of partitions that leave theirs 0 */
  uint64_t prealloc_block;           /* GPUPART_PREALLOC_BLOCK; 0 = the largest block the driver allows */
  uint64_t initial_block, max_block; /* GPUPART_INITIAL_BLOCK, GPUPART_MAX_BLOCK: defaults of partitions */
  double growth_factor;              /* GPUPART_GROWTH_FACTOR: the same */
  int expandable;                    /* GPUPART_EXPANDABLE: the same */
  gpupart__settings settings;        /* what the device was opened with, and where each value came from */
  pthread_mutex_t slow;              /* growth, OOM sequence, the partition list */
  gpupart__identity id;              /* the physical device (identity.c) */
  gpupart__ledger *ledger;           /* shared by every handle of the device in the context */
  gpupart__ledger_member member;     /* this handle's membership of the ledger */
  gpupart_partition **parts;
  uint32_t nparts, cap, created;
  gpupart__counters retired;        /* counts of destroyed partitions */
  atomic_uint allocating;           /* the partitions' allocating, summed: close is EBUSY */
  atomic_uint_fast64_t charged;     /* sum of the partitions' charges (peak.c) */
  atomic_uint_fast64_t peak_in_use; /* highest value of charged since open or the last reset */
  gpupart_partition *solo;          /* the one partition, whose exact peak is the device's (peak.c) */
  /* Shared ledgers: the last trim request of other processes this handle honoured, and
   * whether gpupart_partition_find joins their partitions (not while the device opens, so
   * configured partitions another process made stay its own). Guarded by slow. */
  uint64_t trim_seen;
  uint64_t posted_seen;   /* and the last sized give-back request posted that it looked at */
  uint64_t growth_ticket; /* this handle's request for a growth the budget refused (trim.c), until it grows */
  int find_joins;
  /* DRA metadata (device.c): 1 + the index of the configuration's DRA device that names
   * this device (0: none), the generation applied and its memory; when its file is next
   * read (atomic: read before taking slow). Guarded by slow. */
  uint32_t dra;
  uint64_t dra_generation, dra_memory;
  atomic_uint_fast64_t dra_next_ns;
  /* The responder (trim.c): its thread, the process that started it (0: none runs), its
   * stop flag, and the wake word's value when it started. */
  pthread_t responder;
  pid_t responder_pid;
  atomic_int responder_stop;
  uint32_t responder_seen;
  gpupart__ratelimit refusals;   /* events.c: how often refused allocations are logged */
  gpupart__ratelimit oom_events; /* events.c: and OOM-sequence steps and reclaim calls */
};

/* The device's budget as it is now: a shared ledger's is read from it each time (an
 * operator may change it from outside: gpupart resize --budget); dev->budget is the
 * in-process one, and the shared one at open. No gpupart lock needed (the ledger's is
 * innermost). */
static inline uint64_t gpupart__budget_now(const gpupart_device *dev) {
  if (!dev->ledger || !dev->ledger->shared) return dev->budget;
  gpupart__ledger_figures t;
  dev->ledger->ops->totals(dev->ledger, &t);
  return t.limit ? t.limit : dev->budget; /* 0: the ledger could not be read just now */
}

#endif
