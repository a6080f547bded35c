/* A client of the public API written in the C99 style of descriptors: every call of
 * gpupart.h that takes or fills a struct is given a compound literal, whose braces hold
 * commas that a function-like macro would split into extra arguments (STYLE habit 20).
 * It must compile warning-free with gcc and clang under -std=c11 -Wall -Wextra
 * -Wpedantic -Werror, and run on the sim backend. It also takes the address of each
 * plain name (&gpupart_device_open, ...), which must stay a real function. Run by
 * tests/api/run_clients.py; exits 0 when every check passed. */
#include <stdio.h>
#include <string.h>

#include "gpupart.h"

static int failures;

#define CHECK(cond)                                                                                                   \
  do {                                                                                                                \
    if (!(cond)) {                                                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, gpupart_last_error()); \
      failures++;                                                                                                     \
    }                                                                                                                 \
  } while (0)

#define MiB (1ull << 20)

static void allocations(gpupart_partition *p) {
  gpupart_allocation *a = NULL, *b = NULL;
  gpupart_allocation_info *info, *both;
  CHECK(gpupart_alloc_ex(p, &(gpupart_alloc_desc){.size = 1000, .alignment = 4096, .tag = 7}, &a) == GPUPART_OK);
  gpupart_result r = gpupart_allocation_get_info(a, info = &(gpupart_allocation_info){.size = 1, .offset = 2});
  CHECK(r == GPUPART_OK && info->partition == p && info->size == 1000 && info->device_address % 4096 == 0);
  r = gpupart_alloc_info(p, &(gpupart_alloc_desc){.size = 3000, .flags = GPUPART_ALLOC_NO_RECLAIM}, &b,
                         both = &(gpupart_allocation_info){.size = 0, .block_size = 0});
  CHECK(r == GPUPART_OK && both->size == 3000 && both->partition == p);
  CHECK(gpupart_free(a) == GPUPART_OK && gpupart_free(b) == GPUPART_OK);
}

static void statistics(gpupart_device *dev, gpupart_partition *p) {
  gpupart_stats *st, *dst;
  gpupart_result r = gpupart_partition_get_stats(p, st = &(gpupart_stats){.limit = 1, .guarantee = 2});
  CHECK(r == GPUPART_OK && st->limit == 64 * MiB && st->guarantee == 32 * MiB);
  CHECK(st->total_allocations == 2 && st->total_frees == 2);
  r = gpupart_device_get_stats(dev, dst = &(gpupart_stats){.limit = 1, .in_use = 2});
  CHECK(r == GPUPART_OK && dst->limit == 256 * MiB && dst->guarantee == 32 * MiB);
  gpupart_device_info *info;
  r = gpupart_device_get_info(dev, info = &(gpupart_device_info){.index = 9, .total_bytes = 1});
  CHECK(r == GPUPART_OK && info->backend == GPUPART_BACKEND_SIM && info->total_bytes == 256 * MiB);
  CHECK(info->min_alignment == 4096);
}

static void device(gpupart_context *ctx) {
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  CHECK(gpupart_device_open(
            ctx,
            &(gpupart_device_desc){.backend = GPUPART_BACKEND_SIM,
                                   .memory_fraction = 1.0,
                                   .backend_desc = &(gpupart_sim_desc){.total_bytes = 256 * MiB, .min_alignment = 4096},
                                   .backend_desc_size = sizeof(gpupart_sim_desc)},
            &dev) == GPUPART_OK);
  if (!dev) return;
  CHECK(gpupart_partition_create(dev,
                                 &(gpupart_partition_desc){.name = "literal", .limit = 64 * MiB, .guarantee = 32 * MiB},
                                 &p) == GPUPART_OK);
  if (p) allocations(p);
  if (p) statistics(dev, p);
  CHECK(gpupart_partition_destroy(p) == GPUPART_OK);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}

static void enumerate(gpupart_context *ctx) {
  gpupart_device_info *infos;
  uint32_t *count;
  gpupart_result r = gpupart_enumerate(
      ctx, GPUPART_BACKEND_SIM, infos = (gpupart_device_info[2]){{.index = 5}, {.index = 6}}, count = &(uint32_t){2});
  CHECK(r == GPUPART_OK && *count == 1 && infos[0].backend == GPUPART_BACKEND_SIM && infos[0].index == 0);
  CHECK(infos[1].index == 6); /* past the count: untouched */
}

/* The plain names are real functions too: each called through its address, with the
 * arguments the macros take (a program built now gets the current layouts from them). */
