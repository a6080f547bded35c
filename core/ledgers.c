/* The context's ledgers, one per physical device: a second open of a device that is
 * already open in the context (same identity, whichever backend or index reached it)
 * joins the first open's ledger instead of getting a budget of its own, so that two
 * handles of one GPU never double its budget. Each ledger is counted by the handles
 * that use it and destroyed when the last one closes. The list is guarded by the
 * context lock; the ledgers lock themselves. */
#include "ledgers.h"

#include "error.h"
#include "events.h"
#include "internal.h"
#include "shm.h"

struct gpupart__ledger_ref {
  gpupart__ledger_ref *next;
  gpupart__ledger *ledger;
  uint32_t users;
  int shared; /* a ledger_shm.c ledger */
};

/* Context lock held. */
static gpupart__ledger_ref *find_locked(gpupart_context *ctx, const gpupart__identity *id) {
  for (gpupart__ledger_ref *r = ctx->ledgers; r; r = r->next)
    if (gpupart__identity_equal(&r->ledger->id, id)) return r;
  return NULL;
}

static int create(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget, const char *shared_dir,
                  gpupart__ledger **out) {
  if (shared_dir) {
    int rc = gpupart__ledger_shm_create(&ctx->mem, id, budget, shared_dir, out);
    if (rc == GPUPART_OK) {
      (*out)->on_reaped = gpupart__event_reaped;
      (*out)->event_user = ctx;
    }
    return rc;
  }
  *out = gpupart__ledger_local_create(&ctx->mem, id, budget);
  return *out ? GPUPART_OK : gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
}

/* Context lock held: the ledger of id, created with budget when the context has none.
 * One device is either shared across processes or not, in one context. */
static int get_locked(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget, const char *shared_dir,
                      gpupart__ledger_ref **out) {
  gpupart__ledger_ref *r = *out = find_locked(ctx, id);
  if (r && r->shared != !!shared_dir)
    return gpupart__fail(GPUPART_EINVAL, "device_open: %s is open in this context %s a shared ledger", id->key,
                         r->shared ? "with" : "without");
  if (r) return GPUPART_OK;
  r = gpupart__host_calloc(&ctx->mem, 1, sizeof *r);
  if (!r) return gpupart__fail(GPUPART_ENOMEM, "device_open: out of host memory");
  int rc = create(ctx, id, budget, shared_dir, &r->ledger);
  if (rc) {
    gpupart__host_free(&ctx->mem, r);
    return rc;
  }
  r->shared = !!shared_dir;
  r->next = ctx->ledgers;
  ctx->ledgers = r;
  *out = r;
  return GPUPART_OK;
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

int gpupart__ledger_acquire(gpupart_context *ctx, const gpupart__identity *id, uint64_t budget, const char *shared_dir,
                            gpupart__ledger **out, gpupart__ledger_member *member) {
  gpupart__ledger_ref *r = NULL;
  pthread_mutex_lock(&ctx->lock);
  int rc = get_locked(ctx, id, budget, shared_dir, &r);
  if (rc == GPUPART_OK) rc = r->ledger->ops->join(r->ledger, member);
  if (rc == GPUPART_OK) r->users++;
  else if (r && r->ledger) put_locked(ctx, r);
  pthread_mutex_unlock(&ctx->lock);
  *out = rc ? NULL : r->ledger;
  if (rc == GPUPART_ENOMEM) return gpupart__fail(rc, "device_open: out of host memory");
  return rc;
}

void gpupart__ledger_release(gpupart_context *ctx, gpupart__ledger *l, gpupart__ledger_member member) {
  pthread_mutex_lock(&ctx->lock);
  gpupart__ledger_ref *r = find_locked(ctx, &l->id);
  l->ops->leave(l, member);
  r->users--;
  put_locked(ctx, r);
  pthread_mutex_unlock(&ctx->lock);
}
