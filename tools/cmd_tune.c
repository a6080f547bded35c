/* gpupart tune TRACE...: the configuration an application's own allocation trace asks
 * for. It loads the trace (GPUPART_TRACE's .ops, or .ops.gz; several files are the
 * processes of one run, sharing the partitions they name), searches the settings that
 * matter by replaying the trace under each on a simulated device (tune_search.c, with the
 * replay gpupart-bench's "configured" policy uses, so the figures reproduce there), and
 * prints the configurations best first with the recommendation as GPUPART_* lines and an
 * INI section (tune_print.c). With --budget it answers whether the trace fits in that
 * much memory, and with what settings. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tune.h"

#define MAX_TRACES 64         /* processes: each is a member of one shared ledger */
#define MAX_PEAK (1ull << 50) /* live bytes beyond any device's (1 PiB): not a device's trace */
#define EXIT_NO_FIT 3

static const char help[] = "usage: gpupart tune [--objective memory|calls|balanced] [--budget SIZE] [--json]\n"
                           "                    [--top N] [--progress] TRACE...\n"
                           "\n"
                           "Recommends a configuration for an application from its own allocation trace\n"
                           "(recorded with GPUPART_TRACE=FILE; .ops or .ops.gz). Several TRACE files are the\n"
                           "processes of one run, recorded with GPUPART_TRACE=FILE.%p: a partition name is one\n"
                           "partition shared by them (GPUPART_SHARED=1), and their operations are interleaved\n"
                           "in proportion to their lengths.\n"
                           "\n"
                           "The trace is replayed on a simulated device under a bounded search of growth or\n"
                           "preallocation, initial_block, max_block, growth_factor, release_threshold,\n"
                           "expandable and each partition's size; the table shows, best first, each\n"
                           "configuration's peak reserved, fragmentation (1 - peak in use / peak reserved),\n"
                           "driver calls, their time at a real GPU's price (80 us per allocation, 450 us per\n"
                           "free) and ns per operation here.\n"
                           "The recommendation follows as GPUPART_* lines and as an INI section.\n"
                           "gpupart-bench --trace TRACE --policy configured, run with those lines, reproduces\n"
                           "its peak reserved, fragmentation and driver calls.\n"
                           "\n"
                           "  --objective O  memory (default): the least peak reserved, ties to the least driver\n"
                           "                 time; calls: the least driver time, ties to the least memory;\n"
                           "                 balanced: the least sum of both, each relative to the default's.\n"
                           "                 Only configurations that serve every allocation and hold no more\n"
                           "                 than the default configuration are recommended.\n"
                           "  --budget SIZE  does the trace fit in SIZE (a number of GiB, or with a unit: 1.5,\n"
                           "                 512MiB, 8GB)? Every configuration is replayed under\n"
                           "                 GPUPART_MEMORY_LIMIT=SIZE; the answer is the best that serves every\n"
                           "                 allocation, or \"does not fit\" with what it would need.\n"
                           "  --json         one JSON object: the trace, default, recommended, candidates\n"
                           "                 [{rank, settings, env, ini, peak_reserved, fragmentation,\n"
                           "                 driver_allocs, driver_frees, modeled_driver_ms, ns_per_op, failed}]\n"
                           "  --top N        configurations shown besides the default's (default 10)\n"
                           "  --progress     a progress line on standard error even when it is not a terminal\n"
                           "                 (on a terminal it is shown once a search takes more than a moment)\n"
                           "\n"
                           "exit status: 0 a recommendation (with --budget: the trace fits), 1 a trace cannot\n"
                           "             be read or replayed, 2 bad usage, 3 with --budget: it does not fit\n";

typedef struct options {
  const char *traces[MAX_TRACES];
  int ntraces, json, progress;
  size_t top;
  uint64_t budget;
  tune_objective objective;
} options;

/* ---- arguments ---- */

