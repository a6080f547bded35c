/* The OOM sequence (core/alloc.c), step by step, each proven by driver counters and by
 * which reclaim callbacks ran, in which order: 1. the requester's own empty blocks;
 * 2. other partitions' empty blocks, only when the budget or the driver refused;
 * 3. reclaim callbacks, the requester's first, then (budget or driver refusals) those of
 * partitions above their guarantee, with no lock held and never re-entered; 4. ELIMIT or
 * EDEVMEM with a message that explains the refusal. Unless a test says otherwise the
 * device is a 64 MiB sim, so the budget is 64 MiB. */
#include "policy.h"

/* The order in which callbacks ran, one letter per call. */
typedef struct recorder {
  char log[32];
  int n;
} recorder;

/* An application cache kept in a partition: the callback frees its items, newest first,
 * until it freed what was asked. */
typedef struct cache {
  char tag;
  recorder *rec;
  gpupart_allocation *items[16];
  int count, calls;
  uint64_t wanted;
  void (*extra)(struct cache *c, gpupart_partition *p); /* more work inside the callback */
  void *extra_arg;
} cache;

static int reclaim_cache(gpupart_partition *p, uint64_t wanted, void *user) {
  cache *c = user;
  c->calls++;
  c->wanted = wanted;
  if (c->rec->n < (int)sizeof c->rec->log - 1) c->rec->log[c->rec->n++] = c->tag;
  if (c->extra) c->extra(c, p);
  uint64_t freed = 0;
  while (c->count && freed < wanted) {
    gpupart_allocation *a = c->items[--c->count];
    freed += info_of(a).size;
    gpupart_free(a);
  }
  return 0;
}

static sim_env env;
static recorder rec;

static void setup(void) {
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB};
  env = open_env(&sim, NULL);
  rec = (recorder){0};
}

static void teardown(void) { close_env(&env); }

TestSuite(oom, .init = setup, .fini = teardown);

static gpupart_partition *cached_partition(gpupart_device *dev, const char *name, uint64_t limit, uint64_t guarantee,
                                           cache *c) {
  c->tag = name[0];
  c->rec = &rec;
  gpupart_partition_desc d = {
      .name = name, .limit = limit, .guarantee = guarantee, .reclaim = reclaim_cache, .reclaim_user = c};
  return make_partition(dev, &d);
}

/* The two partitions of most tests: a and b, with no limit and no guarantee, over the
 * caches ca and cb. */
static void cached_pair(cache *ca, cache *cb, gpupart_partition **a, gpupart_partition **b) {
  *a = cached_partition(env.dev, "a", 0, 0, ca);
  *b = cached_partition(env.dev, "b", 0, 0, cb);
}

static void stash(cache *c, gpupart_partition *p, uint64_t size) { c->items[c->count++] = alloc_ok(p, size); }

static void release_cache(cache *c) {
  while (c->count) gpupart_free(c->items[--c->count]);
}

/* An empty cached block of the given size in p. */
static void leave_empty_block(gpupart_partition *p, uint64_t size) { gpupart_free(alloc_ok(p, size)); }

static gpupart_result try_alloc(gpupart_partition *p, uint64_t size, uint32_t flags, gpupart_allocation **out) {
  gpupart_alloc_desc d = {.size = size, .flags = flags};
  return gpupart_alloc_ex(p, &d, out);
}

