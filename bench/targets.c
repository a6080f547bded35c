/* Targets: the devices the suite runs on. The simulated device is always there (a 64 GiB
 * one, which costs nothing since no memory backs it); every other backend is used when it
 * is built, its driver loads and it has a device, so new backends are picked up with no
 * change here. Real devices get workloads scaled down to a small share of their memory
 * and a cap on operations, since CPU drivers (PoCL, lavapipe) back blocks with host
 * memory and the driver policy there is slow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "registry.h"

#define SIM_TOTAL (64 * BENCH_GIB)
#define REAL_MEM_CAP (256 * BENCH_MIB)
#define REAL_OPS_CAP 20000

/* Where the CUDA driver is: $GPUPART_CUDA_LIBRARY (e.g. the test double) or the system's.
 * A library's location is not policy, so it alone passes through the ignored environment. */
const char *bench_cuda_library(void) {
  const char *p = getenv("GPUPART_CUDA_LIBRARY");
  return p && *p ? p : NULL;
}

const char *bench_shared_dir;

static char shared_tmp[64];

static void remove_shared_tmp(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", shared_tmp);
  if (system(cmd) != 0) fprintf(stderr, "gpupart-bench: could not remove %s\n", shared_tmp);
}

const char *bench_shared_tmpdir(void) {
  if (shared_tmp[0]) return shared_tmp;
  snprintf(shared_tmp, sizeof shared_tmp, "/tmp/gpupart-bench-XXXXXX");
  if (!mkdtemp(shared_tmp)) bench_die("mkdtemp: cannot make a ledger folder under /tmp");
  atexit(remove_shared_tmp);
  return shared_tmp;
}

const char *bench_trace_file;

gpupart_context *bench_context(void) {
  static char text[1200];
  int n = snprintf(text, sizeof text, "[gpupart]\n");
  if (bench_cuda_library())
    n += snprintf(text + n, sizeof text - (size_t)n, "cuda_library = %s\n", bench_cuda_library());
  if (bench_trace_file) snprintf(text + n, sizeof text - (size_t)n, "trace = %s\n", bench_trace_file);
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV,
                            .config_text = bench_cuda_library() || bench_trace_file ? text : NULL,
                            .ledger_dir = bench_shared_dir};
  gpupart_context *ctx = NULL;
  if (gpupart_context_create(&d, &ctx)) bench_die("context_create: %s", gpupart_last_error());
  return ctx;
}

const void *bench_target_desc(const bench_target *t) {
  return t->backend == GPUPART_BACKEND_SIM ? (const void *)&t->sim : NULL;
}

gpupart_device *bench_device_open(gpupart_context *ctx, const bench_target *t, char *err, size_t n) {
  gpupart_device_desc d = {.backend = t->backend,
                           .index = t->index,
                           .backend_desc = bench_target_desc(t),
                           .flags = bench_shared_dir ? GPUPART_DEVICE_SHARED : 0};
  gpupart_device *dev = NULL;
  gpupart_result rc = gpupart_device_open(ctx, &d, &dev);
  if (rc) snprintf(err, n, "device_open: %s: %s", gpupart_result_name(rc), gpupart_last_error());
  return dev;
}

static void sim_target(bench_target *t) {
  *t = (bench_target){.backend = GPUPART_BACKEND_SIM};
  t->sim = (gpupart_sim_desc){.total_bytes = SIM_TOTAL};
  t->info.backend = GPUPART_BACKEND_SIM;
  t->info.total_bytes = SIM_TOTAL;
  t->info.max_block_bytes = SIM_TOTAL;
  t->info.min_alignment = 256;
}

/* Device 0 of backend b, if the backend is built, loads and has one. */
static int real_target(gpupart_context *ctx, gpupart_backend b, int named, bench_target *t) {
  gpupart_device_info info;
  uint32_t count = 1;
  gpupart_result rc = gpupart_enumerate(ctx, b, &info, &count);
  if (rc || !count) {
    if (named)
      fprintf(stderr, "gpupart-bench: backend %s: %s\n", gpupart_backend_name(b),
              rc ? gpupart_last_error() : "no device");
    return 0;
  }
  *t = (bench_target){.backend = b, .index = 0, .info = info, .ops_cap = REAL_OPS_CAP};
  t->mem_cap = info.total_bytes / 8 < REAL_MEM_CAP ? info.total_bytes / 8 : REAL_MEM_CAP;
  return 1;
}

/* Whether the comma-separated list names name ("sim,vulkan" names vulkan). */
static int list_names(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t k = strcspn(p, ",");
    if (k == n && strncmp(p, name, n) == 0) return 1;
    p += k + (p[k] == ',');
  }
  return 0;
}

/* Every element of the --backend list must be "all" or a backend's name. */
static void check_list(const char *list, const gpupart_backend *known, size_t n) {
  for (const char *p = list;; p++) {
    size_t k = strcspn(p, ","), ok = k == 3 && strncmp(p, "all", 3) == 0;
    for (size_t i = 0; i < n && !ok; i++)
      ok = k == strlen(gpupart_backend_name(known[i])) && strncmp(p, gpupart_backend_name(known[i]), k) == 0;
    if (!ok)
      bench_die("--backend: unknown backend '%.*s' in '%s' (want sim, opencl, vulkan, cuda or all, "
                "or a comma-separated list of them)",
                (int)k, p, list);
    p += k;
    if (!*p) return;
  }
}

int bench_targets_find(const char *which, bench_target *out, int max) {
  /* Every backend of the registry, in registry order (core/base/registry.h). */
#define BENCH_REAL(ID, name, rank) GPUPART_BACKEND_##ID,
  static const gpupart_backend listed[] = {GPUPART__BACKENDS(BENCH_REAL)};
#undef BENCH_REAL
  size_t nl = sizeof listed / sizeof listed[0];
  check_list(which, listed, nl);
  int all = list_names(which, "all"), n = 0;
  if ((all || list_names(which, "sim")) && n < max) sim_target(&out[n++]);
  gpupart_context *ctx = bench_context();
  for (size_t i = 0; i < nl && n < max; i++) {
    int named = list_names(which, gpupart_backend_name(listed[i]));
    if (listed[i] != GPUPART_BACKEND_SIM && (all || named)) n += real_target(ctx, listed[i], named, &out[n]);
  }
  gpupart_context_destroy(ctx);
  return n;
}
