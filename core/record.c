/* The pool of allocation records (record.h). A freed record first waits in a FIFO
 * quarantine of the QUARANTINE most recently freed records, so that a stale handle freed
 * again still finds a record that is not LIVE; leaving the quarantine it goes onto a LIFO
 * stack, so reuse takes a record that is still warm in the cache. */
#include "record.h"

#define SLAB_RECORDS 256u
#define QUARANTINE 128u

typedef struct slab {
  struct slab *next;
  gpupart__record records[SLAB_RECORDS];
} slab;

void gpupart__record_pool_init(gpupart__record_pool *pool, const gpupart__hostmem *mem, void *owner) {
  *pool = (gpupart__record_pool){.mem = mem, .owner = owner};
}

void gpupart__record_pool_fini(gpupart__record_pool *pool) {
  for (slab *s = pool->slabs, *next; s; s = next) {
    next = s->next;
    gpupart__host_free(pool->mem, s);
  }
  *pool = (gpupart__record_pool){.mem = pool->mem, .owner = pool->owner};
}

static void push(gpupart__record_pool *pool, gpupart__record *r) {
  r->next = pool->stack;
  pool->stack = r;
}

static int grow(gpupart__record_pool *pool) {
  slab *s = gpupart__host_calloc(pool->mem, 1, sizeof *s);
  if (!s) return 0;
  s->next = pool->slabs;
  pool->slabs = s;
  for (uint32_t i = SLAB_RECORDS; i-- > 0;) {
    s->records[i].owner = pool->owner;
    push(pool, &s->records[i]);
  }
  return 1;
}

gpupart__record *gpupart__record_take(gpupart__record_pool *pool) {
  if (!pool->stack && !grow(pool)) return NULL;
  gpupart__record *r = pool->stack;
  pool->stack = r->next;
  *r = (gpupart__record){.owner = pool->owner, .state = GPUPART__RECORD_LIVE};
  return r;
}

void gpupart__record_put(gpupart__record_pool *pool, gpupart__record *r) {
  r->state = GPUPART__RECORD_FREED;
  r->range = NULL;
  r->next = NULL;
  if (pool->tail) pool->tail->next = r;
  else pool->head = r;
  pool->tail = r;
  if (++pool->quarantined <= QUARANTINE) return;
  gpupart__record *oldest = pool->head;
  pool->head = oldest->next;
  pool->quarantined--;
  push(pool, oldest);
}