typedef struct plain_fns {
  gpupart_result (*context_create)(const gpupart_context_desc *, gpupart_context **);
  gpupart_result (*enumerate)(gpupart_context *, gpupart_backend, gpupart_device_info *, uint32_t *);
  gpupart_result (*device_open)(gpupart_context *, const gpupart_device_desc *, gpupart_device **);
  gpupart_result (*device_get_info)(const gpupart_device *, gpupart_device_info *);
  gpupart_result (*partition_create)(gpupart_device *, const gpupart_partition_desc *, gpupart_partition **);
  gpupart_result (*alloc_ex)(gpupart_partition *, const gpupart_alloc_desc *, gpupart_allocation **);
  gpupart_result (*allocation_get_info)(const gpupart_allocation *, gpupart_allocation_info *);
  gpupart_result (*alloc_info)(gpupart_partition *, const gpupart_alloc_desc *, gpupart_allocation **,
                               gpupart_allocation_info *);
  gpupart_result (*partition_get_stats)(const gpupart_partition *, gpupart_stats *);
  gpupart_result (*device_get_stats)(const gpupart_device *, gpupart_stats *);
} plain_fns;

static const plain_fns fn = {&gpupart_context_create,      &gpupart_enumerate,        &gpupart_device_open,
                             &gpupart_device_get_info,     &gpupart_partition_create, &gpupart_alloc_ex,
                             &gpupart_allocation_get_info, &gpupart_alloc_info,       &gpupart_partition_get_stats,
                             &gpupart_device_get_stats};

static void plain_partition(gpupart_partition *p) {
  gpupart_allocation *a = NULL, *b = NULL;
  gpupart_allocation_info *info, *both;
  gpupart_stats *st;
  CHECK(fn.alloc_ex(p, &(gpupart_alloc_desc){.size = 100, .tag = 1}, &a) == GPUPART_OK);
  gpupart_result r = fn.allocation_get_info(a, info = &(gpupart_allocation_info){.size = 0, .offset = 0});
  CHECK(r == GPUPART_OK && info->size == 100);
  r = fn.alloc_info(p, &(gpupart_alloc_desc){.size = 200, .tag = 2}, &b,
                    both = &(gpupart_allocation_info){.size = 0, .offset = 0});
  CHECK(r == GPUPART_OK && both->size == 200);
  r = fn.partition_get_stats(p, st = &(gpupart_stats){.limit = 0, .in_use = 0});
  CHECK(r == GPUPART_OK && st->limit == 32 * MiB && st->in_use == 300);
  CHECK(gpupart_free(a) == GPUPART_OK && gpupart_free(b) == GPUPART_OK);
}

static void plain_device(gpupart_device *dev) {
  gpupart_partition *p = NULL;
  gpupart_device_info *info;
  gpupart_result r = fn.device_get_info(dev, info = &(gpupart_device_info){.index = 1, .total_bytes = 0});
  CHECK(r == GPUPART_OK && info->backend == GPUPART_BACKEND_SIM && info->block_granularity == 256);
  CHECK(fn.partition_create(dev, &(gpupart_partition_desc){.name = "by_address", .limit = 32 * MiB}, &p) == GPUPART_OK);
  if (p) plain_partition(p);
  gpupart_stats *st;
  r = fn.device_get_stats(dev, st = &(gpupart_stats){.limit = 0, .in_use = 0});
  CHECK(r == GPUPART_OK && st->limit == 128 * MiB);
}

static void addresses(void) {
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  uint32_t count = 0;
  CHECK(fn.context_create(&(gpupart_context_desc){.flags = GPUPART_CONTEXT_IGNORE_ENV, .log = NULL}, &ctx) ==
        GPUPART_OK);
  CHECK(fn.enumerate(ctx, GPUPART_BACKEND_SIM, NULL, &count) == GPUPART_OK && count == 1);
  CHECK(fn.device_open(ctx, &(gpupart_device_desc){.backend = GPUPART_BACKEND_SIM, .memory_limit = 128 * MiB}, &dev) ==
        GPUPART_OK);
  if (dev) plain_device(dev);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
  CHECK(gpupart_context_destroy(ctx) == GPUPART_OK);
}

int main(void) {
  gpupart_context *ctx = NULL;
  CHECK(gpupart_context_create(&(gpupart_context_desc){.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = NULL},
                               &ctx) == GPUPART_OK);
  if (!ctx) return 1;
  enumerate(ctx);
  device(ctx);
  addresses();
  CHECK(gpupart_context_destroy(ctx) == GPUPART_OK);
  printf("compound literals: %d failure(s)\n", failures);
  return failures != 0;
}
