/* gpupart tune's search: the settings that matter (one row each in the table below),
 * tried on the application's own trace with the configured replay (bench/replay.c) on a
 * simulated device, in three bounded stages:
 *   grid     every combination of each setting's coarse values (the growth settings only
 *            when growing, the block settings only for partitions that are not
 *            expandable, and expandable ones where the device has virtual memory); a
 *            preallocating combination declares each partition at the least size that
 *            serves all of its allocations (found by bisection over granules, replaying
 *            that partition's operations alone);
 *   refine   from the best growth configuration with blocks so far, each setting in turn
 *            over its finer values, kept where it ranks better, twice over;
 *   limits   the best growth configurations (and the default) with each partition's
 *            limit bisected down to the least that still serves its allocations: a
 *            partition at its limit gives cached blocks back instead of growing.
 * A configuration is ranked by the objective among those that serve every allocation and
 * hold at peak no more than the default configuration (so the recommendation never asks
 * for more memory than doing nothing): memory = least peak reserved, then least driver
 * time at a real GPU's per-call price; calls = the reverse; balanced = the least sum of
 * the two, each relative to the default's. Remaining ties go to the configuration that
 * changes fewer settings, then to the one tried first. */
#include <stdlib.h>
#include <string.h>

#include "tune.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define GRANULE TUNE_GRANULE
#define REFINE_PASSES 2
#define LIMIT_BASES 3   /* growth configurations given bisected limits, besides the default */
#define MAX_DECLARED 64 /* partitions configuration may declare (per source, docs/configuration.md) */

/* The settings searched. To search another, add its id to tune_dim_id (tune.h) and its
 * row here: the grid crosses it with the others, refinement tries its fine values, and
 * the INI, GPUPART_* lines, table and JSON show it; normalise() says where it means
 * nothing. The table is laid out by hand, one row per setting (clang-format would put
 * each field on a line). */
/* clang-format off */
static const tune_dim dims[TUNE_DIMS] = {
    [TUNE_ALLOW_GROWTH] = {"allow_growth", "GPUPART_ALLOW_GROWTH", TUNE_BOOL, 1, {1, 0, TUNE_END}, {TUNE_END}, 0, 0},
    [TUNE_INITIAL_BLOCK] = {"initial_block", "GPUPART_INITIAL_BLOCK", TUNE_BYTES, 2 * MIB,
                            {2 * MIB, 8 * MIB, 32 * MIB, TUNE_END},
                            {2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB, TUNE_END}, 1, 1},
    [TUNE_MAX_BLOCK] = {"max_block", "GPUPART_MAX_BLOCK", TUNE_BYTES, GIB, {64 * MIB, 256 * MIB, GIB, TUNE_END},
                        {32 * MIB, 64 * MIB, 128 * MIB, 256 * MIB, 512 * MIB, GIB, 2 * GIB, 4 * GIB, TUNE_END}, 1, 1},
    [TUNE_GROWTH_FACTOR] = {"growth_factor", "GPUPART_GROWTH_FACTOR", TUNE_FACTOR, 2000, {1500, 2000, 4000, TUNE_END},
                            {1250, 1500, 2000, 3000, 4000, 8000, TUNE_END}, 1, 1},
    [TUNE_RELEASE_THRESHOLD] = {"release_threshold", "GPUPART_RELEASE_THRESHOLD", TUNE_THRESHOLD, 0,
                                {0, 1, TUNE_END}, {0, 1, 32 * MIB, 128 * MIB, 512 * MIB, TUNE_END}, 1, 1},
    [TUNE_EXPANDABLE] = {"expandable", "GPUPART_EXPANDABLE", TUNE_BOOL, 0, {0, 1, TUNE_END}, {0, 1, TUNE_END}, 1, 0},
};
/* clang-format on */

const tune_dim *tune_dim_get(tune_dim_id d) { return &dims[d]; }

/* ---- candidates ---- */

static tune_candidate *add(tune_search *s, const uint64_t *v, const uint64_t *limits) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->c = bench_xrealloc(s->c, s->cap * sizeof *s->c);
  }
  tune_candidate *c = &s->c[s->n];
  *c = (tune_candidate){.order = (uint32_t)s->n};
  memcpy(c->v, v, sizeof c->v);
  c->limits = bench_xcalloc(s->w->nnames ? s->w->nnames : 1, sizeof *c->limits);
  if (limits) memcpy(c->limits, limits, s->w->nnames * sizeof *limits);
  s->n++;
  return c;
}

