/* Shared helpers and fixtures of the test suites: a context that ignores the environment,
 * a sim device of a given shape, so every suite starts from a known state, and the
 * counting host allocator. */
#ifndef GPUPART_TESTS_COMMON_H
#define GPUPART_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "gpupart.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static inline gpupart_context *test_context(void) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

static inline gpupart_device *test_sim_device(gpupart_context *ctx, const gpupart_sim_desc *sim,
                                              const gpupart_device_desc *base) {
  gpupart_device_desc d = base ? *base : (gpupart_device_desc){0};
  d.backend = GPUPART_BACKEND_SIM;
  d.backend_desc = sim;
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static inline gpupart_partition *test_partition(gpupart_device *dev, const char *name, uint64_t limit,
                                                uint64_t guarantee) {
  gpupart_partition_desc d = {.name = name, .limit = limit, .guarantee = guarantee};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static inline gpupart_stats test_stats(const gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s;
}

static inline void test_check(const gpupart_device *dev) {
  cr_assert_eq(gpupart_device_check(dev), GPUPART_OK, "%s", gpupart_last_error());
}

/* The counting host allocator (gpupart_context_desc.host_alloc and host_free, host_user
 * pointing at a test_counting): every call, and the blocks still live, in atomics since
 * a library thread may allocate too. */
typedef struct test_counting {
  atomic_long calls, live;
} test_counting;

static inline void *test_count_alloc(size_t n, void *user) {
  test_counting *c = user;
  void *p = malloc(n);
  atomic_fetch_add(&c->calls, 1);
  if (p) atomic_fetch_add(&c->live, 1);
  return p;
}

static inline void test_count_free(void *p, void *user) {
  test_counting *c = user;
  if (p) atomic_fetch_sub(&c->live, 1);
  free(p);
}

/* A context descriptor that ignores the environment and allocates through c. */
static inline gpupart_context_desc test_counting_desc(test_counting *c) {
  return (gpupart_context_desc){.flags = GPUPART_CONTEXT_IGNORE_ENV,
                                .host_alloc = test_count_alloc,
                                .host_free = test_count_free,
                                .host_user = c};
}

#endif
