/* The targeted micro benchmarks (gpupart-bench --micro). Each prints its figure next to
 * a baseline measured in the same run and, where the project set one, its target:
 *   1. mean ns/op and p99 through the public API on the sim device (growth policy) for
 *      the kineto ResNet-50 trace and the built-in workloads, from a fresh device (growth
 *      inside the timed region) and on a warm partition at 256-byte alignment (what a
 *      side-by-side harness replays); baseline: glibc malloc/free replaying the same
 *      operations (targets: mean <= 35 ns, p99 <= 250 ns);
 *   2. O(1) scaling: random-size alloc/free churn with 100 live allocations against
 *      1,000,000 live ones (target: <= 1.3x), churning a hot set (the allocator's own
 *      scaling) and slots drawn from the whole live set (adds the host's cache misses);
 *   3. ledger overhead: quotas on (three partitions with limits and guarantees) against
 *      off (one partition with the whole budget), target <= 10 ns/op added; and the cost
 *      of a refused request (ELIMIT at the partition limit), target <= 1 us;
 *   4. two threads on two partitions against one thread (target: >= 1.8x throughput);
 *   5. replay speed of the android_systemui trace (788k operations) against glibc;
 *   6. the shared ledger: trace replay in shared mode against in-process (target:
 *      <= 1.10x), the cost of reserving and releasing a block in the ledger file, and of
 *      returning the bytes of 100 dead members (one call that reads the ledger);
 *   7. trace recording (GPUPART_TRACE): the kineto trace on a warm partition with the
 *      recording on against off.
 * Nothing here asserts: targets are reported as met or missed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MAX_FIGURES 64

typedef struct figure {
  char name[192];
  double value, baseline, target; /* baseline, target: 0 = none */
  const char *unit;
  int at_least; /* the target is a floor, not a ceiling */
} figure;

typedef struct micro {
  const bench_micro_opts *o;
  bench_target sim;
  figure f[MAX_FIGURES];
  int n;
} micro;

static void report(micro *m, figure f) {
  if (m->n < MAX_FIGURES) m->f[m->n++] = f;
  printf("  %-58s %10.2f %-5s", f.name, f.value, f.unit);
  if (f.baseline > 0) printf("  baseline %10.2f  ratio %6.2fx", f.baseline, f.value / f.baseline);
  if (f.target > 0)
    printf("  target %s %g: %s", f.at_least ? ">=" : "<=", f.target,
           (f.at_least ? f.value >= f.target : f.value <= f.target) ? "met" : "MISSED");
  putchar('\n');
  fflush(stdout);
}

static size_t scaled(const micro *m, size_t n) {
  size_t v = (size_t)((double)n * m->o->scale);
  return v ? v : 1;
}

static double min_d(double a, double b) { return a < b ? a : b; }

/* A sim device (64 GiB) and one partition with the given descriptor. */
static gpupart_partition *open_one(const micro *m, gpupart_context **ctx, gpupart_device **dev,
                                   const gpupart_partition_desc *d) {
  char err[200];
  *ctx = bench_context();
  if (!(*dev = bench_device_open(*ctx, &m->sim, err, sizeof err))) bench_die("%s", err);
  gpupart_partition *p = NULL;
  if (d && gpupart_partition_create(*dev, d, &p)) bench_die("partition_create: %s", gpupart_last_error());
  return p;
}

static void close_all(gpupart_context *ctx, gpupart_device *dev) {
  if (gpupart_device_close(dev) || gpupart_context_destroy(ctx)) bench_die("close: %s", gpupart_last_error());
}

/* ---- baseline: glibc malloc replaying a workload ---- */

