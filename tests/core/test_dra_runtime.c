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
#include "configured.h"
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

/* Writes generation gen of the claim, giving the device memory bytes (and a floor of
 * guarantee bytes unless 0), as a driver that rewrites the file in place does (the same
 * inode). */
static void write_claim_floor(uint64_t gen, uint64_t memory, uint64_t guarantee) {
  char floor[96] = "";
  if (guarantee)
    snprintf(floor, sizeof floor, ", \"gpupart.io/guarantee\": {\"int\": %llu}", (unsigned long long)guarantee);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "{\"apiVersion\": \"metadata.resource.k8s.io/v1beta1\", \"kind\": \"DeviceMetadata\", \"metadata\": "
          "{\"name\": \"gpu-claim\", \"namespace\": \"team-a\", \"uid\": \"u-1\", \"generation\": %llu}, "
          "\"requests\": [{\"name\": \"gpu\", \"devices\": [{\"driver\": \"gpu.example.com\", \"pool\": \"n1\", "
          "\"name\": \"gpu-0\", \"attributes\": {\"uuid\": {\"string\": \"" SIM0_UUID "\"}, "
          "\"gpupart.io/memory\": {\"int\": %llu}%s}}]}]}\n",
          (unsigned long long)gen, (unsigned long long)memory, floor);
  fclose(f);
}

static void write_claim(uint64_t gen, uint64_t memory) { write_claim_floor(gen, memory, 0); }

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

/* A shared ledger in the test's folder; its path into path (n bytes) once a device made it. */
static void shared_ledger(char *dir, size_t n) {
  snprintf(dir, n, "%s/ledgers", root);
  cr_assert_eq(mkdir(dir, 0700), 0);
  setenv("GPUPART_SHARED", "1", 1);
  setenv("GPUPART_LEDGER_DIR", dir, 1);
}