static long find(const tune_search *s, const uint64_t *v, const uint64_t *limits) {
  for (size_t i = 0; i < s->n; i++)
    if (!memcmp(s->c[i].v, v, sizeof s->c[i].v) &&
        (!s->w->nnames || !memcmp(s->c[i].limits, limits, s->w->nnames * sizeof *limits)))
      return (long)i;
  return -1;
}

/* Settings that mean nothing in v's mode are left at the default, so that two
 * configurations that differ only there are one: the growth settings (expandable
 * included: a preallocated partition maps or takes its whole size at creation either
 * way) while preallocating, the block settings for an expandable partition (it grows by
 * what each request lacks and 1/32 more, and a free never gives memory back). With
 * several processes the block settings stay: a partition joined from another process's
 * ledger keeps growth blocks. Expandable is off where the device has no virtual memory. */
static void normalise(const tune_search *s, uint64_t *v) {
  if (!s->expandable_ok) v[TUNE_EXPANDABLE] = 0;
  int preallocating = !v[TUNE_ALLOW_GROWTH], expandable = v[TUNE_EXPANDABLE] && s->w->processes <= 1;
  for (int d = 0; d < TUNE_DIMS; d++)
    if ((preallocating && dims[d].growth_only) || (expandable && dims[d].blocks_only)) v[d] = dims[d].def;
}

/* ---- one replay ---- */

/* Replays w under c's configuration (as tune_ini writes it) into c->r. */
static void replay(tune_search *s, const bench_workload *w, tune_candidate *c) {
  char ini[16384];
  tune_ini(s, c, ini, sizeof ini);
  bench_replay_setup setup = {.config_text = ini, .backend = GPUPART_BACKEND_SIM};
  bench_replayer r;
  c->r = (bench_result){.ops = w->n, .scale = 1.0};
  snprintf(c->r.workload, sizeof c->r.workload, "%s", w->name);
  c->error = bench_replayer_open(&r, w, &setup, c->r.message, sizeof c->r.message) != 0;
  if (!c->error) {
    uint64_t t0 = bench_now_ns();
    c->r.failed = bench_replayer_run(&r, w->ops, w->n);
    uint64_t t1 = bench_now_ns();
    bench_replayer_collect(&r, w->n, &c->r);
    c->r.ns_per_op = w->n ? (double)(t1 - t0) / (double)w->n : 0;
    bench_derive(&c->r);
  }
  bench_replayer_close(&r);
  s->replays++;
}

static void tell(tune_search *s, const char *stage) {
  if (s->progress) s->progress(stage, s->replays, 0, s->progress_user);
}

/* The candidate of settings v and limits (NULL = none), replayed once: an index into s->c. */
static size_t evaluate(tune_search *s, const uint64_t *v, const uint64_t *limits, const char *stage) {
  uint64_t *zero = limits ? NULL : bench_xcalloc(s->w->nnames ? s->w->nnames : 1, sizeof *zero);
  const uint64_t *l = limits ? limits : zero;
  long have = find(s, v, l);
  if (have < 0) {
    replay(s, s->w, add(s, v, l));
    tell(s, stage);
    have = (long)s->n - 1;
  }
  free(zero);
  return (size_t)have;
}

/* ---- partition limits by bisection ---- */

static const bench_workload *only(tune_search *s, uint32_t name) {
  if (s->w->nnames == 1) return s->w;
  if (!s->only) s->only = bench_xcalloc(s->w->nnames, sizeof *s->only);
  if (!s->only[name].ops) bench_workload_only(s->w, name, &s->only[name]);
  return &s->only[name];
}

/* Whether partition `name`'s operations alone are all served under settings v with the
 * partition declared at size granules * GRANULE (0 = not declared). *reserved: the peak. */
static int serves(tune_search *s, const uint64_t *v, uint32_t name, uint64_t granules, uint64_t *reserved) {
  uint64_t *limits = bench_xcalloc(s->w->nnames, sizeof *limits);
  limits[name] = granules * GRANULE;
  tune_candidate probe = {.limits = limits};
  memcpy(probe.v, v, sizeof probe.v);
  replay(s, only(s, name), &probe);
  free(limits);
  if (reserved) *reserved = probe.r.peak_reserved;
  return !probe.error && !probe.r.failed;
}

