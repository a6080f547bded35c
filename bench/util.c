/* Small helpers of the benchmark: allocation that exits on failure (a benchmark that
 * runs out of host memory has nothing useful left to measure) and the deterministic
 * random generator every synthetic workload draws from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifndef GPUPART_BENCH_BUILDTYPE
#define GPUPART_BENCH_BUILDTYPE "unknown"
#define GPUPART_BENCH_OPTIMIZATION "unknown"
#endif

/* The first "model name" line of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon) continue;
    colon += strspn(colon + 1, " \t") + 1;
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(out, n, "%s", colon);
    break;
  }
  fclose(f);
}

void bench_machine_get(bench_machine *m) {
  cpu_model(m->cpu, sizeof m->cpu);
  m->build_type = GPUPART_BENCH_BUILDTYPE;
  m->optimization = GPUPART_BENCH_OPTIMIZATION;
#if defined(__clang__)
  m->compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  m->compiler = "gcc " __VERSION__;
#else
  m->compiler = "unknown";
#endif
}

const char *bench_program = "gpupart-bench";

_Noreturn void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", bench_program);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

void *bench_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) bench_die("out of host memory (%zu bytes)", n);
  return p;
}

void *bench_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) bench_die("out of host memory (%zu x %zu bytes)", n, size);
  return p;
}

void *bench_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) bench_die("out of host memory (%zu bytes)", n);
  return q;
}

/* splitmix64: tiny, fast, and good enough to make sizes and choices look random. */
uint64_t bench_rand(bench_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t bench_uniform(bench_rng *r, uint64_t lo, uint64_t hi) {
  if (hi <= lo) return lo;
  uint64_t span = hi - lo + 1;
  return span ? lo + bench_rand(r) % span : bench_rand(r);
}

/* Sizes spread evenly over orders of magnitude, as tensor and buffer sizes are. */
uint64_t bench_log_uniform(bench_rng *r, uint64_t lo, uint64_t hi) {
  int lo_bits = 63 - __builtin_clzll(lo | 1), hi_bits = 63 - __builtin_clzll(hi | 1);
  int bits = (int)bench_uniform(r, (uint64_t)lo_bits, (uint64_t)hi_bits);
  uint64_t base = 1ull << bits, top = bits >= 63 ? UINT64_MAX : (base << 1) - 1;
  uint64_t v = bench_uniform(r, base, top);
  return v < lo ? lo : v > hi ? hi : v;
}

int bench_chance(bench_rng *r, unsigned percent) { return bench_rand(r) % 100 < percent; }

uint64_t bench_round_up(uint64_t v, uint64_t pow2) { return (v + pow2 - 1) & ~(pow2 - 1); }
