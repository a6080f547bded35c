/* Multi-threaded stress: threads allocate and free in a shared partition, in their own
 * partitions and in a preallocated one, with limits that force the OOM sequence and
 * reclaim callbacks that free cached allocations; a monitor thread reads stats, checks
 * invariants, trims and resets peaks meanwhile. Worker threads never assert (Criterion
 * reports from the main thread): they count what they saw, and the main thread compares
 * the counts with the library's after joining. Counts, never timings. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

#define WORKERS 6
#define OPS 40000
#define KEEP 24

/* A cache of allocations that a partition's reclaim callback may free. Threads never
 * allocate while holding its lock, except with GPUPART_ALLOC_NO_RECLAIM. */
typedef struct cache {
  pthread_mutex_t lock;
  gpupart_allocation *items[256];
  uint64_t sizes[256];
  int count;
  atomic_int inside;             /* threads running this partition's callback now */
  atomic_uint_fast64_t overlaps; /* times two threads ran it at once: must stay 0 */
  atomic_uint_fast64_t calls, freed_items;
} cache;

typedef struct shared {
  gpupart_device *dev;
  gpupart_partition *common, *pre, *own[WORKERS];
  cache caches[WORKERS + 1]; /* caches[WORKERS] belongs to common */
  atomic_int stop;
  atomic_uint_fast64_t check_failures, monitor_rounds;
} shared;

typedef struct worker {
  shared *sh;
  int id;
  uint64_t rng;
  gpupart_allocation *held[KEEP];
  uint64_t held_size[KEEP];
  int nheld;
  uint64_t ok, refused, odd_results, frees, no_reclaim_ok;
} worker;

static int reclaim(gpupart_partition *p, uint64_t wanted, void *user) {
  (void)p;
  cache *c = user;
  if (atomic_fetch_add(&c->inside, 1) != 0) atomic_fetch_add(&c->overlaps, 1);
  atomic_fetch_add(&c->calls, 1);
  sched_yield(); /* widen the window in which a second run would overlap */
  pthread_mutex_lock(&c->lock);
  uint64_t freed = 0;
  while (c->count && freed < wanted) {
    c->count--;
    freed += c->sizes[c->count];
    gpupart_free(c->items[c->count]);
    atomic_fetch_add(&c->freed_items, 1);
  }
  pthread_mutex_unlock(&c->lock);
  atomic_fetch_sub(&c->inside, 1);
  return 0;
}

static uint64_t next(worker *w) {
  w->rng ^= w->rng << 13, w->rng ^= w->rng >> 7, w->rng ^= w->rng << 17;
  return w->rng;
}

static uint64_t pick_size(worker *w) {
  uint64_t r = next(w) % 100;
  if (r < 70) return 1 + next(w) % (256 * 1024);
  return r < 97 ? 256 * 1024 + next(w) % (2 * MiB) : 4 * MiB + next(w) % (8 * MiB);
}

static void count_result(worker *w, gpupart_result rc) {
  if (rc == GPUPART_OK) w->ok++;
  else if (rc == GPUPART_ELIMIT || rc == GPUPART_EDEVMEM) w->refused++;
  else w->odd_results++;
}

/* Allocates and parks the allocation in the partition's cache. Sometimes does it the
 * way an application holding its cache lock must: lock first, allocate with NO_RECLAIM. */
static void alloc_into_cache(worker *w, gpupart_partition *p, cache *c) {
  gpupart_allocation *a;
  uint64_t size = pick_size(w);
  if (next(w) % 8 == 0) {
    gpupart_alloc_desc d = {.size = size, .flags = GPUPART_ALLOC_NO_RECLAIM, .tag = (uint64_t)w->id};
    pthread_mutex_lock(&c->lock);
    gpupart_result rc = c->count < 256 ? gpupart_alloc_ex(p, &d, &a) : GPUPART_EBUSY;
    if (rc == GPUPART_OK) c->items[c->count] = a, c->sizes[c->count++] = size, w->no_reclaim_ok++;
    pthread_mutex_unlock(&c->lock);
    if (rc != GPUPART_EBUSY) count_result(w, rc);
    return;
  }
  gpupart_result rc = gpupart_alloc(p, size, 0, &a);
  count_result(w, rc);
  if (rc) return;
  pthread_mutex_lock(&c->lock);
  int room = c->count < 256;
  if (room) c->items[c->count] = a, c->sizes[c->count++] = size;
  pthread_mutex_unlock(&c->lock);
  if (!room) gpupart_free(a), w->frees++;
}