/* SIZE: a plain decimal, GiB without a unit; KiB..TiB (powers of 1024), KB..TB (of 1000). */
static int parse_budget(const char *s, uint64_t *out) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"", 1073741824.0},       {"b", 1.0},  {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
               {"tib", 1099511627776.0}, {"kb", 1e3}, {"mb", 1e6},     {"gb", 1e9},        {"tb", 1e12}};
  size_t digits = strspn(s, "0123456789"), frac = s[digits] == '.' ? strspn(s + digits + 1, "0123456789") : 0;
  if (!digits && !frac) return -1;
  size_t end = digits + (s[digits] == '.' ? 1 + frac : 0);
  double v = strtod(s, NULL);
  const char *unit = s + end + strspn(s + end, " ");
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(unit, units[i].unit)) continue;
    double bytes = v * units[i].scale;
    if (!(bytes >= 1.0) || bytes > 9.0e18) return -1;
    /* A device's budget is whole granules (the default granularity): so is this one, but
     * for one below a granule, which stays as asked (and holds nothing). */
    *out = (uint64_t)bytes >= TUNE_GRANULE ? (uint64_t)bytes & ~(TUNE_GRANULE - 1) : (uint64_t)bytes;
    return 0;
  }
  return -1;
}

static int parse_objective(const char *v, tune_objective *out) {
  for (int o = TUNE_MEMORY; o <= TUNE_BALANCED; o++)
    if (!strcmp(v, tune_objective_name((tune_objective)o))) {
      *out = (tune_objective)o;
      return 0;
    }
  return -1;
}

/* One option at argv[*i]: 1 taken, 0 not an option of this command, -1 a value missing. */
static int parse_option(int argc, char **argv, int *i, options *o, int *bad) {
  const char *v;
  int k;
  if ((k = cli_option(argc, argv, i, "--json", 0, &v))) o->json = 1;
  if (!k && (k = cli_option(argc, argv, i, "--progress", 0, &v))) o->progress = 1;
  if (k) return k;
  if ((k = cli_option(argc, argv, i, "--objective", 1, &v)) == 1 && parse_objective(v, &o->objective))
    *bad = cli_usage_error("tune", "--objective: want memory, calls or balanced, not '%s'", v);
  if (k) return k;
  if ((k = cli_option(argc, argv, i, "--budget", 1, &v)) == 1 && parse_budget(v, &o->budget))
    *bad = cli_usage_error("tune", "--budget: want a size (1.5 for GiB, 512MiB, 8GB), not '%s'", v);
  if (k) return k;
  if ((k = cli_option(argc, argv, i, "--top", 1, &v)) == 1) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 100000 || end == v)
      *bad = cli_usage_error("tune", "--top: want a number >= 1, not '%s'", v);
    else o->top = (size_t)n;
  }
  return k;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.top = 10, .objective = TUNE_MEMORY};
  for (int i = 1; i < argc; i++) {
    int bad = 0, k = argv[i][0] == '-' && argv[i][1] ? parse_option(argc, argv, &i, o, &bad) : 0;
    if (bad) return bad;
    if (k < 0) return EXIT_USAGE;
    if (k) continue;
    if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("tune", "unknown option '%s'", argv[i]);
    if (o->ntraces == MAX_TRACES) return cli_usage_error("tune", "at most %d trace files", MAX_TRACES);
    o->traces[o->ntraces++] = argv[i];
  }
  return o->ntraces ? 0 : cli_usage_error("tune", "expects at least one TRACE file");
}

/* ---- progress ---- */

typedef struct progress {
  int asked, tty, shown;
  uint64_t start, last;
} progress;

#define PROGRESS_QUIET_NS 500000000ull /* a terminal sees nothing of a search shorter */
#define PROGRESS_TTY_NS 200000000ull
#define PROGRESS_LINE_NS 1000000000ull

static void on_progress(const char *stage, size_t done, size_t planned, void *user) {
  progress *p = user;
  (void)planned;
  uint64_t now = bench_now_ns();
  if (!p->asked && (!p->tty || now - p->start < PROGRESS_QUIET_NS)) return;
  if (p->shown && now - p->last < (p->tty ? PROGRESS_TTY_NS : PROGRESS_LINE_NS)) return;
  p->last = now;
  p->shown = 1;
  double s = (double)(now - p->start) / 1e9;
  if (p->tty) fprintf(stderr, "\rgpupart tune: %s: %zu replays, %.0f s\033[K", stage, done, s);
  else fprintf(stderr, "gpupart tune: %s: %zu replays, %.1f s\n", stage, done, s);
}

static void progress_done(progress *p, size_t replays) {
  if (p->tty && p->shown) fputs("\r\033[K", stderr);
  else if (p->asked)
    fprintf(stderr, "gpupart tune: done: %zu replays in %.1f s\n", replays, (double)(bench_now_ns() - p->start) / 1e9);
}