Test(oom, own_empty_blocks_are_released_first) {
  cache ca = {0};
  gpupart_partition *a = cached_partition(env.dev, "a", 8 * MiB, 0, &ca);
  stash(&ca, a, 1 * MiB); /* something the callback could free, were it asked */
  gpupart_partition *b = test_partition(env.dev, "b", 0, 0);
  gpupart_allocation *t[3];
  for (int i = 0; i < 3; i++) t[i] = alloc_ok(a, 2 * MiB);
  for (int i = 0; i < 3; i++) gpupart_free(t[i]);
  leave_empty_block(b, 2 * MiB);
  cr_assert_eq(test_stats(a).reserved, 8 * MiB);
  /* 6 MiB fits in none of the 2 MiB blocks, and the limit leaves no room for a new one */
  gpupart_allocation *x = alloc_ok(a, 6 * MiB);
  gpupart_stats s = test_stats(a);
  cr_expect_eq(s.driver_frees, 3, "the three empty blocks went back");
  cr_expect_eq(info_of(x).block_size, 6 * MiB);
  cr_expect_eq(ca.calls, 0, "step 1 sufficed: no callback");
  cr_expect_eq(test_stats(b).driver_frees, 0, "a limit refusal never touches other partitions");
  cr_expect_eq(s.failed_allocations, 0);
  gpupart_free(x);
  release_cache(&ca);
}

Test(oom, others_empty_blocks_are_released_when_the_budget_refuses) {
  cache ca = {0}, cb = {0};
  gpupart_partition *a, *b;
  cached_pair(&ca, &cb, &a, &b);
  stash(&cb, b, 4 * MiB);
  leave_empty_block(b, 40 * MiB);
  gpupart_allocation *x = alloc_ok(a, 30 * MiB); /* 64 - 44 = 20 MiB left in the budget */
  cr_expect_eq(test_stats(b).driver_frees, 1, "b's empty block went back");
  cr_expect_eq(test_stats(b).reserved, 4 * MiB, "b's live block stays");
  cr_expect_eq(ca.calls + cb.calls, 0, "step 2 sufficed: no callback");
  gpupart_free(x);
  release_cache(&cb);
}

Test(oom, others_empty_blocks_are_left_alone_when_the_limit_refuses) {
  gpupart_partition *a = test_partition(env.dev, "a", 16 * MiB, 0);
  gpupart_partition *b = test_partition(env.dev, "b", 0, 0);
  leave_empty_block(b, 10 * MiB);
  gpupart_allocation *keep = alloc_ok(a, 10 * MiB), *x;
  cr_expect_eq(gpupart_alloc(a, 8 * MiB, 0, &x), GPUPART_ELIMIT);
  cr_expect(message_has("partition limit"), "%s", gpupart_last_error());
  cr_expect_eq(test_stats(b).driver_frees, 0);
  cr_expect_eq(test_stats(b).reserved, 10 * MiB);
  gpupart_free(keep);
}

Test(oom, the_requesters_callback_runs_before_others) {
  cache ca = {0}, cb = {0};
  gpupart_partition *a, *b;
  cached_pair(&ca, &cb, &a, &b);
  stash(&ca, a, 20 * MiB);
  stash(&cb, b, 30 * MiB);
  gpupart_allocation *x = alloc_ok(a, 20 * MiB); /* 14 MiB left: a's own 20 MiB must go */
  cr_expect_str_eq(rec.log, "a", "only a's callback ran");
  cr_expect(ca.wanted >= 6 * MiB && ca.wanted <= 20 * MiB,
            "bytes_wanted %llu: between the budget's shortfall and the request", (unsigned long long)ca.wanted);
  cr_expect_eq(ca.count, 0);
  cr_expect_eq(cb.count, 1, "b kept its cache");
  cr_expect_eq(test_stats(a).driver_allocs, 1, "the freed block was reused, no new driver call");
  gpupart_free(x);
  release_cache(&cb);
}

Test(oom, others_callbacks_run_after_the_requesters_when_the_budget_refuses) {
  cache ca = {0}, cb = {0};
  gpupart_partition *a, *b;
  cached_pair(&ca, &cb, &a, &b);
  stash(&ca, a, 4 * MiB);
  stash(&cb, b, 40 * MiB);
  gpupart_allocation *x = alloc_ok(a, 30 * MiB);
  cr_expect_str_eq(rec.log, "ab");
  cr_expect_eq(cb.count, 0);
  cr_expect_eq(test_stats(b).reserved, 0, "the block b's callback emptied went back");
  cr_expect_eq(test_stats(b).driver_frees, 1);
  cr_expect_eq(test_stats(a).driver_frees, 1, "so did a's");
  gpupart_free(x);
}

