/* A model-based randomized test of the policy engine. Four partitions with limits and
 * guarantees share a simulated device (one preallocated, one releasing emptied blocks at
 * once, two with reclaim callbacks); random allocations, frees, resizes, trims and peak
 * resets run against a reference model, with driver failures injected per seed
 * (fail_block_alloc_at, max_blocks), and, in some runs, a second handle of the same
 * simulated device whose partition takes bytes of the same budget (one physical device
 * has one budget in a context, whichever handle reserves it). After every
 * step every counter is compared with the model, the bounds that cannot be predicted
 * exactly are checked (reserved against limits, budget, the blocks holding live
 * allocations and the release threshold), live ranges must not overlap, and
 * gpupart_device_check must pass. The model also predicts outcomes: a request that
 * cannot fit its limit or the budget must fail, and one that the OOM sequence can make
 * room for (in particular a partition below its guarantee) must succeed. */
#include <stdlib.h>

#include "policy.h"

#define NPART 4
#define MAXLIVE 512
#define GRAN (2 * MiB)
#define STEPS 5000

typedef struct live {
  gpupart_allocation *a;
  int part;
  uint64_t size;
  int cached; /* its partition's callback may free it */
} live;

typedef struct mpart {
  gpupart_partition *p;
  int prealloc, has_reclaim;
  uint64_t threshold, limit, guarantee;
  uint64_t in_use, peak_in_use, live, allocs, frees, failed, callbacks;
  uint64_t pre_allocs, pre_frees; /* driver calls of a preallocated partition: only resizes make them */
} mpart;

typedef struct model model;
typedef struct reclaim_arg {
  model *m;
  int idx;
} reclaim_arg;

typedef struct config {
  uint64_t seed;
  uint32_t fail_at, max_blocks;
  int hog; /* a second handle of the same simulated device takes bytes of its budget */
} config;

struct model {
  config cfg;
  gpupart_context *ctx;
  gpupart_device *dev, *hog_dev;
  gpupart_partition *hog;
  gpupart_allocation *hogs[8];
  int nhogs;
  mpart part[NPART];
  reclaim_arg args[NPART];
  live lives[MAXLIVE];
  int nlive;
  uint64_t budget, dev_peak, rng;
  int step;
  int requester, no_reclaim;
  uint64_t must_succeed, must_fail, refused, reclaims; /* how often each prediction was tested */
};

static uint64_t next(model *m) {
  m->rng ^= m->rng << 13, m->rng ^= m->rng >> 7, m->rng ^= m->rng << 17;
  return m->rng;
}

static uint64_t below(model *m, uint64_t n) { return next(m) % n; }

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- the model's bookkeeping ---- */

static void forget(model *m, int k) {
  live *l = &m->lives[k];
  mpart *mp = &m->part[l->part];
  mp->in_use -= l->size, mp->live--, mp->frees++;
  m->lives[k] = m->lives[--m->nlive];
}

static void free_live(model *m, int k) {
  gpupart_free(m->lives[k].a);
  forget(m, k);
}

static uint64_t total_in_use(const model *m) {
  uint64_t s = 0;
  for (int i = 0; i < NPART; i++) s += m->part[i].in_use;
  return s;
}

static uint64_t cached_bytes(const model *m, int part) {
  uint64_t s = 0;
  for (int k = 0; k < m->nlive; k++)
    if (m->lives[k].part == part && m->lives[k].cached) s += m->lives[k].size;
  return s;
}

typedef struct block_ref {
  uintptr_t native;
  uint64_t size;
} block_ref;

static int by_native(const void *a, const void *b) {
  const block_ref *x = a, *y = b;
  return x->native < y->native ? -1 : x->native > y->native;
}

/* Bytes of the blocks that hold live allocations of a partition, and how many blocks. */
static uint64_t held_blocks(const model *m, int part, uint64_t *count) {
  block_ref refs[MAXLIVE];
  int n = 0;
  for (int k = 0; k < m->nlive; k++) {
    if (m->lives[k].part != part) continue;
    gpupart_allocation_info i = info_of(m->lives[k].a);
    refs[n++] = (block_ref){(uintptr_t)i.native_block, i.block_size};
  }
  qsort(refs, (size_t)n, sizeof refs[0], by_native);
  uint64_t bytes = 0;
  *count = 0;
  for (int k = 0; k < n; k++)
    if (!k || refs[k].native != refs[k - 1].native) bytes += refs[k].size, ++*count;
  return bytes;
}