/* ---- the run ---- */

static const tune_candidate *best_of(const tune_search *s) {
  size_t n;
  tune_candidate **ranked = tune_ranked(s, &n);
  const tune_candidate *best = n && tune_eligible(s, ranked[0]) ? ranked[0] : NULL;
  free(ranked);
  return best;
}

/* The budget was not met: the search again without it says what the trace needs. */
static int search_unbudgeted(tune_run *t, bench_workload *w, char *err, size_t n) {
  t->unbudgeted = bench_xcalloc(1, sizeof *t->unbudgeted);
  tune_search_init(t->unbudgeted, w, 0, t->s.objective);
  t->unbudgeted->progress = t->s.progress;
  t->unbudgeted->progress_user = t->s.progress_user;
  if (tune_search_run(t->unbudgeted, err, n)) return -1;
  t->unbudgeted_best = best_of(t->unbudgeted);
  return 0;
}

/* The trace's peak live bytes, as requested, or 0 past MAX_PEAK (summed in long double, so
 * a hostile trace cannot wrap the sum around). */
static uint64_t trace_peak(const bench_workload *w) {
  long double *live = bench_xcalloc(w->slots ? w->slots : 1, sizeof *live), sum = 0, peak = 0;
  for (size_t i = 0; i < w->n; i++) {
    const bench_op *o = &w->ops[i];
    sum += o->size ? (long double)o->size : -live[o->slot];
    live[o->slot] = (long double)o->size;
    if (sum > peak) peak = sum;
  }
  free(live);
  return peak > (long double)MAX_PEAK ? 0 : (uint64_t)peak;
}

static int search(tune_run *t, bench_workload *w, const options *o, progress *p) {
  char err[512] = "";
  tune_search_init(&t->s, w, o->budget, o->objective);
  t->s.progress = on_progress;
  t->s.progress_user = p;
  /* Below the trace's own live bytes nothing fits: only the default is replayed, for its row. */
  t->s.default_only = o->budget && o->budget < t->peak_in_use;
  int rc = tune_search_run(&t->s, err, sizeof err);
  if (!rc && !best_of(&t->s) && !o->budget) {
    snprintf(err, sizeof err, "no configuration served every allocation of the trace (the default refused %llu)",
             (unsigned long long)tune_default(&t->s)->r.failed);
    rc = -1;
  }
  if (!rc && o->budget && !best_of(&t->s)) rc = search_unbudgeted(t, w, err, sizeof err);
  progress_done(p, t->s.replays + (t->unbudgeted ? t->unbudgeted->replays : 0));
  if (rc) fprintf(stderr, "gpupart tune: %s\n", err);
  return rc;
}

static void run_free(tune_run *t) {
  tune_search_free(&t->s);
  if (t->unbudgeted) tune_search_free(t->unbudgeted);
  free(t->unbudgeted);
}

int cmd_tune(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    fputs(help, stdout);
    return EXIT_OK;
  }
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  bench_program = "gpupart tune";
  progress p = {.asked = o.progress, .tty = isatty(STDERR_FILENO), .start = bench_now_ns()};
  if (o.progress) fprintf(stderr, "gpupart tune: reading %d trace%s\n", o.ntraces, o.ntraces == 1 ? "" : "s");
  bench_workload w;
  if (bench_trace_load_together(o.traces, o.ntraces, &w)) return EXIT_CHECKED;
  tune_run t = {.traces = o.traces, .ntraces = o.ntraces, .top = o.top, .peak_in_use = trace_peak(&w)};
  if (!t.peak_in_use) {
    fprintf(stderr, "gpupart tune: the trace holds more than 1 PiB live at once: not a device's allocations\n");
    bench_workload_free(&w);
    return EXIT_CHECKED;
  }
  rc = search(&t, &w, &o, &p);
  t.seconds = (double)(bench_now_ns() - p.start) / 1e9;
  if (!rc && o.json) tune_print_json(&t);
  else if (!rc) tune_print_text(&t);
  int fits = !rc && best_of(&t.s) != NULL;
  run_free(&t);
  bench_workload_free(&w);
  if (rc) return EXIT_CHECKED;
  return o.budget && !fits ? EXIT_NO_FIT : EXIT_OK;
}