Test(oom, a_limit_refusal_calls_only_the_requesters_callback) {
  cache ca = {0}, cb = {0};
  gpupart_partition *a = cached_partition(env.dev, "a", 16 * MiB, 0, &ca);
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  stash(&cb, b, 8 * MiB);
  stash(&ca, a, 10 * MiB);
  gpupart_allocation *x = alloc_ok(a, 10 * MiB);
  cr_expect_str_eq(rec.log, "a");
  gpupart_allocation *y;
  cr_expect_eq(gpupart_alloc(a, 8 * MiB, 0, &y), GPUPART_ELIMIT, "a's callback has nothing left");
  cr_expect_str_eq(rec.log, "aa", "b's callback is never asked for a's limit");
  cr_expect_eq(cb.count, 1);
  gpupart_free(x);
  release_cache(&cb);
}

Test(oom, callbacks_of_partitions_at_their_guarantee_are_not_called) {
  cache ca = {0}, cb = {0}, cc = {0};
  gpupart_partition *a = cached_partition(env.dev, "a", 0, 0, &ca);
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 20 * MiB, &cb);
  gpupart_partition *c = cached_partition(env.dev, "c", 0, 10 * MiB, &cc);
  stash(&cb, b, 20 * MiB); /* at its guarantee */
  stash(&cc, c, 20 * MiB); /* above its guarantee */
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(a, 40 * MiB, 0, &x), GPUPART_ELIMIT);
  cr_expect_str_eq(rec.log, "ac", "a is asked first though its cache is empty; b is at its floor");
  cr_expect_eq(cb.calls, 0);
  x = alloc_ok(a, 20 * MiB);
  cr_expect_eq(cb.count, 1, "b's guaranteed bytes were never asked for");
  gpupart_free(x);
  release_cache(&cb);
}

Test(oom, borrowers_bytes_are_won_back_by_a_guaranteed_partition) {
  cache cb = {0};
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  for (int i = 0; i < 3; i++) stash(&cb, b, 20 * MiB);
  leave_empty_block(b, 4 * MiB);
  /* The guarantee is created while b borrows almost the whole budget: its creation wins
   * the bytes back (b's empty block, then b's callback until nothing lacks). */
  gpupart_partition *g = test_partition(env.dev, "g", 0, 32 * MiB);
  cr_expect_eq(cb.calls, 1);
  cr_expect_eq(cb.wanted, 28 * MiB, "asked for what the floor lacked once the empty block went");
  cr_expect_eq(cb.count, 1);
  gpupart_allocation *x = alloc_ok(g, 16 * MiB);
  gpupart_allocation *y = alloc_ok(g, 16 * MiB);
  cr_expect_eq(cb.calls, 1, "the floor's bytes were free at creation");
  gpupart_stats s = test_stats(g);
  cr_expect_eq(s.reserved, 32 * MiB, "g got its whole guarantee");
  cr_expect_eq(test_stats(b).reserved, 20 * MiB);
  test_check(env.dev);
  /* Once g frees its bytes, nobody else can take them, even after its blocks went back. */
  gpupart_free(x);
  gpupart_free(y);
  gpupart_allocation *z;
  cr_expect_eq(try_alloc(b, 40 * MiB, GPUPART_ALLOC_NO_RECLAIM, &z), GPUPART_ELIMIT);
  cr_expect_eq(test_stats(g).reserved, 0, "g's empty blocks went back in step 2");
  z = alloc_ok(g, 32 * MiB);
  cr_expect_eq(cb.calls, 1, "g's guarantee needed no callback this time");
  gpupart_free(z);
  release_cache(&cb);
}

