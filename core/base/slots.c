/* Generation-checked slots (slots.h): slabs aligned inside larger host allocations, as
 * the sub-allocator's node slabs are (suballoc/tlsf.c), each headed by its pool's owner. */
#include "slots.h"

#include <string.h>

#define SLAB_BYTES ((uintptr_t)GPUPART__SLOTS_PER_SLAB * sizeof(gpupart__slot))

typedef struct gpupart__slots_slab {
  void *owner;
  void *raw; /* what the host allocator returned (the slab is aligned within it) */
  struct gpupart__slots_slab *next;
} slab;

_Static_assert(sizeof(slab) <= sizeof(gpupart__slot), "a slab's header fits its slot 0");
_Static_assert(GPUPART__SLOTS_SPACE >= SLAB_BYTES, "a slab's handles cover its slots");

void gpupart__slots_init(gpupart__slots *s, const gpupart__hostmem *mem, void *owner) {
  *s = (gpupart__slots){.mem = *(mem ? mem : gpupart__hostmem_default()), .owner = owner};
}

void gpupart__slots_fini(gpupart__slots *s) {
  while (s->slabs) {
    slab *b = s->slabs;
    s->slabs = b->next;
    s->mem.free(b->raw, s->mem.user);
  }
  s->free = NULL;
}

static int grow(gpupart__slots *s) {
  void *raw = s->mem.alloc(SLAB_BYTES + GPUPART__SLOTS_SPACE, s->mem.user);
  if (!raw) return 0;
  slab *b = (slab *)(((uintptr_t)raw + GPUPART__SLOTS_SPACE - 1u) & ~(GPUPART__SLOTS_SPACE - 1u));
  memset(b, 0, SLAB_BYTES);
  *b = (slab){s->owner, raw, s->slabs};
  s->slabs = b;
  gpupart__slot *slots = (gpupart__slot *)(void *)b;
  for (uint32_t i = GPUPART__SLOTS_PER_SLAB - 1u; i >= 1u; i--) {
    slots[i].next = s->free;
    s->free = &slots[i];
  }
  return 1;
}

gpupart__slot *gpupart__slots_take(gpupart__slots *s, uint64_t value) {
  if (!s->free && !grow(s)) return NULL;
  gpupart__slot *slot = s->free;
  s->free = slot->next;
  slot->next = NULL;
  slot->value = value;
  slot->aux = 0;
  slot->live = 1;
  return slot;
}

void gpupart__slots_put(gpupart__slots *s, gpupart__slot *slot) {
  slot->live = 0;
  slot->gen++;
  slot->value = 0;
  slot->next = s->free;
  s->free = slot;
}

static uintptr_t base_of(uintptr_t a) { return a & ~(GPUPART__SLOTS_SPACE - 1u); }

uintptr_t gpupart__slots_handle(const gpupart__slot *slot) {
  uintptr_t base = base_of((uintptr_t)slot);
  return base + (((uintptr_t)slot - base) / sizeof *slot << GPUPART__SLOTS_GEN_BITS) + slot->gen;
}

void *gpupart__slots_owner(uintptr_t h) { return ((const slab *)base_of(h))->owner; }

gpupart__slot *gpupart__slots_live(uintptr_t h) {
  uintptr_t base = base_of(h), index = (h - base) >> GPUPART__SLOTS_GEN_BITS;
  if (index == 0 || index >= GPUPART__SLOTS_PER_SLAB) return NULL; /* the header: never a slot's handle */
  gpupart__slot *slot = (gpupart__slot *)(base + index * sizeof(gpupart__slot));
  return slot->live && slot->gen == (uint8_t)h ? slot : NULL;
}