static double malloc_ns_per_op(const micro *m, const bench_workload *w) {
  void **h = bench_xcalloc(w->slots ? w->slots : 1, sizeof *h);
  double best = 0;
  for (int k = -1; k < m->o->repeat; k++) {
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < w->n; i++) {
      const bench_op *o = &w->ops[i];
      if (o->size) h[o->slot] = malloc(o->size);
      else free(h[o->slot]), h[o->slot] = NULL;
    }
    double ns = (double)(bench_now_ns() - t0) / (double)w->n;
    for (uint32_t s = 0; s < w->slots; s++) free(h[s]), h[s] = NULL;
    if (k >= 0) best = k == 0 ? ns : min_d(best, ns);
  }
  free(h);
  return best;
}

/* ---- 1. ns/op and p99 through the public API ---- */

static void truncate_to(const micro *m, bench_workload *w) {
  size_t n = scaled(m, w->n);
  if (n < w->n) w->n = n;
}

/* One pass of w on p at 256-byte alignment; what it leaves live is freed untimed.
 * Returns the mean ns/op. */
static double warm_pass(gpupart_partition *p, const bench_workload *w, gpupart_allocation **h) {
  uint64_t t0 = bench_now_ns();
  for (size_t i = 0; i < w->n; i++) {
    const bench_op *o = &w->ops[i];
    if (o->size) gpupart_alloc(p, o->size, 256, &h[o->slot]);
    else gpupart_free(h[o->slot]), h[o->slot] = NULL;
  }
  double ns = (double)(bench_now_ns() - t0) / (double)(w->n ? w->n : 1);
  for (size_t s = 0; s < w->slots; s++) gpupart_free(h[s]), h[s] = NULL;
  return ns;
}

/* Best mean ns/op on one warm partition, as a side-by-side harness measures it (one
 * untimed warm-up pass, then repeat passes on the same partition: no growth inside). */
static double warm_ns_per_op(const micro *m, const bench_workload *w) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p = open_one(m, &ctx, &dev, &(gpupart_partition_desc){.name = "warm"});
  gpupart_allocation **h = bench_xcalloc(w->slots ? w->slots : 1, sizeof *h);
  double best = warm_pass(p, w, h);
  for (int k = 0; k < m->o->repeat; k++) best = min_d(k ? best : 1e300, warm_pass(p, w, h));
  free(h);
  close_all(ctx, dev);
  return best;
}

static void api_one(micro *m, bench_workload *w) {
  truncate_to(m, w);
  bench_result r;
  bench_run(&m->sim, BENCH_GROWTH, w, w->n, m->o->repeat, &r);
  if (r.error) bench_die("%s: %s", w->name, r.message);
  double base = malloc_ns_per_op(m, w);
  figure f = {.unit = "ns", .baseline = base, .target = 35};
  snprintf(f.name, sizeof f.name, "1. %.40s: mean per op (baseline glibc)", w->name);
  f.value = r.ns_per_op;
  report(m, f);
  f = (figure){.unit = "ns", .baseline = base, .target = 35, .value = warm_ns_per_op(m, w)};
  snprintf(f.name, sizeof f.name, "1. %.40s: mean per op, warm partition, align 256", w->name);
  report(m, f);
  f = (figure){.unit = "ns", .target = 250, .value = r.p99_ns};
  snprintf(f.name, sizeof f.name, "1. %.40s: p99 per op (p50 %.0f ns)", w->name, r.p50_ns);
  report(m, f);
}

static void micro_api(micro *m) {
  char path[4096];
  snprintf(path, sizeof path, "%s/kineto_resnet50_v100.ops.gz", bench_trace_dir());
  bench_workload w;
  if (access(path, R_OK) == 0 && bench_trace_load(path, &w) == 0) api_one(m, &w), bench_workload_free(&w);
  else printf("  (kineto_resnet50_v100 trace not found at %s)\n", path);
  for (const char *const *b = bench_builtin_names(); *b; b++) {
    bench_builtin(*b, &w);
    api_one(m, &w);
    bench_workload_free(&w);
  }
}

/* ---- 2. O(1) scaling ---- */

typedef struct churn {
  uint32_t *idx;  /* which live slot each step frees and refills */
  uint64_t *size; /* the size it refills with */
  size_t steps;
} churn;