Test(oom, no_reclaim_skips_the_callbacks_but_not_the_empty_blocks) {
  cache ca = {0}, cb = {0};
  gpupart_partition *a, *b;
  cached_pair(&ca, &cb, &a, &b);
  stash(&cb, b, 30 * MiB);
  leave_empty_block(b, 10 * MiB);
  gpupart_allocation *x;
  cr_expect_eq(try_alloc(a, 40 * MiB, GPUPART_ALLOC_NO_RECLAIM, &x), GPUPART_ELIMIT);
  cr_expect_null(x);
  cr_expect_eq(rec.n, 0, "no callback ran");
  cr_expect_eq(test_stats(b).driver_frees, 1, "step 2 still released b's empty block");
  cr_expect_eq(test_stats(a).failed_allocations, 1);
  cr_expect_eq(try_alloc(a, 40 * MiB, 0, &x), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_str_eq(rec.log, "ab");
  gpupart_free(x);
}

/* Inside a's callback: take every lock the library has, and allocate in a full partition. */
static void busy_callback(cache *c, gpupart_partition *p) {
  gpupart_device *dev = c->extra_arg;
  test_check(dev);
  gpupart_stats s;
  cr_expect_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  cr_expect_eq(gpupart_device_get_stats(dev, &s), GPUPART_OK);
  cr_expect_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_partition *tmp = test_partition(dev, "tmp", 4 * MiB, 0);
  gpupart_allocation *t = alloc_ok(tmp, 1 * MiB);
  gpupart_free(t);
  cr_expect_eq(gpupart_partition_destroy(tmp), GPUPART_OK);
  gpupart_allocation *x;
  cr_expect_eq(gpupart_alloc(p, 60 * MiB, 0, &x), GPUPART_ELIMIT, "inside a callback: no callbacks");
  cr_expect_eq(c->calls, 1, "never re-entered");
}

Test(oom, callbacks_run_with_no_lock_held_and_are_never_reentered, .timeout = 20) {
  cache ca = {.extra = busy_callback, .extra_arg = env.dev};
  gpupart_partition *a = cached_partition(env.dev, "a", 0, 0, &ca);
  stash(&ca, a, 40 * MiB);
  gpupart_allocation *x = alloc_ok(a, 40 * MiB);
  cr_expect_eq(ca.calls, 1);
  cr_expect_eq(test_stats(a).failed_allocations, 1, "only the inner allocation failed");
  gpupart_free(x);
}

/* b's callback frees an allocation of a: callbacks may free memory of any partition. */
static void free_other(cache *c, gpupart_partition *p) {
  (void)p;
  gpupart_free(c->extra_arg);
  c->extra_arg = NULL;
}

Test(oom, a_callback_may_free_allocations_of_any_partition, .timeout = 20) {
  cache ca = {0}, cb = {.extra = free_other};
  gpupart_partition *a, *b;
  cached_pair(&ca, &cb, &a, &b);
  stash(&cb, b, 2 * MiB);
  cb.extra_arg = alloc_ok(a, 40 * MiB);
  gpupart_allocation *x = alloc_ok(b, 40 * MiB);
  cr_expect_str_eq(rec.log, "b");
  cr_expect_eq(test_stats(a).live_allocations, 0);
  cr_expect_eq(test_stats(a).reserved, 0, "the block b's callback emptied in a went back");
  gpupart_free(x);
}

Test(oom, the_driver_refusing_a_growth_block_retries_with_the_requests_own_size) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .fail_block_alloc_at = 1};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "a", .initial_block = 64 * MiB};
  gpupart_partition *a = make_partition(e.dev, &d);
  gpupart_allocation *x = alloc_ok(a, 1 * MiB);
  gpupart_stats s = test_stats(a);
  cr_expect_eq(info_of(x).block_size, 2 * MiB, "the 64 MiB block was refused; its own size was not");
  cr_expect_eq(s.reserved, 2 * MiB);
  cr_expect_eq(s.driver_allocs, 1);
  cr_expect_eq(s.failed_allocations, 0);
  gpupart_free(x);
  close_env(&e);
}

