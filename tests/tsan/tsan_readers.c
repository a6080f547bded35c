/* Two threads each allocating in their own partition, and a third that meanwhile reads
 * both partitions' stats and peaks, the device's stats (gpupart_device_get_stats), runs
 * the invariant walk and dumps the device with every allocation. Every snapshot the
 * reader takes must be consistent in itself; at the end each partition's figures must be
 * exactly its thread's: counts, and peak_in_use the highest sum of live sizes the thread
 * itself held (a partition's peaks are exact). */
#include <string.h>

#include "tsan_common.h"

#define OPS 80000
#define KEEP 16

typedef tsan_worker worker;

static atomic_int stop;

static void *allocate(void *arg) {
  worker *w = arg;
  gpupart_allocation *held[KEEP];
  uint64_t sizes[KEEP];
  int n = 0;
  for (int i = 0; i < OPS; i++) {
    if (n == KEEP || (n && tsan_rand(&w->rng) % 2)) {
      n--;
      tsan_free(&w->t, held[n]);
      w->t.in_use -= sizes[n];
      continue;
    }
    uint64_t size = 1 + tsan_rand(&w->rng) % (256 * 1024);
    if (gpupart_alloc(w->p, size, 0, &held[n]) != GPUPART_OK) {
      w->t.odd++;
      continue;
    }
    w->t.allocs++;
    sizes[n++] = size;
    w->t.in_use += size;
    if (w->t.in_use > w->t.peak) w->t.peak = w->t.in_use;
  }
  while (n) {
    n--;
    tsan_free(&w->t, held[n]);
  }
  return NULL;
}

typedef struct reader {
  gpupart_device *dev;
  gpupart_partition *p[2];
  uint64_t rounds, bad;
} reader;

/* One snapshot of a partition: its figures agree with each other. */
static int consistent(const gpupart_stats *s) {
  return s->in_use <= s->peak_in_use && s->reserved <= s->peak_reserved && s->in_use <= s->reserved &&
         s->live_allocations <= KEEP && s->total_frees + s->live_allocations == s->total_allocations &&
         s->double_frees == 0;
}

static void *read_all(void *arg) {
  reader *r = arg;
  while (!atomic_load(&stop)) {
    gpupart_stats s[2], d;
    for (int i = 0; i < 2; i++)
      if (gpupart_partition_get_stats(r->p[i], &s[i]) != GPUPART_OK || !consistent(&s[i])) r->bad++;
    if (gpupart_device_get_stats(r->dev, &d) != GPUPART_OK || d.in_use > d.peak_in_use ||
        d.total_frees + d.live_allocations != d.total_allocations)
      r->bad++;
    if (gpupart_device_check(r->dev) != GPUPART_OK) r->bad++;
    char *json = NULL;
    size_t len = 0;
    gpupart_result rc = gpupart_device_dump(r->dev, GPUPART_DUMP_ALLOCATIONS, &json, &len);
    if (rc == GPUPART_OK && (len != strlen(json) || json[0] != '{')) r->bad++;
    if (rc != GPUPART_OK && rc != GPUPART_EBUSY) r->bad++; /* EBUSY: changed too fast for 8 snapshots */
    gpupart_dump_free(json);
    r->rounds++;
  }
  return NULL;
}

int main(void) {
  gpupart_context *ctx = tsan_context(NULL);
  gpupart_device *dev = tsan_device(ctx, 4 * GiB, 0);
  worker w[2] = {{.p = tsan_partition(dev, "left", 1 * GiB, 0), .rng = 88172645463325252ull},
                 {.p = tsan_partition(dev, "right", 1 * GiB, 0), .rng = 2463534242ull}};
  reader r = {.dev = dev, .p = {w[0].p, w[1].p}};
  pthread_t t[3];
  for (int i = 0; i < 2; i++) tsan_start(&t[i], allocate, &w[i]);
  tsan_start(&t[2], read_all, &r);
  for (int i = 0; i < 2; i++) tsan_join(t[i]);
  atomic_store(&stop, 1);
  tsan_join(t[2]);
  tsan_expect(r.rounds > 0, "the reader ran no round");
  tsan_expect_eq(r.bad, 0, "reader snapshots that were inconsistent or failed");
  for (int i = 0; i < 2; i++) {
    gpupart_stats s = tsan_stats(w[i].p);
    tsan_expect_eq(w[i].t.odd, 0, "calls that failed");
    tsan_expect_eq(s.total_allocations, w[i].t.allocs, "total_allocations");
    tsan_expect_eq(s.total_frees, w[i].t.frees, "total_frees");
    tsan_expect_eq(s.live_allocations, 0, "live_allocations");
    tsan_expect_eq(s.in_use, 0, "in_use");
    tsan_expect_eq(s.peak_in_use, w[i].t.peak, "peak_in_use against the thread's own highest");
  }
  gpupart_stats d;
  tsan_ok(gpupart_device_get_stats(dev, &d), "device_get_stats");
  tsan_expect_eq(d.total_allocations, w[0].t.allocs + w[1].t.allocs, "device total_allocations");
  tsan_expect_eq(d.in_use, 0, "device in_use");
  tsan_expect(d.peak_in_use >= w[0].t.peak && d.peak_in_use >= w[1].t.peak, "device peak below a partition's");
  tsan_ok(gpupart_device_check(dev), "device_check");
  printf("reader rounds: %" PRIu64 "\n", r.rounds);
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  return tsan_finish("tsan_readers");
}