/* What a partition holds that no OOM step can take back: its preallocation, or the
 * blocks with live allocations. */
static uint64_t pinned(const model *m, int part) {
  uint64_t n;
  return m->part[part].prealloc ? test_stats(m->part[part].p).reserved : held_blocks(m, part, &n);
}

/* ---- the reclaim callback: frees the partition's cached allocations, newest first ---- */

static int model_reclaim(gpupart_partition *p, uint64_t wanted, void *user) {
  reclaim_arg *arg = user;
  model *m = arg->m;
  mpart *mp = &m->part[arg->idx];
  cr_assert_eq(p, mp->p);
  cr_assert_eq(m->no_reclaim, 0, "GPUPART_ALLOC_NO_RECLAIM skips the callbacks");
  if (arg->idx != m->requester) {
    gpupart_stats s = test_stats(p);
    cr_assert_gt(s.reserved, s.guarantee, "another partition's callback runs only above its guarantee");
  }
  mp->callbacks++, m->reclaims++;
  uint64_t freed = 0;
  for (int k = m->nlive - 1; k >= 0 && freed < wanted; k--) {
    if (m->lives[k].part != arg->idx || !m->lives[k].cached) continue;
    freed += m->lives[k].size;
    free_live(m, k);
  }
  return 0;
}

/* ---- setup ---- */

static void add_partition(model *m, int i, const gpupart_partition_desc *d) {
  mpart *mp = &m->part[i];
  gpupart_partition_desc pd = *d;
  m->args[i] = (reclaim_arg){m, i};
  if (mp->has_reclaim) pd.reclaim = model_reclaim, pd.reclaim_user = &m->args[i];
  mp->p = make_partition(m->dev, &pd);
  gpupart_stats s = test_stats(mp->p);
  mp->limit = s.limit;
  mp->guarantee = s.guarantee;
  mp->threshold = d->release_threshold;
  mp->prealloc = d->growth == GPUPART_GROWTH_OFF;
  mp->pre_allocs = s.driver_allocs;
  mp->pre_frees = s.driver_frees;
}

static model *model_open(config cfg) {
  model *m = calloc(1, sizeof *m);
  cr_assert_not_null(m);
  m->cfg = cfg;
  m->rng = cfg.seed * 0x9e3779b97f4a7c15ull + 1;
  m->requester = -1;
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .fail_block_alloc_at = cfg.fail_at, .max_blocks = cfg.max_blocks};
  m->ctx = test_context();
  m->dev = test_sim_device(m->ctx, &sim, NULL);
  m->budget = gpupart_device_budget(m->dev);
  m->part[0].has_reclaim = m->part[2].has_reclaim = 1;
  gpupart_partition_desc d[NPART] = {
      {.name = "a", .limit = 128 * MiB, .guarantee = 32 * MiB},
      {.name = "b", .limit = 96 * MiB, .release_threshold = 1},
      {.name = "c",
       .fraction = 0.5,
       .guarantee = 16 * MiB,
       .release_threshold = 8 * MiB,
       .initial_block = 4 * MiB,
       .growth_factor = 1.5},
      {.name = "pre", .limit = 32 * MiB, .guarantee = 8 * MiB, .max_block = 8 * MiB, .growth = GPUPART_GROWTH_OFF},
  };
  for (int i = 0; i < NPART; i++) add_partition(m, i, &d[i]);
  if (cfg.hog) {
    m->hog_dev = test_sim_device(m->ctx, &sim, NULL);
    gpupart_partition_desc hd = {.name = "hog", .release_threshold = 1};
    m->hog = make_partition(m->hog_dev, &hd);
  }
  return m;
}

/* ---- predictions ---- */

static uint64_t need_of(uint64_t size, uint64_t align) {
  uint64_t slack = align > 256 ? align - 256 : 0;
  return round_up(round_up(size, 256) + slack, GRAN);
}

static uint64_t driver_blocks(const model *m) {
  uint64_t n = 0;
  gpupart_stats s = dev_stats(m->dev);
  n = s.driver_allocs - s.driver_frees;
  if (m->hog) {
    gpupart_stats h = test_stats(m->hog);
    n += h.driver_allocs - h.driver_frees;
  }
  return n;
}

/* Whether an injected failure may still come: the failing call is ahead, or a block
 * limit is set. (The second handle's bytes come out of the shared budget, so the driver,
 * whose memory is that budget, never runs short because of them.) */