Test(oom, a_second_handle_of_the_device_is_refused_by_the_shared_budget_not_the_driver) {
  /* Two handles on one simulated device share its budget: what the other holds, the
   * ledger refuses (ELIMIT) before the driver is asked. */
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  sim_env e = open_env(&sim, NULL);
  gpupart_device *other = test_sim_device(e.ctx, &sim, NULL);
  gpupart_allocation *hog = alloc_ok(test_partition(other, "hog", 0, 0), 200 * MiB);
  gpupart_partition_desc d = {.name = "a", .initial_block = 64 * MiB};
  gpupart_partition *a = make_partition(e.dev, &d);
  gpupart_allocation *x = alloc_ok(a, 1 * MiB), *y;
  cr_expect_leq(test_stats(a).reserved, 56 * MiB, "the first block is capped by what the budget grants");
  uint64_t calls = test_stats(a).driver_allocs;
  cr_expect_eq(gpupart_alloc(a, 60 * MiB, 0, &y), GPUPART_ELIMIT, "%s", gpupart_last_error());
  cr_expect(message_has("budget"), "%s", gpupart_last_error());
  cr_expect_eq(test_stats(a).driver_allocs, calls, "a budget refusal makes no driver call");
  gpupart_free(x);
  gpupart_free(hog);
  cr_expect_eq(gpupart_device_close(other), GPUPART_OK);
  close_env(&e);
}

Test(oom, a_driver_refusal_releases_others_empty_blocks) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_blocks = 2};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *a = test_partition(e.dev, "a", 0, 0);
  gpupart_partition *b = test_partition(e.dev, "b", 0, 0);
  leave_empty_block(b, 2 * MiB);
  gpupart_allocation *x = alloc_ok(a, 2 * MiB);
  gpupart_allocation *y = alloc_ok(a, 2 * MiB); /* the driver has no third block */
  cr_expect_eq(test_stats(b).driver_frees, 1);
  cr_expect_eq(test_stats(a).driver_allocs, 2);
  gpupart_free(x);
  gpupart_free(y);
  close_env(&e);
}

Test(oom, a_driver_refusal_calls_others_callbacks) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_blocks = 2};
  sim_env e = open_env(&sim, NULL);
  cache cb = {0};
  gpupart_partition *a = test_partition(e.dev, "a", 0, 0);
  gpupart_partition *b = cached_partition(e.dev, "b", 0, 0, &cb);
  stash(&cb, b, 2 * MiB);
  gpupart_allocation *x = alloc_ok(a, 2 * MiB);
  gpupart_allocation *y = alloc_ok(a, 2 * MiB);
  cr_expect_str_eq(rec.log, "b");
  cr_expect_eq(test_stats(b).reserved, 0);
  gpupart_free(x);
  gpupart_free(y);
  close_env(&e);
}

Test(oom, a_driver_refusal_with_nothing_to_release_is_edevmem) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB, .max_blocks = 1};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *a = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *x = alloc_ok(a, 2 * MiB), *y;
  gpupart_alloc_desc d = {.size = 2 * MiB, .tag = 77};
  cr_expect_eq(gpupart_alloc_ex(a, &d, &y), GPUPART_EDEVMEM);
  cr_expect_null(y);
  cr_expect(message_has("'a'") && message_has("driver") && message_has("tag 77"), "%s", gpupart_last_error());
  gpupart_stats s = test_stats(a);
  cr_expect_eq(s.failed_allocations, 1);
  cr_expect_eq(s.driver_allocs, 1);
  cr_expect_eq(s.reserved, 2 * MiB);
  gpupart_free(x);
  close_env(&e);
}

