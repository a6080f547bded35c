/* The preload library's overhead per cuMemAlloc_v2 / cuMemFree_v2 pair, measured through
 * whatever libcuda.so.1 it is linked against (the test double here, the driver on a GPU):
 *
 *   cu_bench PRELOAD [PAIRS] [ROUNDS]
 * runs itself ROUNDS times (default 5) without and with LD_PRELOAD=PRELOAD, alternating,
 * each child timing PAIRS (default 100000) pairs of 4 KiB, and prints the best ns per
 * pair of each and their ratio. The children inherit the environment (GPUPART_* apply to
 * the preloaded one); `cu_bench --child PAIRS` is one child. Not a test: no figure is
 * asserted anywhere. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, readlink, RTLD_DEFAULT when built outside meson */
#endif
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int child(long pairs) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
  for (int i = 0; i < 1000; i++) /* warm: the preload opens its mirror at the first */
    if (cuMemAlloc_v2(&p, 4096) || cuMemFree_v2(p)) return 1;
  double start = now_ns();
  for (long i = 0; i < pairs; i++)
    if (cuMemAlloc_v2(&p, 4096) || cuMemFree_v2(p)) return 1;
  printf("%.1f\n", (now_ns() - start) / (double)pairs);
  return 0;
}

/* One child's ns per pair, with LD_PRELOAD=preload or without any; < 0 on failure. */
static double run(const char *self, const char *preload, long pairs) {
  char cmd[4096];
  double ns = -1;
  if (preload) snprintf(cmd, sizeof cmd, "env LD_PRELOAD='%s' '%s' --child %ld", preload, self, pairs);
  else snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD '%s' --child %ld", self, pairs);
  FILE *f = popen(cmd, "r");
  if (!f || fscanf(f, "%lf", &ns) != 1) ns = -1;
  if (f && pclose(f) != 0) ns = -1;
  return ns;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child(atol(argv[2]));
  if (argc < 2) return fprintf(stderr, "usage: cu_bench PRELOAD [PAIRS] [ROUNDS]\n"), 2;
  long pairs = argc > 2 ? atol(argv[2]) : 100000, rounds = argc > 3 ? atol(argv[3]) : 5;
  double best[2] = {-1, -1};
  char self[2048];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fprintf(stderr, "cu_bench: /proc/self/exe unreadable\n"), 1;
  self[n] = '\0';
  for (long r = 0; r < rounds; r++)
    for (int with = 0; with < 2; with++) {
      double ns = run(self, with ? argv[1] : NULL, pairs);
      if (ns < 0) return fprintf(stderr, "cu_bench: a child failed\n"), 1;
      if (best[with] < 0 || ns < best[with]) best[with] = ns;
    }
  printf("cuMemAlloc_v2+cuMemFree_v2 4 KiB, best of %ld x %ld pairs: without %.1f ns, with the preload %.1f ns, "
         "ratio %.2f, overhead %.1f ns per pair\n",
         rounds, pairs, best[0], best[1], best[1] / best[0], best[1] - best[0]);
  return 0;
}
