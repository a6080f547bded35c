/* The preload library's arena mode (cu_arena.h). Each device has one arena: a gpupart
 * device on the cuda backend (the device's primary context, which gpupart retains) in a
 * gpupart context of the arena's own that reads no configuration (the process's limits
 * are the mirror's), and on it one growth partition limited as the mirror partition is,
 * its emptied blocks kept for the next allocations (release_threshold 0: no driver call
 * when a program frees and allocates again). Every block the arena holds is one charge
 * of its size on the mirror partition, taken when an allocation lands in a block not
 * seen before (a new block at the address of one given back earlier is new), and each
 * record counts the arena allocations in its block. Where the program's configuration
 * makes the device expandable (GPUPART_EXPANDABLE, per device or in the file) the
 * partition is expandable: one record for its range, charged one charge per growth of
 * the mapped bytes, its charges following them down when trim unmaps the free top. Blocks go back to the driver
 * only when empty, and only inside gpupart's trim, OOM sequence, growth rule or a shrink
 * of the arena's limit: whenever the arena's driver frees move, the arena is trimmed
 * (every empty block goes) and every record with no allocation is given back to the
 * mirror, so the mirror holds exactly the blocks the arena holds. Before a request that
 * needs a new block, the arena's limit is fitted to what the mirror can still account,
 * so that the growth rule sizes a block the mirror accepts, and with no room at all the
 * request is refused without a driver call. A new block the mirror still refuses frees
 * its allocation, trims the cached blocks away and is tried once more; refused again, it
 * is the program's CUDA_ERROR_OUT_OF_MEMORY. A refusal on the mirror of the driver's
 * path trims the arena too (gpupart__cu_arena_trim), and a reset of the primary context
 * forgets the arena whose blocks it freed. One lock keeps the records and the arena in
 * step; the mirror is accounted under it (account.c never calls here). */
#include "cu_arena.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "account.h"
#include "cu_preload.h"
#include "gpupart_cuda.h"
#include "handle_map.h"

#define MAX_DEVICES 64

/* A block, or an expandable arena's one range: its bytes charged on the mirror, in one
 * charge for a block, one per growth for a range (its mapped bytes change). */
typedef struct block_record {
  uintptr_t base;          /* the block's cuMemAlloc_v2 pointer, or the range's base */
  uint64_t size;           /* the block's size, the range's mapped bytes */
  uint64_t live;           /* arena allocations in it */
  gpupart_charge **charge; /* what stands for size on the mirror, newest last (none: not accounted) */
  size_t ncharges, cap;
} block_record;

typedef struct arena {
  int state;                 /* 0: not opened, 1: open, -1: refused (the driver's path is taken) */
  int expandable;            /* its partition was asked to be expandable (GPUPART_EXPANDABLE) */
  gpupart_partition *mirror; /* the device's mirror partition, where its records are charged */
  gpupart_context *ctx;      /* the arena's own, so that a reset can leave it behind whole */
  gpupart_device *device;
  gpupart_partition *partition;
  CUcontext context;
  block_record *blocks;
  size_t nblocks, cap;
  uint64_t driver_frees;  /* the arena's, when the records last matched its blocks */
  uint64_t driver_allocs; /* the arena's, and its largest free range, as last read (stats_of): */
  uint64_t largest_free;  /* only an allocation moves the one, and a free only grows the other */
} arena;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static arena arenas[MAX_DEVICES];

typedef CUresult (*current_fn)(CUcontext *);
typedef CUresult (*push_fn)(CUcontext);
typedef CUresult (*sync_fn)(void);

static int is_word(const char *v, const char *const words[4]) {
  for (int i = 0; i < 4; i++)
    if (!strcasecmp(v, words[i])) return 1;
  return 0;
}

/* GPUPART_PRELOAD_ARENA: 1 on, 0 off (unset or empty too), -1 any other value, which is
 * off and said once on stderr, so that a misspelt value does not pass for a choice. */
static int arena_setting(const char *v) {
  static const char *const on[4] = {"1", "true", "yes", "on"}, *const off[4] = {"0", "false", "no", "off"};
  if (!v || !*v || is_word(v, off)) return 0;
  return is_word(v, on) ? 1 : -1;
}

int gpupart__cu_arena_wanted(void) {
  static atomic_int wanted = -1;
  int w = atomic_load_explicit(&wanted, memory_order_relaxed), expected = -1;
  if (w >= 0) return w;
  const char *v = getenv("GPUPART_PRELOAD_ARENA");
  int setting = arena_setting(v);
  w = setting > 0;
  if (!atomic_compare_exchange_strong(&wanted, &expected, w)) return expected;
  if (setting < 0)
    fprintf(stderr,
            "gpupart preload: GPUPART_PRELOAD_ARENA='%.64s' is none of 1, true, yes, on, 0, false, no, off; "
            "arena mode is off\n",
            v);
  return w;
}

