/* The core's shared definitions: the structs behind the public handles and the
 * internal calls between core files. Lock order, outermost first (never take an outer
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

#include "backend.h"
#include "error.h"
#include "events.h"
#include "extstruct.h"
#include "gpupart.h"
#include "hostmem.h"
#include "identity.h"
#include "ledger.h"
#include "registry.h"
#include "lock.h"
#include "reach.h"
#include "settings.h"
#include "tlsf.h"
#include "trace.h"

#define GPUPART__MIB (1ull << 20)
#define GPUPART__GIB (1ull << 30)

typedef struct gpupart__ledger_ref gpupart__ledger_ref; /* ledger_registry.c */

typedef struct gpupart__loaded_backend {
  const gpupart_backend_ops *ops; /* NULL when not built */
  void *state;
  int tried;  /* load attempted */
  int result; /* load's result */
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
  atomic_int unreachable_said;  /* verbose.c: configuration that cannot apply here was looked for */
};

/* Counters of a partition (or retired into its device when a partition is destroyed). */
typedef struct gpupart__counters {
  uint64_t in_use, peak_in_use;
  uint64_t live_allocations, total_allocations, total_frees;
  uint64_t driver_allocs, driver_frees, failed_allocations;
  uint64_t double_frees;
} gpupart__counters;

/* One driver block held by an arena. */
typedef struct gpupart__block {
  gpupart_block drv;
  uint64_t size;                      /* bytes reserved in the ledger and managed by the tlsf */
  struct gpupart__block *prev, *next; /* the arena's block list */
  gpupart__tlsf_block *home;          /* the sub-allocator's record of it (its first range) */
  uint64_t live;                      /* live allocations in the block */
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
} gpupart__growth;

/* The blocks a partition holds and the sub-allocator over them (arena.c). */
typedef struct gpupart__arena {
  gpupart__tlsf *tlsf;
  gpupart__block *blocks;
  uint64_t reserved, peak_reserved; /* bytes of blocks held */
  uint64_t empty_bytes;             /* bytes of blocks with no live allocation */
  uint64_t releasing;               /* bytes of detached blocks the driver has not had back yet */
  uint64_t last_block;              /* size of the last growth block (geometric sequence) */
} gpupart__arena;

struct gpupart_partition {
  char pad_head[64]; /* the lock and counters share no cache line with a neighbour */
  gpupart_device *dev;
  char *name;
  gpupart__trace *trace; /* its context's trace or NULL: read by the allocation paths (trace.h) */
  gpupart__lock lock; /* guards arena and counters */
  gpupart__arena arena;
  gpupart__counters c;
  gpupart__growth growth;
  gpupart__ledger_entry *account;
  gpupart__ledger_counters *pub; /* where its counters are published for gpupart top (ledger.h); never NULL */
  unsigned pub_forks;            /* gpupart__forks when pub was set: a forked child's differs */
  gpupart_reclaim_fn reclaim;
  void *reclaim_user;
  atomic_flag reclaim_busy;
  /* allocations in the slow path (OOM sequence, reclaim) and frees still releasing a view
   * or block outside the lock: destroy is EBUSY */
  atomic_uint allocating;
  uint64_t charge; /* >= c.in_use, a multiple of the granularity: its share of the device's peak (peak.c) */
  int configured; /* made by configuration at device open, not yet handed to a program's create (slow lock) */
  char pad_tail[64];
};

struct gpupart_device {
  gpupart_context *ctx;
  const gpupart_backend_ops *ops;
  void *bdev;
  gpupart_device_info info;
  uint64_t budget, granularity, alignment;
  int growth;
  uint64_t release_threshold; /* default of partitions that leave theirs 0 */
  uint64_t prealloc_block;    /* GPUPART_PREALLOC_BLOCK; 0 = the largest block the driver allows */
  uint64_t initial_block, max_block; /* GPUPART_INITIAL_BLOCK, GPUPART_MAX_BLOCK: defaults of partitions */
  double growth_factor;              /* GPUPART_GROWTH_FACTOR: the same */
  gpupart__settings settings; /* what the device was opened with, and where each value came from */
  pthread_mutex_t slow; /* growth, OOM sequence, the partition list */
  gpupart__identity id;          /* the physical device (identity.c) */
  gpupart__ledger *ledger;       /* shared by every handle of the device in the context */
  gpupart__ledger_member member; /* this handle's membership of the ledger */
  gpupart_partition **parts;
  uint32_t nparts, cap, created;
  gpupart__counters retired; /* counts of destroyed partitions */
  atomic_uint allocating;           /* the partitions' allocating, summed: close is EBUSY */
  atomic_uint_fast64_t charged;     /* sum of the partitions' charges (peak.c) */
  atomic_uint_fast64_t peak_in_use; /* highest value of charged since open or the last reset */
  atomic_uint_fast64_t peak_crossings, peak_visits; /* charge raises, and partitions each one read */
  /* Shared ledgers: the last trim request of other processes this handle honoured, and
   * whether gpupart_partition_find joins their partitions (not while the device opens, so
   * configured partitions another process made stay its own). Guarded by slow. */
  uint64_t trim_seen;
  int find_joins;
  gpupart__ratelimit refusals; /* events.c: how often refused allocations are logged */
  gpupart__ratelimit oom_events; /* events.c: and OOM-sequence steps and reclaim calls */
};