/* The least whole number of granules in (lo, hi] that serves, given that hi does. */
static uint64_t bisect(tune_search *s, const uint64_t *v, uint32_t name, uint64_t lo, uint64_t hi) {
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (serves(s, v, name, mid, NULL)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/* Granules the partition's live bytes need at least (256-byte placement). */
static uint64_t floor_granules(tune_search *s, uint32_t name) {
  uint64_t peak = bench_workload_peak(only(s, name), only(s, name)->n, 256);
  return (peak + GRANULE - 1) / GRANULE;
}

/* The least limit, in bytes, under which a growing partition still serves its
 * allocations, when it is below what it reserves unlimited; else 0 (no limit helps). */
static uint64_t growth_limit(tune_search *s, const uint64_t *v, uint32_t name) {
  uint64_t reserved = 0;
  if (!serves(s, v, name, 0, &reserved)) return 0;
  uint64_t hi = (reserved + GRANULE - 1) / GRANULE, lo = floor_granules(s, name);
  if (lo >= hi) return 0;
  uint64_t least = bisect(s, v, name, lo ? lo - 1 : 0, hi);
  return least < hi ? least * GRANULE : 0;
}

/* The least size, in bytes, at which the partition preallocated serves its allocations;
 * 0 when none up to the device's size (or the budget) does. Below its live bytes none can;
 * above them, the size grows by quarters until one serves, then is bisected. */
static uint64_t prealloc_size(tune_search *s, const uint64_t *v, uint32_t name) {
  gpupart_sim_desc sim;
  bench_replay_sim(s->w, &sim);
  uint64_t max = (s->budget && s->budget < sim.total_bytes ? s->budget : sim.total_bytes) / GRANULE;
  uint64_t need = floor_granules(s, name);
  if (!need) need = 1;
  uint64_t bad = need - 1, hi = need;
  while (hi <= max && !serves(s, v, name, hi, NULL)) {
    if (hi == max) return 0;
    bad = hi;
    hi = hi + (hi / 4 ? hi / 4 : 1) < max ? hi + (hi / 4 ? hi / 4 : 1) : max;
  }
  return hi <= max ? bisect(s, v, name, bad, hi) * GRANULE : 0;
}

/* ---- ranking ---- */

const tune_candidate *tune_default(const tune_search *s) { return s->n ? &s->c[0] : NULL; }

const char *tune_objective_name(tune_objective o) {
  static const char *const names[] = {[TUNE_MEMORY] = "memory", [TUNE_CALLS] = "calls", [TUNE_BALANCED] = "balanced"};
  return names[o];
}

int tune_eligible(const tune_search *s, const tune_candidate *c) {
  const tune_candidate *d = tune_default(s);
  if (c->error || c->r.failed) return 0;
  return !d || d->error || d->r.failed || c->r.peak_reserved <= d->r.peak_reserved;
}

/* Settings c changes from the default, partition sizes included. */
static int changes(const tune_search *s, const tune_candidate *c) {
  int k = 0;
  for (int d = 0; d < TUNE_DIMS; d++) k += c->v[d] != dims[d].def;
  for (uint32_t i = 0; i < s->w->nnames; i++) k += c->limits[i] != 0;
  return k;
}

/* balanced: peak reserved and driver time, each relative to the default's (a
 * millisecond added to both times, so that a default with no driver time at all still
 * gives a finite ratio). */
static double balanced(const tune_search *s, const tune_candidate *c) {
  const bench_result *d = &tune_default(s)->r;
  double mem = d->peak_reserved ? (double)c->r.peak_reserved / (double)d->peak_reserved : 0;
  return mem + (c->r.modeled_driver_ms + 1.0) / (d->modeled_driver_ms + 1.0);
}

static int cmp_d(double a, double b) { return (a > b) - (a < b); }
static int cmp_u(uint64_t a, uint64_t b) { return (a > b) - (a < b); }

/* < 0 when a ranks before b. */
static int compare(const tune_search *s, const tune_candidate *a, const tune_candidate *b) {
  int ea = tune_eligible(s, a), eb = tune_eligible(s, b), k = eb - ea;
  if (!k && !ea) k = cmp_u(a->error ? UINT64_MAX : a->r.failed, b->error ? UINT64_MAX : b->r.failed);
  if (!k && s->objective == TUNE_BALANCED) k = cmp_d(balanced(s, a), balanced(s, b));
  if (!k && s->objective == TUNE_CALLS) k = cmp_d(a->r.modeled_driver_ms, b->r.modeled_driver_ms);
  if (!k) k = cmp_u(a->r.peak_reserved, b->r.peak_reserved);
  if (!k) k = cmp_d(a->r.modeled_driver_ms, b->r.modeled_driver_ms);
  if (!k) k = changes(s, a) - changes(s, b);
  if (!k) k = cmp_u(a->order, b->order);
  return k;
}

static const tune_search *sorting; /* qsort has no user pointer */

static int by_rank(const void *x, const void *y) {
  return compare(sorting, *(tune_candidate *const *)x, *(tune_candidate *const *)y);
}

tune_candidate **tune_ranked(const tune_search *s, size_t *count) {
  tune_candidate **r = bench_xcalloc(s->n ? s->n : 1, sizeof *r);
  for (size_t i = 0; i < s->n; i++) r[i] = &s->c[i];
  sorting = s;
  qsort(r, s->n, sizeof *r, by_rank);
  sorting = NULL;
  *count = s->n;
  return r;
}

/* ---- stages ---- */

int tune_limited(const tune_search *s, const tune_candidate *c) {
  for (uint32_t i = 0; i < s->w->nnames; i++)
    if (c->limits[i]) return 1;
  return 0;
}

/* Whether refinement has something to try from settings v: a growing configuration
 * whose block settings mean something (an expandable one in one process has none left:
 * the grid tried it). */
static int refinable(const tune_search *s, const uint64_t *v) {
  return v[TUNE_ALLOW_GROWTH] && !(v[TUNE_EXPANDABLE] && s->w->processes <= 1);
}

/* The best refinable configuration without limits (the default is one). */
static size_t best_growth(const tune_search *s) {
  size_t best = 0;
  for (size_t i = 1; i < s->n; i++) {
    const tune_candidate *c = &s->c[i];
    if (refinable(s, c->v) && !tune_limited(s, c) && compare(s, c, &s->c[best]) < 0) best = i;
  }
  return best;
}

/* A preallocating configuration: every partition declared at its least size. */
static void prealloc_candidate(tune_search *s, const uint64_t *v) {
  uint64_t *limits = bench_xcalloc(s->w->nnames, sizeof *limits);
  int ok = 1;
  for (uint32_t i = 0; i < s->w->nnames && ok; i++) ok = (limits[i] = prealloc_size(s, v, i)) != 0;
  if (ok) evaluate(s, v, limits, "grid");
  free(limits);
}

/* Whether the growth settings are at their first coarse values: a preallocating
 * combination is tried there only, since they mean nothing to it. */
static int growth_at_first(const size_t *at) {
  for (int d = 0; d < TUNE_DIMS; d++)
    if (dims[d].growth_only && at[d]) return 0;
  return 1;
}

/* Every combination of the coarse values, the last setting varying fastest. */
static void grid(tune_search *s) {
  size_t at[TUNE_DIMS] = {0};
  for (;;) {
    uint64_t v[TUNE_DIMS];
    for (int d = 0; d < TUNE_DIMS; d++) v[d] = dims[d].coarse[at[d]];
    normalise(s, v);
    if (v[TUNE_ALLOW_GROWTH]) evaluate(s, v, NULL, "grid");
    else if (s->prealloc_ok && growth_at_first(at)) prealloc_candidate(s, v);
    int d = TUNE_DIMS - 1;
    while (d >= 0 && dims[d].coarse[++at[d]] == TUNE_END) at[d--] = 0;
    if (d < 0) return;
  }
}

/* One setting at a time over its fine values, from the best refinable configuration. */
static void refine(tune_search *s) {
  size_t best = best_growth(s);
  for (int pass = 0; pass < REFINE_PASSES; pass++)
    for (int d = 0; d < TUNE_DIMS; d++)
      for (const uint64_t *f = dims[d].fine; *f != TUNE_END; f++) {
        uint64_t v[TUNE_DIMS];
        memcpy(v, s->c[best].v, sizeof v);
        v[d] = *f;
        normalise(s, v);
        if (!refinable(s, v)) continue;
        size_t i = evaluate(s, v, NULL, "refine");
        if (compare(s, &s->c[i], &s->c[best]) < 0) best = i;
      }
}

/* base's settings with each declarable partition at the least limit that serves it. */
static void limit_candidate(tune_search *s, size_t base) {
  uint64_t v[TUNE_DIMS], *limits = bench_xcalloc(s->w->nnames, sizeof *limits);
  memcpy(v, s->c[base].v, sizeof v);
  int declared = 0;
  for (uint32_t i = 0; i < s->w->nnames && declared < MAX_DECLARED; i++)
    if (tune_name_declarable(s->w->names[i])) declared += (limits[i] = growth_limit(s, v, i)) != 0;
  if (declared) evaluate(s, v, limits, "limits");
  free(limits);
}

/* The default and the best few growth configurations without limits, given limits. */
static void limits(tune_search *s) {
  size_t count, bases = 0, pick[LIMIT_BASES + 1];
  tune_candidate **ranked = tune_ranked(s, &count);
  pick[bases++] = 0;
  for (size_t i = 0; i < count && bases <= LIMIT_BASES; i++) {
    const tune_candidate *c = ranked[i];
    if (!c->is_default && c->v[TUNE_ALLOW_GROWTH] && tune_eligible(s, c) && !tune_limited(s, c))
      pick[bases++] = (size_t)(c - s->c);
  }
  free(ranked);
  for (size_t i = 0; i < bases; i++) limit_candidate(s, pick[i]);
}

/* ---- the search ---- */

/* Allocations without a name go to "p0", the name gpupart gives a program's first
 * unnamed partition: the replay's name for them, and the one configuration can declare. */
static void name_everything(bench_workload *w) {
  uint32_t p0 = BENCH_NO_NAME;
  char *used = bench_xcalloc(w->nstreams ? w->nstreams : 1, 1);
  for (size_t i = 0; i < w->n; i++)
    if (w->ops[i].size) used[w->ops[i].part] = 1;
  for (uint32_t i = 0; i < w->nstreams; i++) {
    if (w->streams[i].name != BENCH_NO_NAME || !used[i]) continue;
    if (p0 == BENCH_NO_NAME) p0 = bench_name_of(w, "p0");
    w->streams[i].name = p0;
  }
  free(used);
}

void tune_search_init(tune_search *s, bench_workload *w, uint64_t budget, tune_objective objective) {
  *s = (tune_search){.w = w, .budget = budget, .objective = objective};
  name_everything(w);
  s->declarable = 1;
  for (uint32_t i = 0; i < w->nnames; i++) s->declarable &= tune_name_declarable(w->names[i]);
  /* A preallocated partition's memory is its first process's: another process that
   * shares it could allocate nothing, so preallocation is searched for one process. */
  s->prealloc_ok = s->declarable && w->processes <= 1 && w->nnames <= MAX_DECLARED;
  gpupart_sim_desc sim;
  bench_replay_sim(w, &sim);
  s->expandable_ok = !sim.no_vm;
}

int tune_search_run(tune_search *s, char *err, size_t n) {
  uint64_t v[TUNE_DIMS];
  for (int d = 0; d < TUNE_DIMS; d++) v[d] = dims[d].def;
  evaluate(s, v, NULL, "default");
  s->c[0].is_default = 1;
  if (s->c[0].error && !s->budget) {
    snprintf(err, n, "the default configuration cannot be replayed: %s", s->c[0].r.message);
    return -1;
  }
  if (s->default_only || s->c[0].error) return 0; /* under a budget the device cannot open: nothing fits */
  grid(s);
  refine(s);
  limits(s);
  return 0;
}

void tune_search_free(tune_search *s) {
  for (size_t i = 0; i < s->n; i++) free(s->c[i].limits);
  free(s->c);
  for (uint32_t i = 0; s->only && i < s->w->nnames; i++) bench_workload_free(&s->only[i]);
  free(s->only);
  *s = (tune_search){0};
}
