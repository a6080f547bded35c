/* What the ThreadSanitizer programs (tests/tsan/, meson suite 'tsan' of a build with
 * b_sanitize=thread) share. Criterion cannot start under TSan, so each program is a plain
 * C program with pthreads: it runs its threads against the public API on a sim device,
 * counts what each thread saw (threads never stop the program themselves), and after
 * joining compares those counts with the library's figures; a mismatch prints what
 * differed and exits 1. TSan's own reports fail the run through TSAN_OPTIONS
 * (halt_on_error=1, exitcode=66; tests/tsan/meson.build). Counts, never timings. */
#ifndef GPUPART_TESTS_TSAN_COMMON_H
#define GPUPART_TESTS_TSAN_COMMON_H

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpupart.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* Stops the program: a precondition that must hold failed (setup, a call that cannot fail). */
static inline void tsan_die(const char *what, gpupart_result rc) {
  fprintf(stderr, "FAIL: %s: %s (%s)\n", what, gpupart_result_name(rc), gpupart_last_error());
  exit(1);
}

static inline void tsan_ok(gpupart_result rc, const char *what) {
  if (rc != GPUPART_OK) tsan_die(what, rc);
}

/* The program's verdict: every tsan_expect that failed is printed and counted. */
static atomic_int tsan_failures;

static inline void tsan_expect(int ok, const char *fmt, ...) {
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("FAIL: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  atomic_fetch_add(&tsan_failures, 1);
}

static inline void tsan_expect_eq(uint64_t got, uint64_t want, const char *what) {
  tsan_expect(got == want, "%s: %" PRIu64 ", expected %" PRIu64, what, got, want);
}

static inline int tsan_finish(const char *name) {
  int n = atomic_load(&tsan_failures);
  if (n) fprintf(stderr, "%s: %d check(s) failed\n", name, n);
  else printf("%s: all checks passed\n", name);
  return n ? 1 : 0;
}

static inline gpupart_context *tsan_context(const char *ledger_dir) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = ledger_dir};
  gpupart_context *ctx = NULL;
  tsan_ok(gpupart_context_create(&d, &ctx), "context_create");
  return ctx;
}

/* A sim device of total bytes (no memory behind it), shared through the ledger or not. */
static inline gpupart_device *tsan_device(gpupart_context *ctx, uint64_t total, uint32_t flags) {
  static gpupart_sim_desc sims[8];
  static atomic_int nsims;
  gpupart_sim_desc *sim = &sims[atomic_fetch_add(&nsims, 1) % 8];
  sim->total_bytes = total;
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = sim, .flags = flags};
  gpupart_device *dev = NULL;
  tsan_ok(gpupart_device_open(ctx, &d, &dev), "device_open");
  return dev;
}

static inline gpupart_partition *tsan_partition(gpupart_device *dev, const char *name, uint64_t limit, uint32_t flags) {
  gpupart_partition_desc d = {.name = name, .limit = limit, .flags = flags};
  gpupart_partition *p = NULL;
  tsan_ok(gpupart_partition_create(dev, &d, &p), "partition_create");
  return p;
}

static inline gpupart_stats tsan_stats(const gpupart_partition *p) {
  gpupart_stats s;
  tsan_ok(gpupart_partition_get_stats(p, &s), "partition_get_stats");
  return s;
}

static inline uint64_t tsan_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return x;
}

/* A thread's own figures: what it allocated, freed, was refused, and its live bytes. */
typedef struct tsan_tally {
  uint64_t allocs, frees, refused, odd, in_use, peak;
} tsan_tally;

/* A thread allocating in its own partition: the partition, its random state, its tally. */
typedef struct tsan_worker {
  gpupart_partition *p;
  uint64_t rng;
  tsan_tally t;
} tsan_worker;

/* Frees a, counted in t: a free the library refuses is odd. */
static inline void tsan_free(tsan_tally *t, gpupart_allocation *a) {
  if (gpupart_free(a) == GPUPART_OK) t->frees++;
  else t->odd++;
}

static inline void tsan_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  if (pthread_create(t, NULL, fn, arg) != 0) {
    fputs("FAIL: pthread_create\n", stderr);
    exit(1);
  }
}

static inline void tsan_join(pthread_t t) {
  if (pthread_join(t, NULL) != 0) {
    fputs("FAIL: pthread_join\n", stderr);
    exit(1);
  }
}

#endif