static int injections(const model *m) {
  uint64_t calls = dev_stats(m->dev).driver_allocs + (m->hog ? test_stats(m->hog).driver_allocs : 0);
  return m->cfg.max_blocks || (m->cfg.fail_at && calls < m->cfg.fail_at);
}

/* Bytes the second handle holds in the shared budget: all pinned, since its partition
 * releases every emptied block at once. */
static uint64_t hog_reserved(const model *m) { return m->hog ? test_stats(m->hog).reserved : 0; }

/* Whether the driver can refuse no block once the OOM sequence has released every empty
 * block. */
static int driver_reliable(const model *m) {
  if (m->cfg.max_blocks && driver_blocks(m) >= m->cfg.max_blocks) return 0;
  uint64_t calls = dev_stats(m->dev).driver_allocs + (m->hog ? test_stats(m->hog).driver_allocs : 0);
  return !(m->cfg.fail_at && calls < m->cfg.fail_at);
}

/* The OOM sequence can always make room: after steps 1 and 2 every partition holds only
 * its pinned bytes, the limit leaves room for the new block, and so does the budget less
 * the other partitions' unused guarantees and what the second handle holds. */
static int must_succeed(const model *m, int i, uint64_t need) {
  if (m->part[i].prealloc || !driver_reliable(m)) return 0;
  uint64_t own = pinned(m, i), others = hog_reserved(m);
  for (int j = 0; j < NPART; j++)
    if (j != i) others += max64(pinned(m, j), m->part[j].guarantee);
  return own + need <= m->part[i].limit && others + own + need <= m->budget;
}

/* ---- steps ---- */

static uint64_t pick_size(model *m) {
  uint64_t r = below(m, 100);
  if (r < 60) return 1 + below(m, 256 * 1024);
  if (r < 90) return 256 * 1024 + below(m, 4 * MiB);
  return 4 * MiB + below(m, 20 * MiB);
}

static uint64_t device_driver_allocs(const model *m) { return dev_stats(m->dev).driver_allocs; }

static void expect_refusal_changed_nothing(const model *m, const gpupart_stats *before, int requester) {
  for (int i = 0; i < NPART; i++) {
    gpupart_stats s = test_stats(m->part[i].p);
    cr_assert_eq(s.driver_allocs, before[i].driver_allocs, "a refused request obtains no block (partition %d)", i);
    cr_assert_leq(s.reserved, before[i].reserved);
    if (i == requester) cr_assert_eq(s.failed_allocations, before[i].failed_allocations + 1);
  }
}

static void step_alloc(model *m) {
  int i = (int)below(m, NPART);
  mpart *mp = &m->part[i];
  uint64_t size = pick_size(m), align = below(m, 8) == 0 ? 1ull << (9 + below(m, 8)) : 0;
  int no_reclaim = below(m, 10) == 0, cached = mp->has_reclaim && below(m, 3) == 0;
  uint64_t need = need_of(size, align);
  int succeed = must_succeed(m, i, need);
  uint64_t own_help = mp->has_reclaim && !no_reclaim ? cached_bytes(m, i) : 0, all_help = 0;
  for (int j = 0; j < NPART; j++) all_help += m->part[j].has_reclaim && !no_reclaim ? cached_bytes(m, j) : 0;
  int over_limit = mp->in_use - own_help + size > mp->limit;
  int over_budget = total_in_use(m) - all_help + size > m->budget;
  int reliable = !injections(m);
  gpupart_stats before[NPART];
  for (int j = 0; j < NPART; j++) before[j] = test_stats(m->part[j].p);
  uint64_t dev_allocs = device_driver_allocs(m);

  gpupart_alloc_desc d = {
      .size = size, .alignment = align, .flags = no_reclaim ? GPUPART_ALLOC_NO_RECLAIM : 0, .tag = (uint64_t)m->nlive};
  gpupart_allocation *a = (gpupart_allocation *)&d;
  m->requester = i;
  m->no_reclaim = no_reclaim;
  gpupart_result rc = gpupart_alloc_ex(mp->p, &d, &a);
  m->requester = -1;
  m->no_reclaim = 0;

  if (succeed) m->must_succeed++;
  if (over_limit || over_budget) m->must_fail++;
  if (rc == GPUPART_OK) {
    cr_assert_lt(m->nlive, MAXLIVE);
    cr_assert(!over_limit && !over_budget, "seed %llu: %llu bytes fit neither the limit nor the budget",
              (unsigned long long)m->cfg.seed, (unsigned long long)size);
    gpupart_allocation_info info = info_of(a);
    cr_assert_eq(info.partition, mp->p);
    cr_assert_eq(info.size, size);
    cr_assert_eq(info.device_address % (align ? align : 256), 0);
    m->lives[m->nlive++] = (live){a, i, size, cached};
    mp->in_use += size, mp->live++, mp->allocs++;
    mp->peak_in_use = max64(mp->peak_in_use, mp->in_use);
    m->dev_peak = max64(m->dev_peak, total_in_use(m));
    if (mp->prealloc) cr_assert_eq(device_driver_allocs(m), dev_allocs, "no driver call for a preallocated partition");
    return;
  }
  m->refused++;
  cr_assert(rc == GPUPART_ELIMIT || rc == GPUPART_EDEVMEM, "seed %llu: %s (%s)", (unsigned long long)m->cfg.seed,
            gpupart_result_name(rc), gpupart_last_error());
  cr_assert_null(a);
  cr_assert(!succeed, "seed %llu: partition %d refused %llu bytes (need %llu) the OOM sequence could place: %s",
            (unsigned long long)m->cfg.seed, i, (unsigned long long)size, (unsigned long long)need,
            gpupart_last_error());
  if (over_limit) cr_assert_eq(rc, GPUPART_ELIMIT, "%s", gpupart_last_error());
  if (reliable) cr_assert_eq(rc, GPUPART_ELIMIT, "the driver cannot refuse here: %s", gpupart_last_error());
  mp->failed++;
  expect_refusal_changed_nothing(m, before, i);
}

