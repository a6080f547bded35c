/* The expandable arena (core/arena.c, core/vm/): a partition that is one reserved address
 * range, growing by mapping granules of the emulated virtual memory of the sim backend.
 * Counts only: mapped bytes stay within one granule of what the allocations need, a
 * request spanning granules is one piece, trim unmaps the wholly free granules at the
 * top and a partition with nothing live holds nothing after trim, the limit binds at the
 * limit (no block tail), a device without virtual memory keeps blocks, and a
 * preallocated expandable partition maps its whole limit at once. Host-backed devices
 * let the tests write every byte of every allocation. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "policy.h"

#define MiB (1ull << 20)
#define GRANULE (2 * MiB)

static sim_env env;

static void teardown(void) {
  if (env.dev) close_env(&env);
}

/* A sim device of this library's descriptor size (its 0.3 fields count). */
static void open_sim(const gpupart_sim_desc *sim) {
  env.ctx = test_context();
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = sim, .backend_desc_size = sizeof *sim};
  cr_assert_eq(gpupart_device_open(env.ctx, &d, &env.dev), GPUPART_OK, "%s", gpupart_last_error());
}

static void open_host_backed(int no_vm) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .host_backed = 1, .no_vm = no_vm};
  open_sim(&sim);
}

TestSuite(expandable, .fini = teardown);

static gpupart_partition *expandable(uint64_t limit, int growth) {
  gpupart_partition_desc d = {.limit = limit, .growth = growth, .flags = GPUPART_PARTITION_EXPANDABLE};
  return make_partition(env.dev, &d);
}

static void fill(gpupart_allocation *a, uint8_t v) {
  gpupart_allocation_info i = info_of(a);
  memset((void *)(uintptr_t)i.device_address, v, i.size);
}

static void expect_filled(gpupart_allocation *a, uint8_t v) {
  gpupart_allocation_info i = info_of(a);
  const uint8_t *p = (const uint8_t *)(uintptr_t)i.device_address;
  for (uint64_t k = 0; k < i.size; k += 4093) cr_assert_eq(p[k], v, "byte %llu", (unsigned long long)k);
  cr_assert_eq(p[i.size - 1], v);
}

Test(expandable, mapped_bytes_follow_the_allocations_within_a_granule) {
  open_host_backed(0);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a[40];
  uint64_t in_use = 0;
  for (int i = 0; i < 40; i++) {
    uint64_t size = (uint64_t)(i % 5 + 1) * 300 * 1024;
    a[i] = alloc_ok(p, size);
    fill(a[i], (uint8_t)i);
    in_use += size;
    gpupart_stats s = test_stats(p);
    cr_assert_geq(s.reserved, s.in_use);
    cr_assert_lt(s.reserved, s.in_use + GRANULE + 256 * 40, "reserved %llu in use %llu", (unsigned long long)s.reserved,
                 (unsigned long long)s.in_use);
    test_check(env.dev);
  }
  for (int i = 0; i < 40; i++) expect_filled(a[i], (uint8_t)i);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, in_use);
  cr_expect_lt(s.driver_allocs, 40, "granules are mapped as the range grows, not per allocation");
  uintptr_t base = (uintptr_t)info_of(a[0]).device_address - info_of(a[0]).offset;
  for (int i = 0; i < 40; i++) cr_expect_eq(info_of(a[i]).device_address - info_of(a[i]).offset, base, "one range");
  for (int i = 0; i < 40; i++) gpupart_free(a[i]);
  gpupart_partition_destroy(p);
}

Test(expandable, an_allocation_spans_several_granules_in_one_piece) {
  open_host_backed(0);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *small = alloc_ok(p, 1 * MiB), *big = alloc_ok(p, 7 * MiB + 12345);
  fill(small, 0x11);
  fill(big, 0x5a);
  expect_filled(small, 0x11);
  expect_filled(big, 0x5a);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 10 * MiB, "1 MiB + 7 MiB and a bit in five granules");
  gpupart_free(small);
  gpupart_free(big);
  gpupart_partition_destroy(p);
}

