/* gpupart tune's output: the table of configurations (best first, the default's row
 * always shown), the recommendation as GPUPART_* lines and as an INI section ready to
 * paste, and the same as one JSON object. Names that come from the trace are made safe
 * for a terminal (cli_text) or escaped (json_string): a trace is outside input. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tune.h"

#define TEXT_MAX 16384

static double mib(uint64_t b) { return (double)b / (double)(1ull << 20); }

static void print_header(const tune_run *t) {
  const bench_workload *w = t->s.w;
  char name[256], part[256];
  cli_text(w->name, name, sizeof name);
  printf("gpupart tune: %s (%u process%s, %zu operations, %u partition%s:", name, w->processes,
         w->processes == 1 ? "" : "es", w->n, w->nnames, w->nnames == 1 ? "" : "s");
  for (uint32_t i = 0; i < w->nnames && i < 8; i++) {
    cli_text(w->names[i], part, sizeof part);
    printf(" %s", part);
  }
  printf("%s)\n", w->nnames > 8 ? " ..." : "");
  printf("peak in use %.1f MiB; %zu configuration%s, %zu replay%s on a simulated device in %.1f s; objective %s",
         mib(t->peak_in_use), t->s.n, t->s.n == 1 ? "" : "s", t->s.replays, t->s.replays == 1 ? "" : "s", t->seconds,
         tune_objective_name(t->s.objective));
  if (t->s.budget) printf("; budget %.1f MiB", mib(t->s.budget));
  printf("\n\n");
}

static void print_row(const tune_run *t, const tune_candidate *c, const char *rank) {
  char what[512];
  tune_describe(&t->s, c, what, sizeof what);
  if (c->error) {
    char why[sizeof c->r.message];
    cli_text(c->r.message, why, sizeof why);
    printf("%5s  cannot be replayed (%s): %s\n", rank, what, why);
    return;
  }
  printf("%5s %11.1f MiB %7.4f %12llu %10.1f %7.1f", rank, mib(c->r.peak_reserved), c->r.fragmentation,
         (unsigned long long)(c->r.driver_allocs + c->r.driver_frees), c->r.modeled_driver_ms, c->r.ns_per_op);
  if (c->r.failed) printf("  %s (refused %llu allocations)\n", what, (unsigned long long)c->r.failed);
  else printf("  %s\n", what);
}

/* Whether c's figures are those of an earlier row (another configuration that behaves
 * the same on this trace): shown once, at the rank of the first. */
static int same_as_earlier(tune_candidate *const *ranked, size_t i) {
  const bench_result *r = &ranked[i]->r;
  for (size_t j = 0; j < i; j++) {
    const bench_result *q = &ranked[j]->r;
    if (!ranked[j]->error && q->peak_reserved == r->peak_reserved && q->driver_allocs == r->driver_allocs &&
        q->driver_frees == r->driver_frees && q->failed == r->failed)
      return 1;
  }
  return 0;
}

static void print_table(const tune_run *t, tune_candidate *const *ranked, size_t n) {
  printf("%5s %15s %7s %12s %10s %7s  %s\n", "rank", "peak reserved", "frag", "driver calls", "driver ms", "ns/op",
         "configuration");
  size_t shown = 0, hidden = 0, refused = 0;
  int default_shown = 0;
  for (size_t i = 0; i < n; i++) {
    const tune_candidate *c = ranked[i];
    if (!tune_eligible(&t->s, c)) {
      refused += !c->is_default;
      if (!c->is_default) continue;
    }
    char rank[24];
    snprintf(rank, sizeof rank, "%zu", i + 1);
    if (c->is_default || (shown < t->top && !same_as_earlier(ranked, i))) {
      print_row(t, c, rank);
      shown += !c->is_default;
      default_shown |= c->is_default;
    } else {
      hidden++;
    }
  }
  if (!default_shown) print_row(t, tune_default(&t->s), "-");
  if (hidden || refused)
    printf("(%zu more configurations not shown; %zu refused allocations or held more than the default)\n", hidden,
           refused);
}

static void print_settings(const tune_run *t, const tune_candidate *c) {
  char text[TEXT_MAX];
  tune_env(&t->s, c, text, sizeof text);
  printf("\nAs environment variables (a shell's, or a container's env file):\n%s", *text ? text : "(none to set)\n");
  tune_ini(&t->s, c, text, sizeof text);
  printf("\nAs an INI file (GPUPART_CONFIG=FILE; gpupart check-config FILE accepts it):\n%s", text);
}