/* Whether the arena's partition of device dev is expandable (one reserved range growing
 * by mapped granules, docs/design.md): the expandable option as the library resolves it
 * for cuda:dev from the program's configuration (GPUPART_EXPANDABLE, its per-device form
 * cuda:0=1, the INI file's expandable and [device] sections), which the arena's own
 * context does not read (the process's limits being the mirror's). Asked once per arena,
 * at its opening. */
static int expandable_wanted(CUdevice dev) {
  char v[8];
  return gpupart__ip_option(GPUPART_BACKEND_CUDA, (uint32_t)dev, "expandable", v, sizeof v) == 0 && !strcmp(v, "true");
}

static void say_refused(const char *what) {
  fprintf(stderr, "gpupart preload: arena %s: %s; allocations go to the driver one by one\n", what,
          gpupart_last_error());
}

/* Lock held: opens the arena of dev in a context of its own, its partition limited as
 * mirror is. */
static int arena_open(arena *A, CUdevice dev, gpupart_partition *mirror) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE};
  if (gpupart_context_create(&cd, &A->ctx) != GPUPART_OK) return say_refused("context"), A->ctx = NULL, -1;
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_CUDA, .index = (uint32_t)dev};
  if (gpupart_device_open(A->ctx, &dd, &A->device) != GPUPART_OK) return say_refused("device"), -1;
  gpupart_partition_desc pd = {.name = "preload-arena", .limit = gpupart__ip_limit(mirror)};
  A->expandable = expandable_wanted(dev);
  if (A->expandable) pd.flags = GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED;
  gpupart_result r = gpupart_partition_create(A->device, &pd, &A->partition);
  if (r == GPUPART_ENOTSUP) { /* no virtual memory on this device: growth blocks, said */
    fprintf(stderr, "gpupart preload: arena: %s; it keeps growth blocks\n", gpupart_last_error());
    A->expandable = 0;
    pd.flags = 0;
    r = gpupart_partition_create(A->device, &pd, &A->partition);
  }
  if (r != GPUPART_OK) return say_refused("partition"), gpupart_device_close(A->device), A->device = NULL, -1;
  A->mirror = mirror;
  A->context = gpupart_cuda_context(A->device);
  return A->context ? 0 : -1;
}

/* Lock held: the arena of dev, opened on first use; NULL where it was refused. */
static arena *arena_of(CUdevice dev, gpupart_partition *mirror) {
  if (dev < 0 || dev >= MAX_DEVICES) return NULL;
  arena *A = &arenas[dev];
  if (A->state == 0) A->state = arena_open(A, dev, mirror) == 0 ? 1 : -1;
  return A->state == 1 ? A : NULL;
}

/* Lock held: the record of the block at base, or NULL. */
static block_record *record_of(arena *A, uintptr_t base) {
  for (size_t i = 0; i < A->nblocks; i++)
    if (A->blocks[i].base == base) return &A->blocks[i];
  return NULL;
}

/* Lock held: records the block at base, taking its size from mirror: 0, or -1 refused. */
/* The bytes rec's charges hold. */
static uint64_t charged(const block_record *rec) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < rec->ncharges; i++) bytes += gpupart_charge_size(rec->charge[i]);
  return bytes;
}

/* Gives back every charge of rec and its list. */
static void record_drop(block_record *rec) {
  for (size_t i = 0; i < rec->ncharges; i++) gpupart__ip_unaccount(rec->charge[i]);
  free(rec->charge);
  rec->charge = NULL;
  rec->ncharges = rec->cap = 0;
}

/* Lock held: rec's charges brought to size bytes (rec->size set): the newest given back
 * while they hold more, then what is missing charged: 0, or -1 where the mirror refuses
 * it (then rec holds less than size) or there is no host memory. Where the mirror would
 * not account the size at all (gpupart__ip_account's NULL), rec is left unaccounted. */
static int record_charge_to(block_record *rec, gpupart_partition *mirror, uint64_t size) {
  uint64_t have = charged(rec);
  rec->size = size;
  while (rec->ncharges && have > size) {
    gpupart_charge *top = rec->charge[--rec->ncharges];
    have -= gpupart_charge_size(top);
    gpupart__ip_unaccount(top);
  }
  if (have >= size) return 0;
  if (rec->ncharges == rec->cap) {
    size_t cap = rec->cap ? 2 * rec->cap : 4;
    gpupart_charge **grown = realloc(rec->charge, cap * sizeof *grown);
    if (!grown) return -1;
    rec->charge = grown;
    rec->cap = cap;
  }
  gpupart_charge *c = NULL;
  if (gpupart__ip_account(mirror, size - have, &c) != 0) return -1;
  if (c) rec->charge[rec->ncharges++] = c;
  return 0;
}