Test(expandable, trim_unmaps_the_free_granules_at_the_top_and_nothing_is_held_at_the_end) {
  open_host_backed(0);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a[16];
  for (int i = 0; i < 16; i++) {
    a[i] = alloc_ok(p, 2 * MiB);
    fill(a[i], (uint8_t)(i + 1));
  }
  cr_assert_eq(test_stats(p).reserved, 32 * MiB);
  for (int i = 8; i < 16; i++) gpupart_free(a[i]);
  cr_expect_eq(test_stats(p).reserved, 32 * MiB, "a free unmaps nothing");
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 16 * MiB, "the free top went back");
  cr_expect_eq(dev_stats(env.dev).reserved, 16 * MiB);
  test_check(env.dev);
  for (int i = 0; i < 8; i++) expect_filled(a[i], (uint8_t)(i + 1));
  gpupart_allocation *again = alloc_ok(p, 3 * MiB);
  fill(again, 0x77);
  expect_filled(again, 0x77);
  gpupart_free(again);
  for (int i = 0; i < 8; i++) gpupart_free(a[i]);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  s = test_stats(p);
  cr_expect_eq(s.reserved, 0, "nothing held");
  cr_expect_eq(s.driver_allocs, s.driver_frees, "every mapping undone");
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(env.dev, &info), GPUPART_OK);
  cr_expect_eq(info.free_bytes, info.total_bytes, "the device has every byte back");
  gpupart_partition_destroy(p);
}

Test(expandable, the_limit_binds_at_the_limit) {
  open_host_backed(0);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a[64], *extra = NULL;
  for (int i = 0; i < 64; i++) a[i] = alloc_ok(p, 1 * MiB);
  cr_expect_eq(gpupart_alloc(p, 1, 0, &extra), GPUPART_ELIMIT);
  for (int i = 0; i < 63; i++) gpupart_free(a[i]);
  gpupart_allocation *b = alloc_ok(p, 63 * MiB);
  fill(b, 3);
  gpupart_free(b);
  gpupart_free(a[63]);
  gpupart_partition_destroy(p);
}

Test(expandable, a_device_without_virtual_memory_keeps_blocks) {
  open_host_backed(1);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 3 * MiB), *b = alloc_ok(p, 3 * MiB);
  cr_expect_neq(info_of(a).device_address - info_of(a).offset, info_of(b).device_address - info_of(b).offset,
                "two growth blocks, not one range");
  fill(a, 1);
  gpupart_free(a);
  gpupart_free(b);
  gpupart_partition_destroy(p);
  gpupart_partition_desc d = {.name = "required",
                              .limit = 64 * MiB,
                              .flags = GPUPART_PARTITION_EXPANDABLE | GPUPART_PARTITION_EXPANDABLE_REQUIRED};
  gpupart_partition *q = NULL;
  cr_expect_eq(gpupart_partition_create(env.dev, &d, &q), GPUPART_ENOTSUP);
  cr_expect(message_has("no virtual memory"), "%s", gpupart_last_error());
  cr_expect_null(q);
  d.flags = GPUPART_PARTITION_EXPANDABLE_REQUIRED; /* alone: it implies EXPANDABLE */
  cr_expect_eq(gpupart_partition_create(env.dev, &d, &q), GPUPART_ENOTSUP);
  cr_expect_null(q);
  d.flags = 0x8; /* no GPUPART_PARTITION_* bit */
  cr_expect_eq(gpupart_partition_create(env.dev, &d, &q), GPUPART_EINVAL);
  cr_expect(message_has("unknown flags 0x8"), "%s", gpupart_last_error());
  cr_expect_null(q);
}

Test(expandable, a_preallocated_partition_maps_its_limit_at_once_and_keeps_it) {
  open_host_backed(0);
  gpupart_partition *p = expandable(24 * MiB, GPUPART_GROWTH_OFF);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.reserved, 24 * MiB);
  gpupart_allocation *a = alloc_ok(p, 24 * MiB);
  fill(a, 9);
  expect_filled(a, 9);
  cr_expect_eq(test_stats(p).driver_allocs, s.driver_allocs, "no mapping after creation");
  gpupart_free(a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_expect_eq(test_stats(p).reserved, 24 * MiB, "kept");
  gpupart_partition_destroy(p);
  cr_expect_eq(dev_stats(env.dev).reserved, 0);
}