/* Random sizes over four orders of magnitude, so no step reuses the range just freed. */
static uint64_t churn_size(bench_rng *r) { return bench_log_uniform(r, 256, 64 * 1024); }

static void churn_make(churn *c, size_t steps, uint32_t from, uint32_t count, bench_rng *r) {
  c->steps = steps;
  c->idx = bench_xmalloc(steps * sizeof *c->idx);
  c->size = bench_xmalloc(steps * sizeof *c->size);
  for (size_t i = 0; i < steps; i++) {
    c->idx[i] = from + (uint32_t)bench_uniform(r, 0, count - 1);
    c->size[i] = churn_size(r);
  }
}

static void churn_free(churn *c) {
  free(c->idx);
  free(c->size);
}

/* ns per operation (a free or an allocation) of the churn. */
static double churn_run(gpupart_partition *p, gpupart_allocation **h, const churn *c) {
  uint64_t t0 = bench_now_ns();
  for (size_t i = 0; i < c->steps; i++) {
    gpupart_free(h[c->idx[i]]);
    if (gpupart_alloc(p, c->size[i], 0, &h[c->idx[i]])) bench_die("churn: %s", gpupart_last_error());
  }
  return (double)(bench_now_ns() - t0) / (double)(2 * c->steps);
}

/* Best churn time with live allocations; hot: churn only the last 100 allocated. */
static double churn_with_live(const micro *m, uint32_t live, int hot, size_t steps) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition_desc d = {.name = "churn"};
  gpupart_partition *p = open_one(m, &ctx, &dev, &d);
  gpupart_allocation **h = bench_xcalloc(live, sizeof *h);
  bench_rng r = {42};
  for (uint32_t i = 0; i < live; i++)
    if (gpupart_alloc(p, churn_size(&r), 0, &h[i])) bench_die("prefill: %s", gpupart_last_error());
  uint32_t count = hot && live > 100 ? 100 : live;
  churn c;
  churn_make(&c, steps, live - count, count, &r);
  double best = churn_run(p, h, &c); /* warm-up */
  for (int k = 0; k < m->o->repeat; k++) best = min_d(k ? best : 1e300, churn_run(p, h, &c));
  churn_free(&c);
  for (uint32_t i = 0; i < live; i++) gpupart_free(h[i]);
  free(h);
  close_all(ctx, dev);
  return best;
}

static void micro_scaling(micro *m) {
  uint32_t big = (uint32_t)scaled(m, 1000000);
  size_t steps = scaled(m, 200000);
  double small = churn_with_live(m, 100, 0, steps);
  figure f = {.unit = "ns", .value = small};
  snprintf(f.name, sizeof f.name, "2. churn, 100 live (baseline of 2.)");
  report(m, f);
  f = (figure){.unit = "ns", .value = churn_with_live(m, big, 1, steps), .baseline = small};
  snprintf(f.name, sizeof f.name, "2. churn of 100 hot slots, %u live", big);
  report(m, f);
  f = (figure){.unit = "x", .value = f.value / small, .target = 1.3};
  snprintf(f.name, sizeof f.name, "2. O(1) ratio, hot set: %u live / 100 live", big);
  report(m, f);
  double spread = churn_with_live(m, big, 0, steps);
  f = (figure){.unit = "x", .value = spread / small};
  snprintf(f.name, sizeof f.name, "2. ratio, random slots among %u live (%.1f ns/op)", big, spread);
  report(m, f);
}

/* ---- 3. ledger overhead and refusals ---- */

static double policy_ns(const micro *m, bench_policy p, const bench_workload *w) {
  bench_result r;
  bench_run(&m->sim, p, w, w->n, m->o->repeat, &r);
  if (r.error) bench_die("%s/%s: %s", w->name, bench_policy_name(p), r.message);
  return r.ns_per_op;
}

/* Quotas off: one partition, whole budget (growth); on: the partitions policy (three
 * partitions with limits and guarantees), same operations. */