static gpupart__ledger_snapshot *snapshot_of(const char *dir) {
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0;
  cr_assert_eq(gpupart__ledger_shm_scan(dir, 200, &s, &n), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(n, 1);
  return s;
}

/* The partitions a claim's process makes carry the claim, its namespace and the pod's
 * name (POD_NAME, the downward API's) in the shared ledger, for the metrics. */
Test(dra_runtime, a_claim_s_partitions_carry_its_labels_in_the_ledger) {
  char ledgers[128];
  shared_ledger(ledgers, sizeof ledgers);
  setenv("POD_NAME", "trainer-0", 1);
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = NULL;
  gpupart_partition_desc d = {.name = "later", .limit = 1 * GiB};
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  gpupart__ledger_snapshot *s = snapshot_of(ledgers);
  cr_assert_eq(s->entries, 2);
  for (uint32_t i = 0; i < s->entries; i++) {
    const gpupart__ledger_labels *l = &s->entry[i].labels;
    cr_expect_str_eq(l->claim, "gpu-claim", "%s", s->entry[i].name);
    cr_expect_str_eq(l->namespace, "team-a");
    cr_expect_str_eq(l->pod, "trainer-0");
    cr_expect_not(s->entry[i].labels_refused);
  }
  free(s);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* Without a claim (or in-process), no labels; a POD_NAME that is no Kubernetes name is a
 * warning and no pod label. */
Test(dra_runtime, a_pod_name_that_is_no_name_is_left_out) {
  char ledgers[128];
  shared_ledger(ledgers, sizeof ledgers);
  setenv("POD_NAME", "Bad\x7fName", 1);
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart__ledger_snapshot *s = snapshot_of(ledgers);
  cr_assert_eq(s->entries, 1);
  cr_expect_str_eq(s->entry[0].labels.claim, "gpu-claim");
  cr_expect_str_eq(s->entry[0].labels.pod, "");
  free(s);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* A process started after the claim's bump: its variables (gpupart cdi's, injected when
 * the container was made) still say generation 1's 4 GiB, the metadata file generation 2's
 * 6 GiB and a 2 GiB floor: the claim's partition is made with the newest figures. */
Test(dra_runtime, a_process_started_after_a_bump_takes_the_newest_figures) {
  write_claim_floor(2, 6 * GiB, 2 * GiB);
  setenv("GPUPART_MEMORY_LIMIT", "12GiB", 1);
  setenv("GPUPART_PARTITIONS", "claim:4GiB:1GiB,other:1GiB", 1);
  setenv("GPUPART_PARTITION", "claim", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx);
  gpupart_stats st;
  cr_assert_eq(gpupart_partition_get_stats(gpupart_partition_find(dev, "claim"), &st), GPUPART_OK);
  cr_expect_eq(st.limit, 6 * GiB);
  cr_expect_eq(st.guarantee, 2 * GiB);
  cr_expect_eq(limit_of(gpupart_partition_find(dev, "other")), 1 * GiB, "not the claim's partition");
  cr_expect_eq(dev->dra_generation, 2);
  write_claim(3, 5 * GiB); /* and later generations still apply to it */
  past_the_poll_interval();
  gpupart_device_close(dev);
  dev = open_sim(ctx);
  cr_expect_eq(limit_of(gpupart_partition_find(dev, "claim")), 5 * GiB, "%s", test_log_text);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

static uint64_t floor_of(gpupart_partition *p) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(p, &s), GPUPART_OK);
  return s.guarantee;
}

/* A newer generation's gpupart.io/guarantee changes the claim's floor live, through the
 * ledger's rule of `gpupart resize --guarantee` (shm_resize.c): a floor the budget cannot
 * hold beside the others' is refused, logged with that rule's reason, and tried again. */
Test(dra_runtime, a_newer_generation_s_guarantee_changes_the_floor_live) {
  char ledgers[128];
  shared_ledger(ledgers, sizeof ledgers);
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim"), *other = NULL;
  gpupart_partition_desc od = {.name = "other", .limit = 8 * GiB, .guarantee = 8 * GiB};
  cr_assert_eq(gpupart_partition_create(dev, &od, &other), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(floor_of(p), 0);
  write_claim_floor(2, 4 * GiB, 3 * GiB);
  past_the_poll_interval();
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(floor_of(p), 3 * GiB, "%s", test_log_text);
  cr_expect(strstr(test_log_text, "generation 2: memory 4294967296 -> 4294967296, guarantee 3221225472"), "%s",
            test_log_text);
  gpupart__ledger_snapshot *s = snapshot_of(ledgers);
  cr_expect_eq(s->guarantees, 11 * GiB, "the ledger's floors");
  free(s);
  write_claim_floor(3, 4 * GiB, 4 * GiB + 1); /* above the limit */
  past_the_poll_interval();
  gpupart_free(a);
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(floor_of(p), 3 * GiB);
  cr_expect(strstr(test_log_text, "generation 3") && strstr(test_log_text, "not applied"), "%s", test_log_text);
  cr_expect_eq(dev->dra_generation, 2, "so it is tried again");
  gpupart_free(a);
  cr_assert_eq(gpupart_partition_destroy(other), GPUPART_OK);
  write_claim_floor(4, 4 * GiB, 4 * GiB);
  past_the_poll_interval();
  cr_assert_eq(gpupart_partition_trim(p), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(p, 64 * MiB, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(floor_of(p), 4 * GiB, "%s", test_log_text);
  cr_expect_eq(gpupart_device_check(dev), GPUPART_OK);
  gpupart_free(a);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* The same floor past the budget, from a member (a claim's generation) and from outside
 * (gpupart resize), is refused by one rule with one reason. */
Test(dra_runtime, a_floor_past_the_budget_is_refused_alike_from_a_member_and_from_outside) {
  char ledgers[128];
  shared_ledger(ledgers, sizeof ledgers);
  gpupart_context *ctx = claim_context(4 * GiB);
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *other = NULL;
  gpupart_partition_desc od = {.name = "other", .limit = 8 * GiB, .guarantee = 9 * GiB};
  od.limit = 9 * GiB;
  cr_assert_eq(gpupart_partition_create(dev, &od, &other), GPUPART_OK, "%s", gpupart_last_error());
  write_claim_floor(2, 4 * GiB, 4 * GiB);
  past_the_poll_interval();
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(gpupart_partition_find(dev, "claim"), 64 * MiB, 0, &a), GPUPART_OK);
  cr_expect(strstr(test_log_text, "would take the guarantees past the budget"), "%s", test_log_text);
  gpupart__ledger_snapshot *s = snapshot_of(ledgers);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", ledgers, s->file);
  free(s);
  gpupart__ledger_change c = {.partition = "claim", .limit = 4 * GiB, .guarantee = 4 * GiB};
  cr_expect_eq(gpupart__ledger_change_file(path, &c), GPUPART_ELIMIT);
  cr_expect(strstr(gpupart_last_error(), "would take the guarantees past the budget"), "%s", gpupart_last_error());
  gpupart_free(a);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}

/* The late process's partition exists already, made by a job of generation 1 that has not
 * looked at the file since (no slow path): it is joined, not refused (EEXIST), and resized
 * ledger-wide to the newest generation's figures. */
Test(dra_runtime, a_late_process_joins_a_partition_of_an_older_generation_and_updates_it) {
  char ledgers[128];
  shared_ledger(ledgers, sizeof ledgers);
  setenv("GPUPART_PARTITION", "claim", 1);
  gpupart_context *first = claim_context(4 * GiB);
  gpupart_device *a = open_sim(first);
  write_claim_floor(2, 6 * GiB, 1 * GiB);
  gpupart_context *late = test_env_context();
  gpupart_device *b = open_sim(late);
  gpupart_partition *p = gpupart_partition_find(b, "claim");
  cr_assert_not_null(p);
  cr_expect_eq(limit_of(p), 6 * GiB, "%s", test_log_text);
  cr_expect_eq(floor_of(p), 1 * GiB);
  cr_expect_eq(limit_of(gpupart_partition_find(a, "claim")), 6 * GiB, "the first job's partition is the same one: %s",
               test_log_text);
  gpupart__ledger_snapshot *s = snapshot_of(ledgers);
  cr_expect(s->entries == 1 && s->members == 2, "one partition, two members");
  free(s);
  gpupart_device_close(b);
  gpupart_context_destroy(late);
  gpupart_device_close(a);
  gpupart_context_destroy(first);
}

/* A floor the variables give as a share of the budget stays that share when the claim
 * gives none (clamped to the claim's newest memory). */
Test(dra_runtime, a_late_process_keeps_the_variables_floor_share_when_the_claim_gives_none) {
  write_claim(2, 6 * GiB);
  setenv("GPUPART_MEMORY_LIMIT", "12GiB", 1);
  setenv("GPUPART_PARTITIONS", "claim:4GiB:25%", 1);
  gpupart_context *ctx = test_env_context();
  gpupart_device *dev = open_sim(ctx);
  gpupart_partition *p = gpupart_partition_find(dev, "claim");
  cr_expect_eq(limit_of(p), 6 * GiB);
  cr_expect_eq(floor_of(p), 3 * GiB, "25%% of the 12 GiB budget");
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
}