Test(expandable, the_option_switches_it_on_for_every_partition) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = "[gpupart]\nexpandable = true\n"};
  cr_assert_eq(gpupart_context_create(&cd, &env.ctx), GPUPART_OK, "%s", gpupart_last_error());
  env.dev = test_sim_device(env.ctx, &sim, NULL);
  gpupart_partition *p = test_partition(env.dev, "a", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 100);
  gpupart_allocation *b = alloc_ok(p, 100);
  cr_expect_eq(info_of(a).block_size, GRANULE, "one granule mapped");
  cr_expect_eq(info_of(b).device_address, info_of(a).device_address + 256);
  gpupart_free(a);
  gpupart_free(b);
  gpupart_partition_destroy(p);
}

/* Random allocations, frees and trims, with the consistency check after every step and
 * the bytes of every live allocation checked at the end: the tail, the mapped chunks and
 * the ledger never disagree. */
Test(expandable, random_steps_keep_every_invariant) {
  open_host_backed(0);
  gpupart_partition *p = expandable(96 * MiB, 0);
  gpupart_allocation *live[64] = {0};
  uint8_t tag[64] = {0};
  unsigned seed = 12345;
  for (int step = 0; step < 3000; step++) {
    seed = seed * 1103515245u + 12345u;
    unsigned slot = (seed >> 8) % 64, what = (seed >> 16) % 16;
    if (what == 0) {
      cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
    } else if (live[slot]) {
      expect_filled(live[slot], tag[slot]);
      gpupart_free(live[slot]);
      live[slot] = NULL;
    } else {
      uint64_t size = 1 + (seed >> 4) % (what < 4 ? 6 * MiB : 64 * 1024);
      gpupart_result rc = gpupart_alloc(p, size, 0, &live[slot]);
      if (rc == GPUPART_OK) {
        tag[slot] = (uint8_t)step;
        fill(live[slot], tag[slot]);
      } else {
        cr_assert_eq(rc, GPUPART_ELIMIT, "%s", gpupart_last_error());
        live[slot] = NULL;
      }
    }
    test_check(env.dev);
    gpupart_stats s = test_stats(p);
    cr_assert_leq(s.reserved, 96 * MiB, "never past the limit");
  }
  for (int i = 0; i < 64; i++)
    if (live[i]) {
      expect_filled(live[i], tag[i]);
      gpupart_free(live[i]);
    }
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_expect_eq(test_stats(p).reserved, 0);
  gpupart_partition_destroy(p);
}

typedef struct worker {
  gpupart_partition *p;
  int id, trims;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  gpupart_allocation *mine[16] = {0};
  for (int round = 0; round < 400; round++) {
    int i = round % 16;
    if (w->trims && round % 7 == 0) gpupart_partition_trim(w->p);
    if (mine[i]) {
      gpupart_free(mine[i]);
      mine[i] = NULL;
    } else if (gpupart_alloc(w->p, (uint64_t)(1 + (round * 7919 + w->id * 104729) % (3 * MiB)), 0, &mine[i]) !=
               GPUPART_OK) {
      mine[i] = NULL;
    }
  }
  for (int i = 0; i < 16; i++) gpupart_free(mine[i]);
  return NULL;
}

/* Threads allocating and freeing while one of them trims: growth and trim move the tail
 * under the slow lock while the fast path runs; nothing is lost. */
Test(expandable, threads_growing_and_trimming_at_once_leave_nothing_behind) {
  gpupart_sim_desc sim = {.total_bytes = 1024 * MiB};
  env = open_env(&sim, NULL);
  gpupart_partition *p = expandable(512 * MiB, 0);
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){p, i, i == 0};
    cr_assert_eq(pthread_create(&t[i], NULL, churn, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  test_check(env.dev);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.live_allocations, 0);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_expect_eq(test_stats(p).reserved, 0, "everything unmapped at the end");
  gpupart_partition_destroy(p);
}

/* Removes the test's ledger folder and the files in it. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[512];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* On a shared ledger (two contexts of one sim device, as two processes would be): the
 * mapped bytes of an expandable partition are what the ledger holds, so the other
 * handle's budget and a guarantee see them, the guarantee keeps them from growing into it,
 * and trim gives them back to the other handle. */