static void quota_one(micro *m, bench_workload *w) {
  truncate_to(m, w);
  double off = policy_ns(m, BENCH_GROWTH, w), on = policy_ns(m, BENCH_PARTITIONS, w);
  figure f = {.unit = "ns", .value = on - off, .target = 10};
  snprintf(f.name, sizeof f.name, "3. %.40s: quotas on - off (%.1f - %.1f ns/op)", w->name, on, off);
  report(m, f);
}

/* A partition at its limit refusing a request: the OOM sequence, then ELIMIT. */
static double refused_ns(const micro *m, double *pair_ns) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition_desc d = {.name = "full", .limit = 64 * BENCH_MIB, .guarantee = 32 * BENCH_MIB};
  gpupart_partition *p = open_one(m, &ctx, &dev, &d);
  gpupart_allocation *fill, *a;
  if (gpupart_alloc(p, 60 * BENCH_MIB, 0, &fill)) bench_die("fill: %s", gpupart_last_error());
  size_t n = scaled(m, 100000);
  double best = 1e300, pair = 1e300;
  for (int k = -1; k < m->o->repeat; k++) {
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < n; i++)
      if (gpupart_alloc(p, 32 * BENCH_MIB, 0, &a) != GPUPART_ELIMIT) bench_die("refusal: not ELIMIT");
    uint64_t t1 = bench_now_ns();
    for (size_t i = 0; i < n; i++) {
      if (gpupart_alloc(p, 4096, 0, &a)) bench_die("pair: %s", gpupart_last_error());
      gpupart_free(a);
    }
    if (k >= 0) best = min_d(best, (double)(t1 - t0) / (double)n);
    if (k >= 0) pair = min_d(pair, (double)(bench_now_ns() - t1) / (double)n);
  }
  gpupart_free(fill);
  close_all(ctx, dev);
  *pair_ns = pair;
  return best;
}

static void micro_ledger(micro *m) {
  bench_workload w;
  for (const char *const *b = bench_builtin_names(); *b; b++) {
    bench_builtin(*b, &w);
    quota_one(m, &w);
    bench_workload_free(&w);
  }
  double pair, refused = refused_ns(m, &pair);
  figure f = {.unit = "ns", .value = refused, .baseline = pair, .target = 1000};
  snprintf(f.name, sizeof f.name, "3. refused request, ELIMIT (baseline: alloc+free)");
  report(m, f);
}

/* ---- 4. two threads on two partitions ---- */

typedef struct worker {
  gpupart_partition *p;
  churn c;
  pthread_barrier_t *start;
  int cpu;
  uint64_t t0, t1;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  enum { LIVE = 1000 };
  gpupart_allocation *h[LIVE];
  bench_pin_cpu(w->cpu);
  bench_rng r = {(uint64_t)w->cpu + 7};
  for (int i = 0; i < LIVE; i++)
    if (gpupart_alloc(w->p, churn_size(&r), 0, &h[i])) bench_die("worker: %s", gpupart_last_error());
  churn_run(w->p, h, &w->c); /* warm-up */
  if (w->start) pthread_barrier_wait(w->start);
  w->t0 = bench_now_ns();
  churn_run(w->p, h, &w->c);
  w->t1 = bench_now_ns();
  for (int i = 0; i < LIVE; i++) gpupart_free(h[i]);
  return NULL;
}

/* Operations per microsecond of nthreads threads, each on its own partition. */
static double threads_rate(const micro *m, int nthreads, size_t steps) {
  gpupart_context *ctx;
  gpupart_device *dev;
  open_one(m, &ctx, &dev, NULL);
  worker w[2];
  pthread_t th[2];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 0; i < nthreads; i++) {
    bench_rng r = {(uint64_t)i + 99};
    gpupart_partition_desc d = {.fraction = 0.5};
    w[i] = (worker){.start = &start, .cpu = (int)(i % (cpus > 0 ? cpus : 1))};
    if (gpupart_partition_create(dev, &d, &w[i].p)) bench_die("partition: %s", gpupart_last_error());
    churn_make(&w[i].c, steps, 0, 1000, &r);
  }
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker_main, &w[i]);
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(th[i], NULL);
    t0 = w[i].t0 < t0 ? w[i].t0 : t0;
    t1 = w[i].t1 > t1 ? w[i].t1 : t1;
    churn_free(&w[i].c);
  }
  pthread_barrier_destroy(&start);
  close_all(ctx, dev);
  return (double)(2 * steps * (size_t)nthreads) / ((double)(t1 - t0) / 1000.0);
}

