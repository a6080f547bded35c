/* Tests of the offset sub-allocator (core/suballoc/tlsf.c): the contract of each call on small,
 * hand-built layouts, then a randomized differential test that runs millions of
 * operations against a granule-by-granule reference model and checks, after every step,
 * that live ranges never overlap, stay inside their blocks and honour their alignment,
 * and that an allocation never fails while the model holds a free run big enough for it
 * (the good-fit guarantee). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tlsf.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* Criterion's asserts do work even when they pass; the random test uses this instead. */
#define REQUIRE(cond, ...)                    \
  do {                                        \
    if (!(cond)) cr_assert_fail(__VA_ARGS__); \
  } while (0)

static void check_ok(const gpupart__tlsf *t) {
  char why[256] = "unset";
  int rc = gpupart__tlsf_check(t, why, sizeof why);
  REQUIRE(rc == 0, "tlsf_check: %s", why);
}

static gpupart__tlsf_totals totals_of(const gpupart__tlsf *t) {
  gpupart__tlsf_totals s;
  gpupart__tlsf_get_totals(t, &s);
  return s;
}

static void expect_totals(const gpupart__tlsf *t, uint64_t managed, uint64_t used, uint64_t blocks,
                          uint64_t used_ranges, uint64_t free_ranges) {
  gpupart__tlsf_totals s = totals_of(t);
  cr_assert_eq(s.managed, managed, "managed %llu", (unsigned long long)s.managed);
  cr_assert_eq(s.used, used, "used %llu", (unsigned long long)s.used);
  cr_assert_eq(s.blocks, blocks, "blocks %llu", (unsigned long long)s.blocks);
  cr_assert_eq(s.used_ranges, used_ranges, "used_ranges %llu", (unsigned long long)s.used_ranges);
  cr_assert_eq(s.free_ranges, free_ranges, "free_ranges %llu", (unsigned long long)s.free_ranges);
  check_ok(t);
}

static int block_cookie;

static gpupart__tlsf *make(uint64_t granule) {
  gpupart__tlsf *t = gpupart__tlsf_create(granule, gpupart__hostmem_default());
  cr_assert_not_null(t, "create(%llu)", (unsigned long long)granule);
  return t;
}

/* ---- basics ---- */

Test(tlsf, create_refuses_a_granule_that_is_not_a_power_of_two) {
  cr_assert_null(gpupart__tlsf_create(0, gpupart__hostmem_default()), "granule 0");
  cr_assert_null(gpupart__tlsf_create(384, gpupart__hostmem_default()), "granule 384");
  gpupart__tlsf *t = make(1);
  cr_assert_eq(gpupart__tlsf_granule(t), 1, "granule");
  gpupart__tlsf_destroy(t);
  gpupart__tlsf_destroy(NULL);
}

