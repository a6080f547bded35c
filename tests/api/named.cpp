/* The client of tests/api/literals.c as C++ would write it: C++ has no compound
 * literals, so every descriptor, info and stats struct is a named variable. It must
 * compile warning-free with g++ (and clang++) under -std=c++11 -Wall -Wextra -Wpedantic
 * -Werror, which checks that gpupart.h's forwarding macros and inline functions are
 * valid C++, and run on the sim backend. Run by tests/api/run_clients.py; exits 0 when
 * every check passed. */
#include <cstdio>
#include <cstring>

#include "gpupart.h"

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
                   gpupart_last_error());                                                          \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const uint64_t MiB = 1ull << 20;

static void allocations(gpupart_partition *p) {
  gpupart_alloc_desc ad = gpupart_alloc_desc();
  ad.size = 1000;
  ad.alignment = 4096;
  gpupart_allocation *a = NULL, *b = NULL;
  gpupart_allocation_info info = gpupart_allocation_info();
  CHECK(gpupart_alloc_ex(p, &ad, &a) == GPUPART_OK);
  CHECK(gpupart_allocation_get_info(a, &info) == GPUPART_OK);
  CHECK(info.partition == p && info.size == 1000 && info.device_address % 4096 == 0);
  ad.size = 3000;
  ad.alignment = 0;
  CHECK(gpupart_alloc_info(p, &ad, &b, &info) == GPUPART_OK);
  CHECK(info.size == 3000 && info.partition == p);
  CHECK(gpupart_free(a) == GPUPART_OK && gpupart_free(b) == GPUPART_OK);
}

static void statistics(gpupart_device *dev, gpupart_partition *p) {
  gpupart_stats st = gpupart_stats();
  CHECK(gpupart_partition_get_stats(p, &st) == GPUPART_OK);
  CHECK(st.limit == 64 * MiB && st.guarantee == 32 * MiB && st.total_allocations == 2 && st.total_frees == 2);
  CHECK(gpupart_device_get_stats(dev, &st) == GPUPART_OK);
  CHECK(st.limit == 256 * MiB && st.guarantee == 32 * MiB);
  gpupart_device_info info = gpupart_device_info();
  CHECK(gpupart_device_get_info(dev, &info) == GPUPART_OK);
  CHECK(info.backend == GPUPART_BACKEND_SIM && info.total_bytes == 256 * MiB && info.min_alignment == 4096);
}

static void device(gpupart_context *ctx) {
  gpupart_sim_desc sim = gpupart_sim_desc();
  sim.total_bytes = 256 * MiB;
  sim.min_alignment = 4096;
  gpupart_device_desc dd = gpupart_device_desc();
  dd.backend = GPUPART_BACKEND_SIM;
  dd.backend_desc = &sim;
  dd.backend_desc_size = sizeof sim;
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open(ctx, &dd, &dev) == GPUPART_OK);
  if (!dev) return;
  gpupart_partition_desc pd = gpupart_partition_desc();
  pd.name = "named";
  pd.limit = 64 * MiB;
  pd.guarantee = 32 * MiB;
  gpupart_partition *p = NULL;
  CHECK(gpupart_partition_create(dev, &pd, &p) == GPUPART_OK);
  if (p) allocations(p);
  if (p) statistics(dev, p);
  CHECK(gpupart_partition_destroy(p) == GPUPART_OK);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}

static void enumerate(gpupart_context *ctx) {
  gpupart_device_info infos[2];
  std::memset(infos, 0, sizeof infos);
  infos[1].index = 6;
  uint32_t count = 2;
  CHECK(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, infos, &count) == GPUPART_OK);
  CHECK(count == 1 && infos[0].backend == GPUPART_BACKEND_SIM && infos[0].index == 0 && infos[1].index == 6);
}

/* A plain name is a real function in C++ too. */
static void addresses(gpupart_context *ctx) {
  gpupart_result (*open)(gpupart_context *, const gpupart_device_desc *, gpupart_device **) = &gpupart_device_open;
  gpupart_result (*stats)(const gpupart_device *, gpupart_stats *) = &gpupart_device_get_stats;
  gpupart_device_desc dd = gpupart_device_desc();
  dd.backend = GPUPART_BACKEND_SIM;
  dd.memory_limit = 128 * MiB;
  gpupart_device *dev = NULL;
  gpupart_stats st = gpupart_stats();
  CHECK(open(ctx, &dd, &dev) == GPUPART_OK);
  CHECK(dev && stats(dev, &st) == GPUPART_OK && st.limit == 128 * MiB);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}

int main() {
  gpupart_context_desc cd = gpupart_context_desc();
  cd.flags = GPUPART_CONTEXT_IGNORE_ENV;
  gpupart_context *ctx = NULL;
  CHECK(gpupart_context_create(&cd, &ctx) == GPUPART_OK);
  if (!ctx) return 1;
  enumerate(ctx);
  device(ctx);
  addresses(ctx);
  CHECK(gpupart_context_destroy(ctx) == GPUPART_OK);
  std::printf("named variables (C++): %d failure(s)\n", failures);
  return failures != 0;
}