/* Lock held: records the block at base, its size charged on mirror: 0, or -1 refused. */
static int record_new(arena *A, gpupart_partition *mirror, uintptr_t base, uint64_t size) {
  if (A->nblocks == A->cap) {
    size_t cap = A->cap ? 2 * A->cap : 16;
    block_record *grown = realloc(A->blocks, cap * sizeof *grown);
    if (!grown) return -1;
    A->blocks = grown;
    A->cap = cap;
  }
  block_record rec = {.base = base, .live = 1};
  if (record_charge_to(&rec, mirror, size) != 0) return record_drop(&rec), -1;
  A->blocks[A->nblocks++] = rec;
  return 0;
}

/* Lock held: A's partition's statistics (all zero where gpupart cannot tell them), noted
 * in A. */
static gpupart_stats stats_of(arena *A) {
  gpupart_stats s = {0};
  (void)gpupart_partition_get_stats(A->partition, &s);
  A->driver_allocs = s.driver_allocs;
  A->largest_free = s.largest_free;
  return s;
}

/* Lock held: after the arena's blocks may have gone back to the driver (its driver frees
 * moved since the records last matched, s being its statistics now, or force): the arena
 * trimmed of every empty block, and the records of empty blocks given back to the mirror.
 * Only empty blocks ever go, so a record that still counts an allocation names a block
 * the arena holds. An expandable arena's range that still holds allocations may have
 * had its free top unmapped: its charges follow it down to what stays mapped. */
static void settle_seen(arena *A, const gpupart_stats *s, int force) {
  if (!force && s->driver_frees == A->driver_frees) return;
  (void)gpupart_partition_trim(A->partition);
  for (size_t i = A->nblocks; i-- > 0;)
    if (A->blocks[i].live == 0) record_drop(&A->blocks[i]), A->blocks[i] = A->blocks[--A->nblocks];
  gpupart_stats now = stats_of(A);
  if (A->expandable && A->nblocks == 1 && now.reserved < A->blocks[0].size)
    (void)record_charge_to(&A->blocks[0], A->mirror, now.reserved); /* less: gives back only */
  A->driver_frees = now.driver_frees;
}

/* Lock held: the bytes A's records stand for. */
static uint64_t records_size(const arena *A) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < A->nblocks; i++) bytes += A->blocks[i].size;
  return bytes;
}

static void settle(arena *A, int force) {
  gpupart_stats s = stats_of(A);
  settle_seen(A, &s, force);
}

static int is_current(const arena *A) {
  current_fn current = (current_fn)gpupart__cu_real(CU_CTX_GET_CURRENT);
  CUcontext now = NULL;
  return current && current(&now) == CUDA_SUCCESS && now && now == A->context;
}

/* Lock held: the record of the block at base that an allocation made by this call holds,
 * fresh where the call took a new block (a request goes into a new block only when none
 * A holds can serve it). A new block may have the address of one the arena gave back
 * before this call (the growth rule or the OOM sequence inside gpupart_alloc released it,
 * and the driver reuses addresses, at another size too): that record is stale, its block
 * empty and gone, and is given back to the mirror so that the new block is recorded at
 * its own size. */
static block_record *record_for(arena *A, uintptr_t base, int fresh) {
  block_record *known = record_of(A, base);
  if (!known || !fresh) return known;
  record_drop(known);
  *known = A->blocks[--A->nblocks];
  return NULL;
}

/* What the mirror can still charge: its limit less what it holds (partition-wide with a
 * shared ledger), within what gpupart__ip_available leaves (the shared budget). */
static uint64_t mirror_room(gpupart_partition *mirror) {
  gpupart_stats m;
  if (gpupart_partition_get_stats(mirror, &m) != GPUPART_OK) return 0;
  uint64_t grow = m.limit > m.reserved ? m.limit - m.reserved : 0, available = gpupart__ip_available(mirror);
  return available < grow ? available : grow;
}