Test(oom, the_failure_message_names_every_figure) {
  gpupart_partition *a = test_partition(env.dev, "train", 16 * MiB, 0);
  gpupart_allocation *x = alloc_ok(a, 3 * MiB), *y;
  gpupart_alloc_desc d = {.size = 20 * MiB, .tag = 0xbeef};
  cr_expect_eq(gpupart_alloc_ex(a, &d, &y), GPUPART_ELIMIT);
  const char *m = gpupart_last_error();
  cr_expect(message_has("'train'"), "%s", m);
  cr_expect(message_has("20971520 bytes"), "the request: %s", m);
  cr_expect(message_has("tag 48879"), "the tag: %s", m);
  cr_expect(message_has("limit 16777216"), "%s", m);
  cr_expect(message_has("in use 3145728"), "%s", m);
  cr_expect(message_has("reserved 4194304"), "%s", m);
  cr_expect(message_has("largest free 1048576"), "%s", m);
  gpupart_free(x);
}

Test(oom, a_budget_refusal_says_so) {
  test_partition(env.dev, "floor", 0, 60 * MiB);
  gpupart_partition *a = test_partition(env.dev, "a", 0, 0);
  gpupart_allocation *y;
  cr_expect_eq(gpupart_alloc(a, 8 * MiB, 0, &y), GPUPART_ELIMIT);
  cr_expect(message_has("budget"), "%s", gpupart_last_error());
}

static int same_except_failed(gpupart_stats a, gpupart_stats b) {
  a.failed_allocations = b.failed_allocations = 0;
  return memcmp(&a, &b, sizeof a) == 0;
}

Test(oom, a_refused_request_changes_only_failed_allocations) {
  gpupart_partition *a = test_partition(env.dev, "a", 32 * MiB, 0);
  gpupart_partition *b = test_partition(env.dev, "b", 0, 0);
  gpupart_allocation *x = alloc_ok(a, 20 * MiB), *y = alloc_ok(b, 30 * MiB), *z;
  gpupart_stats sa = test_stats(a), sb = test_stats(b), sd = dev_stats(env.dev);
  cr_expect_eq(gpupart_alloc(a, 16 * MiB, 0, &z), GPUPART_ELIMIT); /* the limit */
  cr_expect_eq(gpupart_alloc(b, 16 * MiB, 0, &z), GPUPART_ELIMIT); /* the budget */
  cr_expect_eq(gpupart_alloc(a, 0, 0, &z), GPUPART_EINVAL);        /* not a refusal */
  gpupart_stats ta = test_stats(a), tb = test_stats(b), td = dev_stats(env.dev);
  cr_expect(same_except_failed(sa, ta));
  cr_expect(same_except_failed(sb, tb));
  cr_expect(same_except_failed(sd, td));
  cr_expect_eq(ta.failed_allocations, sa.failed_allocations + 1);
  cr_expect_eq(tb.failed_allocations, sb.failed_allocations + 1);
  cr_expect_eq(td.failed_allocations, sd.failed_allocations + 2);
  gpupart_free(x);
  gpupart_free(y);
}

