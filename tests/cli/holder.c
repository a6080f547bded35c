/* A process that holds memory in a shared simulated device, for the tests of gpupart top,
 * metrics and exporter: opens sim device 0 of TOTAL MiB with GPUPART_DEVICE_SHARED and the
 * ledger folder DIR, creates each partition NAME:LIMIT:GUARANTEE:ALLOC[:FAILS] (MiB; limit
 * 0 = the budget), allocates ALLOC MiB in it and then makes FAILS allocations (default 0;
 * needs a LIMIT below TOTAL) of LIMIT + 1 MiB, each of which must be refused with ELIMIT; prints "ready" and
 * waits for standard input to close; then frees everything and exits 0 (1 on any failure,
 * with the message). A spec that starts with '+' makes its partition preallocated (its
 * whole limit reserved at creation). With GPUPART_TEST_HOLDER_ENV set, the GPUPART_*
 * variables are read too (the configured partitions, a DRA metadata folder), as a job's.
 * usage: holder DIR TOTAL [+]NAME:LIMIT:GUARANTEE:ALLOC[:FAILS]... */
#include <stdio.h>
#include <stdlib.h>

#include "gpupart.h"

#define MIB (1ull << 20)

static int fail(const char *what, gpupart_result rc) {
  fprintf(stderr, "holder: %s: %s (%s)\n", what, gpupart_last_error(), gpupart_result_name(rc));
  return 1;
}

/* Creates and fills the partition spec describes; the allocation goes to *a. */
static int hold(gpupart_device *dev, const char *spec, gpupart_allocation **a) {
  char name[64];
  unsigned long long limit, guarantee, alloc, fails = 0;
  int prealloc = *spec == '+';
  spec += prealloc;
  if (sscanf(spec, "%63[^:]:%llu:%llu:%llu:%llu", name, &limit, &guarantee, &alloc, &fails) < 4)
    return fprintf(stderr, "holder: bad partition '%s'\n", spec), 1;
  gpupart_partition_desc pd = {.name = name,
                               .limit = limit * MIB,
                               .guarantee = guarantee * MIB,
                               .growth = prealloc ? GPUPART_GROWTH_OFF : GPUPART_GROWTH_DEFAULT};
  gpupart_partition *p = NULL;
  gpupart_result rc = gpupart_partition_create(dev, &pd, &p);
  if (rc) return fail(name, rc);
  if (alloc && (rc = gpupart_alloc(p, alloc * MIB, 0, a))) return fail(name, rc);
  for (unsigned long long i = 0; i < fails; i++) {
    gpupart_allocation *x = NULL;
    if ((rc = gpupart_alloc(p, limit * MIB + MIB, 0, &x)) != GPUPART_ELIMIT)
      return fprintf(stderr, "holder: %s: an allocation past the limit was not refused\n", name), 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: holder DIR TOTAL NAME:LIMIT:GUARANTEE:ALLOC...\n"), 2;
  gpupart_context_desc cd = {.flags = getenv("GPUPART_TEST_HOLDER_ENV") ? 0 : GPUPART_CONTEXT_IGNORE_ENV,
                             .ledger_dir = argv[1]};
  gpupart_sim_desc sim = {.total_bytes = strtoull(argv[2], NULL, 10) * MIB};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  gpupart_result rc = gpupart_context_create(&cd, &ctx);
  if (rc || (rc = gpupart_device_open(ctx, &dd, &dev))) {
    fail("open", rc);
    gpupart_context_destroy(ctx); /* a refused open leaks nothing (the ASan build checks) */
    return 1;
  }
  gpupart_allocation *a[16] = {0};
  for (int i = 3; i < argc && i < 19; i++)
    if (hold(dev, argv[i], &a[i - 3])) return 1;
  printf("ready\n");
  fflush(stdout);
  while (getchar() != EOF) {}
  for (int i = 0; i < 16; i++)
    if (a[i]) gpupart_free(a[i]);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  return 0;
}