/* Lock held: where size needs a new block (no free range of A holds it), A's partition
 * limited to its blocks plus what the mirror can still account of one (mirror_room), so
 * that the block the growth rule sizes is one the mirror accepts: without it a block past
 * what the mirror leaves was taken from the driver (the limit exceeded in the driver for
 * a moment) only to be refused, at every call, while a smaller one would have fitted.
 * Where the mirror has room for no block of size, the empty cached blocks are given back
 * first (their bytes become room), and -1 where that is still too little: refused with
 * no driver call. A shrink gives the empty cached blocks back too (settled after). Only
 * here, as the mirror's shared figures take the ledger's lock to read. An expandable
 * range grows from its free top, so there the request needs the room less the largest
 * free range (at most: the arena's own ledger then charges exactly what it maps). */
static uint64_t room_needed(const arena *A, const gpupart_stats *s, size_t size) {
  return A->expandable ? size - s->largest_free : size; /* largest_free < size */
}

static int fit_limit(arena *A, gpupart_partition *mirror, size_t size) {
  if (A->largest_free >= size) return 0; /* at most what is free now */
  gpupart_stats s = stats_of(A);
  if (s.largest_free >= size) return 0;
  uint64_t room = mirror_room(mirror), limit = gpupart__ip_limit(mirror);
  if (room < room_needed(A, &s, size)) settle(A, 1), s = stats_of(A), room = mirror_room(mirror);
  if (room < room_needed(A, &s, size)) return -1;
  uint64_t want = s.reserved + room < limit ? s.reserved + room : limit;
  if (want != s.limit && gpupart_partition_resize(A->partition, want) == GPUPART_OK) settle(A, 0);
  return 0;
}

/* Lock held: one try at serving size from A, a new block accounted on mirror. */
static gpupart__cu_served serve_once(arena *A, gpupart_partition *mirror, size_t size, CUdeviceptr *dptr,
                                     gpupart_allocation **out) {
  gpupart_allocation *a = NULL;
  gpupart_allocation_info info;
  if (fit_limit(A, mirror, size) != 0) return CU_REFUSED;
  uint64_t allocs = A->driver_allocs;
  gpupart_result r = gpupart_alloc(A->partition, size, 0, &a);
  if (r == GPUPART_ELIMIT || r == GPUPART_EDEVMEM) return settle(A, 0), CU_REFUSED;
  if (r != GPUPART_OK) return CU_NOT_SERVED; /* EINVAL: more than the device; the driver answers */
  if (gpupart_allocation_get_info(a, &info) != GPUPART_OK) return gpupart_free(a), settle(A, 0), CU_NOT_SERVED;
  uintptr_t base = (uintptr_t)info.native_block;
  gpupart_stats s = stats_of(A);
  block_record *known = record_for(A, base, s.driver_allocs != allocs && !A->expandable);
  if (known) known->live++; /* before settle, which gives back only empty blocks */
  if (known && A->expandable && info.block_size != known->size && /* the range grew: its new granules */
      record_charge_to(known, mirror, info.block_size) != 0) {
    known->live--;
    gpupart_free(a);
    settle(A, 1); /* the free top is unmapped and the charges follow it */
    return CU_REFUSED;
  }
  settle_seen(A, &s, 0);
  if (!known && record_new(A, mirror, base, info.block_size) != 0) {
    gpupart_free(a);
    settle(A, 1); /* the new block, empty again, and the cached ones go */
    return CU_REFUSED;
  }
  *dptr = (CUdeviceptr)info.device_address;
  *out = a;
  return CU_SERVED;
}

/* Lock held: serves size from A, once more after a refusal that cached blocks (or an
 * expandable range's mapped free top) held up. */
static gpupart__cu_served serve(arena *A, gpupart_partition *mirror, size_t size, CUdeviceptr *dptr,
                                gpupart_allocation **out) {
  uint64_t cached = records_size(A);
  gpupart__cu_served s = serve_once(A, mirror, size, dptr, out);
  return s == CU_REFUSED && records_size(A) < cached ? serve_once(A, mirror, size, dptr, out) : s;
}

gpupart__cu_served gpupart__cu_arena_alloc(CUdevice dev, gpupart_partition *mirror, size_t size, CUdeviceptr *dptr) {
  gpupart_allocation *a = NULL;
  gpupart__cu_served s = CU_NOT_SERVED;
  if (!mirror) return s;
  pthread_mutex_lock(&lock);
  arena *A = arena_of(dev, mirror);
  if (A && is_current(A)) s = serve(A, mirror, size, dptr, &a);
  pthread_mutex_unlock(&lock);
  if (s != CU_SERVED) return s;
  gpupart__ip_record stale;
  if (gpupart__ip_map_set((const void *)(uintptr_t)*dptr, gpupart__ip_served(a), &stale) != 0)
    return gpupart__cu_arena_free(a), CU_REFUSED; /* no host memory to remember it */
  gpupart__cu_drop_stale(stale); /* the driver freed it unseen (with its context) and gave the address to a block */
  return s;
}

