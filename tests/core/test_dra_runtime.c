/* A Kubernetes DRA claim's device metadata (KEP-5304) on a sim device, end to end: its
 * gpupart.io/memory is the budget of the device it names by UUID when nothing else sets
 * one; a newer generation of the file (the driver updated the claim) is applied at the
 * next device open and on the growth slow path as a live resize of the partition that held
 * the whole claim; a resize that cannot be made is logged and tried again. The file is
 * looked at again at most once per GPUPART__DRA_POLL_NS: the tests wait longer than
 * that, never asserting on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "config_env.h"
#include "internal.h"
#include "partition.h"
#include "resize.h"
#include "snapshot.h"

static char root[64], file[256];

static void setup(void) {
  test_clear_gpupart_env();
  test_log_text[0] = 0;
  test_log_warnings = 0;
  snprintf(root, sizeof root, "/tmp/gpupart-dra-run-XXXXXX");
  cr_assert_not_null(mkdtemp(root));
  char dir[200];
  snprintf(dir, sizeof dir, "%s/resourceclaims", root);
  mkdir(dir, 0755);
  strcat(dir, "/gpu-claim");
  mkdir(dir, 0755);
  strcat(dir, "/gpu");
  mkdir(dir, 0755);
  snprintf(file, sizeof file, "%s/gpu.example.com-metadata.json", dir);
  setenv("GPUPART_DRA_METADATA_DIR", root, 1);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(dra_runtime, .init = setup, .fini = teardown);

/* The sim device 0's UUID when its descriptor gives none (gpupart__sim_uuid). */
#define SIM0_UUID "GPU-00000000-0000-0000-0000-00000000005a"

/* Writes generation gen of the claim, giving the device memory bytes, as a driver that
 * rewrites the file in place does (the same inode). */
static void write_claim(uint64_t gen, uint64_t memory) {
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "{\"apiVersion\": \"metadata.resource.k8s.io/v1beta1\", \"kind\": \"DeviceMetadata\", \"metadata\": "
          "{\"name\": \"gpu-claim\", \"namespace\": \"team-a\", \"uid\": \"u-1\", \"generation\": %llu}, "
          "\"requests\": [{\"name\": \"gpu\", \"devices\": [{\"driver\": \"gpu.example.com\", \"pool\": \"n1\", "
          "\"name\": \"gpu-0\", \"attributes\": {\"uuid\": {\"string\": \"" SIM0_UUID "\"}, "
          "\"gpupart.io/memory\": {\"int\": %llu}}}]}]}\n",
          (unsigned long long)gen, (unsigned long long)memory);
  fclose(f);
}

static gpupart_device *open_sim(gpupart_context *ctx) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  return dev;
}

static uint64_t limit_of(gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s.limit;
}

/* Longer than GPUPART__DRA_POLL_NS (and the coarse clock's step): the next slow path looks. */
static void past_the_poll_interval(void) {
  struct timespec t = {0, (long)(GPUPART__DRA_POLL_NS * 2)};
  nanosleep(&t, NULL);
}