Test(tlsf, alloc_then_free_restores_an_empty_block) {
  gpupart__tlsf *t = make(256);
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  cr_assert_not_null(first, "add_block");
  cr_assert(gpupart__tlsf_block_is_empty(first), "new block is empty");
  expect_totals(t, MiB, 0, 1, 0, 1);
  gpupart__range *r = gpupart__tlsf_alloc(t, 1000, 0);
  cr_assert_not_null(r, "alloc");
  cr_assert_eq(r->state, GPUPART__RANGE_USED, "state");
  cr_assert_eq(r->size, 1024, "size rounded up to the granule");
  cr_assert_eq(r->offset, 0, "offset");
  cr_assert_eq(gpupart__range_block(r), &block_cookie, "block cookie");
  cr_assert_eq(gpupart__range_owner(r), t, "owner");
  cr_assert(!gpupart__tlsf_block_is_empty(first), "block in use");
  expect_totals(t, MiB, 1024, 1, 1, 1);
  gpupart__range *f = gpupart__tlsf_free(t, r);
  cr_assert_eq(f, gpupart__tlsf_block_first(f->home), "the free range is the block's first node");
  cr_assert_eq(f, first, "the block's free range absorbs the freed node: nothing is copied");
  cr_assert_eq(r->state, GPUPART__RANGE_DEAD, "the freed node is back in the pool");
  cr_assert(gpupart__tlsf_block_is_empty(f), "block empty again");
  expect_totals(t, MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, consecutive_allocs_are_adjacent_and_disjoint) {
  gpupart__tlsf *t = make(64);
  cr_assert_not_null(gpupart__tlsf_add_block(t, &block_cookie, 0, 64 * KiB), "add_block");
  gpupart__range *a = gpupart__tlsf_alloc(t, 100, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, 64, 0);
  cr_assert(a && b, "allocs");
  cr_assert_eq(a->size, 128, "a size");
  cr_assert_eq(b->offset, a->offset + a->size, "b follows a");
  cr_assert_eq(a->next_phys, b, "phys link");
  expect_totals(t, 64 * KiB, 192, 1, 2, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, exact_fit_takes_the_whole_block) {
  gpupart__tlsf *t = make(4096);
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, 16 * MiB);
  gpupart__range *r = gpupart__tlsf_alloc(t, 16 * MiB, 0);
  cr_assert_eq(r, first, "the whole block is the first node");
  cr_assert_eq(r->size, 16 * MiB, "size");
  cr_assert_eq(gpupart__tlsf_largest_free(t), 0, "nothing free");
  cr_assert_null(gpupart__tlsf_alloc(t, 1, 0), "full");
  cr_assert(!gpupart__tlsf_can_alloc(t, 1, 0), "full (can_alloc)");
  expect_totals(t, 16 * MiB, 16 * MiB, 1, 1, 0);
  gpupart__tlsf_free(t, r);
  expect_totals(t, 16 * MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, add_block_rounds_down_and_refuses_bad_blocks) {
  gpupart__tlsf *t = make(256);
  cr_assert_null(gpupart__tlsf_add_block(t, &block_cookie, 0, 255), "below one granule");
  cr_assert_null(gpupart__tlsf_add_block(t, &block_cookie, 128, 4096), "base not a granule multiple");
  expect_totals(t, 0, 0, 0, 0, 0);
  gpupart__range *r = gpupart__tlsf_add_block(t, &block_cookie, 256, 1000);
  cr_assert_not_null(r, "add_block");
  cr_assert_eq(r->size, 768, "rounded down");
  expect_totals(t, 768, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

/* ---- alignment ---- */

Test(tlsf, alignment_applies_to_base_plus_offset_with_an_unaligned_base) {
  gpupart__tlsf *t = make(256);
  uint64_t base = 0x7f0000000000ull + 3 * 256; /* 256-aligned, not 1024-aligned */
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, base, MiB);
  gpupart__range *r = gpupart__tlsf_alloc(t, 300, 4096);
  cr_assert_not_null(r, "alloc");
  cr_assert_eq((base + r->offset) % 4096, 0, "aligned address");
  cr_assert_eq(r->offset, 4096 - 3 * 256, "smallest aligned offset");
  cr_assert_eq(first->state, GPUPART__RANGE_FREE, "the leading pad stays free in the first node");
  cr_assert_eq(first->size, r->offset, "pad size");
  cr_assert_eq(first->next_phys, r, "pad is the lower node");
  expect_totals(t, MiB, 512, 1, 1, 2);
  gpupart__tlsf_free(t, r);
  expect_totals(t, MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, alignment_of_every_power_of_two_is_honoured) {
  gpupart__tlsf *t = make(64);
  uint64_t base = 64 * 5;
  gpupart__tlsf_add_block(t, &block_cookie, base, 64 * MiB);
  for (uint64_t a = 1; a <= 8 * MiB; a <<= 1) {
    gpupart__range *r = gpupart__tlsf_alloc(t, 100, a);
    cr_assert_not_null(r, "align %llu", (unsigned long long)a);
    cr_assert_eq((base + r->offset) % (a < 64 ? 64 : a), 0, "align %llu", (unsigned long long)a);
    check_ok(t);
  }
  gpupart__tlsf_destroy(t);
}

Test(tlsf, align_below_the_granule_means_the_granule) {
  gpupart__tlsf *t = make(512);
  gpupart__tlsf_add_block(t, &block_cookie, 512, MiB);
  gpupart__range *a = gpupart__tlsf_alloc(t, 10, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, 10, 1);
  gpupart__range *c = gpupart__tlsf_alloc(t, 10, 256);
  cr_assert(a && b && c, "allocs");
  cr_assert(b->offset == 512 && c->offset == 1024, "packed at granule steps");
  expect_totals(t, MiB, 1536, 1, 3, 1);
  gpupart__tlsf_destroy(t);
}

/* ---- free and coalescing ---- */

Test(tlsf, free_coalesces_with_both_neighbours) {
  gpupart__tlsf *t = make(256);
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, 64 * KiB);
  gpupart__range *a = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__range *c = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__range *d = gpupart__tlsf_alloc(t, KiB, 0);
  cr_assert_eq(gpupart__tlsf_block_first(a->home), a, "a is the block's first node now");
  cr_assert(first == d->next_phys && first->state == GPUPART__RANGE_FREE, "the block's free range keeps the rest");
  expect_totals(t, 64 * KiB, 4 * KiB, 1, 4, 1);
  gpupart__range *fa = gpupart__tlsf_free(t, a);
  cr_assert(fa == a && fa->offset == 0 && fa->size == KiB, "a alone: its node becomes the free range");
  cr_assert_eq(gpupart__tlsf_block_first(fa->home), fa, "the block's first node");
  gpupart__range *fc = gpupart__tlsf_free(t, c);
  cr_assert(fc == c && fc->size == KiB, "c alone (d is used)");
  expect_totals(t, 64 * KiB, 2 * KiB, 1, 2, 3);
  cr_assert_eq(gpupart__tlsf_free(t, b), fa, "b merges into a's range and absorbs c's");
  cr_assert_eq(b->state, GPUPART__RANGE_DEAD, "b is dead");
  cr_assert_eq(fc->state, GPUPART__RANGE_DEAD, "c's range is dead");
  cr_assert_eq(fa->size, 3 * KiB, "one range spans a, b, c");
  cr_assert_eq(fa->next_phys, d, "d follows");
  expect_totals(t, 64 * KiB, KiB, 1, 1, 2);
  cr_assert_eq(gpupart__tlsf_free(t, d), fa, "d merges both ways");
  cr_assert(gpupart__tlsf_block_is_empty(fa), "block empty");
  expect_totals(t, 64 * KiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, a_freed_node_merges_into_the_free_range_above_it) {
  gpupart__tlsf *t = make(16);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 4096);
  gpupart__range *a = gpupart__tlsf_alloc(t, 16, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, 16, 0);
  gpupart__range *rest = b->next_phys;
  cr_assert(a && b && a->next_phys == b, "a then b");
  gpupart__range *fb = gpupart__tlsf_free(t, b);
  cr_assert(fb == rest && fb->offset == 16, "the remainder grows down over b");
  cr_assert_eq(b->state, GPUPART__RANGE_DEAD, "b is back in the pool");
  cr_assert_eq(gpupart__range_owner(b), t, "dead nodes keep their owner");
  cr_assert_eq(fb->size, 4096 - 16, "the free range spans the rest");
  expect_totals(t, 4096, 16, 1, 1, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, double_free_returns_null_and_changes_nothing) {
  gpupart__tlsf *t = make(256);
  gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  gpupart__range *a = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__tlsf_free(t, b); /* b absorbs the remainder and stays FREE */
  gpupart__tlsf_totals before = totals_of(t);
  cr_assert_null(gpupart__tlsf_free(t, b), "second free of a FREE node");
  gpupart__tlsf_totals after = totals_of(t);
  cr_assert(memcmp(&before, &after, sizeof before) == 0, "totals unchanged");
  gpupart__range *c = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__range *d = gpupart__tlsf_alloc(t, KiB, 0);
  gpupart__tlsf_free(t, d);
  gpupart__tlsf_free(t, c); /* c absorbs d: d is DEAD */
  before = totals_of(t);
  cr_assert_eq(d->state, GPUPART__RANGE_DEAD, "d dead");
  cr_assert_null(gpupart__tlsf_free(t, d), "free of a DEAD node");
  cr_assert_null(gpupart__tlsf_free(t, NULL), "free of NULL");
  after = totals_of(t);
  cr_assert(memcmp(&before, &after, sizeof before) == 0, "totals unchanged");
  check_ok(t);
  gpupart__tlsf_free(t, a);
  expect_totals(t, MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, free_of_another_allocators_range_is_refused) {
  gpupart__tlsf *t = make(256), *u = make(256);
  gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  gpupart__tlsf_add_block(u, &block_cookie, 0, MiB);
  gpupart__range *r = gpupart__tlsf_alloc(t, KiB, 0);
  cr_assert_null(gpupart__tlsf_free(u, r), "wrong owner");
  cr_assert_eq(r->state, GPUPART__RANGE_USED, "still used");
  expect_totals(t, MiB, KiB, 1, 1, 1);
  expect_totals(u, MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
  gpupart__tlsf_destroy(u);
}

/* ---- refused requests ---- */

Test(tlsf, zero_size_overflow_and_bad_alignment_are_refused) {
  gpupart__tlsf *t = make(256);
  gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  uint64_t bad_sizes[] = {0, UINT64_MAX, UINT64_MAX - 100, UINT64_MAX - 255, 2 * MiB};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    cr_assert_null(gpupart__tlsf_alloc(t, bad_sizes[i], 0), "size %llu", (unsigned long long)bad_sizes[i]);
    cr_assert(!gpupart__tlsf_can_alloc(t, bad_sizes[i], 0), "can_alloc size %llu", (unsigned long long)bad_sizes[i]);
  }
  cr_assert_null(gpupart__tlsf_alloc(t, UINT64_MAX - 511, MiB), "alignment slack overflows");
  cr_assert_null(gpupart__tlsf_alloc(t, 1, 1ull << 63), "alignment larger than anything");
  uint64_t bad_aligns[] = {3, 768, 4097, UINT64_MAX};
  for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++) {
    cr_assert_null(gpupart__tlsf_alloc(t, KiB, bad_aligns[i]), "align %llu", (unsigned long long)bad_aligns[i]);
    cr_assert(!gpupart__tlsf_can_alloc(t, KiB, bad_aligns[i]), "can_alloc align");
  }
  expect_totals(t, MiB, 0, 1, 0, 1);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, alloc_without_blocks_fails) {
  gpupart__tlsf *t = make(1);
  cr_assert_null(gpupart__tlsf_alloc(t, 1, 0), "no blocks");
  cr_assert_eq(gpupart__tlsf_largest_free(t), 0, "largest_free");
  expect_totals(t, 0, 0, 0, 0, 0);
  gpupart__tlsf_destroy(t);
}

/* ---- blocks ---- */

Test(tlsf, remove_block_only_when_empty) {
  gpupart__tlsf *t = make(256);
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  gpupart__range *r = gpupart__tlsf_alloc(t, KiB, 0);
  cr_assert_eq(gpupart__tlsf_remove_block(t, first), -1, "block in use");
  cr_assert_eq(gpupart__tlsf_remove_block(t, r->next_phys), -1, "not the block's only range");
  cr_assert_eq(gpupart__tlsf_remove_block(t, NULL), -1, "NULL");
  expect_totals(t, MiB, KiB, 1, 1, 1);
  gpupart__tlsf_free(t, r);
  first = gpupart__tlsf_block_first(first->home); /* the free range that now covers the block */
  gpupart__tlsf *u = make(256);
  cr_assert_eq(gpupart__tlsf_remove_block(u, first), -1, "another allocator's block");
  gpupart__tlsf_destroy(u);
  cr_assert_eq(gpupart__tlsf_remove_block(t, first), 0, "empty block");
  cr_assert_eq(first->state, GPUPART__RANGE_DEAD, "node back in the pool");
  cr_assert_eq(gpupart__tlsf_remove_block(t, first), -1, "already removed");
  expect_totals(t, 0, 0, 0, 0, 0);
  gpupart__tlsf_destroy(t);
}

typedef struct visit {
  gpupart__tlsf *t;
  int seen;
  int removed;
} visit;

static void remove_if_empty(gpupart__range *first, void *ctx) {
  visit *v = ctx;
  cr_assert_eq(first->offset, 0, "first range of a block");
  cr_assert_null(first->prev_phys, "first has no predecessor");
  v->seen++;
  if (gpupart__tlsf_block_is_empty(first)) {
    cr_assert_eq(gpupart__tlsf_remove_block(v->t, first), 0, "remove empty block");
    v->removed++;
  }
}

Test(tlsf, many_blocks_and_foreach_with_removal) {
  enum { N = 1000 };
  static int cookies[N];
  gpupart__tlsf *t = make(256);
  gpupart__range *held[N];
  for (int i = 0; i < N; i++) {
    cr_assert_not_null(gpupart__tlsf_add_block(t, &cookies[i], (uint64_t)i * MiB, 64 * KiB), "add %d", i);
    held[i] = NULL;
  }
  expect_totals(t, N * 64 * KiB, 0, N, 0, N);
  for (int i = 0; i < N; i += 3) {
    held[i] = gpupart__tlsf_alloc(t, 64 * KiB, 0); /* exact fits: one whole block each */
    cr_assert_not_null(held[i], "alloc %d", i);
  }
  int used = (N + 2) / 3;
  expect_totals(t, N * 64 * KiB, (uint64_t)used * 64 * KiB, N, (uint64_t)used, (uint64_t)(N - used));
  visit v = {t, 0, 0};
  gpupart__tlsf_foreach_block(t, remove_if_empty, &v);
  cr_assert_eq(v.seen, N, "every block visited once");
  cr_assert_eq(v.removed, N - used, "empty blocks removed");
  expect_totals(t, (uint64_t)used * 64 * KiB, (uint64_t)used * 64 * KiB, (uint64_t)used, (uint64_t)used, 0);
  for (int i = 0; i < N; i += 3) gpupart__tlsf_free(t, held[i]);
  v = (visit){t, 0, 0};
  gpupart__tlsf_foreach_block(t, remove_if_empty, &v);
  cr_assert(v.seen == used && v.removed == used, "second pass removes the rest");
  expect_totals(t, 0, 0, 0, 0, 0);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, ranges_never_span_two_blocks) {
  gpupart__tlsf *t = make(256);
  static int c1, c2;
  gpupart__tlsf_add_block(t, &c1, 0, 4 * KiB);
  gpupart__tlsf_add_block(t, &c2, 4 * KiB, 4 * KiB); /* adjacent addresses, separate blocks */
  cr_assert_null(gpupart__tlsf_alloc(t, 8 * KiB, 0), "no range spans both blocks");
  cr_assert_not_null(gpupart__tlsf_alloc(t, 4 * KiB, 0), "one block fits");
  gpupart__tlsf_destroy(t);
}

/* ---- queries ---- */

Test(tlsf, largest_free_reports_the_biggest_range) {
  gpupart__tlsf *t = make(1);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 1000);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 1001);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 1003);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 1002);
  cr_assert_eq(gpupart__tlsf_largest_free(t), 1003, "largest of one list");
  gpupart__range *r = gpupart__tlsf_alloc(t, 1003, 0);
  cr_assert_eq(r->size, 1003, "exact");
  cr_assert_eq(gpupart__tlsf_largest_free(t), 1002, "next largest");
  gpupart__tlsf_destroy(t);
}

