/* Clocks of the benchmark. Whole replays are timed with CLOCK_MONOTONIC; single
 * operations, which take tens of nanoseconds, with the time-stamp counter (fenced so the
 * measured call cannot drift outside the region), calibrated once against
 * CLOCK_MONOTONIC, and with the cost of an empty timed region subtracted. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "timing.h"

static double ns_per_tick = 1.0;
static uint64_t overhead_ticks;

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bench_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static uint64_t measure_overhead(void) {
  enum { N = 4001 };
  static uint32_t s[N];
  for (int i = 0; i < N; i++) {
    uint64_t t0 = bench_tick_begin();
    uint64_t t1 = bench_tick_end();
    s[i] = (uint32_t)(t1 - t0);
  }
  qsort(s, N, sizeof s[0], cmp_u32);
  return s[N / 2];
}

void bench_ticks_calibrate(void) {
#if BENCH_HAVE_TSC
  uint64_t n0 = bench_now_ns(), t0 = bench_tick_begin(), n1;
  while ((n1 = bench_now_ns()) - n0 < 20000000ull) {}
  uint64_t t1 = bench_tick_end();
  ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
#endif
  overhead_ticks = measure_overhead();
}

double bench_ns_per_tick(void) { return ns_per_tick; }
uint64_t bench_tick_overhead(void) { return overhead_ticks; }

double bench_percentile_ns(uint32_t *samples, size_t n, double p) {
  if (!n) return 0;
  qsort(samples, n, sizeof *samples, cmp_u32);
  size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  uint64_t t = samples[i > n - 1 ? n - 1 : i];
  t = t > overhead_ticks ? t - overhead_ticks : 0;
  return (double)t * ns_per_tick;
}

int bench_pin_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