Test(oom, a_refused_request_makes_no_driver_call) {
  /* The second driver call fails. Refusals that called the driver would consume it. */
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB, .fail_block_alloc_at = 2};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *a = test_partition(e.dev, "a", 22 * MiB, 0);
  gpupart_partition *b = test_partition(e.dev, "b", 0, 40 * MiB);
  gpupart_partition *c = test_partition(e.dev, "c", 0, 0);
  gpupart_allocation *x = alloc_ok(a, 20 * MiB), *z;
  cr_expect_eq(gpupart_alloc(a, 4 * MiB, 0, &z), GPUPART_ELIMIT, "the limit");
  cr_expect(message_has("partition limit"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_alloc(c, 6 * MiB, 0, &z), GPUPART_ELIMIT, "the budget less b's guarantee");
  cr_expect(message_has("budget"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_alloc(b, 2 * MiB, 0, &z), GPUPART_EDEVMEM, "this is the second driver call");
  z = alloc_ok(b, 2 * MiB);
  gpupart_free(z);
  gpupart_free(x);
  close_env(&e);
}

Test(oom, edevmem_and_elimit_are_told_apart) {
  gpupart_sim_desc sim = {.total_bytes = 64 * MiB, .max_blocks = 1};
  sim_env e = open_env(&sim, NULL);
  gpupart_partition *a = test_partition(e.dev, "a", 0, 0);
  gpupart_allocation *x = alloc_ok(a, 10 * MiB), *z;
  cr_expect_eq(gpupart_alloc(a, 60 * MiB, 0, &z), GPUPART_ELIMIT, "the budget refuses before the driver is asked");
  cr_expect_eq(gpupart_alloc(a, 50 * MiB, 0, &z), GPUPART_EDEVMEM, "the budget grants, the driver refuses");
  gpupart_free(x);
  close_env(&e);
}

/* What a callback's destroy or close returned, and its message. */
typedef struct attempt_log {
  void *target;
  gpupart_result rc;
  int says_in_progress;
} attempt_log;

static void destroy_target(cache *c, gpupart_partition *p) {
  (void)p;
  attempt_log *l = c->extra_arg;
  l->rc = gpupart_partition_destroy(l->target);
  l->says_in_progress = message_has("allocation in progress");
}

static void close_target(cache *c, gpupart_partition *p) {
  (void)p;
  release_cache(c); /* frees its cache first, so no allocation is live */
  attempt_log *l = c->extra_arg;
  l->rc = gpupart_device_close(l->target);
  l->says_in_progress = message_has("allocation in progress");
}

Test(oom, a_callback_cannot_destroy_the_partition_whose_allocation_called_it) {
  attempt_log log = {.rc = GPUPART_OK};
  cache cb = {.extra = destroy_target, .extra_arg = &log};
  gpupart_partition *a = test_partition(env.dev, "a", 0, 0);
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  stash(&cb, b, 48 * MiB);
  log.target = a;
  gpupart_allocation *x = alloc_ok(a, 32 * MiB); /* the budget refuses: b's callback runs */
  cr_expect_eq(cb.calls, 1);
  cr_expect_eq(log.rc, GPUPART_EBUSY, "destroy of the requester inside a callback");
  cr_expect(log.says_in_progress);
  cr_expect_eq(info_of(x).partition, a, "the allocation and its partition are intact");
  gpupart_free(x);
  test_check(env.dev);
}

Test(oom, a_callback_cannot_destroy_its_own_partition) {
  attempt_log log = {.rc = GPUPART_OK};
  cache ca = {.extra = destroy_target, .extra_arg = &log};
  gpupart_partition *a = cached_partition(env.dev, "a", 0, 0, &ca);
  stash(&ca, a, 48 * MiB);
  log.target = a;
  gpupart_allocation *x = alloc_ok(a, 32 * MiB);
  cr_expect_eq(log.rc, GPUPART_EBUSY);
  gpupart_free(x);
}

Test(oom, a_callback_cannot_close_the_device) {
  attempt_log log = {.rc = GPUPART_OK, .target = env.dev};
  cache cb = {.extra = close_target, .extra_arg = &log};
  gpupart_partition *a = test_partition(env.dev, "a", 0, 0);
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  stash(&cb, b, 48 * MiB);
  gpupart_allocation *x = alloc_ok(a, 32 * MiB);
  cr_expect_eq(log.rc, GPUPART_EBUSY, "close inside a callback");
  cr_expect(log.says_in_progress);
  cr_expect_eq(gpupart_partition_count(env.dev), 2, "nothing was freed");
  gpupart_free(x);
  test_check(env.dev);
}

Test(oom, a_limit_refusal_says_the_limit_when_the_bytes_do_not_fit_under_it) {
  gpupart_partition *a = test_partition(env.dev, "a", 8 * MiB, 0);
  gpupart_allocation *x = alloc_ok(a, 6 * MiB), *y;
  cr_expect_eq(gpupart_alloc(a, 4 * MiB, 0, &y), GPUPART_ELIMIT);
  cr_expect(message_has("the partition limit is reached"), "%s", gpupart_last_error());
  gpupart_free(x);
}

Test(oom, a_limit_refusal_with_room_under_the_limit_says_fragmentation) {
  gpupart_partition *a = test_partition(env.dev, "a", 8 * MiB, 0);
  gpupart_allocation *x = alloc_ok(a, 3 * MiB), *y = alloc_ok(a, 3 * MiB), *z;
  cr_expect_eq(test_stats(a).reserved, 8 * MiB, "two 4 MiB blocks with 1 MiB free in each");
  cr_expect_eq(gpupart_alloc(a, 2 * MiB, 0, &z), GPUPART_ELIMIT);
  cr_expect(message_has("fragmentation"), "%s", gpupart_last_error());
  cr_expect(!message_has("the partition limit is reached"), "%s", gpupart_last_error());
  gpupart_free(x);
  gpupart_free(y);
}

Test(oom, callbacks_are_asked_for_the_shortfall_and_stop_once_the_request_fits) {
  cache cb = {0}, cc = {0}, cd = {0};
  gpupart_partition *a = test_partition(env.dev, "a", 0, 0);
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  gpupart_partition *c = cached_partition(env.dev, "c", 0, 0, &cc);
  gpupart_partition *d = cached_partition(env.dev, "d", 0, 0, &cd);
  stash(&cb, b, 8 * MiB), stash(&cb, b, 8 * MiB);
  stash(&cc, c, 8 * MiB), stash(&cc, c, 8 * MiB);
  stash(&cd, d, 8 * MiB), stash(&cd, d, 8 * MiB); /* 48 of the 64 MiB budget cached */
  gpupart_allocation *x = alloc_ok(a, 32 * MiB);  /* 16 MiB short */
  cr_expect_str_eq(rec.log, "b", "b's callback freed enough: c and d are not asked");
  cr_expect_eq(cb.wanted, 16 * MiB, "asked for the shortfall, not the request");
  cr_expect_eq(cc.count + cd.count, 4, "c and d kept their caches");
  gpupart_free(x);
  release_cache(&cc), release_cache(&cd);
}

Test(oom, a_guarantee_under_a_borrower_is_given_back_by_its_callback_and_empty_blocks) {
  cache cb = {0};
  gpupart_partition *b = cached_partition(env.dev, "b", 0, 0, &cb);
  for (int i = 0; i < 4; i++) stash(&cb, b, 16 * MiB); /* b borrows the whole budget */
  gpupart_partition *g = test_partition(env.dev, "g", 0, 32 * MiB);
  gpupart_allocation *x = alloc_ok(g, 32 * MiB);
  cr_expect_eq(cb.calls, 1, "the borrower was asked once");
  cr_expect_eq(cb.count, 2, "and gave back exactly the guarantee's 32 MiB");
  cr_expect_eq(test_stats(b).reserved, 32 * MiB, "its emptied blocks went back to the driver");
  gpupart_free(x);
  release_cache(&cb);
}

Test(oom, a_guarantee_that_only_a_preallocated_partitions_bytes_could_cover_is_refused_at_creation) {
  gpupart_partition_desc pd = {.name = "pre", .limit = 48 * MiB, .growth = GPUPART_GROWTH_OFF};
  make_partition(env.dev, &pd);
  gpupart_partition_desc gd = {.name = "g", .guarantee = 32 * MiB};
  gpupart_partition *g = NULL;
  cr_expect_eq(gpupart_partition_create(env.dev, &gd, &g), GPUPART_ELIMIT);
  cr_expect(message_has("cannot be honoured"), "%s", gpupart_last_error());
  gd.guarantee = 16 * MiB;
  cr_expect_eq(gpupart_partition_create(env.dev, &gd, &g), GPUPART_OK, "16 MiB is free: %s", gpupart_last_error());
  gpupart_free(alloc_ok(g, 16 * MiB));
}
