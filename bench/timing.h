/* Per-operation timestamps, inline so a timed region costs a few dozen cycles: the TSC
 * on x86-64 (lfence before and after the start, rdtscp then lfence at the end, so the
 * measured call stays inside the region), CLOCK_MONOTONIC elsewhere (1 tick = 1 ns). */
#ifndef GPUPART_BENCH_TIMING_H
#define GPUPART_BENCH_TIMING_H

#include <stdint.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#define BENCH_HAVE_TSC 1
static inline uint64_t bench_tick_begin(void) {
  _mm_lfence();
  uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
static inline uint64_t bench_tick_end(void) {
  unsigned aux;
  uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
}
#else
#define BENCH_HAVE_TSC 0
uint64_t bench_now_ns(void);
static inline uint64_t bench_tick_begin(void) { return bench_now_ns(); }
static inline uint64_t bench_tick_end(void) { return bench_now_ns(); }
#endif

#endif
