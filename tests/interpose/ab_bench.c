/* ab_bench.h: the children, their lines read back, the best of each kept. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, readlink when built outside meson */
#endif
#include "ab_bench.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double ab_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int ab_mapped(const char *part) {
  char line[4096];
  int found = 0;
  FILE *f = part && *part ? fopen("/proc/self/maps", "r") : NULL;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, part) != NULL;
  if (f) fclose(f);
  return found;
}

void ab_child_print(int mapped, const double *ns, int figures) {
  printf("%d", mapped);
  for (int f = 0; f < figures; f++) printf(" %.1f", ns[f]);
  printf("\n");
}

/* One child's figures: 0, or -1 on failure (a child that failed, or whose layer is not as
 * asked, said on stderr). */
static int child(const ab_bench *b, const char *self, const char *arg, int with, long calls, double *ns) {
  char cmd[4096];
  int mapped = -1, ok = 1;
  b->command(cmd, sizeof cmd, self, arg, with, calls);
  FILE *f = popen(cmd, "r");
  if (!f || fscanf(f, "%d", &mapped) != 1) ok = 0;
  for (int i = 0; ok && i < b->figures; i++) ok = fscanf(f, "%lf", &ns[i]) == 1;
  if (f && pclose(f) != 0) ok = 0;
  if (ok && mapped != with)
    return fprintf(stderr, "%s: the layer is %s the child\n", b->tool, mapped ? "in" : "not in"), -1;
  return ok ? 0 : -1;
}

int ab_run(const ab_bench *b, const char *arg, long calls, long rounds, const char *header) {
  double best[2][AB_MAX_FIGURES], ns[AB_MAX_FIGURES];
  char self[2048];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0 || b->figures > AB_MAX_FIGURES) return fprintf(stderr, "%s: /proc/self/exe unreadable\n", b->tool), 1;
  self[n] = '\0';
  if (rounds < 1) rounds = 1;
  for (long r = 0; r < rounds; r++)
    for (int with = 0; with < 2; with++) {
      if (child(b, self, arg, with, calls, ns)) return fprintf(stderr, "%s: a child failed\n", b->tool), 1;
      for (int f = 0; f < b->figures; f++)
        if (r == 0 || ns[f] < best[with][f]) best[with][f] = ns[f];
    }
  printf("%s", header);
  for (int f = 0; f < b->figures; f++)
    printf("%s: without %.1f ns, with the layer %.1f ns, ratio %.2f\n", b->names[f], best[0][f], best[1][f],
           best[1][f] / best[0][f]);
  return 0;
}