/* context.c */
int gpupart__backend_get(gpupart_context *ctx, gpupart_backend b, const gpupart_backend_ops **ops,
                         void **state);
/* context.c: whether the load of backend b is already decided in ctx (not built, or
 * tried), so asking for it costs no driver library load. */
int gpupart__backend_known(gpupart_context *ctx, gpupart_backend b);
/* context.c: whether the configuration names backend b: its backend list (GPUPART_BACKEND,
 * `backend =`) lists it, or its library path (GPUPART_<B>_LIBRARY) is set. */
int gpupart__backend_named(const gpupart_context *ctx, gpupart_backend b);

/* ledger_registry.c: the context's ledger of device id (created with budget when the
 * device is not open in the context yet; its budget stays the first open's), joined as a
 * new member; released by each member, destroyed with the last. shared_dir: NULL for the
 * in-process ledger, else the folder of the shared one. ENOMEM, EINVAL (the device is
 * open in the context with the other kind of ledger), and ledger_shm.c's codes. */
int gpupart__ledger_acquire(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget,
                            const char *shared_dir, gpupart__ledger **out, gpupart__ledger_member *member);
void gpupart__ledger_release(gpupart_context *ctx, gpupart__ledger *l, gpupart__ledger_member member);

/* device.c: gpupart_device_open, with exact = 1 to open desc->index even when it is 0
 * (the gpupart command's --device), where the public call lets configuration choose. */
gpupart_result gpupart__device_open(gpupart_context *ctx, const gpupart_device_desc *desc, int exact,
                                    gpupart_device **out);
/* device.c: gpupart_device_open for a program built against gpupart 0.1 (abi_0_1.c): desc
 * (NULL = defaults) has the 0.1 layout of gpupart_device_desc, without backend_desc_type
 * and backend_desc_size, and its backend_desc the 0.1 layout of that backend's struct. */
gpupart_result gpupart__device_open_0_1(gpupart_context *ctx, const gpupart_device_desc *desc, gpupart_device **out);

/* arena.c. Partition lock held: try, on_alloc, on_free, check. Device slow lock held and
 * partition lock NOT held (they call the driver): fini, grow (returns GPUPART_OK with the
 * partition lock held and a block in place that fits the request), reserve_exact,
 * release_empty, release_detached. */
int gpupart__arena_init(gpupart__arena *a, const gpupart_device *dev);
void gpupart__arena_fini(gpupart__arena *a, gpupart_partition *p);
gpupart__range *gpupart__arena_try(gpupart_partition *p, uint64_t size, uint64_t align);
int gpupart__arena_grow(gpupart_partition *p, uint64_t size, uint64_t align, gpupart__refusal *why);
int gpupart__arena_reserve_exact(gpupart_partition *p, uint64_t bytes, int prealloc);
uint64_t gpupart__arena_release_empty(gpupart_partition *p);
void gpupart__arena_on_alloc(gpupart_partition *p, gpupart__range *r);
gpupart__block *gpupart__arena_on_free(gpupart_partition *p, gpupart__block *b);
void gpupart__arena_release_detached(gpupart_partition *p, gpupart__block *b);
int gpupart__arena_check(const gpupart_partition *p, char *why, uint64_t n);

/* peak.c. crossed and freed: partition lock held (after in_use rose above the charge, or
 * fell). reset: device slow lock held. leave: the partition is unreachable. */
void gpupart__peak_crossed(gpupart_partition *p);
void gpupart__peak_freed(gpupart_partition *p);
void gpupart__peak_leave(gpupart_partition *p);
uint64_t gpupart__peak_in_use(gpupart_device *dev);
void gpupart__peak_reset(gpupart_device *dev);

/* A public handle is the sub-allocator's handle of the allocation's range (tlsf.h). */
static inline gpupart__range *gpupart__range_of(const gpupart_allocation *a) {
  return gpupart__tlsf_node((uintptr_t)a);
}
/* The partition a handle was allocated from, even when the handle is stale. */
static inline gpupart_partition *gpupart__partition_of(const gpupart_allocation *a) {
  return gpupart__tlsf_user(gpupart__range_owner(gpupart__range_of(a)));
}
/* Nonzero while a names a live allocation (partition lock held). */
static inline int gpupart__handle_live(const gpupart_allocation *a) { return gpupart__tlsf_live((uintptr_t)a); }

/* alloc.c: describes a live allocation's range (partition lock held). */
void gpupart__range_info(const gpupart_partition *p, const gpupart__range *r, gpupart_allocation_info *out);

/* partition.c */
void gpupart__partition_free(gpupart_partition *p);
/* Creates the partitions configuration declares for dev (its settings), in order, but
 * those another handle of the device made already. ECONFIG (or the driver's EDEVMEM, or
 * ENOMEM) naming the source; the caller closes the device on failure. */
int gpupart__partition_create_configured(gpupart_device *dev);
int gpupart__partition_check(const gpupart_partition *p, char *why, uint64_t n);
/* Partition lock held: where p publishes its counters now; in a child forked after p was
 * set up, the sink (its parent goes on publishing its own figures in the share). */
static inline gpupart__ledger_counters *gpupart__published(gpupart_partition *p) {
  if (p->pub_forks != gpupart__forks) p->pub = &gpupart__unpublished, p->pub_forks = gpupart__forks;
  return p->pub;
}

#endif