Test(expandable, a_shared_ledger_sees_the_mapped_bytes) {
  char dir[] = "/tmp/gpupart-expandable-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = dir};
  gpupart_context *other_ctx = NULL;
  cr_assert_eq(gpupart_context_create(&cd, &env.ctx), GPUPART_OK);
  cr_assert_eq(gpupart_context_create(&cd, &other_ctx), GPUPART_OK);
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  gpupart_device *other = NULL;
  cr_assert_eq(gpupart_device_open(env.ctx, &dd, &env.dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart_device_open(other_ctx, &dd, &other), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc gd = {.name = "floor", .limit = 128 * MiB, .guarantee = 64 * MiB};
  gpupart_partition *guarded = make_partition(other, &gd);
  gpupart_partition *p = expandable(256 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 100 * MiB), *b = NULL;
  cr_expect_eq(gpupart_alloc(p, 100 * MiB, 0, &b), GPUPART_ELIMIT, "the guarantee holds: %s", gpupart_last_error());
  uint64_t left = 0;
  cr_assert_eq(gpupart_partition_available(guarded, &left), GPUPART_OK);
  cr_expect_eq(left, 128 * MiB, "the other handle can still take its limit");
  gpupart_free(a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  gpupart_stats s;
  cr_assert_eq(gpupart_device_get_stats(other, &s), GPUPART_OK);
  cr_expect_eq(test_stats(p).reserved, 0);
  gpupart_allocation *big = alloc_ok(guarded, 128 * MiB);
  gpupart_free(big);
  cr_expect_eq(gpupart_partition_destroy(guarded), GPUPART_OK);
  cr_expect_eq(gpupart_partition_destroy(p), GPUPART_OK);
  cr_expect_eq(gpupart_device_close(other), GPUPART_OK);
  cr_expect_eq(gpupart_context_destroy(other_ctx), GPUPART_OK);
  close_env(&env);
  env = (sim_env){0};
  remove_dir(dir);
}

/* The dump shows the mapped bytes as the partition's one block and its allocations only
 * (the unmapped tail is no allocation). */
Test(expandable, the_dump_shows_the_mapped_block_and_the_allocations) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB};
  env = open_env(&sim, NULL);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 3 * MiB);
  char *json = NULL;
  cr_assert_eq(gpupart_device_dump(env.dev, GPUPART_DUMP_ALLOCATIONS, &json, NULL), GPUPART_OK, "%s",
               gpupart_last_error());
  cr_expect_not_null(strstr(json, "\"size\": 4194304, \"in_use\": 3145728, \"allocations\": 1"), "%s", json);
  gpupart_dump_free(json);
  gpupart_free(a);
  gpupart_partition_destroy(p);
}

/* A driver refusal in the middle of a preallocation leaves nothing mapped and nothing
 * charged (all or nothing, as for blocks); growth after a refusal goes on as before. */
Test(expandable, a_refused_mapping_leaves_nothing_behind) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .fail_block_alloc_at = 3};
  open_sim(&sim);
  gpupart_partition_desc d = {.name = "pre",
                              .limit = 64 * MiB,
                              .growth = GPUPART_GROWTH_OFF,
                              .max_block = 16 * MiB,
                              .flags = GPUPART_PARTITION_EXPANDABLE};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(env.dev, &d, &p), GPUPART_EDEVMEM, "%s", gpupart_last_error());
  cr_expect_null(p);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(env.dev, &info), GPUPART_OK);
  cr_expect_eq(info.free_bytes, info.total_bytes, "nothing left mapped");
  cr_expect_eq(dev_stats(env.dev).reserved, 0);
  test_check(env.dev);
  p = expandable(64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 1 * MiB), *b = alloc_ok(p, 8 * MiB);
  gpupart_free(b);
  gpupart_free(a);
  gpupart_partition_destroy(p);
}

/* A device alignment above the default granule raises the granule (it must hold whole
 * aligned ranges); an explicit granule below the alignment is refused. */
Test(expandable, the_granule_is_at_least_the_device_alignment) {
  gpupart_sim_desc sim = {.total_bytes = 1024 * MiB, .min_alignment = 4 * MiB};
  open_sim(&sim);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 1000);
  cr_expect_eq(info_of(a).block_size, 4 * MiB, "one 4 MiB granule mapped");
  gpupart_free(a);
  gpupart_partition_destroy(p);
  gpupart_sim_desc bad = {.total_bytes = 512 * MiB, .min_alignment = 4 * MiB, .vm_granule = 2 * MiB};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &bad, .backend_desc_size = sizeof bad};
  gpupart_device *dev = NULL;
  cr_expect_eq(gpupart_device_open(env.ctx, &d, &dev), GPUPART_EINVAL);
  cr_expect_null(dev);
}

