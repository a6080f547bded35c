/* The demo that ./scripts/run shows: every device of every backend present, then on
 * each backend's first device a partitioned workload (a training share with a floor and
 * an evaluation share, both growing on demand) with the figures gpupart keeps. */
#include <gpupart.h>
#include <inttypes.h>
#include <stdio.h>

#define MiB ((uint64_t)1 << 20)

static void list_devices(gpupart_context *ctx, gpupart_backend b) {
  gpupart_device_info info[8];
  uint32_t n = 8;
  gpupart_result rc = gpupart_enumerate(ctx, b, info, &n);
  if (rc != GPUPART_OK) {
    printf("%-7s absent: %s\n", gpupart_backend_name(b), gpupart_last_error());
    return;
  }
  for (uint32_t i = 0; i < n && i < 8; i++)
    printf("%-7s #%u %s (%s): %" PRIu64 " MiB, largest block %" PRIu64 " MiB, alignment %" PRIu64 "\n",
           gpupart_backend_name(b), i, info[i].name, info[i].vendor, info[i].total_bytes / MiB,
           info[i].max_block_bytes / MiB, info[i].min_alignment);
}

static void print_stats(const gpupart_partition *p) {
  gpupart_stats s;
  gpupart_partition_get_stats(p, &s);
  printf("  %-6s limit %5" PRIu64 " MiB, guarantee %4" PRIu64 " MiB, peak in use %5.1f MiB, "
         "peak reserved %5" PRIu64 " MiB, driver allocs %" PRIu64 ", refused %" PRIu64 "\n",
         gpupart_partition_name(p), s.limit / MiB, s.guarantee / MiB, s.peak_in_use / (double)MiB,
         s.peak_reserved / MiB, s.driver_allocs, s.failed_allocations);
}

/* A training-like pattern: weights that live throughout, activations freed in reverse. */
static int workload(gpupart_partition *p, uint64_t scale) {
  gpupart_allocation *held[48] = {0};
  int n = 0, refused = 0;
  for (int layer = 0; layer < 48; layer++) {
    uint64_t size = scale * (1 + (uint64_t)(layer % 7)) + 4096u * (uint64_t)layer;
    if (gpupart_alloc(p, size, 0, &held[n]) == GPUPART_OK) n++;
    else refused++;
  }
  while (n > 0) gpupart_free(held[--n]);
  return refused;
}

static void run_on(gpupart_context *ctx, gpupart_backend b) {
  gpupart_device_desc dd = {.backend = b, .memory_fraction = 0.5};
  gpupart_device *dev;
  if (gpupart_device_open(ctx, &dd, &dev) != GPUPART_OK) return;
  uint64_t budget = gpupart_device_budget(dev);
  printf("\n%s device 0: budget %" PRIu64 " MiB (half the device)\n", gpupart_backend_name(b), budget / MiB);
  gpupart_partition_desc train = {.name = "train", .fraction = 0.6, .guarantee_fraction = 0.4};
  gpupart_partition_desc eval = {.name = "eval", .fraction = 0.3};
  gpupart_partition *pt, *pe;
  if (gpupart_partition_create(dev, &train, &pt) || gpupart_partition_create(dev, &eval, &pe)) {
    printf("  partitions: %s\n", gpupart_last_error());
  } else {
    uint64_t scale = budget / 2048 > 16 * MiB ? 16 * MiB : budget / 2048;
    workload(pt, scale);
    int refused = workload(pe, scale * 4);
    print_stats(pt);
    print_stats(pe);
    if (refused) printf("  eval was refused %d time(s): %s\n", refused, gpupart_last_error());
  }
  if (gpupart_device_check(dev) != GPUPART_OK) printf("  check: %s\n", gpupart_last_error());
  gpupart_device_close(dev);
}

int main(void) {
  gpupart_context *ctx;
  if (gpupart_context_create(NULL, &ctx) != GPUPART_OK) {
    fprintf(stderr, "gpupart: %s\n", gpupart_last_error());
    return 1;
  }
  printf("gpupart %s\n\n", gpupart_version_string());
  const gpupart_backend all[] = {GPUPART_BACKEND_CUDA, GPUPART_BACKEND_VULKAN, GPUPART_BACKEND_OPENCL,
                                 GPUPART_BACKEND_SIM};
  for (int i = 0; i < 4; i++) list_devices(ctx, all[i]);
  for (int i = 0; i < 4; i++) run_on(ctx, all[i]);
  return gpupart_context_destroy(ctx) == GPUPART_OK ? 0 : 1;
}
