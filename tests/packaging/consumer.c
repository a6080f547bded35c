/* The program that the packaging tests build outside gpupart's tree, against an installed
 * gpupart (CMake package, pkg-config) or gpupart as a meson subproject: it opens a sim
 * device, splits it, allocates, and checks the figures, so a consumer that compiles but
 * links or loads the wrong library fails. Prints the library's version on success. */
#include <gpupart.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, gpupart_result r) {
  fprintf(stderr, "consumer: %s: %s (%s)\n", what, gpupart_result_name(r), gpupart_last_error());
  return 1;
}

static int use_partition(gpupart_partition *p) {
  gpupart_allocation *a = NULL;
  gpupart_stats st;
  gpupart_result r = gpupart_alloc(p, 1u << 20, 0, &a);
  if (r != GPUPART_OK) return fail("gpupart_alloc", r);
  r = gpupart_partition_get_stats(p, &st);
  if (r != GPUPART_OK || st.in_use != (1u << 20) || st.live_allocations != 1) {
    fprintf(stderr, "consumer: in_use %llu, live %llu after one 1 MiB allocation\n", (unsigned long long)st.in_use,
            (unsigned long long)st.live_allocations);
    return 1;
  }
  (void)gpupart_free(a);
  return 0;
}

static int run(gpupart_context *ctx) {
  gpupart_sim_desc sim = {.total_bytes = 64u << 20};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
  gpupart_partition_desc pd = {.name = "train", .fraction = 0.5};
  gpupart_device *dev = NULL;
  gpupart_partition *p = NULL;
  gpupart_result r = gpupart_device_open(ctx, &dd, &dev);
  if (r != GPUPART_OK) return fail("gpupart_device_open", r);
  r = gpupart_partition_create(dev, &pd, &p);
  int bad = r != GPUPART_OK ? fail("gpupart_partition_create", r) : use_partition(p);
  r = gpupart_device_close(dev);
  return bad || (r != GPUPART_OK && fail("gpupart_device_close", r));
}

int main(void) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx = NULL;
  gpupart_result r = gpupart_context_create(&cd, &ctx);
  if (r != GPUPART_OK) return fail("gpupart_context_create", r);
  int bad = run(ctx);
  r = gpupart_context_destroy(ctx);
  if (bad || r != GPUPART_OK) return bad ? 1 : fail("gpupart_context_destroy", r);
  if (strlen(gpupart_version_string()) == 0) return 1;
  printf("gpupart %s: consumer ok\n", gpupart_version_string());
  return 0;
}
