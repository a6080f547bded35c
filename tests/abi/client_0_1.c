/* A program built against the 0.1 header (tests/abi/0.1/gpupart.h, include/gpupart.h as
 * commit 5e448af had it: the first published API, with no symbol versions and no
 * `_sized` calls) and linked as 0.1 programs were, against an unversioned
 * libgpupart.so.0 (tests/abi/stub), then run against the current library. Every struct
 * it passes lies between two canaries of 64 bytes of 0xa5, and so does the padding inside
 * each input struct (its fields are set one by one over the pattern, as a program that
 * never zeroes its structs would): the library must read and write the 0.1 layouts only.
 * A byte written past a struct, or a 0.2 field read from past a 0.1 struct, fails a
 * check. Exits 0 when every check passed, 1 otherwise, printing each failure. */
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
#define CANARY 64
#define PATTERN 0xa5

/* Room for one struct (or array) of up to 1 KiB between two canaries. */
typedef struct fenced {
  _Alignas(16) unsigned char bytes[CANARY + 1024 + CANARY];
  size_t size;
} fenced;

/* Fills the whole fence with the pattern and returns the struct's place in it. */
static void *fence(fenced *f, size_t size) {
  memset(f->bytes, PATTERN, sizeof f->bytes);
  f->size = size;
  return f->bytes + CANARY;
}

/* Whether both canaries still hold the pattern. */
static int intact(const fenced *f) {
  for (size_t i = 0; i < CANARY; i++)
    if (f->bytes[i] != PATTERN || f->bytes[CANARY + f->size + i] != PATTERN) return 0;
  return 1;
}

static gpupart_context *context(void) {
  fenced f;
  gpupart_context_desc *d = fence(&f, sizeof *d);
  d->flags = GPUPART_CONTEXT_IGNORE_ENV;
  d->config_path = NULL;
  d->config_text = NULL;
  d->ledger_dir = NULL;
  d->log = NULL;
  d->log_user = NULL;
  d->host_alloc = NULL;
  d->host_free = NULL;
  d->host_user = NULL;
  gpupart_context *ctx = NULL;
  CHECK(gpupart_context_create(d, &ctx) == GPUPART_OK);
  CHECK(intact(&f));
  return ctx;
}

/* Two entries of room, one sim device: the second entry and the canaries untouched. */
static void enumerate(gpupart_context *ctx) {
  fenced f;
  gpupart_device_info *infos = fence(&f, 2 * sizeof *infos);
  uint32_t count = 2;
  CHECK(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, infos, &count) == GPUPART_OK);
  CHECK(count == 1 && infos[0].backend == GPUPART_BACKEND_SIM && infos[0].index == 0);
  CHECK(strcmp(infos[0].name, "gpupart simulated device") == 0 && infos[0].min_alignment == 256);
  CHECK(infos[1].index == 0xa5a5a5a5u && infos[1].total_bytes == 0xa5a5a5a5a5a5a5a5ull);
  CHECK(intact(&f));
  infos = fence(&f, sizeof *infos);
  count = 1;
  CHECK(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, infos, &count) == GPUPART_OK && count == 1);
  CHECK(infos[0].total_bytes == 16ull << 30 && intact(&f));
}

static gpupart_device *open_sim(gpupart_context *ctx) {
  fenced fs, fd;
  gpupart_sim_desc *sim = fence(&fs, sizeof *sim);
  sim->total_bytes = 256 * MiB;
  sim->max_block_bytes = 0;
  sim->min_alignment = 4096;
  sim->max_blocks = 0;
  sim->fail_block_alloc_at = 0;
  sim->host_backed = 0;
  gpupart_device_desc *d = fence(&fd, sizeof *d);
  d->backend = GPUPART_BACKEND_SIM;
  d->index = 0;
  d->memory_fraction = 0;
  d->memory_limit = 0;
  d->headroom = 0;
  d->growth = GPUPART_GROWTH_DEFAULT;
  d->granularity = 0;
  d->backend_desc = sim;
  d->flags = 0;
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open(ctx, d, &dev) == GPUPART_OK);
  CHECK(intact(&fs) && intact(&fd));
  return dev;
}

static void device_info(gpupart_device *dev) {
  fenced f;
  gpupart_device_info *info = fence(&f, sizeof *info);
  CHECK(gpupart_device_get_info(dev, info) == GPUPART_OK);
  CHECK(info->backend == GPUPART_BACKEND_SIM && info->total_bytes == 256 * MiB && info->min_alignment == 4096);
  CHECK(intact(&f));
}

static gpupart_partition *partition(gpupart_device *dev) {
  fenced f;
  gpupart_partition_desc *d = fence(&f, sizeof *d);
  d->name = "abi01";
  d->fraction = 0;
  d->limit = 64 * MiB;
  d->guarantee_fraction = 0;
  d->guarantee = 32 * MiB;
  d->growth = GPUPART_GROWTH_DEFAULT;
  d->initial_block = 0;
  d->max_block = 0;
  d->growth_factor = 0;
  d->release_threshold = 0;
  d->reclaim = NULL;
  d->reclaim_user = NULL;
  gpupart_partition *p = NULL;
  CHECK(gpupart_partition_create(dev, d, &p) == GPUPART_OK);
  CHECK(intact(&f));
  return p;
}

static void allocation(gpupart_partition *p) {
  fenced fa, fi;
  gpupart_alloc_desc *d = fence(&fa, sizeof *d);
  d->size = 1000;
  d->alignment = 8192;
  d->flags = 0;
  d->tag = 7;
  gpupart_allocation *a = NULL;
  CHECK(gpupart_alloc_ex(p, d, &a) == GPUPART_OK && intact(&fa));
  gpupart_allocation_info *info = fence(&fi, sizeof *info);
  CHECK(a && gpupart_allocation_get_info(a, info) == GPUPART_OK);
  CHECK(info->partition == p && info->size == 1000 && info->device_address % 8192 == 0 && intact(&fi));
  gpupart_free(a); /* void in 0.1: the result the library returns now is ignored */
  gpupart_free(a); /* a double free: reported, ignored */
}

static void stats(gpupart_device *dev, gpupart_partition *p) {
  fenced f;
  gpupart_stats *st = fence(&f, sizeof *st);
  CHECK(gpupart_partition_get_stats(p, st) == GPUPART_OK);
  CHECK(st->limit == 64 * MiB && st->guarantee == 32 * MiB && st->total_allocations == 1 && st->total_frees == 1);
  CHECK(st->live_allocations == 0 && st->in_use == 0 && st->peak_in_use == 1000 && st->driver_allocs == 1);
  CHECK(intact(&f));
  st = fence(&f, sizeof *st);
  CHECK(gpupart_device_get_stats(dev, st) == GPUPART_OK);
  CHECK(st->limit == 256 * MiB && st->guarantee == 32 * MiB && st->driver_allocs == 1 && intact(&f));
}

int main(void) {
  /* The stub's gpupart_version returns 0: make sure the real library was loaded. */
  if (gpupart_version() < 200) {
    fprintf(stderr, "abi 0.1: running against libgpupart %u, not the library under test\n", gpupart_version());
    return 1;
  }
  gpupart_context *ctx = context();
  if (!ctx) return 1;
  enumerate(ctx);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = dev ? partition(dev) : NULL;
  if (dev) device_info(dev);
  if (p) allocation(p);
  if (p) stats(dev, p);
  CHECK(gpupart_partition_destroy(p) == GPUPART_OK);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
  CHECK(gpupart_context_destroy(ctx) == GPUPART_OK);
  printf("abi 0.1: %d failure(s)\n", failures);
  return failures != 0;
}