/* A small granule (lavapipe's sparse block is 4 KiB) does not mean a mapping per growth:
 * each growth maps at least the partition's initial block (2 MiB by default, rounded up
 * to the granule), never past the range. */
Test(expandable, a_small_granule_maps_at_least_the_initial_block) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .host_backed = 1, .vm_granule = 4096};
  open_sim(&sim);
  gpupart_partition *p = expandable(64 * MiB, 0);
  gpupart_allocation *a[256];
  for (int i = 0; i < 256; i++) a[i] = alloc_ok(p, 4096);
  gpupart_stats s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 1, "%llu mappings for 256 allocations of 4 KiB (1 MiB)",
               (unsigned long long)s.driver_allocs);
  cr_expect_eq(s.reserved, 2 * MiB, "one initial block mapped");
  fill(a[255], 0x3c);
  expect_filled(a[255], 0x3c);
  for (int i = 0; i < 256; i++) gpupart_free(a[i]);
  gpupart_partition_destroy(p);
  gpupart_partition_desc d = {.limit = 64 * MiB, .initial_block = 8 * MiB, .flags = GPUPART_PARTITION_EXPANDABLE};
  p = make_partition(env.dev, &d);
  for (int i = 0; i < 256; i++) a[i] = alloc_ok(p, 4096);
  s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 1, "%llu mappings", (unsigned long long)s.driver_allocs);
  cr_expect_eq(s.reserved, 8 * MiB, "the step is the partition's initial block");
  for (int i = 0; i < 256; i++) gpupart_free(a[i]);
  gpupart_partition_destroy(p);
  d.limit = 2 * MiB;
  p = make_partition(env.dev, &d);
  for (int i = 0; i < 200; i++) a[i] = alloc_ok(p, 4096);
  s = test_stats(p);
  cr_expect_eq(s.driver_allocs, 1, "the step is capped by the range: the 2 MiB limit mapped at once");
  cr_expect_eq(s.reserved, 2 * MiB);
  for (int i = 0; i < 200; i++) gpupart_free(a[i]);
  gpupart_partition_destroy(p);
}

/* kineto's shape at lavapipe's scale: requests of 2.4 to 9.7 MiB held until a peak of
 * about 250 MiB, on a 4 KiB granule. Growth blocks start at the initial block (2 MiB)
 * whatever the peak; the expandable step ahead has that term too, so it makes no more
 * driver calls than growth blocks (33 mappings against 35 blocks; 40 with 1/32 of the
 * mapped bytes alone), and keeps its top within the step ahead of the peak. */
Test(expandable, a_small_granule_makes_no_more_calls_than_growth_blocks_up_to_a_peak) {
  gpupart_sim_desc sim = {.total_bytes = 1024 * MiB, .vm_granule = 4096};
  open_sim(&sim);
  gpupart_partition_desc gd = {.limit = 512 * MiB};
  gpupart_partition *g = make_partition(env.dev, &gd), *x = expandable(512 * MiB, 0);
  static gpupart_allocation *a[2][64];
  uint64_t in_use = 0;
  int n = 0;
  for (; in_use < 250 * MiB; n++) {
    uint64_t size = 2 * MiB + 400 * 1024 + (uint64_t)((n * 7919) % 29) * 256 * 1024;
    a[0][n] = alloc_ok(g, size);
    a[1][n] = alloc_ok(x, size);
    in_use += size;
  }
  gpupart_stats sg = test_stats(g), sx = test_stats(x);
  cr_expect_leq(sx.driver_allocs, sg.driver_allocs, "expandable: %llu mappings, growth: %llu blocks (%d allocations)",
                (unsigned long long)sx.driver_allocs, (unsigned long long)sg.driver_allocs, n);
  cr_expect_leq(sx.reserved, in_use + in_use / 32 + in_use / 16, "%llu mapped for %llu in use",
                (unsigned long long)sx.reserved, (unsigned long long)in_use);
  test_check(env.dev);
  for (int i = 0; i < n; i++) {
    gpupart_free(a[0][i]);
    gpupart_free(a[1][i]);
  }
  gpupart_partition_destroy(g);
  gpupart_partition_destroy(x);
}