static void print_verdict(const tune_run *t, const tune_candidate *best) {
  const tune_candidate *d = tune_default(&t->s);
  char what[512];
  if (!best && t->s.budget < t->peak_in_use) {
    printf("\nDoes not fit: the trace's allocations alone hold %.1f MiB at their peak, more than %.1f MiB.\n",
           mib(t->peak_in_use), mib(t->s.budget));
    return;
  }
  if (!best) {
    printf("\nDoes not fit: no configuration served every allocation of the trace within %.1f MiB.\n",
           mib(t->s.budget));
    return;
  }
  tune_describe(&t->s, best, what, sizeof what);
  if (t->s.budget) printf("\nFits in %.1f MiB.", mib(t->s.budget));
  printf("\nRecommended: %s\n", what);
  if (d->error || d->r.failed)
    printf("  peak reserved %.1f MiB (the default refused %llu allocations)\n", mib(best->r.peak_reserved),
           (unsigned long long)d->r.failed);
  else
    printf("  peak reserved %.1f MiB (the default %.1f MiB), driver calls %llu costing %.1f ms at a GPU's price "
           "(the default %llu, %.1f ms)\n",
           mib(best->r.peak_reserved), mib(d->r.peak_reserved),
           (unsigned long long)(best->r.driver_allocs + best->r.driver_frees), best->r.modeled_driver_ms,
           (unsigned long long)(d->r.driver_allocs + d->r.driver_frees), d->r.modeled_driver_ms);
  if (tune_limited(&t->s, best))
    printf("  The partition sizes are the least this trace needs: leave headroom where the application's\n"
           "  runs differ from the one recorded.\n");
}

static void print_notes(const tune_run *t) {
  if (t->s.w->processes > 1)
    printf("\nNot searched: preallocation (a shared partition's preallocated memory is its first process's).\n");
  else if (!t->s.declarable)
    printf("\nNot searched: preallocation, and limits for partitions whose names configuration cannot\n"
           "declare (1 to 63 of A-Z a-z 0-9 _ . -).\n");
  else if (!t->s.prealloc_ok)
    printf("\nNot searched: preallocation (configuration declares at most 64 partitions; limits: the first 64).\n");
}

void tune_print_text(const tune_run *t) {
  size_t n;
  tune_candidate **ranked = tune_ranked(&t->s, &n);
  print_header(t);
  print_table(t, ranked, n);
  const tune_candidate *best = n && tune_eligible(&t->s, ranked[0]) ? ranked[0] : NULL;
  print_verdict(t, best);
  if (best && best->is_default && !t->s.budget) printf("  The default configuration is already the best found.\n");
  if (best) print_settings(t, best);
  if (!best && t->unbudgeted) {
    char what[512];
    tune_describe(t->unbudgeted, t->unbudgeted_best, what, sizeof what);
    printf("Without a budget, the least peak reserved found is %.1f MiB: %s\n",
           mib(t->unbudgeted_best->r.peak_reserved), what);
  }
  print_notes(t);
  free(ranked);
}

/* ---- JSON ---- */

static void json_settings(const tune_search *s, const tune_candidate *c) {
  printf("{");
  for (int d = 0; d < TUNE_DIMS; d++) {
    const tune_dim *dim = tune_dim_get((tune_dim_id)d);
    printf("%s\"%s\": ", d ? ", " : "", dim->key);
    if (dim->kind == TUNE_BOOL) printf("%s", c->v[d] ? "true" : "false");
    else if (dim->kind == TUNE_FACTOR) printf("%g", (double)c->v[d] / 1000.0);
    else if (dim->kind == TUNE_THRESHOLD && !c->v[d]) printf("null");
    else printf("%llu", (unsigned long long)c->v[d]);
  }
  printf(", \"partitions\": {");
  for (uint32_t i = 0, first = 1; i < s->w->nnames; i++) {
    if (!c->limits[i]) continue;
    printf("%s", first ? "" : ", ");
    json_string(stdout, s->w->names[i]);
    printf(": %llu", (unsigned long long)c->limits[i]);
    first = 0;
  }
  printf("}}");
}

