/* The A/B harness of the layers' benchmarks (cl_bench.c, vk_bench.c): a program that runs
 * itself as children, alternately without and with the layer, and keeps the best ns per
 * operation of each figure. Each benchmark says how a child is started (its command) and
 * what a child measures; a child prints "<layer mapped 0|1> <ns> ... <ns>" (ab_child_print)
 * and the run stops when a child's layer is not as asked. Not a test: nothing is asserted. */
#ifndef GPUPART_TESTS_AB_BENCH_H
#define GPUPART_TESTS_AB_BENCH_H

#include <stddef.h>

typedef struct ab_bench {
  const char *tool;         /* "cl_bench": its messages' prefix */
  int figures;              /* at most AB_MAX_FIGURES */
  const char *const *names; /* each figure's name */
  /* Writes the shell command of one child into cmd: self --child calls, with or without
   * the layer, arg being the benchmark's first argument. */
  void (*command)(char *cmd, size_t n, const char *self, const char *arg, int with, long calls);
} ab_bench;

#define AB_MAX_FIGURES 16

/* Monotonic nanoseconds, for a child's timing. */
double ab_now_ns(void);
/* Whether a file mapped into this process has `part` in its path (is the layer loaded). */
int ab_mapped(const char *part);

/* In a child's measuring function (one returning int): ns per iteration of body over n
 * iterations into out, after n / 10 (at least one) untimed ones; a body that returns
 * nonzero ends the function with 1. */
#define AB_TIMED(out, n, body)                   \
  do {                                           \
    long n_ = (n) > 0 ? (n) : 1;                 \
    for (long i = 0; i < n_ / 10 + 1; i++)       \
      if (body) return 1;                        \
    double start_ = ab_now_ns();                 \
    for (long i = 0; i < n_; i++)                \
      if (body) return 1;                        \
    (out) = (ab_now_ns() - start_) / (double)n_; \
  } while (0)

/* A child's line: whether the layer is mapped, then each figure. */
void ab_child_print(int mapped, const double *ns, int figures);
/* Runs rounds pairs of children (without, then with), prints header then each figure's
 * best without, best with and their ratio: 0, or 1 when a child failed. */
int ab_run(const ab_bench *b, const char *arg, long calls, long rounds, const char *header);

#endif