static void step_free(model *m) {
  if (m->nlive) free_live(m, (int)below(m, (uint64_t)m->nlive));
}

/* The bytes a preallocated partition could add now: what the ledger would grant. */
static uint64_t grantable_now(const model *m, int i, uint64_t new_limit) {
  uint64_t reserved_all = hog_reserved(m), others_unused = 0;
  for (int j = 0; j < NPART; j++) {
    gpupart_stats s = test_stats(m->part[j].p);
    reserved_all += s.reserved;
    if (j != i && s.guarantee > s.reserved) others_unused += s.guarantee - s.reserved;
  }
  uint64_t own = new_limit - test_stats(m->part[i].p).reserved;
  uint64_t room = m->budget > reserved_all + others_unused ? m->budget - reserved_all - others_unused : 0;
  return own < room ? own : room;
}

static void step_resize(model *m) {
  int i = (int)below(m, NPART);
  mpart *mp = &m->part[i];
  uint64_t asked = below(m, 5) == 0 ? below(m, 4 * MiB) : below(m, m->budget + 64 * MiB);
  uint64_t limit = asked & ~(GRAN - 1), hold = pinned(m, i);
  uint64_t grant = mp->prealloc && limit > mp->limit && limit <= m->budget ? grantable_now(m, i, limit) : 0;
  int reliable = !injections(m);
  uint64_t old_limit = mp->limit;
  gpupart_result rc = gpupart_partition_resize(mp->p, asked);
  gpupart_result want = !limit                                                           ? GPUPART_EINVAL
                        : limit > m->budget                                              ? GPUPART_ELIMIT
                        : limit < mp->limit && hold > limit                              ? GPUPART_EBUSY
                        : mp->prealloc && limit > mp->limit && grant < limit - mp->limit ? GPUPART_ELIMIT
                                                                                         : GPUPART_OK;
  int grows_prealloc = mp->prealloc && limit > mp->limit && limit <= m->budget;
  if (rc == GPUPART_EDEVMEM && grows_prealloc && !reliable) want = GPUPART_EDEVMEM;
  cr_assert_eq(rc, want, "seed %llu: resize of %d from %llu to %llu: %s (%s)", (unsigned long long)m->cfg.seed, i,
               (unsigned long long)mp->limit, (unsigned long long)asked, gpupart_result_name(rc), gpupart_last_error());
  gpupart_stats s = test_stats(mp->p);
  if (rc == GPUPART_OK) {
    mp->limit = limit;
    if (mp->guarantee > limit) mp->guarantee = limit;
  }
  if (mp->prealloc && rc != GPUPART_EDEVMEM && !(rc == GPUPART_OK && limit > old_limit))
    cr_assert_eq(s.driver_allocs, mp->pre_allocs, "only a granted growth calls the driver");
  if (mp->prealloc) mp->pre_allocs = s.driver_allocs, mp->pre_frees = s.driver_frees;
  if (limit && limit < old_limit && !mp->prealloc)
    cr_assert_eq(test_stats(mp->p).reserved, hold, "shrinking trims first, and the trim stays done");
}