Test(tlsf, a_fit_in_the_requests_own_list_is_found) {
  /* 65 and 66 granules share a list; with good fit alone, a request for 65 would look
   * only at lists whose every range holds 66 and miss the 65-granule range. */
  gpupart__tlsf *t = make(256);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 65 * 256);
  cr_assert(gpupart__tlsf_can_alloc(t, 65 * 256, 0), "can_alloc");
  gpupart__range *r = gpupart__tlsf_alloc(t, 65 * 256, 0);
  cr_assert_not_null(r, "alloc");
  gpupart__tlsf_free(t, r);
  cr_assert_null(gpupart__tlsf_alloc(t, 66 * 256, 0), "too big");
  /* 2 granules aligned to 64 need 65 in the worst case: again only the own list has it. */
  r = gpupart__tlsf_alloc(t, 512, 64 * 256);
  cr_assert(r && r->offset == 0, "aligned fit within the own list");
  gpupart__tlsf_destroy(t);
}

Test(tlsf, can_alloc_agrees_with_alloc) {
  gpupart__tlsf *t = make(64);
  gpupart__tlsf_add_block(t, &block_cookie, 64 * 7, 256 * KiB);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 100 * KiB);
  uint64_t x = 12345;
  for (int i = 0; i < 20000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint64_t size = 1 + x % (64 * KiB), align = 1ull << ((x >> 32) % 16);
    int can = gpupart__tlsf_can_alloc(t, size, align);
    gpupart__range *r = gpupart__tlsf_alloc(t, size, align);
    cr_assert_eq(can, r != NULL, "step %d", i);
    if (r && (x >> 40) % 3 == 0) gpupart__tlsf_free(t, r);
    if (!r) check_ok(t);
  }
  check_ok(t);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, huge_blocks_and_granules_work) {
  gpupart__tlsf *t = make(1);
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, 1ull << 63);
  gpupart__range *a = gpupart__tlsf_alloc(t, 1ull << 50, 0);
  gpupart__range *b = gpupart__tlsf_alloc(t, 3, 1ull << 61);
  cr_assert(a && b, "allocs");
  cr_assert_eq(b->offset, 1ull << 61, "aligned");
  cr_assert_null(gpupart__tlsf_add_block(t, &block_cookie, 0, 1ull << 63), "managed would overflow");
  expect_totals(t, 1ull << 63, (1ull << 50) + 3, 1, 2, 2);
  gpupart__tlsf_free(t, a);
  gpupart__tlsf_free(t, b);
  cr_assert(gpupart__tlsf_block_is_empty(gpupart__tlsf_block_first(first->home)), "empty");
  gpupart__tlsf_destroy(t);
  t = make(GiB);
  gpupart__tlsf_add_block(t, &block_cookie, 0, 1ull << 62);
  a = gpupart__tlsf_alloc(t, 1, 0);
  b = gpupart__tlsf_alloc(t, (1ull << 60) + 1, 1ull << 61);
  cr_assert(a && b && a->size == GiB && b->size == (1ull << 60) + GiB, "granule-sized and huge");
  cr_assert_eq(b->offset, 1ull << 61, "aligned");
  expect_totals(t, 1ull << 62, 2 * GiB + (1ull << 60), 1, 2, 2);
  gpupart__tlsf_destroy(t);
}

