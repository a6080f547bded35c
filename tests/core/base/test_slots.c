/* Generation-checked slots (core/base/slots.c) on their own: a handle leads to its slot
 * and its pool's owner, goes stale when the slot is put back (also after the slot is
 * handed out again, until its generation comes round after 256 puts), and never names a
 * slab's header; pools grow by slabs and give them all back at fini. */
#include <criterion/criterion.h>

#include "slots.h"

static int owner;

Test(slots, a_handle_leads_to_its_slot_and_owner_until_put_back) {
  gpupart__slots s;
  gpupart__slots_init(&s, NULL, &owner);
  gpupart__slot *a = gpupart__slots_take(&s, 4096);
  cr_assert_not_null(a);
  uintptr_t h = gpupart__slots_handle(a);
  cr_expect_eq(gpupart__slots_owner(h), &owner);
  cr_expect_eq(gpupart__slots_live(h), a);
  cr_expect_eq(a->value, 4096);
  gpupart__slots_put(&s, a);
  cr_expect_null(gpupart__slots_live(h), "put back: stale");
  gpupart__slot *again = gpupart__slots_take(&s, 1);
  cr_expect_eq(again, a, "the slot is handed out again");
  cr_expect_null(gpupart__slots_live(h), "the old handle stays stale");
  cr_expect_eq(gpupart__slots_live(gpupart__slots_handle(again)), again);
  gpupart__slots_fini(&s);
}

Test(slots, the_generation_comes_round_after_256_puts) {
  gpupart__slots s;
  gpupart__slots_init(&s, NULL, &owner);
  gpupart__slot *a = gpupart__slots_take(&s, 1);
  uintptr_t h = gpupart__slots_handle(a);
  for (int i = 1; i < 256; i++) {
    gpupart__slots_put(&s, a);
    cr_assert_eq(gpupart__slots_take(&s, 1), a);
    cr_assert_null(gpupart__slots_live(h), "reuse %d", i);
  }
  gpupart__slots_put(&s, a);
  cr_assert_eq(gpupart__slots_take(&s, 1), a);
  cr_expect_eq(gpupart__slots_live(h), a, "the documented bound: 255 reuses");
  gpupart__slots_fini(&s);
}

Test(slots, pools_grow_by_slabs_and_a_header_is_no_slot) {
  gpupart__slots s;
  gpupart__slots_init(&s, NULL, &owner);
  gpupart__slot *all[600];
  for (int i = 0; i < 600; i++) {
    all[i] = gpupart__slots_take(&s, (uint64_t)i);
    cr_assert_not_null(all[i]);
    for (int j = 0; j < i; j += 97) cr_assert_neq(all[i], all[j]);
  }
  for (int i = 0; i < 600; i++) {
    uintptr_t h = gpupart__slots_handle(all[i]);
    cr_assert_eq(gpupart__slots_live(h), all[i]);
    cr_assert_eq(gpupart__slots_owner(h), &owner);
    uintptr_t header = h & ~(GPUPART__SLOTS_SPACE - 1u);
    cr_assert_null(gpupart__slots_live(header), "slot 0 is the slab's header");
  }
  gpupart__slots_fini(&s); /* the slabs go (ASan's leak check) */
}