static void alloc_kept(worker *w, gpupart_partition *p) {
  if (w->nheld == KEEP) {
    int k = (int)(next(w) % KEEP);
    gpupart_free(w->held[k]);
    w->frees++;
    w->nheld--;
    w->held[k] = w->held[w->nheld];
    w->held_size[k] = w->held_size[w->nheld];
  }
  gpupart_allocation *a;
  uint64_t size = pick_size(w);
  gpupart_result rc = gpupart_alloc(p, size, next(w) % 4 == 0 ? 4096 : 0, &a);
  count_result(w, rc);
  if (rc == GPUPART_OK) w->held[w->nheld] = a, w->held_size[w->nheld++] = size;
}

static void free_one(worker *w) {
  if (!w->nheld) return;
  int k = (int)(next(w) % (uint64_t)w->nheld);
  gpupart_free(w->held[k]);
  w->frees++;
  w->nheld--;
  w->held[k] = w->held[w->nheld];
  w->held_size[k] = w->held_size[w->nheld];
}

static void *work(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  for (int i = 0; i < OPS; i++) {
    uint64_t r = next(w) % 100;
    if (r < 25) alloc_kept(w, sh->common);
    else if (r < 45) alloc_kept(w, sh->own[w->id]);
    else if (r < 55) alloc_kept(w, sh->pre);
    else if (r < 62) alloc_into_cache(w, sh->common, &sh->caches[WORKERS]);
    else if (r < 69) alloc_into_cache(w, sh->own[w->id], &sh->caches[w->id]);
    else free_one(w);
  }
  return NULL;
}

static void *monitor(void *arg) {
  shared *sh = arg;
  uint64_t rounds = 0;
  while (!atomic_load(&sh->stop)) {
    if (gpupart_device_check(sh->dev) != GPUPART_OK) atomic_fetch_add(&sh->check_failures, 1);
    gpupart_stats s;
    gpupart_device_get_stats(sh->dev, &s);
    gpupart_partition *p = gpupart_partition_at(sh->dev, (uint32_t)(rounds % gpupart_partition_count(sh->dev)));
    if (rounds % 3 == 0) gpupart_partition_trim(p);
    if (rounds % 5 == 0) gpupart_partition_reset_peak(p);
    rounds++;
    sched_yield();
  }
  atomic_store(&sh->monitor_rounds, rounds);
  return NULL;
}

static gpupart_partition *cached(gpupart_device *dev, const char *name, uint64_t limit, uint64_t guarantee,
                                 uint64_t threshold, cache *c) {
  pthread_mutex_init(&c->lock, NULL);
  gpupart_partition_desc d = {.name = name,
                              .limit = limit,
                              .guarantee = guarantee,
                              .release_threshold = threshold,
                              .reclaim = reclaim,
                              .reclaim_user = c};
  return make_partition(dev, &d);
}

static uint64_t drain(cache *c) {
  uint64_t n = 0;
  pthread_mutex_lock(&c->lock);
  while (c->count) gpupart_free(c->items[--c->count]), n++;
  pthread_mutex_unlock(&c->lock);
  return n;
}

static void sum_partitions(gpupart_device *dev, gpupart_stats *sum) {
  *sum = (gpupart_stats){0};
  for (uint32_t i = 0; i < gpupart_partition_count(dev); i++) {
    gpupart_stats s = test_stats(gpupart_partition_at(dev, i));
    cr_expect_eq(s.total_allocations - s.total_frees, s.live_allocations, "partition %u", i);
    cr_expect_leq(s.reserved, s.limit);
    sum->in_use += s.in_use, sum->live_allocations += s.live_allocations, sum->reserved += s.reserved;
    sum->total_allocations += s.total_allocations, sum->failed_allocations += s.failed_allocations;
  }
}

/* The common partition, a preallocated one, and one partition per worker (half of them
 * releasing emptied blocks at once, the first with a guarantee), each with a cache. */
static shared *make_shared(gpupart_device *dev) {
  shared *sh = calloc(1, sizeof *sh);
  cr_assert_not_null(sh);
  sh->dev = dev;
  sh->common = cached(dev, "common", 96 * MiB, 32 * MiB, 0, &sh->caches[WORKERS]);
  gpupart_partition_desc pd = {.name = "pre", .limit = 32 * MiB, .max_block = 8 * MiB, .growth = GPUPART_GROWTH_OFF};
  sh->pre = make_partition(dev, &pd);
  for (int i = 0; i < WORKERS; i++) {
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    sh->own[i] = cached(dev, name, 48 * MiB, i == 0 ? 16 * MiB : 0, i % 2 ? 1 : 0, &sh->caches[i]);
  }
  return sh;
}

