/* Driver calls never run under the partition spinlock: while one thread is inside a slow
 * block_alloc, block_free or view construction of a partition, other threads keep
 * allocating from that partition's held blocks. The device's backend table is wrapped
 * with one whose calls wait at a gate (this suite links the static library, so it can):
 * the gated call waits until a second thread has completed HITS allocations on the same
 * partition, or gives up after a bounded number of yields. The tests assert on how many
 * allocations completed while the driver call was in progress: counts, never timings.
 * And the partition lock is biased to the thread that allocates, not the one that made
 * the partition. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "interop.h"
#include "internal.h"
#include "common.h"

#define HITS 200
#define GIVE_UP_YIELDS 300000 /* only reached when the other thread is stuck behind the lock */

static gpupart_backend_ops gated_ops;
static const gpupart_backend_ops *real_ops;
static atomic_int gate_alloc, gate_free; /* arm the gate for the next call */
static atomic_int inside;                /* a gated call is waiting */
static atomic_int hits;                  /* allocations completed by the other thread */
static atomic_int hits_while_inside;     /* hits when the gated call went on */
static atomic_int views_released;

/* Waits, inside a driver call, until the other thread has done its allocations. */
static void hold_gate(void) {
  atomic_store(&inside, 1);
  for (long i = 0; i < GIVE_UP_YIELDS && atomic_load(&hits) < HITS; i++) sched_yield();
  atomic_store(&hits_while_inside, atomic_load(&hits));
  atomic_store(&inside, 0);
}

static int gated_block_alloc(void *dev, uint64_t size, gpupart_block *out) {
  if (atomic_exchange(&gate_alloc, 0)) hold_gate();
  return real_ops->block_alloc(dev, size, out);
}

static void gated_block_free(void *dev, gpupart_block *b) {
  if (atomic_exchange(&gate_free, 0)) hold_gate();
  real_ops->block_free(dev, b);
}

static void counting_view_release(void *dev, void *view) {
  (void)dev, (void)view;
  atomic_fetch_add(&views_released, 1);
}

static gpupart_device *gated_device(gpupart_context *ctx) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  real_ops = dev->ops;
  gated_ops = *dev->ops;
  gated_ops.block_alloc = gated_block_alloc;
  gated_ops.block_free = gated_block_free;
  gated_ops.view_release = counting_view_release;
  dev->ops = &gated_ops;
  atomic_store(&hits, 0), atomic_store(&hits_while_inside, -1), atomic_store(&views_released, 0);
  return dev;
}

/* The other thread: waits for the gated call, then allocates and frees HITS times from
 * the partition's held blocks. */
static void *hitter(void *arg) {
  gpupart_partition *p = arg;
  while (!atomic_load(&inside)) sched_yield();
  for (int i = 0; i < HITS; i++) {
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(p, 4096, 0, &a) != GPUPART_OK) break;
    gpupart_free(a);
    atomic_fetch_add(&hits, 1);
  }
  return NULL;
}

static gpupart_allocation *warm; /* keeps the warm block in use */

/* A partition with one 2 MiB block, kept in use, that the hitter's allocations fit in. */
static gpupart_partition *warm_partition(gpupart_device *dev, uint64_t release_threshold) {
  gpupart_partition_desc d = {.name = "p", .limit = 512 * MiB, .release_threshold = release_threshold};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &warm), GPUPART_OK);
  return p;
}

static void finish(gpupart_context *ctx, gpupart_device *dev) {
  test_check(dev);
  gpupart_free(warm);
  dev->ops = real_ops;
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

static void *grow(void *arg) {
  gpupart_allocation *a = NULL;
  if (gpupart_alloc(arg, 64 * MiB, 0, &a) == GPUPART_OK) gpupart_free(a);
  return NULL;
}

Test(locks, other_threads_allocate_from_held_blocks_while_a_block_alloc_is_in_the_driver) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = gated_device(ctx);
  gpupart_partition *p = warm_partition(dev, 0);
  atomic_store(&gate_alloc, 1);
  pthread_t g, h;
  pthread_create(&h, NULL, hitter, p);
  pthread_create(&g, NULL, grow, p);
  pthread_join(g, NULL), pthread_join(h, NULL);
  cr_expect_eq(atomic_load(&hits_while_inside), HITS,
               "only %d of %d allocations completed while the growth was in the driver",
               atomic_load(&hits_while_inside), HITS);
  finish(ctx, dev);
}

static void *trim(void *arg) {
  gpupart_partition_trim(arg);
  return NULL;
}

Test(locks, other_threads_allocate_while_trim_returns_a_block_to_the_driver) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = gated_device(ctx);
  gpupart_partition *p = warm_partition(dev, 0);
  gpupart_allocation *big = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &big), GPUPART_OK);
  gpupart_free(big); /* an empty 64 MiB block for trim to release */
  atomic_store(&gate_free, 1);
  pthread_t t, h;
  pthread_create(&h, NULL, hitter, p);
  pthread_create(&t, NULL, trim, p);
  pthread_join(t, NULL), pthread_join(h, NULL);
  cr_expect_eq(atomic_load(&hits_while_inside), HITS, "only %d of %d allocations completed during the release",
               atomic_load(&hits_while_inside), HITS);
  finish(ctx, dev);
}

static void *free_big(void *arg) {
  gpupart_free(arg);
  return NULL;
}

