/* gpupart-floor-latency: how long a new floor waits for its bytes when idle processes hold
 * them as cached empty blocks (docs/benchmarks.md, "Give-back"). Each round forks three
 * processes that open a shared 1 GiB sim device in a scratch ledger folder, allocate
 * 250 MiB each, free it (their blocks stay cached) and then wait on a pipe, making no
 * gpupart call; the measuring process then creates a partition with an 800 MiB guarantee
 * and allocates its 800 MiB. The time from the create call to the allocation's return is
 * what the responders' give-back costs. It measures; it asserts nothing.
 * Usage: gpupart-floor-latency [ROUNDS] (default 20). Prints min, median and max in ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupart.h"

#define MiB (1024ull * 1024ull)
#define HOLDERS 3

static char dir[64];

static int open_shared(gpupart_context **ctx, gpupart_device **dev) {
  static gpupart_sim_desc sim = {.total_bytes = 1024 * MiB};
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  if (gpupart_context_create(&cd, ctx)) return -1;
  return gpupart_device_open(*ctx, &dd, dev) ? -1 : 0;
}

/* A holder: 250 MiB allocated and freed (cached), then idle until go is written. */
static void hold(int i, int ready, int go) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p;
  gpupart_allocation *a;
  char name[16], c = 1;
  snprintf(name, sizeof name, "be%d", i);
  gpupart_partition_desc pd = {.name = name};
  if (open_shared(&ctx, &dev) || gpupart_partition_create(dev, &pd, &p) || gpupart_alloc(p, 250 * MiB, 0, &a)) _exit(2);
  gpupart_free(a);
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) _exit(3);
  _exit(gpupart_device_close(dev) || gpupart_context_destroy(ctx) ? 4 : 0);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One round: the ms from the floor's create to its allocation's return; < 0 on failure. */
static double round_ms(void) {
  int r[2], g[2];
  if (pipe(r) || pipe(g)) return -1;
  for (int i = 0; i < HOLDERS; i++)
    if (fork() == 0) hold(i, r[1], g[0]);
  char c;
  for (int i = 0; i < HOLDERS; i++)
    if (read(r[0], &c, 1) != 1) return -1;
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p = NULL;
  gpupart_allocation *a = NULL;
  double ms = -1;
  if (open_shared(&ctx, &dev) == 0) {
    gpupart_partition_desc pd = {.name = "crit", .guarantee = 800 * MiB};
    double t0 = now_ms();
    if (gpupart_partition_create(dev, &pd, &p) == GPUPART_OK && gpupart_alloc(p, 800 * MiB, 0, &a) == GPUPART_OK)
      ms = now_ms() - t0;
    else fprintf(stderr, "floor refused: %s\n", gpupart_last_error());
    gpupart_free(a);
    gpupart_device_close(dev);
    gpupart_context_destroy(ctx);
  }
  for (int i = 0; i < HOLDERS; i++)
    if (write(g[1], "g", 1) != 1) ms = -1;
  while (wait(NULL) > 0) continue;
  close(r[0]);
  close(r[1]);
  close(g[0]);
  close(g[1]);
  return ms;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20;
  if (rounds < 1 || rounds > 1000) return fprintf(stderr, "usage: gpupart-floor-latency [ROUNDS 1..1000]\n"), 2;
  snprintf(dir, sizeof dir, "/tmp/gpupart-floor-XXXXXX");
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  double *ms = calloc((size_t)rounds, sizeof *ms);
  int ok = ms != NULL;
  for (int i = 0; ok && i < rounds; i++) ok = (ms[i] = round_ms()) >= 0;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) ok = 0;
  if (ok) {
    qsort(ms, (size_t)rounds, sizeof *ms, by_value);
    printf("floor of 800 MiB over %d idle processes' 750 MiB of cache, %d rounds: min %.2f ms, median %.2f ms, "
           "max %.2f ms\n",
           HOLDERS, rounds, ms[0], ms[rounds / 2], ms[rounds - 1]);
  }
  free(ms);
  return ok ? 0 : 1;
}
