/* Tests of gpupart__tlsf_move_floor (core/suballoc/tlsf.c): the expandable arena keeps the
 * unmapped tail of its reserved range as one USED range, and maps or unmaps granules by
 * moving that range's floor; the bytes between change hands with the FREE range below,
 * and a failed move changes nothing. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "tlsf.h"

#define MiB (1ull << 20)

static int cookie;

static void check_ok(const gpupart__tlsf *t) {
  char why[256] = "unset";
  cr_assert_eq(gpupart__tlsf_check(t, why, sizeof why), 0, "tlsf_check: %s", why);
}

/* A block of 8 MiB whose whole range is one USED "tail", as the arena starts. */
static gpupart__range *tail_of(gpupart__tlsf **t) {
  *t = gpupart__tlsf_create(4096, gpupart__hostmem_default());
  cr_assert_not_null(gpupart__tlsf_add_block(*t, &cookie, 0, 8 * MiB), "add_block");
  gpupart__range *tail = gpupart__tlsf_alloc(*t, 8 * MiB, 0);
  cr_assert_not_null(tail, "the whole block");
  return tail;
}

Test(tlsf_floor, raising_the_floor_frees_the_bytes_below) {
  gpupart__tlsf *t;
  gpupart__range *tail = tail_of(&t);
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 2 * MiB), 0, "map 2 MiB");
  check_ok(t);
  cr_assert_eq(tail->offset, 2 * MiB, "the tail starts above");
  cr_assert_eq(tail->size, 6 * MiB, "and keeps its top");
  gpupart__range *a = gpupart__tlsf_alloc(t, 2 * MiB, 0);
  cr_assert(a && a->offset == 0, "the freed bytes are handed out");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 4 * MiB), 0, "map 2 MiB more above a used range");
  check_ok(t);
  gpupart__range *b = gpupart__tlsf_alloc(t, 1 * MiB, 0);
  cr_assert(b && b->offset == 2 * MiB, "the new free node is used");
  gpupart__tlsf_totals s;
  gpupart__tlsf_get_totals(t, &s);
  cr_assert_eq(s.used, 4 * MiB + 3 * MiB, "used counts the tail");
  gpupart__tlsf_destroy(t);
}

Test(tlsf_floor, lowering_the_floor_takes_free_bytes_back) {
  gpupart__tlsf *t;
  gpupart__range *tail = tail_of(&t);
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 4 * MiB), 0, "map 4 MiB");
  gpupart__range *a = gpupart__tlsf_alloc(t, 1 * MiB, 0);
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 2 * MiB), 0, "unmap the top 2 MiB");
  check_ok(t);
  cr_assert_eq(tail->offset, 2 * MiB, "tail lowered");
  cr_assert_eq(gpupart__tlsf_largest_free(t), 1 * MiB, "1 MiB stays free below");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 1 * MiB), 0, "the whole free range");
  check_ok(t);
  cr_assert_eq(gpupart__tlsf_largest_free(t), 0, "nothing free");
  cr_assert_eq(tail->prev_phys, a, "the tail sits on the used range");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 0), -1, "a used range below cannot be taken");
  check_ok(t);
  gpupart__tlsf_free(t, a);
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 0), 0, "once freed it can");
  cr_assert_eq(gpupart__tlsf_block_first(tail->home), tail, "the tail is the block's first range again");
  check_ok(t);
  gpupart__tlsf_destroy(t);
}

Test(tlsf_floor, bad_moves_change_nothing) {
  gpupart__tlsf *t;
  gpupart__range *tail = tail_of(&t);
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 8 * MiB), -1, "the tail keeps at least one granule");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 100), -1, "off the granule");
  cr_assert_eq(gpupart__tlsf_move_floor(t, NULL, 0), -1, "NULL");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 0), 0, "no move is fine");
  cr_assert_eq(gpupart__tlsf_move_floor(t, tail, 4 * MiB), 0, "map");
  gpupart__range *free_range = tail->prev_phys;
  cr_assert_eq(gpupart__tlsf_move_floor(t, free_range, 0), -1, "a FREE range is refused");
  gpupart__tlsf *other = gpupart__tlsf_create(4096, gpupart__hostmem_default());
  cr_assert_eq(gpupart__tlsf_move_floor(other, tail, 0), -1, "another allocator's range is refused");
  gpupart__tlsf_destroy(other);
  check_ok(t);
  gpupart__tlsf_destroy(t);
}