/* Lock held: the arena whose partition is p, or NULL. */
static arena *arena_with(const gpupart_partition *p) {
  for (int i = 0; i < MAX_DEVICES && p; i++)
    if (arenas[i].state == 1 && arenas[i].partition == p) return &arenas[i];
  return NULL;
}

int gpupart__cu_arena_owns(const gpupart_allocation *a) {
  gpupart_allocation_info info;
  if (!a || gpupart_allocation_get_info(a, &info) != GPUPART_OK) return 0;
  pthread_mutex_lock(&lock);
  int owns = arena_with(info.partition) != NULL;
  pthread_mutex_unlock(&lock);
  return owns;
}

/* The work queued on the arena's context is done before its memory is served again, as
 * cuMemFree waits for it: the context made current for the call, then the caller's back. */
static CUresult drain(CUcontext c) {
  push_fn push = (push_fn)gpupart__cu_real(CU_CTX_PUSH);
  current_fn pop = (current_fn)gpupart__cu_real(CU_CTX_POP);
  sync_fn sync = (sync_fn)gpupart__cu_real(CU_CTX_SYNCHRONIZE);
  CUcontext popped = NULL;
  if (!push || !pop || !sync) return CUDA_ERROR_NOT_FOUND;
  CUresult r = push(c);
  if (r != CUDA_SUCCESS) return r;
  r = sync();
  pop(&popped);
  return r;
}

CUresult gpupart__cu_arena_free(gpupart_allocation *a) {
  gpupart_allocation_info info;
  if (gpupart_allocation_get_info(a, &info) != GPUPART_OK) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  arena *A = arena_with(info.partition);
  CUcontext c = A ? A->context : NULL;
  pthread_mutex_unlock(&lock);
  if (!A) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = drain(c);
  pthread_mutex_lock(&lock);
  int same = A->state == 1 && A->partition == info.partition; /* not forgotten by a reset meanwhile */
  block_record *rec = same ? record_of(A, (uintptr_t)info.native_block) : NULL;
  if (rec && rec->live) rec->live--;
  (void)gpupart_free(a);
  if (same) settle(A, 0);
  pthread_mutex_unlock(&lock);
  return r;
}

int gpupart__cu_arena_holds(CUdeviceptr p) {
  int holds = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_DEVICES && !holds; i++)
    for (size_t b = 0; b < arenas[i].nblocks && !holds; b++)
      holds = p >= arenas[i].blocks[b].base && p - arenas[i].blocks[b].base < arenas[i].blocks[b].size;
  pthread_mutex_unlock(&lock);
  return holds;
}

int gpupart__cu_arena_trim(CUdevice dev) {
  if (dev < 0 || dev >= MAX_DEVICES) return 0;
  pthread_mutex_lock(&lock);
  arena *A = arenas[dev].state == 1 ? &arenas[dev] : NULL;
  uint64_t before = A ? records_size(A) : 0;
  if (A) settle(A, 1);
  int gave = A && records_size(A) < before; /* blocks gone, or an expandable range's top unmapped */
  pthread_mutex_unlock(&lock);
  return gave;
}

uint64_t gpupart__cu_arena_spare(CUdevice dev) {
  gpupart_stats s;
  uint64_t spare = 0;
  if (dev < 0 || dev >= MAX_DEVICES) return 0;
  pthread_mutex_lock(&lock);
  arena *A = arenas[dev].state == 1 ? &arenas[dev] : NULL;
  if (A && gpupart_partition_get_stats(A->partition, &s) == GPUPART_OK && s.reserved > s.in_use)
    spare = s.reserved - s.in_use;
  pthread_mutex_unlock(&lock);
  return spare;
}

CUresult gpupart__cu_arena_reset(CUdevice dev, CUresult (*reset)(CUdevice)) {
  pthread_mutex_lock(&lock);
  CUresult r = reset(dev);
  arena *A = r == CUDA_SUCCESS && dev >= 0 && dev < MAX_DEVICES ? &arenas[dev] : NULL;
  if (A && A->state == 1) {
    for (size_t i = 0; i < A->nblocks; i++) record_drop(&A->blocks[i]);
    free(A->blocks);
    *A = (arena){0};
  }
  pthread_mutex_unlock(&lock);
  return r;
}

void gpupart__cu_arena_forget(void) {
  pthread_mutex_init(&lock, NULL);
  for (int i = 0; i < MAX_DEVICES; i++) arenas[i] = (arena){0}; /* the parent's blocks: not the child's to free */
}