Test(locks, other_threads_allocate_while_a_free_returns_its_block_to_the_driver) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = gated_device(ctx);
  gpupart_partition *p = warm_partition(dev, 1); /* every emptied block goes back at once */
  gpupart_allocation *big = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &big), GPUPART_OK);
  atomic_store(&gate_free, 1);
  pthread_t f, h;
  pthread_create(&h, NULL, hitter, p);
  pthread_create(&f, NULL, free_big, big);
  pthread_join(f, NULL), pthread_join(h, NULL);
  cr_expect_eq(atomic_load(&hits_while_inside), HITS, "only %d of %d allocations completed during the release",
               atomic_load(&hits_while_inside), HITS);
  finish(ctx, dev);
}

static int fake_view;

static void *gated_make(void *bdev, const gpupart_allocation_info *info, void *user) {
  (void)bdev, (void)info, (void)user;
  hold_gate();
  return &fake_view;
}

static void *make_view(void *arg) {
  return gpupart__allocation_view("test", arg, GPUPART_BACKEND_SIM, gated_make, NULL);
}

Test(locks, other_threads_allocate_while_a_view_is_built_and_free_releases_it_outside_the_lock) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = gated_device(ctx);
  gpupart_partition *p = warm_partition(dev, 0);
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK);
  pthread_t v, h;
  void *view = NULL;
  pthread_create(&h, NULL, hitter, p);
  pthread_create(&v, NULL, make_view, a);
  pthread_join(v, &view), pthread_join(h, NULL);
  cr_expect_eq(atomic_load(&hits_while_inside), HITS, "only %d of %d allocations completed while the view was made",
               atomic_load(&hits_while_inside), HITS);
  cr_expect_eq(view, &fake_view);
  gpupart_free(a);
  cr_expect_eq(atomic_load(&views_released), 1);
  finish(ctx, dev);
}

/* A view_release that waits, inside gpupart_free, until the main thread has tried to
 * destroy the partition and close the device. */
static atomic_int gate_release, tried, destroy_rc, close_rc;

static void waiting_view_release(void *dev, void *view) {
  (void)dev, (void)view;
  atomic_store(&gate_release, 1);
  for (long i = 0; i < GIVE_UP_YIELDS && !atomic_load(&tried); i++) sched_yield();
}

static void *free_with_view(void *arg) {
  gpupart_free(arg);
  return NULL;
}

static void *no_make(void *bdev, const gpupart_allocation_info *info, void *user) {
  (void)bdev, (void)info, (void)user;
  return &fake_view;
}

Test(locks, destroy_and_close_are_busy_while_a_free_releases_its_view_outside_the_lock) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = gated_device(ctx);
  gated_ops.view_release = waiting_view_release;
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, NULL, &p), GPUPART_OK);
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 4096, 0, &a), GPUPART_OK);
  cr_assert_eq(gpupart__allocation_view("test", a, GPUPART_BACKEND_SIM, no_make, NULL), &fake_view);
  atomic_store(&gate_release, 0), atomic_store(&tried, 0);
  pthread_t f;
  pthread_create(&f, NULL, free_with_view, a);
  while (!atomic_load(&gate_release)) sched_yield();
  atomic_store(&destroy_rc, gpupart_partition_destroy(p));
  atomic_store(&close_rc, gpupart_device_close(dev));
  atomic_store(&tried, 1);
  pthread_join(f, NULL);
  cr_expect_eq(atomic_load(&destroy_rc), GPUPART_EBUSY, "destroy ran while the free was still using the partition");
  cr_expect_eq(atomic_load(&close_rc), GPUPART_EBUSY, "close ran while the free was still using the device");
  if (atomic_load(&destroy_rc) == GPUPART_EBUSY) cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  if (atomic_load(&close_rc) == GPUPART_EBUSY) cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

typedef struct worker {
  gpupart_partition *p;
  uint64_t token;
  int failures;
} worker;

static void *allocate_here(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 1000; i++) {
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(w->p, 4096, 0, &a) != GPUPART_OK) w->failures++;
    gpupart_free(a);
  }
  w->token = gpupart__lock_self;
  return NULL;
}

/* A partition made on one thread and used on another is biased to the one that
 * allocates: creation (and the device's figures) took its lock without claiming it, so no
 * revocation is paid and the worker's operations run no locked instruction. */
Test(locks, the_partition_lock_is_biased_to_the_thread_that_allocates_not_the_one_that_made_it) {
  gpupart_context *ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 4 * GiB};
  gpupart_device *dev = test_sim_device(ctx, &sim, NULL);
  gpupart_partition *p = test_partition(dev, "worker", 0, 0);
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  if (atomic_load(&p->lock.revoked)) cr_skip_test("membarrier is refused here: no lock is biased");
  worker w = {.p = p};
  pthread_t t;
  pthread_create(&t, NULL, allocate_here, &w);
  pthread_join(t, NULL);
  cr_expect_eq(w.failures, 0);
  cr_expect_eq(atomic_load(&p->lock.biased_to), w.token, "the allocating thread owns the bias");
  cr_expect_eq(atomic_load(&p->lock.revoked), 0, "no revocation was needed");
  test_check(dev); /* another thread now: it revokes, and the figures are whole */
  cr_expect_eq(atomic_load(&p->lock.revoked), 1);
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}