/* The machine's own ceiling: the same two pinned threads doing pure arithmetic. On a
 * shared or SMT machine it is below 2x, and no allocator can beat it. */
typedef struct spinner {
  int cpu;
  uint64_t iters, t0, t1, sink;
} spinner;

static void *spin_main(void *arg) {
  spinner *s = arg;
  bench_pin_cpu(s->cpu);
  bench_rng r = {(uint64_t)s->cpu};
  uint64_t sink = 0; /* a local: the two spinners' structs share a cache line */
  s->t0 = bench_now_ns();
  for (uint64_t i = 0; i < s->iters; i++) sink += bench_rand(&r);
  s->t1 = bench_now_ns();
  s->sink = sink;
  return NULL;
}

static double spin_rate(int nthreads, uint64_t iters) {
  spinner s[2];
  pthread_t th[2];
  for (int i = 0; i < nthreads; i++) {
    s[i] = (spinner){.cpu = i, .iters = iters};
    pthread_create(&th[i], NULL, spin_main, &s[i]);
  }
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(th[i], NULL);
    t0 = s[i].t0 < t0 ? s[i].t0 : t0;
    t1 = s[i].t1 > t1 ? s[i].t1 : t1;
  }
  return (double)(iters * (uint64_t)nthreads) / (double)(t1 - t0);
}

static void micro_threads(micro *m) {
  size_t steps = scaled(m, 500000);
  double one = 0, two = 0, spin1 = 0, spin2 = 0;
  for (int k = 0; k < m->o->repeat; k++) {
    double a = threads_rate(m, 1, steps), b = threads_rate(m, 2, steps);
    double c = spin_rate(1, 20 * steps), d = spin_rate(2, 20 * steps);
    one = a > one ? a : one;
    two = b > two ? b : two;
    spin1 = c > spin1 ? c : spin1;
    spin2 = d > spin2 ? d : spin2;
  }
  figure f = {.unit = "op/us", .value = one};
  snprintf(f.name, sizeof f.name, "4. one thread, one partition (baseline of 4.)");
  report(m, f);
  f = (figure){.unit = "op/us", .value = two, .baseline = one};
  snprintf(f.name, sizeof f.name, "4. two threads, two partitions");
  report(m, f);
  f = (figure){.unit = "x", .value = two / one, .target = 1.8, .at_least = 1};
  snprintf(f.name, sizeof f.name, "4. throughput scaling, 2 threads / 1 thread");
  report(m, f);
  f = (figure){.unit = "x", .value = spin2 / spin1};
  snprintf(f.name, sizeof f.name, "4. machine ceiling: pure arithmetic, 2 threads / 1");
  report(m, f);
}

/* ---- 5. android_systemui replay ---- */

static void micro_android(micro *m) {
  char path[4096];
  snprintf(path, sizeof path, "%s/android_systemui.ops.gz", bench_trace_dir());
  bench_workload w;
  if (access(path, R_OK) || bench_trace_load(path, &w)) {
    printf("  (android_systemui trace not found at %s)\n", path);
    return;
  }
  truncate_to(m, &w);
  bench_result r;
  bench_run(&m->sim, BENCH_GROWTH, &w, w.n, m->o->repeat, &r);
  figure f = {.unit = "ns", .value = r.ns_per_op, .baseline = malloc_ns_per_op(m, &w)};
  snprintf(f.name, sizeof f.name, "5. android_systemui: per op (baseline glibc)");
  report(m, f);
  f = (figure){.unit = "ms", .value = r.ns_per_op * (double)w.n / 1e6};
  snprintf(f.name, sizeof f.name, "5. android_systemui: whole replay, %zu ops (p99 %.0f ns)", w.n, r.p99_ns);
  report(m, f);
  bench_workload_free(&w);
}

