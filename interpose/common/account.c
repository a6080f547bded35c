/* The interposers' mirror accounting (account.h): one gpupart context per process,
 * created on first use from the process's GPUPART_* configuration; one simulated device
 * per real device, of the real device's size, opened through the public API; on it one
 * partition named GPUPART_PARTITION, else after the program. Nothing here decides a
 * limit: device_open computes the budget and partition_create the limit, as for any
 * gpupart application. */
#include "account.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_MIRRORS 64

typedef struct mirror {
  uint32_t key;
  uint64_t total;
  gpupart_partition *partition; /* NULL: refused, pass through */
} mirror;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gpupart_context *ctx;
static int ctx_failed;
static mirror mirrors[MAX_MIRRORS];
static uint32_t nmirrors;

static void say_refused(const char *what, gpupart_result r) {
  fprintf(stderr, "gpupart layer: %s: %s (%s); memory is not accounted\n", what, gpupart_result_name(r),
          gpupart_last_error());
}

static gpupart_context *context_locked(void) {
  if (ctx || ctx_failed) return ctx;
  gpupart_result r = gpupart_context_create(NULL, &ctx);
  if (r) say_refused("context_create", r), ctx_failed = 1;
  return ctx;
}

/* GPUPART_PARTITION, else the program's name. */
static const char *partition_name(void) {
  const char *n = getenv("GPUPART_PARTITION");
  return n && *n ? n : program_invocation_short_name;
}

/* A name another process of the shared ledger already holds gets this process's own
 * "name.pid": partitions are unique across a shared ledger and cannot be joined (yet),
 * so the two processes share the device budget instead. */
static gpupart_partition *partition_open(gpupart_device *dev) {
  gpupart_partition_desc pd = {.name = partition_name(), .release_threshold = 1};
  gpupart_partition *p = NULL;
  gpupart_result r = gpupart_partition_create(dev, &pd, &p);
  if (r == GPUPART_EEXIST) {
    char own[256];
    snprintf(own, sizeof own, "%s.%ld", pd.name, (long)getpid());
    pd.name = own;
    r = gpupart_partition_create(dev, &pd, &p);
  }
  if (r) say_refused("partition_create", r);
  return p;
}

static gpupart_partition *mirror_open(uint32_t key, uint64_t total) {
  if (!context_locked()) return NULL;
  gpupart_sim_desc sd = {.total_bytes = total};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .index = key, .backend_desc = &sd,
                            .backend_desc_size = sizeof sd};
  gpupart_device *dev = NULL;
  gpupart_result r = gpupart_device_open(ctx, &dd, &dev);
  if (r) return say_refused("device_open", r), NULL;
  return partition_open(dev);
}

gpupart_partition *gpupart__ip_partition(uint32_t key, uint64_t total) {
  gpupart_partition *p = NULL;
  pthread_mutex_lock(&lock);
  uint32_t i = 0;
  while (i < nmirrors && (mirrors[i].key != key || mirrors[i].total != total)) i++;
  if (i < nmirrors) p = mirrors[i].partition;
  else if (nmirrors < MAX_MIRRORS) {
    p = mirror_open(key, total);
    mirrors[nmirrors++] = (mirror){key, total, p};
  }
  pthread_mutex_unlock(&lock);
  return p;
}

uint64_t gpupart__ip_limit(gpupart_partition *p) {
  gpupart_stats s;
  return gpupart_partition_get_stats(p, &s) ? 0 : s.limit;
}

uint64_t gpupart__ip_in_use(gpupart_partition *p) {
  gpupart_stats s;
  return gpupart_partition_get_stats(p, &s) ? 0 : s.in_use;
}

int gpupart__ip_account(gpupart_partition *p, uint64_t size, gpupart_allocation **out) {
  gpupart_result r = gpupart_alloc(p, size, 0, out);
  return r == GPUPART_ELIMIT || r == GPUPART_EDEVMEM ? -1 : 0;
}

void gpupart__ip_unaccount(gpupart_allocation *a) {
  (void)gpupart_free(a);
}

void gpupart__ip_forget(void) {
  pthread_mutex_init(&lock, NULL);
  ctx = NULL;
  ctx_failed = 0;
  nmirrors = 0;
}