/* ---- host memory failure ---- */

typedef struct budget {
  int left;
} budget;

static void *budget_alloc(size_t size, void *user) {
  budget *b = user;
  if (b->left <= 0) return NULL;
  b->left--;
  return malloc(size);
}

static void budget_free(void *p, void *user) {
  (void)user;
  free(p);
}

Test(tlsf, out_of_host_memory_changes_nothing) {
  budget b = {2}; /* the allocator, then one slab */
  gpupart__hostmem mem = {budget_alloc, budget_free, &b};
  gpupart__tlsf *t = gpupart__tlsf_create(16, &mem);
  cr_assert_not_null(t, "create");
  cr_assert_null(gpupart__tlsf_add_block(t, &block_cookie, 0, 1 << 20), "no memory for the block record");
  expect_totals(t, 0, 0, 0, 0, 0);
  b.left = 1;
  gpupart__range *first = gpupart__tlsf_add_block(t, &block_cookie, 0, 1 << 20);
  cr_assert_not_null(first, "add_block");
  int n = 0;
  while (gpupart__tlsf_alloc(t, 16, 0)) n++; /* the slab runs out: no more nodes */
  cr_assert(n > 100 && n < 256, "allocated %d ranges from one slab", n);
  gpupart__tlsf_totals before = totals_of(t);
  cr_assert_null(gpupart__tlsf_alloc(t, 16, 0), "still no nodes");
  gpupart__tlsf_totals after = totals_of(t);
  cr_assert(memcmp(&before, &after, sizeof before) == 0, "nothing changed");
  check_ok(t);
  b.left = 1;
  cr_assert_not_null(gpupart__tlsf_alloc(t, 16, 0), "a new slab");
  check_ok(t);
  gpupart__tlsf_destroy(t);
}

