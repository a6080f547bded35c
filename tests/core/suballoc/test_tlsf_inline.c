/* Tests of the sub-allocator's inline operations (core/suballoc/tlsf_inline.h), which
 * the allocation fast path runs instead of the out-of-line calls: the same random
 * sequence of operations goes through gpupart__tlsf_alloc and gpupart__tlsf_free on one
 * allocator and through gpupart__tlsf_alloc_small (and, where it leaves the request
 * to the call, gpupart__tlsf_alloc, as the fast path does) and gpupart__tlsf_free_used
 * on a twin with the same blocks, and after every step both must have handed out the
 * same range (block and offset), returned the same FREE range, and pass the full check
 * with the same totals; gpupart__tlsf_free_empties must foretell each emptied block. The sequences cover exact fits,
 * ranges cut from the bottom, moves between lists, coalescing both ways, the list walk when no larger class holds a
 * range, node pool growth (thousands of live ranges) and refusals when nothing fits. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tlsf_inline.h"

#define BLOCKS 3
#define LIVE 6000

/* Criterion's asserts do work even when they pass; the loops use this instead. */
#define REQUIRE(cond, ...)                    \
  do {                                        \
    if (!(cond)) cr_assert_fail(__VA_ARGS__); \
  } while (0)

static int cookies[BLOCKS];

typedef struct twin {
  gpupart__tlsf *t[2];           /* 0: out-of-line calls; 1: the inline ones */
  gpupart__range *live[2][LIVE]; /* the same allocation in each */
  uint32_t nlive;
  uint64_t rng;
  uint64_t handed_on, emptied; /* inline allocations left to the call; frees that emptied a block */
} twin;