/* ---- output ---- */

static int write_json(const micro *m, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return perror(path), 1;
  fputs("[\n", f);
  for (int i = 0; i < m->n; i++) {
    const figure *x = &m->f[i];
    fprintf(f,
            "  {\"name\": \"%s\", \"value\": %.4f, \"unit\": \"%s\", \"baseline\": %.4f, \"target\": %.4f, "
            "\"target_is_floor\": %s",
            x->name, x->value, x->unit, x->baseline, x->target, x->at_least ? "true" : "false");
    bench_json_machine(f);
    fprintf(f, "}%s\n", i + 1 < m->n ? "," : "");
  }
  fputs("]\n", f);
  return fclose(f) ? 1 : 0;
}

/* ---- 6. the shared ledger ---- */

/* The growth policy replaying w from a fresh device, in-process or shared. */
static double replay_ns(const micro *m, const bench_workload *w, const char *shared) {
  bench_shared_dir = shared;
  double ns = policy_ns(m, BENCH_GROWTH, w);
  bench_shared_dir = NULL;
  return ns;
}

static void shared_replay(micro *m, bench_workload *w) {
  truncate_to(m, w);
  double local = 1e300, shared = 1e300;
  for (int k = 0; k < 5; k++) { /* alternated, so that a burst of load on the machine hits both */
    local = min_d(local, replay_ns(m, w, NULL));
    shared = min_d(shared, replay_ns(m, w, bench_shared_tmpdir()));
  }
  figure f = {.unit = "x", .value = shared / local, .target = 1.10};
  snprintf(f.name, sizeof f.name, "6. %.40s: shared / in-process (%.1f / %.1f ns/op)", w->name, shared, local);
  report(m, f);
}

/* One 2 MiB block reserved and released per alloc/free pair (release_threshold 1). */
static double block_pair_ns(const micro *m, const char *shared) {
  gpupart_context *ctx;
  gpupart_device *dev;
  bench_shared_dir = shared;
  gpupart_partition *p = open_one(m, &ctx, &dev, &(gpupart_partition_desc){.name = "blocks", .release_threshold = 1});
  bench_shared_dir = NULL;
  size_t n = scaled(m, 200000);
  double best = 1e300;
  for (int k = -1; k < m->o->repeat; k++) {
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < n; i++) {
      gpupart_allocation *a;
      if (gpupart_alloc(p, 2 * BENCH_MIB, 0, &a)) bench_die("block: %s", gpupart_last_error());
      gpupart_free(a);
    }
    if (k >= 0) best = min_d(best, (double)(bench_now_ns() - t0) / (double)n);
  }
  close_all(ctx, dev);
  return best;
}

/* A child: a member of the shared device holding a block, gone without closing. */
static void dead_member(const micro *m) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_allocation *a;
  gpupart_partition *p = open_one(m, &ctx, &dev, &(gpupart_partition_desc){.name = NULL});
  _exit(gpupart_alloc(p, 2 * BENCH_MIB, 0, &a) ? 1 : 0);
}

/* The first call that reads the ledger after `dead` members died: it returns their
 * bytes. Baseline: the same call with nobody to reap. */