static void step_trim(model *m) {
  int i = (int)below(m, NPART);
  uint64_t hold = pinned(m, i);
  cr_assert_eq(gpupart_partition_trim(m->part[i].p), GPUPART_OK);
  cr_assert_eq(test_stats(m->part[i].p).reserved, hold, "trim keeps exactly the blocks in use");
}

static void step_reset_peak(model *m) {
  mpart *mp = &m->part[below(m, NPART)];
  gpupart_partition_reset_peak(mp->p);
  mp->peak_in_use = mp->in_use;
  gpupart_stats s = test_stats(mp->p);
  cr_assert_eq(s.peak_reserved, s.reserved);
}

static void step_hog(model *m) {
  if (!m->hog) return;
  if (m->nhogs && (m->nhogs == 8 || below(m, 2))) {
    int k = (int)below(m, (uint64_t)m->nhogs);
    gpupart_free(m->hogs[k]);
    m->hogs[k] = m->hogs[--m->nhogs];
    return;
  }
  gpupart_allocation *a;
  if (gpupart_alloc(m->hog, 8 * MiB + below(m, 56 * MiB), 0, &a) == GPUPART_OK) m->hogs[m->nhogs++] = a;
}

/* ---- the comparison after every step ---- */

static int by_address(const void *a, const void *b) {
  const gpupart_allocation_info *x = a, *y = b;
  return x->device_address < y->device_address ? -1 : x->device_address > y->device_address;
}

static void expect_no_overlap(const model *m) {
  static _Thread_local gpupart_allocation_info infos[MAXLIVE];
  for (int k = 0; k < m->nlive; k++) {
    infos[k] = info_of(m->lives[k].a);
    cr_assert_leq(infos[k].offset + infos[k].size, infos[k].block_size);
  }
  qsort(infos, (size_t)m->nlive, sizeof infos[0], by_address);
  for (int k = 1; k < m->nlive; k++)
    cr_assert_leq(infos[k - 1].device_address + infos[k - 1].size, infos[k].device_address, "live ranges overlap");
}

#define AT "seed %llu step %d partition %d", (unsigned long long)m->cfg.seed, m->step, i

static void expect_partition(const model *m, int i, gpupart_stats *sum, uint64_t *floors) {
  const mpart *mp = &m->part[i];
  gpupart_stats s = test_stats(mp->p);
  cr_assert_eq(s.limit, mp->limit, AT);
  cr_assert_eq(s.guarantee, mp->guarantee, AT);
  cr_assert_eq(s.in_use, mp->in_use, AT);
  cr_assert_eq(s.peak_in_use, mp->peak_in_use, AT);
  cr_assert_eq(s.live_allocations, mp->live, AT);
  cr_assert_eq(s.total_allocations, mp->allocs, AT);
  cr_assert_eq(s.total_frees, mp->frees, AT);
  cr_assert_eq(s.failed_allocations, mp->failed, AT);
  cr_assert_leq(s.reserved, s.limit, AT);
  cr_assert_geq(s.peak_reserved, s.reserved, AT);
  uint64_t blocks, held = held_blocks(m, i, &blocks);
  cr_assert_geq(s.reserved, held, AT);
  cr_assert_geq(s.driver_allocs - s.driver_frees, blocks, AT);
  if (mp->prealloc) {
    cr_assert_eq(s.reserved, s.limit, "a preallocated partition holds its whole limit");
    cr_assert_eq(s.driver_allocs, mp->pre_allocs, AT);
    cr_assert_eq(s.driver_frees, mp->pre_frees, AT);
  } else if (mp->threshold) {
    cr_assert_leq(s.reserved - held, mp->threshold, "empty blocks beyond release_threshold went back");
    if (mp->threshold == 1) cr_assert_eq(s.driver_allocs - s.driver_frees, blocks);
  }
  *floors += max64(s.reserved, s.guarantee);
  sum->in_use += s.in_use, sum->reserved += s.reserved, sum->live_allocations += s.live_allocations;
  sum->total_allocations += s.total_allocations, sum->total_frees += s.total_frees;
  sum->driver_allocs += s.driver_allocs, sum->driver_frees += s.driver_frees;
  sum->failed_allocations += s.failed_allocations, sum->guarantee += s.guarantee;
}