/* ---- randomized differential test ---- */

#define M_BLOCKS 8
#define M_UNITS 4096
#define M_LIVE (M_BLOCKS * M_UNITS)

typedef struct mblock {
  gpupart__range *first;     /* the first range when added; NULL when this slot holds no block */
  gpupart__tlsf_block *home; /* the block's record: its first range now */
  uint64_t base;
  uint32_t units;
  uint32_t live;
  uint8_t map[M_UNITS]; /* 1 = granule used */
} mblock;

typedef struct mlive {
  gpupart__range *r;
  mblock *b;
  uint32_t at, n; /* in granules */
} mlive;

typedef struct model {
  gpupart__tlsf *t;
  uint64_t g;
  uint64_t rng;
  uint64_t used, managed; /* in granules */
  uint32_t nlive;
  int small; /* mostly tiny requests: thousands of live ranges, long free lists */
  mblock blocks[M_BLOCKS];
  mlive live[M_LIVE];
} model;

static uint64_t next_rand(model *m) { /* splitmix64 */
  uint64_t z = (m->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t below(model *m, uint64_t n) { return next_rand(m) % n; }

static int runs_at_least(const mblock *b, uint64_t need) {
  uint64_t run = 0;
  for (uint32_t i = 0; i < b->units; i++) {
    run = b->map[i] ? 0 : run + 1;
    if (run >= need) return 1;
  }
  return 0;
}

static uint64_t longest_run(const mblock *b) {
  uint64_t run = 0, best = 0;
  for (uint32_t i = 0; i < b->units; i++) {
    run = b->map[i] ? 0 : run + 1;
    if (run > best) best = run;
  }
  return best;
}

static int model_has_run(const model *m, uint64_t need) {
  for (int i = 0; i < M_BLOCKS; i++)
    if (m->blocks[i].first && runs_at_least(&m->blocks[i], need)) return 1;
  return 0;
}

static void model_totals(const model *m) {
  gpupart__tlsf_totals s = totals_of(m->t);
  REQUIRE(s.used == m->used * m->g && s.managed == m->managed * m->g, "used/managed differ from the model");
  REQUIRE(s.used_ranges == m->nlive, "used_ranges %llu, model %u", (unsigned long long)s.used_ranges, m->nlive);
}

static uint64_t random_size(model *m) {
  uint64_t r = below(m, 100), units;
  if (r == 0) return 0;
  if (m->small && r < 95) units = 1 + below(m, 4);
  else if (r < 50) units = 1 + below(m, 8);
  else if (r < 80) units = 1 + below(m, 64);
  else if (r < 95) units = 1 + below(m, 400);
  else units = 1 + below(m, 1200);
  return units * m->g - below(m, m->g);
}

static uint64_t random_align(model *m) {
  uint64_t r = below(m, 100);
  if (r < 35) return 0;
  if (r < 40) return 1;
  if (r < 50) return m->g;
  return m->g << (1 + below(m, 8));
}

static void check_new_range(model *m, const gpupart__range *r, uint64_t size, uint64_t align) {
  uint64_t g = m->g, want = (size + g - 1) / g * g;
  mblock *b = gpupart__range_block(r);
  REQUIRE(gpupart__range_owner(r) == m->t && r->state == GPUPART__RANGE_USED, "bad new range");
  REQUIRE(r->size == want, "size %llu, want %llu", (unsigned long long)r->size, (unsigned long long)want);
  REQUIRE(b >= m->blocks && b < m->blocks + M_BLOCKS && b->first, "range of an unknown block");
  REQUIRE(r->offset % g == 0, "offset not a granule multiple");
  REQUIRE(r->offset / g + r->size / g <= b->units, "range past its block's end");
  if (align > g) REQUIRE((b->base + r->offset) % align == 0, "misaligned");
  for (uint64_t i = r->offset / g; i < (r->offset + r->size) / g; i++)
    REQUIRE(!b->map[i], "overlap with a live range at granule %llu", (unsigned long long)i);
}

static void do_alloc(model *m) {
  uint64_t size = random_size(m), align = random_align(m), g = m->g;
  int can = gpupart__tlsf_can_alloc(m->t, size, align);
  gpupart__range *r = gpupart__tlsf_alloc(m->t, size, align);
  REQUIRE(can == (r != NULL), "can_alloc %d but alloc %p", can, (void *)r);
  if (!r) {
    uint64_t need = (size + g - 1) / g + (align > g ? align / g - 1 : 0);
    REQUIRE(size == 0 || !model_has_run(m, need), "a fit of %llu granules was free but alloc failed",
            (unsigned long long)need);
    return;
  }
  check_new_range(m, r, size, align);
  mblock *b = gpupart__range_block(r);
  mlive *l = &m->live[m->nlive++];
  *l = (mlive){r, b, (uint32_t)(r->offset / g), (uint32_t)(r->size / g)};
  memset(b->map + l->at, 1, l->n);
  b->live++;
  m->used += l->n;
}

static void free_live(model *m, uint32_t i) {
  mlive l = m->live[i];
  m->live[i] = m->live[--m->nlive];
  gpupart__range *f = gpupart__tlsf_free(m->t, l.r);
  REQUIRE(f && f->state == GPUPART__RANGE_FREE && gpupart__range_block(f) == l.b, "free failed");
  uint64_t lo = (uint64_t)l.at * m->g, hi = lo + (uint64_t)l.n * m->g;
  REQUIRE(f->offset <= lo && f->offset + f->size >= hi, "merged range does not cover the freed one");
  REQUIRE(!f->prev_phys || f->prev_phys->state == GPUPART__RANGE_USED, "not coalesced with prev");
  REQUIRE(!f->next_phys || f->next_phys->state == GPUPART__RANGE_USED, "not coalesced with next");
  memset(l.b->map + l.at, 0, l.n);
  l.b->live--;
  m->used -= l.n;
  if (below(m, 50) == 0) {
    gpupart__tlsf_totals before = totals_of(m->t);
    REQUIRE(gpupart__tlsf_free(m->t, l.r) == NULL, "double free accepted");
    gpupart__tlsf_totals after = totals_of(m->t);
    REQUIRE(memcmp(&before, &after, sizeof before) == 0, "double free changed the totals");
  }
}

static void do_free(model *m) {
  if (m->nlive) free_live(m, (uint32_t)below(m, m->nlive));
}

static void do_add(model *m) {
  mblock *b = &m->blocks[below(m, M_BLOCKS)];
  if (b->first) return;
  uint32_t units = (uint32_t)(below(m, 4) ? 16 + below(m, M_UNITS - 15) : 1 + below(m, 16));
  uint64_t base = m->g * below(m, 1u << 20);
  gpupart__range *first = gpupart__tlsf_add_block(m->t, b, base, units * m->g + below(m, m->g));
  REQUIRE(first && first->state == GPUPART__RANGE_FREE && first->offset == 0, "add_block failed");
  REQUIRE(first->size == units * m->g && gpupart__tlsf_block_is_empty(first), "new block's range is wrong");
  *b = (mblock){.first = first, .home = first->home, .base = base, .units = units};
  m->managed += units;
}

static void do_remove(model *m, int drain) {
  mblock *b = &m->blocks[below(m, M_BLOCKS)];
  if (!b->first) return;
  for (uint32_t i = m->nlive; drain && i-- > 0;)
    if (m->live[i].b == b) free_live(m, i);
  int empty = b->live == 0;
  gpupart__range *first = gpupart__tlsf_block_first(b->home);
  REQUIRE(gpupart__tlsf_block_is_empty(first) == empty, "block_is_empty disagrees with the model");
  int rc = gpupart__tlsf_remove_block(m->t, first);
  REQUIRE(rc == (empty ? 0 : -1), "remove_block returned %d, block live %u", rc, b->live);
  if (!empty) return;
  m->managed -= b->units;
  b->first = NULL;
}

/* Every block's chain, range by range, against the model: used ranges are exactly the
 * model's used granules and free space is fully coalesced. */
static void compare_chains(model *m) {
  uint64_t free_bytes = 0, longest = 0;
  for (int i = 0; i < M_BLOCKS; i++) {
    const mblock *b = &m->blocks[i];
    if (!b->first) continue;
    for (const gpupart__range *r = gpupart__tlsf_block_first(b->home); r; r = r->next_phys) {
      uint8_t want = r->state == GPUPART__RANGE_USED;
      for (uint64_t u = r->offset / m->g; u < (r->offset + r->size) / m->g; u++)
        REQUIRE(b->map[u] == want, "chain and model differ at granule %llu", (unsigned long long)u);
      if (!want) free_bytes += r->size;
      REQUIRE(want || !r->next_phys || r->next_phys->state == GPUPART__RANGE_USED, "adjacent free ranges");
    }
    uint64_t run = longest_run(b);
    if (run > longest) longest = run;
  }
  gpupart__tlsf_totals s = totals_of(m->t);
  REQUIRE(free_bytes == s.managed - s.used, "free bytes %llu != managed - used", (unsigned long long)free_bytes);
  REQUIRE(gpupart__tlsf_largest_free(m->t) == longest * m->g, "largest_free differs from the model");
}

static void full_check(model *m) {
  check_ok(m->t);
  compare_chains(m);
}

static void step(model *m) {
  uint64_t r = below(m, 1000);
  int full = m->used * 10 > m->managed * 7;
  if (r < (full ? 400u : 700u)) do_alloc(m);
  else if (r < 970) do_free(m);
  else if (r < 985) do_add(m);
  else if (r < 997) do_remove(m, 0);
  else do_remove(m, 1);
  model_totals(m);
}

static void run_differential(uint64_t seed, uint64_t granule, int small, int steps) {
  static model m; /* large: keep it off the stack */
  memset(&m, 0, sizeof m);
  m.small = small;
  m.t = make(granule);
  m.g = granule;
  m.rng = seed;
  do_add(&m);
  do_add(&m);
  for (int i = 1; i <= steps; i++) {
    step(&m);
    if (i % 1000 == 0) full_check(&m);
  }
  while (m.nlive) free_live(&m, m.nlive - 1);
  full_check(&m);
  for (int i = 0; i < M_BLOCKS; i++)
    if (m.blocks[i].first)
      REQUIRE(gpupart__tlsf_remove_block(m.t, gpupart__tlsf_block_first(m.blocks[i].home)) == 0, "final remove");
  expect_totals(m.t, 0, 0, 0, 0, 0);
  gpupart__tlsf_destroy(m.t);
}

/* Seven runs of 800k steps: 5.6 million operations in all. */
#define DIFF_STEPS 800000

Test(tlsf, differential_granule_1) { run_differential(1, 1, 0, DIFF_STEPS); }
Test(tlsf, differential_granule_16) { run_differential(2, 16, 0, DIFF_STEPS); }
Test(tlsf, differential_granule_64) { run_differential(3, 64, 0, DIFF_STEPS); }
Test(tlsf, differential_granule_256) { run_differential(4, 256, 0, DIFF_STEPS); }
Test(tlsf, differential_granule_4096) { run_differential(5, 4096, 0, DIFF_STEPS); }
Test(tlsf, differential_granule_1gib) { run_differential(6, GiB, 0, DIFF_STEPS); }
Test(tlsf, differential_small_ranges_granule_32) { run_differential(7, 32, 1, DIFF_STEPS); }

Test(tlsf, a_stale_handle_is_refused_while_its_node_is_handed_out_255_more_times) {
  gpupart__tlsf *t = make(256);
  gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  gpupart__range *r = gpupart__tlsf_alloc(t, KiB, 0);
  uintptr_t stale = gpupart__tlsf_handle(r);
  cr_assert(stale && gpupart__tlsf_live(stale), "a live handle");
  cr_assert_eq(gpupart__tlsf_node(stale), r, "the handle names its node");
  cr_assert_not_null(gpupart__tlsf_free(t, r));
  cr_assert(!gpupart__tlsf_live(stale), "freed");
  for (int i = 0; i < 255; i++) { /* the hottest reuse: the same node every time */
    gpupart__range *n = gpupart__tlsf_alloc(t, KiB, 0);
    cr_assert_eq(n, r, "the freed node is reused at once");
    cr_assert_neq(gpupart__tlsf_handle(n), stale, "a new handle for the new allocation");
    cr_assert(!gpupart__tlsf_live(stale), "the stale handle is refused after %d reuses", i + 1);
    cr_assert_not_null(gpupart__tlsf_free(t, n));
  }
  check_ok(t);
  gpupart__tlsf_destroy(t);
}

Test(tlsf, handles_name_their_node_and_owner_across_slabs) {
  gpupart__tlsf *t = make(16), *u = make(16);
  gpupart__tlsf_add_block(t, &block_cookie, 0, MiB);
  gpupart__tlsf_add_block(u, &block_cookie, 0, MiB);
  for (int i = 0; i < 1000; i++) { /* several slabs of each allocator */
    gpupart__range *r = gpupart__tlsf_alloc(i % 2 ? u : t, 16, 0);
    uintptr_t h = gpupart__tlsf_handle(r);
    cr_assert_eq(gpupart__tlsf_node(h), r, "node of handle %d", i);
    cr_assert_eq(gpupart__range_owner(r), i % 2 ? u : t, "owner of range %d", i);
    cr_assert(gpupart__tlsf_live(h), "live %d", i);
  }
  check_ok(t);
  check_ok(u);
  gpupart__tlsf_destroy(t);
  gpupart__tlsf_destroy(u);
}