static double reclaim_ns(const micro *m, int dead, double *base) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_stats s;
  bench_shared_dir = bench_shared_tmpdir();
  open_one(m, &ctx, &dev, NULL);
  for (int i = 0; i < dead; i++) {
    pid_t pid = fork();
    if (pid == 0) dead_member(m);
    if (pid < 0 || waitpid(pid, NULL, 0) != pid) bench_die("fork: a member did not run");
  }
  uint64_t t0 = bench_now_ns();
  gpupart_device_get_stats(dev, &s);
  uint64_t t1 = bench_now_ns();
  gpupart_device_get_stats(dev, &s);
  *base = (double)(bench_now_ns() - t1);
  if (s.reserved) bench_die("reclaim: %llu bytes of dead members left", (unsigned long long)s.reserved);
  close_all(ctx, dev);
  bench_shared_dir = NULL;
  return (double)(t1 - t0);
}

static void micro_shared(micro *m) {
  char path[4096];
  snprintf(path, sizeof path, "%s/kineto_resnet50_v100.ops.gz", bench_trace_dir());
  bench_workload w;
  if (access(path, R_OK) == 0 && bench_trace_load(path, &w) == 0) shared_replay(m, &w), bench_workload_free(&w);
  for (const char *const *b = bench_builtin_names(); *b; b++) {
    bench_builtin(*b, &w);
    shared_replay(m, &w);
    bench_workload_free(&w);
  }
  double local = block_pair_ns(m, NULL), shared = block_pair_ns(m, bench_shared_tmpdir());
  figure f = {.unit = "ns", .value = shared - local};
  snprintf(f.name, sizeof f.name, "6. block reserve + release in the shared ledger (%.0f - %.0f ns)", shared, local);
  report(m, f);
  double base, best = 1e300, best_base = 1e300;
  for (int k = 0; k < (m->o->repeat < 3 ? m->o->repeat : 3); k++) {
    best = min_d(best, reclaim_ns(m, 100, &base));
    best_base = min_d(best_base, base);
  }
  f = (figure){.unit = "us", .value = best / 1000, .baseline = best_base / 1000};
  snprintf(f.name, sizeof f.name, "6. reclaim of 100 dead members (baseline: none to reclaim)");
  report(m, f);
}

/* ---- 7. trace recording ---- */

/* The kineto trace on a warm partition with recording off and on (the trace written to a
 * file under /tmp, removed after), alternated five times, best of each. */
static void micro_trace(micro *m) {
  char path[4096], file[64];
  snprintf(path, sizeof path, "%s/kineto_resnet50_v100.ops.gz", bench_trace_dir());
  bench_workload w;
  if (access(path, R_OK) || bench_trace_load(path, &w)) {
    printf("  (kineto trace not found at %s)\n", path);
    return;
  }
  truncate_to(m, &w);
  snprintf(file, sizeof file, "/tmp/gpupart-bench-trace-%ld.ops", (long)getpid());
  double off = 1e300, on = 1e300;
  for (int k = 0; k < 5; k++) {
    off = min_d(off, warm_ns_per_op(m, &w));
    bench_trace_file = file;
    on = min_d(on, warm_ns_per_op(m, &w));
    bench_trace_file = NULL;
  }
  unlink(file);
  figure f = {.unit = "ns", .value = on - off, .baseline = 0};
  snprintf(f.name, sizeof f.name, "7. kineto, warm partition: recording on minus off (%.1f - %.1f ns/op)", on, off);
  report(m, f);
  bench_workload_free(&w);
}

int bench_micro(const bench_micro_opts *o) {
  micro *m = bench_xcalloc(1, sizeof *m);
  m->o = o;
  bench_targets_find("sim", &m->sim, 1);
  printf("gpupart micro benchmarks (sim device, best of %d, scale %g; per-op latency %.3f ns per tick, "
         "%llu ticks subtracted)\n",
         o->repeat, o->scale, bench_ns_per_tick(), (unsigned long long)bench_tick_overhead());
  static void (*const parts[])(micro *) = {micro_api,     micro_scaling, micro_ledger, micro_threads,
                                           micro_android, micro_shared,  micro_trace};
  for (int i = 0; i < 7; i++)
    if (!o->only || strchr(o->only, '1' + i)) parts[i](m);
  int rc = o->json ? write_json(m, o->json) : 0;
  free(m);
  return rc;
}
