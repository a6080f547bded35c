/* Output of the benchmark: the table on stdout (one row per backend, workload and
 * policy), the JSON array and CSV file with every metric under its contract name, and a
 * gnuplot chart (people would rather look than read): per-operation cost, modeled driver
 * time and fragmentation, each a cluster of bars per workload with one bar per policy. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

void bench_print_header(void) {
  printf("%-10s %-26s %-10s %7s %6s %8s %7s %7s %8s %7s %7s %9s %10s %10s %6s %6s %10s %6s\n", "backend", "workload",
         "policy", "ops", "scale", "ns/op", "cpu_ns", "p50_ns", "p99_ns", "drv_alc", "drv_fre", "calls/10k", "peak_use",
         "peak_rsv", "frag", "floor", "model_ms", "failed");
}

static double mib(uint64_t b) { return (double)b / (double)BENCH_MIB; }

void bench_print_row(const bench_result *r) {
  if (r->error) {
    printf("%-10s %-26s %-10s  error: %s\n", r->backend, r->workload, r->policy, r->message);
    return;
  }
  printf("%-10s %-26.26s %-10s %7llu %6.3g %8.1f %7.1f %7.0f %8.0f %7llu %7llu %9.1f %8.1fMi %8.1fMi %6.3f %6.3f "
         "%10.1f %6llu\n",
         r->backend, r->workload, r->policy, (unsigned long long)r->ops, r->scale, r->ns_per_op, r->cpu_ns_per_op,
         r->p50_ns, r->p99_ns, (unsigned long long)r->driver_allocs, (unsigned long long)r->driver_frees,
         r->driver_calls_per_10k, mib(r->peak_in_use), mib(r->peak_reserved), r->fragmentation, r->floor_fragmentation,
         r->modeled_driver_ms, (unsigned long long)r->failed);
}

/* ---- JSON ---- */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

void bench_json_machine(FILE *f) {
  static bench_machine m;
  if (!m.build_type) bench_machine_get(&m);
  fputs(", \"cpu\": ", f), json_string(f, m.cpu);
  fputs(", \"build_type\": ", f), json_string(f, m.build_type);
  fputs(", \"optimization\": ", f), json_string(f, m.optimization);
  fputs(", \"compiler\": ", f), json_string(f, m.compiler);
}

static void json_row(FILE *f, const bench_result *r) {
  fputs("  {\"backend\": ", f), json_string(f, r->backend);
  fputs(", \"workload\": ", f), json_string(f, r->workload);
  fputs(", \"policy\": ", f), json_string(f, r->policy);
  fprintf(f, ", \"ops\": %llu, \"scale\": %.6g, \"ns_per_op\": %.3f, \"cpu_ns_per_op\": %.3f",
          (unsigned long long)r->ops, r->scale, r->ns_per_op, r->cpu_ns_per_op);
  fprintf(f, ", \"p50_ns\": %.1f, \"p99_ns\": %.1f", r->p50_ns, r->p99_ns);
  fprintf(f, ", \"driver_allocs\": %llu, \"driver_frees\": %llu, \"driver_calls_per_10k_ops\": %.3f",
          (unsigned long long)r->driver_allocs, (unsigned long long)r->driver_frees, r->driver_calls_per_10k);
  fprintf(f, ", \"peak_in_use\": %llu, \"peak_reserved\": %llu, \"fragmentation\": %.6f",
          (unsigned long long)r->peak_in_use, (unsigned long long)r->peak_reserved, r->fragmentation);
  fprintf(f, ", \"floor_reserved\": %llu, \"floor_fragmentation\": %.6f", (unsigned long long)r->floor_reserved,
          r->floor_fragmentation);
  fprintf(f, ", \"modeled_driver_ms\": %.3f, \"failed\": %llu, \"error\": ", r->modeled_driver_ms,
          (unsigned long long)r->failed);
  if (r->error) json_string(f, r->message);
  else fputs("null", f);
  bench_json_machine(f);
  fputc('}', f);
}

static int close_checked(FILE *f, const char *path) {
  int bad = ferror(f);
  if (fclose(f) || bad) {
    fprintf(stderr, "gpupart-bench: writing %s failed\n", path);
    return -1;
  }
  return 0;
}

static FILE *open_out(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) perror(path);
  return f;
}

int bench_write_json(const char *path, const bench_result *rows, size_t n) {
  FILE *f = open_out(path);
  if (!f) return -1;
  fputs("[\n", f);
  for (size_t i = 0; i < n; i++) json_row(f, &rows[i]), fputs(i + 1 < n ? ",\n" : "\n", f);
  fputs("]\n", f);
  return close_checked(f, path);
}