/* What the workers and the caches hold against what the library counts. */
static void expect_counts(const shared *sh, const worker *w) {
  uint64_t ok = 0, refused = 0, held = 0, held_bytes = 0, odd = 0;
  for (int i = 0; i < WORKERS; i++) {
    ok += w[i].ok, refused += w[i].refused, odd += w[i].odd_results, held += (uint64_t)w[i].nheld;
    for (int k = 0; k < w[i].nheld; k++) held_bytes += w[i].held_size[k];
  }
  uint64_t cached_items = 0, cached_bytes = 0, calls = 0, overlaps = 0;
  for (int c = 0; c <= WORKERS; c++) {
    cached_items += (uint64_t)sh->caches[c].count;
    for (int k = 0; k < sh->caches[c].count; k++) cached_bytes += sh->caches[c].sizes[k];
    calls += atomic_load(&sh->caches[c].calls), overlaps += atomic_load(&sh->caches[c].overlaps);
  }
  gpupart_stats sum, d = dev_stats(sh->dev);
  sum_partitions(sh->dev, &sum);
  cr_expect_eq(odd, 0, "every result was OK, ELIMIT or EDEVMEM");
  cr_expect_eq(sum.total_allocations, ok);
  cr_expect_eq(sum.failed_allocations, refused);
  cr_expect_eq(sum.live_allocations, held + cached_items);
  cr_expect_eq(sum.in_use, held_bytes + cached_bytes);
  cr_expect_eq(d.in_use, sum.in_use);
  cr_expect_eq(d.reserved, sum.reserved);
  cr_expect_leq(d.reserved, gpupart_device_budget(sh->dev));
  cr_expect_leq(d.peak_reserved, gpupart_device_budget(sh->dev));
  cr_expect_eq(overlaps, 0, "one partition's callback never ran on two threads at once");
  cr_expect_gt(calls, 0, "the OOM sequence reached the callbacks");
  cr_expect_gt(refused, 0, "the limits were reached");
}

Test(threads, many_threads_allocate_through_the_oom_sequence, .timeout = 300) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  sim_env e = open_env(&sim, NULL);
  shared *sh = make_shared(e.dev);
  uint64_t pre_allocs = test_stats(sh->pre).driver_allocs;
  worker w[WORKERS];
  pthread_t t[WORKERS], mon;
  for (int i = 0; i < WORKERS; i++) w[i] = (worker){.sh = sh, .id = i, .rng = 0x1234567ull * (uint64_t)(i + 1)};
  pthread_create(&mon, NULL, monitor, sh);
  for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, work, &w[i]);
  for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  atomic_store(&sh->stop, 1);
  pthread_join(mon, NULL);

  test_check(e.dev);
  cr_expect_eq(atomic_load(&sh->check_failures), 0, "device_check passed at every moment the monitor looked");
  cr_expect_gt(atomic_load(&sh->monitor_rounds), 0);
  expect_counts(sh, w);
  cr_expect_eq(test_stats(sh->pre).driver_allocs, pre_allocs, "the preallocated partition never grew");

  for (int i = 0; i < WORKERS; i++)
    while (w[i].nheld) gpupart_free(w[i].held[--w[i].nheld]);
  for (int c = 0; c <= WORKERS; c++) drain(&sh->caches[c]);
  gpupart_stats sum;
  sum_partitions(e.dev, &sum);
  cr_expect_eq(sum.in_use, 0);
  cr_expect_eq(sum.live_allocations, 0);
  for (uint32_t i = 0; i < gpupart_partition_count(e.dev); i++) gpupart_partition_trim(gpupart_partition_at(e.dev, i));
  cr_expect_eq(dev_stats(e.dev).reserved, 32 * MiB, "only the preallocation is left");
  close_env(&e);
  free(sh);
}

/* Threads that allocate and free in one partition whose emptied blocks go straight back:
 * the growth and release paths race with the fast path of the others. */
typedef struct churner {
  gpupart_partition *p;
  uint64_t rng, ok, refused, odd;
} churner;