static void json_env(const tune_search *s, const tune_candidate *c) {
  char text[TEXT_MAX], *save = NULL;
  tune_env(s, c, text, sizeof text);
  printf("[");
  int first = 1;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    printf("%s", first ? "" : ", ");
    json_string(stdout, line);
    first = 0;
  }
  printf("]");
}

static void json_candidate(const tune_search *s, const tune_candidate *c, size_t rank) {
  char text[TEXT_MAX];
  printf("{\"rank\": %zu, \"default\": %s, \"eligible\": %s, \"settings\": ", rank, c->is_default ? "true" : "false",
         tune_eligible(s, c) ? "true" : "false");
  json_settings(s, c);
  tune_describe(s, c, text, sizeof text);
  printf(", \"description\": ");
  json_string(stdout, text);
  printf(", \"env\": ");
  json_env(s, c);
  tune_ini(s, c, text, sizeof text);
  printf(", \"ini\": ");
  json_string(stdout, text);
  const bench_result *r = &c->r;
  printf(", \"peak_reserved\": %llu, \"peak_in_use\": %llu, \"fragmentation\": %.6f, \"driver_allocs\": %llu, "
         "\"driver_frees\": %llu, \"driver_calls\": %llu, \"modeled_driver_ms\": %.3f, \"ns_per_op\": %.3f, "
         "\"failed\": %llu, \"error\": ",
         (unsigned long long)r->peak_reserved, (unsigned long long)r->peak_in_use, r->fragmentation,
         (unsigned long long)r->driver_allocs, (unsigned long long)r->driver_frees,
         (unsigned long long)(r->driver_allocs + r->driver_frees), r->modeled_driver_ms, r->ns_per_op,
         (unsigned long long)r->failed);
  if (c->error) json_string(stdout, r->message);
  else printf("null");
  printf("}");
}

static size_t rank_of(tune_candidate *const *ranked, size_t n, const tune_candidate *c) {
  for (size_t i = 0; i < n; i++)
    if (ranked[i] == c) return i + 1;
  return 0;
}

static void json_head(const tune_run *t) {
  const bench_workload *w = t->s.w;
  printf("{\"traces\": [");
  for (int i = 0; i < t->ntraces; i++) {
    printf("%s", i ? ", " : "");
    json_string(stdout, t->traces[i]);
  }
  printf("], \"workload\": ");
  json_string(stdout, w->name);
  printf(", \"processes\": %u, \"operations\": %zu, \"partitions\": [", w->processes, w->n);
  for (uint32_t i = 0; i < w->nnames; i++) {
    printf("%s", i ? ", " : "");
    json_string(stdout, w->names[i]);
  }
  printf("], \"peak_in_use\": %llu, \"objective\": \"%s\", \"budget\": ", (unsigned long long)t->peak_in_use,
         tune_objective_name(t->s.objective));
  if (t->s.budget) printf("%llu", (unsigned long long)t->s.budget);
  else printf("null");
  printf(", \"configurations\": %zu, \"replays\": %zu, \"seconds\": %.3f", t->s.n, t->s.replays, t->seconds);
  printf(", \"prealloc_searched\": %s", t->s.prealloc_ok ? "true" : "false");
  printf(", \"expandable_searched\": %s", t->s.expandable_ok ? "true" : "false");
}

void tune_print_json(const tune_run *t) {
  size_t n;
  tune_candidate **ranked = tune_ranked(&t->s, &n);
  const tune_candidate *best = n && tune_eligible(&t->s, ranked[0]) ? ranked[0] : NULL;
  json_head(t);
  printf(", \"fits\": %s", !t->s.budget ? "null" : best ? "true" : "false");
  printf(",\n \"default\": ");
  json_candidate(&t->s, tune_default(&t->s), rank_of(ranked, n, tune_default(&t->s)));
  printf(",\n \"recommended\": ");
  if (best) json_candidate(&t->s, best, 1);
  else printf("null");
  printf(",\n \"unbudgeted\": ");
  if (t->unbudgeted) json_candidate(t->unbudgeted, t->unbudgeted_best, 1);
  else printf("null");
  printf(",\n \"candidates\": [");
  for (size_t i = 0; i < n; i++) {
    printf("%s\n  ", i ? "," : "");
    json_candidate(&t->s, ranked[i], i + 1);
  }
  printf("]}\n");
  free(ranked);
}