static uint64_t next_rand(twin *w) { /* splitmix64 */
  uint64_t z = (w->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void same_state(const twin *w, uint64_t step) {
  char why[256] = "unset";
  for (int i = 0; i < 2; i++)
    REQUIRE(gpupart__tlsf_check(w->t[i], why, sizeof why) == 0, "step %llu, allocator %d: %s", (unsigned long long)step,
            i, why);
  gpupart__tlsf_totals a, b;
  gpupart__tlsf_get_totals(w->t[0], &a);
  gpupart__tlsf_get_totals(w->t[1], &b);
  REQUIRE(memcmp(&a, &b, sizeof a) == 0, "step %llu: the totals differ", (unsigned long long)step);
}

/* Both ranges (or neither) exist and name the same place of the same block. */
static void same_range(const gpupart__range *a, const gpupart__range *b, uint64_t step, const char *what) {
  REQUIRE(!a == !b, "step %llu: %s: %p against %p", (unsigned long long)step, what, (const void *)a, (const void *)b);
  if (!a) return;
  REQUIRE(a->offset == b->offset && a->size == b->size && gpupart__range_block(a) == gpupart__range_block(b),
          "step %llu: %s at %llu+%llu against %llu+%llu", (unsigned long long)step, what, (unsigned long long)a->offset,
          (unsigned long long)a->size, (unsigned long long)b->offset, (unsigned long long)b->size);
  REQUIRE(a->state == b->state, "step %llu: %s: states differ", (unsigned long long)step, what);
}

/* A size: mostly small (many live ranges, exact fits), sometimes one that needs the list
 * walk or fails. */
static uint64_t size_of(twin *w, uint64_t g) {
  uint64_t r = next_rand(w);
  switch (r % 8) {
  case 0: return g * (1 + r % 3);          /* exact fits of freed neighbours */
  case 1: return 1 + (r >> 8) % (64 * g);  /* below and across granules */
  case 2: return 1 + (r >> 8) % (g << 14); /* large: moves between lists, misses */
  default: return 1 + (r >> 8) % (g * 40);
  }
}

static void step_alloc(twin *w, uint64_t size, uint64_t step) {
  gpupart__range *a = gpupart__tlsf_alloc(w->t[0], size, 0);
  gpupart__range *b = gpupart__tlsf_alloc_small(w->t[1], size);
  if (!b) { /* the inline allocation left it to the call, as the fast path does */
    w->handed_on++;
    b = gpupart__tlsf_alloc(w->t[1], size, 0);
  }
  same_range(a, b, step, "alloc");
  if (!a) return;
  REQUIRE(gpupart__range_user_size(a) == size && gpupart__range_user_size(b) == size, "step %llu: user size",
          (unsigned long long)step);
  w->live[0][w->nlive] = a;
  w->live[1][w->nlive] = b;
  w->nlive++;
}

static void step_free(twin *w, uint64_t step) {
  uint32_t i = (uint32_t)(next_rand(w) % w->nlive);
  int empties = gpupart__tlsf_free_empties(w->live[1][i]);
  gpupart__range *a = gpupart__tlsf_free(w->t[0], w->live[0][i]);
  gpupart__range *b = gpupart__tlsf_free_used(w->t[1], w->live[1][i]);
  same_range(a, b, step, "free");
  REQUIRE(gpupart__tlsf_block_is_empty(a) == gpupart__tlsf_block_is_empty(b), "step %llu: emptiness",
          (unsigned long long)step);
  REQUIRE(empties == gpupart__tlsf_block_is_empty(b), "step %llu: free_empties said %d", (unsigned long long)step,
          empties);
  w->emptied += empties;
  w->nlive--;
  w->live[0][i] = w->live[0][w->nlive];
  w->live[1][i] = w->live[1][w->nlive];
}

static void run_twin(uint64_t seed, uint64_t g, uint64_t steps) {
  twin *w = calloc(1, sizeof *w);
  cr_assert_not_null(w);
  w->rng = seed;
  for (int i = 0; i < 2; i++) {
    w->t[i] = gpupart__tlsf_create(g, gpupart__hostmem_default());
    cr_assert_not_null(w->t[i]);
    for (int k = 0; k < BLOCKS; k++) /* blocks of different sizes and bases */
      cr_assert_not_null(gpupart__tlsf_add_block(w->t[i], &cookies[k], (uint64_t)k * (g << 20), (g << 16) << k));
  }
  for (uint64_t s = 0; s < steps; s++) {
    int grow = (s / 20000) % 2 == 0; /* phases that fill up, then drain */
    if (w->nlive < LIVE && (w->nlive == 0 || next_rand(w) % 100 < (grow ? 65u : 35u))) step_alloc(w, size_of(w, g), s);
    else if (w->nlive) step_free(w, s);
    if (s % 64 == 0 || s + 1 == steps) same_state(w, s);
  }
  while (w->nlive) step_free(w, steps);
  same_state(w, steps);
  cr_expect(w->handed_on > 0 && w->emptied > 0, "the sequence reached the rare cases: %llu handed on, %llu emptied",
            (unsigned long long)w->handed_on, (unsigned long long)w->emptied);
  for (int i = 0; i < 2; i++) gpupart__tlsf_destroy(w->t[i]);
  free(w);
}

Test(tlsf_inline, agrees_with_the_calls_at_granule_256) { run_twin(11, 256, 200000); }
Test(tlsf_inline, agrees_with_the_calls_at_granule_1) { run_twin(12, 1, 200000); }
Test(tlsf_inline, agrees_with_the_calls_at_granule_4096) { run_twin(13, 4096, 200000); }

/* The inline allocation of a size that no range can hold refuses, like the call, and
 * changes nothing; so does one on an allocator with no block. */
Test(tlsf_inline, refuses_what_does_not_fit_and_changes_nothing) {
  gpupart__tlsf *t = gpupart__tlsf_create(256, gpupart__hostmem_default());
  cr_assert_null(gpupart__tlsf_alloc_small(t, 256), "no block yet");
  cr_assert_not_null(gpupart__tlsf_add_block(t, &cookies[0], 0, 1 << 20));
  gpupart__range *r = gpupart__tlsf_alloc_small(t, (1 << 20) + 1);
  cr_assert_null(r, "larger than the block");
  gpupart__range *all = gpupart__tlsf_alloc_small(t, 1 << 20);
  cr_assert_not_null(all, "the whole block, an exact fit");
  cr_assert_eq(all->offset, 0);
  cr_assert_null(gpupart__tlsf_alloc_small(t, 1), "nothing left");
  gpupart__range *fr = gpupart__tlsf_free_used(t, all);
  cr_assert(gpupart__tlsf_block_is_empty(fr), "the block is one FREE range again");
  char why[256];
  cr_assert_eq(gpupart__tlsf_check(t, why, sizeof why), 0, "%s", why);
  gpupart__tlsf_destroy(t);
}