Test(dra_runtime, the_claim_s_memory_is_the_budget_of_the_device_it_names) {
  write_claim(1, 4 * GiB);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx);
  cr_expect_eq(gpupart_device_budget(dev), 4 * GiB);
  cr_expect_eq(dev->dra, 1);
  cr_expect_eq(dev->dra_generation, 1);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(dra_runtime, a_device_the_claim_does_not_name_is_not_watched) {
  write_claim(1, 4 * GiB);
  gpupart_context *ctx = test_env_context();
  gpupart_sim_desc sim = {.uuid = {1, 2, 3}};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .backend_desc_size = sizeof sim};
  gpupart_device *dev = NULL;
  cr_assert_eq(gpupart_device_open(ctx, &d, &dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(dev->dra, 0);
  cr_expect_eq(gpupart_device_budget(dev), 16 * GiB);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* The CDI-injected case: the node's budget from GPUPART_MEMORY_LIMIT, the claim a
 * partition of its memory (gpupart cdi's GPUPART_PARTITIONS). */
static gpupart_context *claim_context(uint64_t memory) {
  char parts[64];
  write_claim(1, memory);
  setenv("GPUPART_MEMORY_LIMIT", "12GiB", 1);
  snprintf(parts, sizeof parts, "claim:%llu", (unsigned long long)memory);
  setenv("GPUPART_PARTITIONS", parts, 1);
  return test_env_context();
}

Test(dra_runtime, a_newer_generation_is_applied_at_the_next_open) {
  gpupart_context *ctx = claim_context(4 * GiB);
  write_claim(2, 6 * GiB);
  gpupart_device *dev = open_sim(ctx);
  cr_expect_eq(limit_of(gpupart_partition_find(dev, "claim")), 6 * GiB, "%s", test_log_text);
  cr_expect_eq(dev->dra_generation, 2);
  cr_expect(strstr(test_log_text, "DRA claim team-a/gpu-claim generation 2: memory 4294967296 -> 6442450944"), "%s",
            test_log_text);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(dra_runtime, a_generation_bump_is_applied_on_the_growth_slow_path) {
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim");
  gpupart_partition *other = NULL;
  gpupart_partition_desc od = {.name = "other", .limit = 1 * GiB};
  cr_assert_eq(gpupart_partition_create(dev, &od, &other), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(limit_of(p), 4 * GiB);
  write_claim(2, 2 * GiB);
  past_the_poll_interval();
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 2 * GiB, "%s", test_log_text);
  cr_expect_eq(limit_of(other), 1 * GiB, "a partition that did not hold the claim keeps its limit");
  write_claim(3, 8 * GiB);
  past_the_poll_interval();
  gpupart_allocation *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 3 * GiB, 0, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 8 * GiB);
  cr_expect_eq(gpupart_device_check(dev), GPUPART_OK);
  gpupart_free(b);
  gpupart_free(a);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(dra_runtime, a_shrink_below_what_the_claim_holds_waits_and_is_logged) {
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim");
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 3 * GiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  write_claim(2, 1 * GiB);
  past_the_poll_interval();
  gpupart_allocation *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 512 * MiB, 0, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 4 * GiB, "not applied while 3.5 GiB are held");
  cr_expect_eq(dev->dra_generation, 1, "so it is tried again");
  cr_expect(strstr(test_log_text, "generation 2: memory 4294967296 -> 1073741824 not applied"), "%s", test_log_text);
  gpupart_free(a);
  gpupart_free(b);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK); /* so the next allocation needs a block */
  past_the_poll_interval();
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 1 * GiB, "%s", test_log_text);
  cr_expect_eq(dev->dra_generation, 2);
  gpupart_free(b);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

Test(dra_runtime, an_older_generation_or_a_broken_file_changes_nothing) {
  gpupart_context *ctx = claim_context(4 * GiB);
  write_claim(1, 1 * GiB); /* the same generation, other bytes: not an update */
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim");
  cr_expect_eq(limit_of(p), 4 * GiB);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fputs("{\"apiVersion\": \"metadata.resource.k8s.io/v1beta1\", \"kind\": \"Device", f);
  fclose(f);
  past_the_poll_interval();
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 4 * GiB);
  unlink(file);
  past_the_poll_interval();
  gpupart_allocation *b = NULL;
  cr_assert_eq(gpupart_alloc(p, 2 * GiB, 0, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 4 * GiB, "a claim whose file is gone keeps what it had");
  gpupart_free(a);
  gpupart_free(b);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* With a shared ledger the generation's resize is the ledger's (every member sees it), and
 * it may grow past the budget the process opened with when the operator raised the
 * ledger's (gpupart resize --budget). */
Test(dra_runtime, a_newer_generation_resizes_a_shared_partition_past_the_opening_budget) {
  char ledgers[128];
  snprintf(ledgers, sizeof ledgers, "%s/ledgers", root);
  cr_assert_eq(mkdir(ledgers, 0700), 0);
  setenv("GPUPART_SHARED", "1", 1);
  setenv("GPUPART_LEDGER_DIR", ledgers, 1);
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim");
  cr_assert_eq(gpupart_device_budget(dev), 12 * GiB);
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  cr_assert_eq(gpupart__ledger_shm_scan(ledgers, 200, &s, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(n, 1);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", ledgers, s->file);
  free(s);
  gpupart__ledger_change c = {.limit = 15 * GiB};
  cr_assert_eq(gpupart__ledger_change_file(path, &c), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_budget(dev), 15 * GiB, "the member reads the ledger's budget");
  write_claim(2, 14 * GiB);
  past_the_poll_interval();
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(limit_of(p), 14 * GiB, "%s", test_log_text);
  cr_assert_eq(gpupart__ledger_shm_scan(ledgers, 200, &s, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect(n == 1 && s->entries == 1 && s->entry[0].figures.limit == 14 * GiB, "the ledger's figure");
  free(s);
  cr_expect_eq(gpupart_device_check(dev), GPUPART_OK);
  gpupart_free(a);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}
