/* deploy_job: the workload that tests/deploy/test_deploy.py runs in place of a
 * container's or a Slurm job step's program, with exactly the configuration the manifest or
 * the batch script gives it. It uses no descriptor field and no flag: the context reads the
 * environment and the GPUPART_CONFIG file, device 0 opens as configured (backend,
 * budget, GPUPART_SHARED, GPUPART_LEDGER_DIR, the orchestrator's share) with the configured
 * partitions, as an unmodified deployment's program would. Then it
 *   - allocates HOLD MiB in the first configured partition and keeps them;
 *   - asks that partition for one granule past its limit, which must be refused (ELIMIT);
 *   - with ASK_MIB, asks that partition for ASK MiB more (within its limit, past what the
 *     shared budget leaves: tests/deploy/slurm_cluster.py's jobs of two users) and prints
 *     one line "ask RESULT: MESSAGE" (gpupart_last_error's message; freed if granted);
 *   - prints one JSON line: {"budget", "held", "refused",
 *     "partitions": [{"name", "limit", "guarantee"}]};
 *   - waits: until the file RELEASE exists (checked every 10 ms, at most 120 s), else
 *     until standard input closes; then frees, closes, and exits 0.
 * usage: deploy_job HOLD_MIB [RELEASE [ASK_MIB]]. Exit 1 on any failure, with the message. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gpupart.h"

#define MIB (1ull << 20)

static int fail(const char *what, gpupart_result rc) {
  fprintf(stderr, "deploy_job: %s: %s (%s)\n", what, gpupart_last_error(), gpupart_result_name(rc));
  return 1;
}

static void print_partitions(gpupart_device *dev) {
  printf("\"partitions\": [");
  for (uint32_t i = 0; i < gpupart_partition_count(dev); i++) {
    gpupart_partition *p = gpupart_partition_at(dev, i);
    gpupart_stats s = {0};
    gpupart_partition_get_stats(p, &s);
    printf("%s{\"name\": \"%s\", \"limit\": %llu, \"guarantee\": %llu}", i ? ", " : "", gpupart_partition_name(p),
           (unsigned long long)s.limit, (unsigned long long)s.guarantee);
  }
  printf("]}\n");
}

/* One granule past the partition's limit must be refused; returns the result. */
static gpupart_result over_limit(gpupart_partition *p) {
  gpupart_stats s = {0};
  gpupart_partition_get_stats(p, &s);
  gpupart_allocation *a = NULL;
  gpupart_result rc = gpupart_alloc(p, s.limit + 2 * MIB, 0, &a);
  if (rc == GPUPART_OK) gpupart_free(a);
  return rc;
}

/* ASK MiB more in the partition, granted or not: says which, and why when refused. */
static void ask_more(gpupart_partition *p, uint64_t ask) {
  gpupart_allocation *a = NULL;
  gpupart_result rc = gpupart_alloc(p, ask, 0, &a);
  printf("ask %s: %s\n", gpupart_result_name(rc), rc == GPUPART_OK ? "granted" : gpupart_last_error());
  if (rc == GPUPART_OK) gpupart_free(a);
}

static void wait_release(const char *release) {
  if (!release) {
    while (getchar() != EOF) {}
    return;
  }
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 12000 && access(release, F_OK) != 0; i++) nanosleep(&tick, NULL);
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: deploy_job HOLD_MIB [RELEASE [ASK_MIB]]\n"), 2;
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  gpupart_device_desc dd = {0};
  gpupart_result rc = gpupart_context_create(NULL, &ctx);
  if (rc || (rc = gpupart_device_open(ctx, &dd, &dev))) return fail("open", rc);
  gpupart_partition *p = gpupart_partition_at(dev, 0);
  if (!p) return fprintf(stderr, "deploy_job: the configuration declares no partition\n"), 1;
  gpupart_allocation *held = NULL;
  uint64_t hold = strtoull(argv[1], NULL, 10) * MIB;
  if (hold && (rc = gpupart_alloc(p, hold, 0, &held))) return fail("hold", rc);
  gpupart_result refused = over_limit(p);
  if (argc > 3) ask_more(p, strtoull(argv[3], NULL, 10) * MIB);
  printf("{\"budget\": %llu, \"held\": %llu, \"refused\": \"%s\", ", (unsigned long long)gpupart_device_budget(dev),
         (unsigned long long)hold, gpupart_result_name(refused));
  print_partitions(dev);
  fflush(stdout);
  wait_release(argc > 2 ? argv[2] : NULL);
  if (held) gpupart_free(held);
  if ((rc = gpupart_device_close(dev)) || (rc = gpupart_context_destroy(ctx))) return fail("close", rc);
  return 0;
}
