/* gpupart-bench: the command line of the benchmark suite. It chooses the targets
 * (backends present), the workloads (built in, bundled or given traces) and the policies,
 * runs every combination and writes the table, JSON, CSV and chart. --micro runs the
 * targeted micro benchmarks instead (micro.c). See docs/benchmarks.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define MAX_TARGETS 8
#define MAX_TRACES 32
#define DEFAULT_TRACE "kineto_resnet50_v100"

typedef struct options {
  const char *backend, *workloads, *json, *csv, *plot, *micro_only;
  const char *traces[MAX_TRACES];
  int ntraces, repeat, micro, together;
  unsigned policies; /* bit per bench_policy */
  size_t ops;        /* 0 = the target's default cap */
  uint64_t mem_cap;  /* 0 = the target's default */
  double micro_scale;
} options;

static void usage(FILE *f) {
  fputs("usage: gpupart-bench [--backend sim|opencl|vulkan|cuda|all[,...]] [--workload NAME[,NAME...]|all]\n"
        "                     [--trace FILE.ops[.gz]]... [--together]\n"
        "                     [--policy driver,growth,prealloc,partitions,cudapool,expandable,configured]\n"
        "                     [--repeat N] [--ops N] [--mem-cap MIB] [--json FILE] [--csv FILE]\n"
        "                     [--plot FILE.png] [--shared]\n"
        "       gpupart-bench --micro[=DIGITS] [--micro-scale F] [--repeat N] [--json FILE]\n"
        "workloads: transformer inference rmm_random vma_algorithms adversarial, or the name of a\n"
        "bundled trace (" DEFAULT_TRACE ", android_systemui); default: all built-in ones and\n" DEFAULT_TRACE
        " when it is present. --together: the --trace files are the processes of\n"
        "one run (one workload). Policy configured (only when named) replays under your\n"
        "GPUPART_* configuration, each allocation on the partition its trace names.\n",
        f);
}

static unsigned parse_policies(const char *list) {
  unsigned bits = 0;
  char *copy = strdup(list), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int p = 0; p < BENCH_POLICY_COUNT; p++)
      if (!strcmp(tok, bench_policy_name((bench_policy)p))) bits |= 1u << p, found = 1;
    if (!strcmp(tok, "all")) bits |= BENCH_DEFAULT_POLICIES, found = 1;
    if (!found) bench_die("unknown policy '%s'", tok);
  }
  free(copy);
  return bits;
}

static long parse_number(const char *flag, const char *v, long min) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || n < min) bench_die("%s wants a number >= %ld, not '%s'", flag, min, v);
  return n;
}

/* One flag with its value; returns how many argv entries it used. */
static int parse_flag(options *o, const char *flag, const char *v) {
  if (!strcmp(flag, "--micro")) return o->micro = 1, 1;
  if (!strcmp(flag, "--shared")) return bench_shared_dir = bench_shared_tmpdir(), 1;
  if (!strcmp(flag, "--together")) {
    o->together = 1;
    return 1;
  }
  if (!strncmp(flag, "--micro=", 8)) return o->micro = 1, o->micro_only = flag + 8, 1;
  if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) usage(stdout), exit(0);
  if (!v) bench_die("%s needs a value (see --help)", flag);
  if (!strcmp(flag, "--backend")) o->backend = v;
  else if (!strcmp(flag, "--workload")) o->workloads = v;
  else if (!strcmp(flag, "--policy")) o->policies = parse_policies(v);
  else if (!strcmp(flag, "--repeat")) o->repeat = (int)parse_number(flag, v, 1);
  else if (!strcmp(flag, "--ops")) o->ops = (size_t)parse_number(flag, v, 1);
  else if (!strcmp(flag, "--mem-cap")) o->mem_cap = (uint64_t)parse_number(flag, v, 1) * BENCH_MIB;
  else if (!strcmp(flag, "--json")) o->json = v;
  else if (!strcmp(flag, "--csv")) o->csv = v;
  else if (!strcmp(flag, "--plot")) o->plot = v;
  else if (!strcmp(flag, "--micro-scale")) o->micro_scale = atof(v);
  else if (!strcmp(flag, "--trace") && o->ntraces < MAX_TRACES) o->traces[o->ntraces++] = v;
  else usage(stderr), bench_die("unknown or repeated too often: %s", flag);
  return 2;
}

static void parse_args(int argc, char **argv, options *o) {
  *o = (options){.backend = "all", .repeat = 5, .policies = BENCH_DEFAULT_POLICIES, .micro_scale = 1.0};
  for (int i = 1; i < argc;) i += parse_flag(o, argv[i], i + 1 < argc ? argv[i + 1] : NULL);
  if (o->micro_scale <= 0 || o->micro_scale > 1) bench_die("--micro-scale wants a number in (0, 1]");
}

/* ---- workloads ---- */

typedef struct workload_list {
  bench_workload *w;
  int n, cap;
} workload_list;

static bench_workload *list_add(workload_list *l) {
  if (l->n == l->cap) l->cap = l->cap ? 2 * l->cap : 8, l->w = bench_xrealloc(l->w, (size_t)l->cap * sizeof *l->w);
  return &l->w[l->n++];
}

