/* The context's ledgers, one per physical device: a second open of a device that is
 * already open in the context (same identity, whichever backend or index reached it)
 * joins the first open's ledger instead of getting a budget of its own, so that two
 * handles of one GPU never double its budget. Each ledger is counted by the handles
 * that use it and destroyed when the last one closes. The list is guarded by the
 * context lock; the ledgers lock themselves. */
#include "internal.h"

struct gpupart__ledger_ref {
  gpupart__ledger_ref *next;
  gpupart__ledger *ledger;
  uint32_t users;
};

/* Context lock held. */
static gpupart__ledger_ref *find_locked(gpupart_context *ctx, const gpupart__identity *id) {
  for (gpupart__ledger_ref *r = ctx->ledgers; r; r = r->next)
    if (gpupart__identity_equal(&r->ledger->id, id)) return r;
  return NULL;
}

/* Context lock held: the ledger of id, created with budget when the context has none. */
static gpupart__ledger_ref *get_locked(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget) {
  gpupart__ledger_ref *r = find_locked(ctx, id);
  if (r) return r;
  r = gpupart__host_calloc(&ctx->mem, 1, sizeof *r);
  if (r) r->ledger = gpupart__ledger_local_create(&ctx->mem, id, budget);
  if (r && !r->ledger) gpupart__host_free(&ctx->mem, r), r = NULL;
  if (r) r->next = ctx->ledgers, ctx->ledgers = r;
  return r;
}

/* Context lock held: forgets r when nobody uses it. */
static void put_locked(gpupart_context *ctx, gpupart__ledger_ref *r) {
  if (r->users) return;
  for (gpupart__ledger_ref **p = &ctx->ledgers; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  r->ledger->ops->destroy(r->ledger);
  gpupart__host_free(&ctx->mem, r);
}

int gpupart__ledger_acquire(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget,
                            gpupart__ledger **out, gpupart__ledger_member *member) {
  pthread_mutex_lock(&ctx->lock);
  gpupart__ledger_ref *r = get_locked(ctx, id, budget);
  int rc = r ? r->ledger->ops->join(r->ledger, member) : GPUPART_ENOMEM;
  if (rc == GPUPART_OK) r->users++;
  else if (r) put_locked(ctx, r);
  pthread_mutex_unlock(&ctx->lock);
  *out = rc ? NULL : r->ledger;
  return rc ? gpupart__fail(rc, "device_open: out of host memory") : GPUPART_OK;
}

void gpupart__ledger_release(gpupart_context *ctx, gpupart__ledger *l, gpupart__ledger_member member) {
  pthread_mutex_lock(&ctx->lock);
  gpupart__ledger_ref *r = find_locked(ctx, &l->id);
  l->ops->leave(l, member);
  r->users--;
  put_locked(ctx, r);
  pthread_mutex_unlock(&ctx->lock);
}
