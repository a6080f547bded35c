/* gp_hold: a gpupart application (linked to libgpupart), which the layer tests run next
 * to unmodified programs under the layers, on the same GPU and the same configuration
 * (GPUPART_SHARED, GPUPART_LEDGER_DIR, GPUPART_MEMORY_LIMIT...). It opens device 0 of
 * the backend named first, takes up to MIB MiB in 1 MiB allocations from partition NAME
 * (created with limit and guarantee 0: joined if another process made it), prints what
 * it got and its pid, waits for a line on stdin, frees everything and ends.
 *   gp_hold vulkan|opencl|cuda NAME MIB
 * Output: "uuid <hex>", "allocated <MiB> code <gpupart_result>", "holding <pid>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupart.h"

#define MAX_ALLOCS 4096

static int fail(const char *what, gpupart_result r) {
  fprintf(stderr, "gp_hold: %s: %s (%s)\n", what, gpupart_result_name(r), gpupart_last_error());
  return 1;
}

static void print_uuid(gpupart_device *dev) {
  gpupart_device_info info;
  if (gpupart_device_get_info(dev, &info)) return;
  printf("uuid ");
  for (int i = 0; i < 16; i++) printf("%02x", info.uuid[i]);
  printf("\n");
}

int main(int argc, char **argv) {
  static gpupart_allocation *held[MAX_ALLOCS];
  if (argc != 4) return fprintf(stderr, "usage: gp_hold vulkan|opencl|cuda NAME MIB\n"), 2;
  gpupart_backend backend = !strcmp(argv[1], "opencl") ? GPUPART_BACKEND_OPENCL
                            : !strcmp(argv[1], "cuda") ? GPUPART_BACKEND_CUDA
                                                       : GPUPART_BACKEND_VULKAN;
  gpupart_device_desc dd = {.backend = backend};
  gpupart_partition_desc pd = {.name = argv[2], .release_threshold = 1};
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_result r = gpupart_context_create(NULL, &ctx);
  if (r) return fail("context_create", r);
  if ((r = gpupart_device_open(ctx, &dd, &dev))) return fail("device_open", r);
  if ((r = gpupart_partition_create(dev, &pd, &p))) return fail("partition_create", r);
  print_uuid(dev);
  int n = 0, want = atoi(argv[3]);
  while (n < want && n < MAX_ALLOCS && (r = gpupart_alloc(p, 1u << 20, 0, &held[n])) == GPUPART_OK) n++;
  printf("allocated %d code %d\nholding %ld\n", n, (int)r, (long)getpid());
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) line[0] = 0;
  while (n) gpupart_free(held[--n]);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  return 0;
}