static int add_bundled(workload_list *l, const char *name, int required) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.ops.gz", bench_trace_dir(), name);
  if (!required && access(path, R_OK)) return 0;
  if (bench_trace_load(path, list_add(l))) return l->n--, required ? -1 : 0;
  return 0;
}

static int add_named(workload_list *l, const char *name) {
  if (!strcmp(name, "all")) {
    for (const char *const *b = bench_builtin_names(); *b; b++) bench_builtin(*b, list_add(l));
    return add_bundled(l, DEFAULT_TRACE, 0);
  }
  bench_workload *w = list_add(l);
  if (bench_builtin(name, w) == 0) return 0;
  l->n--;
  return add_bundled(l, name, 1);
}

static int load_workloads(const options *o, workload_list *l) {
  const char *names = o->workloads ? o->workloads : o->ntraces ? NULL : "all";
  if (names) {
    char *copy = strdup(names), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
      if (add_named(l, tok)) return free(copy), -1;
    free(copy);
  }
  if (o->together && o->ntraces) return bench_trace_load_together(o->traces, o->ntraces, list_add(l));
  for (int i = 0; i < o->ntraces; i++)
    if (bench_trace_load(o->traces[i], list_add(l))) return -1;
  return l->n ? 0 : -1;
}

/* ---- runs ---- */

/* The workload as this target runs it: capped in operations (--ops, else the target's
 * default cap), and scaled so its peak fits the target's share of memory. */
static const bench_workload *fit(const bench_target *t, const options *o, const bench_workload *w, bench_workload *tmp,
                                 size_t *n) {
  size_t cap = o->ops ? o->ops : t->ops_cap;
  uint64_t mem_cap = o->mem_cap ? o->mem_cap : t->mem_cap;
  *n = cap && cap < w->n ? cap : w->n;
  if (!mem_cap) return w;
  uint64_t peak = bench_workload_peak(w, *n, t->info.min_alignment ? t->info.min_alignment : 1);
  double f = peak > mem_cap ? (double)mem_cap / (double)peak : 1.0;
  uint64_t big = t->info.max_block_bytes / 4;
  if (big && (double)w->max_size * f > (double)big) f = (double)big / (double)w->max_size;
  if (f >= 1.0) return w;
  bench_workload_scaled(w, f, tmp);
  return tmp;
}

static size_t run_all(const options *o, const bench_target *t, int nt, const workload_list *l, bench_result **out) {
  size_t cap = (size_t)nt * (size_t)l->n * BENCH_POLICY_COUNT, nr = 0;
  bench_result *rows = bench_xcalloc(cap, sizeof *rows);
  printf("# %d target(s), %d workload(s), best of %d; per-op latency: %.3f ns per tick, %llu ticks "
         "subtracted per sample\n",
         nt, l->n, o->repeat, bench_ns_per_tick(), (unsigned long long)bench_tick_overhead());
  bench_print_header();
  for (int i = 0; i < nt; i++)
    for (int k = 0; k < l->n; k++) {
      bench_workload tmp = {0};
      size_t n;
      const bench_workload *w = fit(&t[i], o, &l->w[k], &tmp, &n);
      double floor_frag;
      uint64_t floor = bench_floor_bytes(w, n, t[i].info.min_alignment ? t[i].info.min_alignment : 256, &floor_frag);
      for (int p = 0; p < BENCH_POLICY_COUNT; p++) {
        if (!(o->policies & (1u << p))) continue;
        if (p == BENCH_CUDAPOOL && t[i].backend != GPUPART_BACKEND_CUDA) continue; /* CUDA's own pool */
        bench_run(&t[i], (bench_policy)p, w, n, o->repeat, &rows[nr]);
        rows[nr].floor_reserved = floor;
        rows[nr].floor_fragmentation = floor_frag;
        bench_print_row(&rows[nr++]);
        fflush(stdout);
      }
      if (tmp.ops) bench_workload_free(&tmp);
    }
  *out = rows;
  return nr;
}

static int write_outputs(const options *o, const bench_result *rows, size_t n) {
  int rc = 0;
  if (o->json) rc |= bench_write_json(o->json, rows, n);
  if (o->csv) rc |= bench_write_csv(o->csv, rows, n);
  if (o->plot) rc |= bench_write_plot(o->plot, rows, n);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  options o;
  parse_args(argc, argv, &o);
  bench_ticks_calibrate();
  if (o.micro)
    return bench_micro(
        &(bench_micro_opts){.scale = o.micro_scale, .repeat = o.repeat, .json = o.json, .only = o.micro_only});
  bench_target targets[MAX_TARGETS];
  int nt = bench_targets_find(o.backend, targets, MAX_TARGETS);
  if (!nt) bench_die("no usable backend for --backend %s", o.backend);
  workload_list l = {0};
  if (load_workloads(&o, &l)) bench_die("no workload to run");
  bench_result *rows;
  size_t nr = run_all(&o, targets, nt, &l, &rows);
  int rc = write_outputs(&o, rows, nr);
  for (int k = 0; k < l.n; k++) bench_workload_free(&l.w[k]);
  free(l.w);
  free(rows);
  return rc;
}