static void expect_model(const model *m) {
  gpupart_stats sum = {0};
  uint64_t floors = hog_reserved(m);
  for (int i = 0; i < NPART; i++) expect_partition(m, i, &sum, &floors);
  gpupart_stats d = dev_stats(m->dev);
  cr_assert_eq(d.limit, m->budget);
  cr_assert_eq(d.guarantee, sum.guarantee);
  cr_assert_eq(d.in_use, sum.in_use);
  cr_assert_eq(d.reserved, sum.reserved);
  cr_assert_leq(d.reserved, m->budget);
  cr_assert_eq(d.live_allocations, sum.live_allocations);
  cr_assert_eq(d.total_allocations, sum.total_allocations);
  cr_assert_eq(d.total_frees, sum.total_frees);
  cr_assert_eq(d.driver_allocs, sum.driver_allocs);
  cr_assert_eq(d.driver_frees, sum.driver_frees);
  cr_assert_eq(d.failed_allocations, sum.failed_allocations);
  /* The device's peak is an upper bound, within two granules (2 MiB here) per partition. */
  cr_assert_geq(d.peak_in_use, m->dev_peak);
  cr_assert_lt(d.peak_in_use, m->dev_peak + NPART * 2 * 2 * MiB);
  cr_assert_geq(d.peak_reserved, d.reserved);
  cr_assert_leq(d.peak_reserved, m->budget);
  cr_assert_leq(floors, m->budget, "every guarantee stays available: sum of max(reserved, guarantee) <= budget");
  expect_no_overlap(m);
  test_check(m->dev);
}

static void model_step(model *m) {
  uint64_t r = below(m, 100), alloc_share = m->nlive < 120 ? 55 : 35;
  if (r < alloc_share) step_alloc(m);
  else if (r < 88) step_free(m);
  else if (r < 92) step_resize(m);
  else if (r < 95) step_trim(m);
  else if (r < 97) step_reset_peak(m);
  else step_hog(m);
}

static void model_close(model *m) {
  while (m->nlive) free_live(m, m->nlive - 1);
  while (m->nhogs) gpupart_free(m->hogs[--m->nhogs]);
  expect_model(m);
  gpupart_stats before = dev_stats(m->dev);
  for (int i = 0; i < NPART; i++) cr_assert_eq(gpupart_partition_destroy(m->part[i].p), GPUPART_OK);
  gpupart_stats after = dev_stats(m->dev);
  cr_assert_eq(after.reserved, 0);
  cr_assert_eq(after.total_allocations, before.total_allocations, "destroyed partitions' counts stay");
  cr_assert_eq(after.failed_allocations, before.failed_allocations);
  cr_assert_eq(after.driver_frees - before.driver_frees, before.driver_allocs - before.driver_frees);
  test_check(m->dev);
  if (m->hog_dev) cr_assert_eq(gpupart_device_close(m->hog_dev), GPUPART_OK);
  cr_assert_eq(gpupart_device_close(m->dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(m->ctx), GPUPART_OK);
  free(m);
}

static void run_model(config cfg) {
  model *m = model_open(cfg);
  expect_model(m);
  for (m->step = 0; m->step < STEPS; m->step++) {
    model_step(m);
    expect_model(m);
  }
  cr_log_info("seed %llu: %llu must-succeed and %llu must-fail predictions, %llu refusals, %llu callbacks",
              (unsigned long long)cfg.seed, (unsigned long long)m->must_succeed, (unsigned long long)m->must_fail,
              (unsigned long long)m->refused, (unsigned long long)m->reclaims);
  cr_assert_gt(m->refused, 0, "the run reached the limits");
  cr_assert_gt(m->must_fail, 0);
  cr_assert_gt(m->reclaims, 0, "the run reached the reclaim callbacks");
  if (!cfg.fail_at && !cfg.max_blocks && !cfg.hog) cr_assert_gt(m->must_succeed, 100);
  model_close(m);
}

Test(model, random_steps_match_the_model_with_a_reliable_driver) {
  for (uint64_t seed = 1; seed <= 3; seed++) run_model((config){.seed = seed});
}

Test(model, random_steps_match_the_model_with_an_injected_driver_failure) {
  run_model((config){.seed = 11, .fail_at = 7});
  run_model((config){.seed = 12, .fail_at = 40});
}

Test(model, random_steps_match_the_model_with_a_driver_block_limit) {
  run_model((config){.seed = 21, .max_blocks = 24});
  run_model((config){.seed = 22, .max_blocks = 40, .fail_at = 90});
}

Test(model, random_steps_match_the_model_with_a_second_handle_sharing_the_budget) {
  run_model((config){.seed = 31, .hog = 1});
  run_model((config){.seed = 32, .hog = 1, .max_blocks = 48});
}
