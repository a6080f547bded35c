/* An application whose allocations gpupart tune's tests record (GPUPART_TRACE, set by the
 * test in the environment this program's context reads): on a simulated device of 8 GiB
 * it keeps model weights live in partition "weights" throughout, and runs ROUNDS steps
 * that each allocate a step's activations of varied sizes in "activations" and free them
 * newest first, with a few scratch buffers in "scratch" freed out of order. SEED varies
 * the sizes, so two processes of one run record different traces. Deterministic: the same
 * arguments record the same operations. Exits 0, or 1 with the message when an
 * allocation fails.
 * usage: recorder ROUNDS SEED */
#include <stdio.h>
#include <stdlib.h>

#include "gpupart.h"

#define WEIGHTS 12
#define ACTIVATIONS 48
#define SCRATCH 6

static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static int fail(const char *what) {
  fprintf(stderr, "recorder: %s: %s\n", what, gpupart_last_error());
  return 1;
}

static int step(gpupart_partition *act, gpupart_partition *scratch, uint64_t *seed) {
  gpupart_allocation *a[ACTIVATIONS] = {0}, *t[SCRATCH] = {0};
  for (int i = 0; i < ACTIVATIONS; i++)
    if (gpupart_alloc(act, (next(seed) % 64 + 1) * 65536 * (i % 4 + 1), 0, &a[i])) return fail("activation");
  for (int i = 0; i < SCRATCH; i++)
    if (gpupart_alloc(scratch, (next(seed) % 16 + 1) * 1000003, 0, &t[i])) return fail("scratch");
  for (int i = 0; i < SCRATCH; i += 2) gpupart_free(t[i]);
  for (int i = ACTIVATIONS - 1; i >= 0; i--) gpupart_free(a[i]);
  for (int i = 1; i < SCRATCH; i += 2) gpupart_free(t[i]);
  return 0;
}

static int run(gpupart_device *dev, int rounds, uint64_t seed) {
  gpupart_partition *w, *act, *scratch;
  if (gpupart_partition_create(dev, &(gpupart_partition_desc){.name = "weights"}, &w) ||
      gpupart_partition_create(dev, &(gpupart_partition_desc){.name = "activations"}, &act) ||
      gpupart_partition_create(dev, &(gpupart_partition_desc){.name = "scratch"}, &scratch))
    return fail("partition_create");
  gpupart_allocation *weights[WEIGHTS] = {0};
  int rc = 0;
  for (int i = 0; i < WEIGHTS && !rc; i++)
    if (gpupart_alloc(w, (uint64_t)(i % 5 + 1) * 3000017 + next(&seed) % 4096, 0, &weights[i])) rc = fail("weights");
  for (int r = 0; r < rounds && !rc; r++) rc = step(act, scratch, &seed);
  for (int i = 0; i < WEIGHTS; i++) gpupart_free(weights[i]);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) return fprintf(stderr, "usage: recorder ROUNDS SEED\n"), 2;
  gpupart_context *ctx;
  gpupart_device *dev;
  if (gpupart_context_create(NULL, &ctx)) return fail("context_create");
  gpupart_sim_desc sim = {.total_bytes = 8ull << 30};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
  if (gpupart_device_open(ctx, &dd, &dev)) return fail("device_open");
  int rc = run(dev, atoi(argv[1]), strtoull(argv[2], NULL, 10));
  if (gpupart_device_close(dev) || gpupart_context_destroy(ctx)) return fail("close");
  return rc;
}