/* ---- CSV ---- */

int bench_write_csv(const char *path, const bench_result *rows, size_t n) {
  FILE *f = open_out(path);
  if (!f) return -1;
  fputs("backend,workload,policy,ops,scale,ns_per_op,cpu_ns_per_op,p50_ns,p99_ns,driver_allocs,driver_frees,"
        "driver_calls_per_10k_ops,peak_in_use,peak_reserved,fragmentation,floor_reserved,floor_fragmentation,"
        "modeled_driver_ms,failed,error\n",
        f);
  for (size_t i = 0; i < n; i++) {
    const bench_result *r = &rows[i];
    fprintf(f, "%s,%s,%s,%llu,%.6g,%.3f,%.3f,%.1f,%.1f,%llu,%llu,%.3f,%llu,%llu,%.6f,%llu,%.6f,%.3f,%llu,\"%s\"\n",
            r->backend, r->workload, r->policy, (unsigned long long)r->ops, r->scale, r->ns_per_op, r->cpu_ns_per_op,
            r->p50_ns, r->p99_ns, (unsigned long long)r->driver_allocs, (unsigned long long)r->driver_frees,
            r->driver_calls_per_10k, (unsigned long long)r->peak_in_use, (unsigned long long)r->peak_reserved,
            r->fragmentation, (unsigned long long)r->floor_reserved, r->floor_fragmentation, r->modeled_driver_ms,
            (unsigned long long)r->failed, r->error ? r->message : "");
  }
  return close_checked(f, path);
}

/* ---- gnuplot ---- */

/* The value of one metric for (label row i's backend/workload, policy p), or "NaN". */
static void plot_value(FILE *g, const bench_result *rows, size_t n, const bench_result *key, int p, int metric) {
  for (size_t i = 0; i < n; i++) {
    const bench_result *r = &rows[i];
    if (r->error || strcmp(r->backend, key->backend) || strcmp(r->workload, key->workload) ||
        strcmp(r->policy, bench_policy_name((bench_policy)p)))
      continue;
    double v = metric == 0 ? r->ns_per_op : metric == 1 ? r->modeled_driver_ms : r->fragmentation;
    fprintf(g, " %.6g", metric < 2 && v <= 0 ? 1e-3 : v); /* log axes cannot show 0 */
    return;
  }
  fputs(" NaN", g);
}

static int first_of_group(const bench_result *rows, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (!strcmp(rows[j].backend, rows[i].backend) && !strcmp(rows[j].workload, rows[i].workload)) return 0;
  return 1;
}

static void plot_data(FILE *g, const bench_result *rows, size_t n, int metric) {
  fprintf(g, "$m%d << EOD\n", metric);
  for (size_t i = 0; i < n; i++) {
    if (!first_of_group(rows, i)) continue;
    fprintf(g, "\"%s/%s\"", rows[i].backend, rows[i].workload);
    for (int p = 0; p < BENCH_POLICY_COUNT; p++) plot_value(g, rows, n, &rows[i], p, metric);
    fputc('\n', g);
  }
  fputs("EOD\n", g);
}

static void plot_panel(FILE *g, int metric, const char *title, int logscale) {
  fprintf(g, "set title '%s'\n%s\n", title, logscale ? "set logscale y" : "unset logscale y");
  fprintf(g,
          "plot $m%d using 2:xtic(1) title 'driver', '' using 3 title 'growth', "
          "'' using 4 title 'prealloc', '' using 5 title 'partitions'\n",
          metric);
}

int bench_write_plot(const char *path, const bench_result *rows, size_t n) {
  if (strpbrk(path, "\"'\\\n")) return fprintf(stderr, "gpupart-bench: --plot: unusable file name\n"), -1;
  FILE *g = popen("gnuplot", "w");
  if (!g) return perror("gnuplot"), -1;
  fprintf(g, "set terminal pngcairo noenhanced size 1400,1500 font ',9'\nset output '%s'\n", path);
  fputs("set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
        "set xtics rotate by -30\nset key outside right top\nset grid y\nset multiplot layout 3,1\n",
        g);
  for (int m = 0; m < 3; m++) plot_data(g, rows, n, m);
  plot_panel(g, 0, "wall time per operation (ns, log)", 1);
  plot_panel(g, 1, "modeled driver time at GPU prices (ms, log: 80 us per alloc, 450 us per free)", 1);
  plot_panel(g, 2, "fragmentation = 1 - peak in use / peak reserved", 0);
  fputs("unset multiplot\n", g);
  int status = pclose(g);
  if (status) fprintf(stderr, "gpupart-bench: gnuplot failed (status %d); is gnuplot installed?\n", status);
  return status ? -1 : 0;
}