static void *churn(void *arg) {
  churner *c = arg;
  gpupart_allocation *held[8] = {0};
  for (int i = 0; i < OPS; i++) {
    c->rng ^= c->rng << 13, c->rng ^= c->rng >> 7, c->rng ^= c->rng << 17;
    int k = (int)(c->rng % 8);
    if (held[k]) {
      gpupart_free(held[k]);
      held[k] = NULL;
      continue;
    }
    gpupart_result rc = gpupart_alloc(c->p, 1 + (c->rng >> 16) % (3 * MiB), 0, &held[k]);
    if (rc == GPUPART_OK) c->ok++;
    else if (rc == GPUPART_ELIMIT) c->refused++;
    else c->odd++;
  }
  for (int k = 0; k < 8; k++) gpupart_free(held[k]);
  return NULL;
}

Test(threads, one_partition_releasing_every_emptied_block_stays_consistent, .timeout = 300) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "hot", .limit = 40 * MiB, .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &d);
  churner c[WORKERS];
  pthread_t t[WORKERS];
  for (int i = 0; i < WORKERS; i++) c[i] = (churner){.p = p, .rng = 99u + (uint64_t)i * 7919u};
  for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, churn, &c[i]);
  for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  uint64_t ok = 0, refused = 0, odd = 0;
  for (int i = 0; i < WORKERS; i++) ok += c[i].ok, refused += c[i].refused, odd += c[i].odd;
  gpupart_stats s = test_stats(p);
  cr_expect_eq(odd, 0);
  cr_expect_eq(s.total_allocations, ok);
  cr_expect_eq(s.total_frees, ok);
  cr_expect_eq(s.failed_allocations, refused);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.reserved, 0, "every emptied block went back");
  cr_expect_eq(s.driver_allocs, s.driver_frees);
  cr_expect_leq(s.peak_reserved, 40 * MiB);
  close_env(&e);
}

/* Partitions are created and destroyed while other threads allocate in theirs. */
typedef struct lifecycler {
  gpupart_device *dev;
  int id, rounds_ok;
  uint64_t odd;
} lifecycler;

static void *lifecycle(void *arg) {
  lifecycler *l = arg;
  char name[16];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "l%d-%d", l->id, i);
    gpupart_partition_desc d = {.name = name, .limit = 16 * MiB, .guarantee = 2 * MiB};
    gpupart_partition *p;
    if (gpupart_partition_create(l->dev, &d, &p) != GPUPART_OK) {
      l->odd++;
      continue;
    }
    gpupart_allocation *a = NULL;
    gpupart_result rc = gpupart_alloc(p, 1 + (uint64_t)i * 4099 % (8 * MiB), 0, &a);
    if (rc != GPUPART_OK && rc != GPUPART_ELIMIT) l->odd++;
    gpupart_free(a);
    if (gpupart_partition_find(l->dev, name) != p) l->odd++;
    if (gpupart_partition_destroy(p) != GPUPART_OK) l->odd++;
    else l->rounds_ok++;
  }
  return NULL;
}

Test(threads, partitions_come_and_go_while_others_allocate, .timeout = 300) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "steady", .limit = 128 * MiB, .release_threshold = 1};
  gpupart_partition *p = make_partition(e.dev, &d);
  churner c[2];
  lifecycler l[3];
  pthread_t tc[2], tl[3];
  for (int i = 0; i < 2; i++) c[i] = (churner){.p = p, .rng = 5u + (uint64_t)i};
  for (int i = 0; i < 3; i++) l[i] = (lifecycler){.dev = e.dev, .id = i};
  for (int i = 0; i < 2; i++) pthread_create(&tc[i], NULL, churn, &c[i]);
  for (int i = 0; i < 3; i++) pthread_create(&tl[i], NULL, lifecycle, &l[i]);
  for (int i = 0; i < 2; i++) pthread_join(tc[i], NULL);
  for (int i = 0; i < 3; i++) pthread_join(tl[i], NULL);
  uint64_t ok = 0, refused = 0;
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(c[i].odd, 0);
    ok += c[i].ok, refused += c[i].refused;
  }
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(l[i].odd, 0);
    cr_expect_eq(l[i].rounds_ok, 300);
  }
  cr_expect_eq(gpupart_partition_count(e.dev), 1);
  gpupart_stats s = dev_stats(e.dev);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.guarantee, 0);
  cr_expect_eq(s.total_allocations + s.failed_allocations, ok + refused + 3 * 300,
               "the destroyed partitions' allocations and refusals are counted too");
  close_env(&e);
}
