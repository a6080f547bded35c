/* Helpers of the policy suites (device, partition, growth, oom, stats, model, threads):
 * creating partitions from descriptors, allocating with the failure message in the
 * assertion, and reading the figures the tests compare. Each helper asserts, so a test
 * reads as the behaviour it checks. */
#ifndef GPUPART_TESTS_POLICY_H
#define GPUPART_TESTS_POLICY_H

#include <string.h>

#include "common.h"

static inline gpupart_partition *make_partition(gpupart_device *dev, const gpupart_partition_desc *d) {
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, d, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_not_null(p);
  return p;
}

static inline gpupart_allocation *alloc_ok(gpupart_partition *p, uint64_t size) {
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, size, 0, &a), GPUPART_OK, "alloc %llu: %s", (unsigned long long)size,
               gpupart_last_error());
  return a;
}

static inline gpupart_stats dev_stats(const gpupart_device *dev) {
  gpupart_stats s;
  cr_assert_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  return s;
}

static inline gpupart_allocation_info info_of(const gpupart_allocation *a) {
  gpupart_allocation_info i;
  cr_assert_eq(gpupart_allocation_get_info(a, &i), GPUPART_OK, "%s", gpupart_last_error());
  return i;
}

static inline int message_has(const char *needle) { return strstr(gpupart_last_error(), needle) != NULL; }

/* A fresh context and sim device of the given shape, closed by close_all. */
typedef struct sim_env {
  gpupart_context *ctx;
  gpupart_device *dev;
} sim_env;

static inline sim_env open_env(const gpupart_sim_desc *sim, const gpupart_device_desc *base) {
  sim_env e;
  e.ctx = test_context();
  e.dev = test_sim_device(e.ctx, sim, base);
  return e;
}

static inline void close_env(sim_env *e) {
  test_check(e->dev);
  cr_expect_eq(gpupart_device_close(e->dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(e->ctx), GPUPART_OK, "%s", gpupart_last_error());
}

#endif
