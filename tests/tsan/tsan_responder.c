/* The responder thread (core/trim.c) answering another process's request while this
 * process allocates. This process opens a shared sim device (1 GiB) in a ledger folder of
 * its own (the context's ledger_dir, which GPUPART_LEDGER_DIR would set: a scratch folder
 * under TMPDIR), leaves a 900 MiB empty block cached in partition "cache", and lets two
 * threads allocate and free in partition "work", preallocated (64 MiB) and never full, so
 * that they never take the slow path that could answer a request in the responder's
 * place. Then a child process (this program again, exec'd with "child DIR") creates a
 * partition with an 800 MiB guarantee: only the cached block, given back by this
 * process's responder thread while the threads allocate, can make room for it. Two more
 * threads read the ledger meanwhile (gpupart_partition_available and _chargeable take its
 * lock), so that its local mutex is contended: the timed wait for it must be one that
 * TSan sees. The child exits 0 once its floor is usable; this process checks the cached
 * block went back to the driver and that "work"'s counts are exactly its threads'. */
#include <dirent.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tsan_common.h"

#define WORKERS 2
#define LOOKERS 2
#define MIN_OPS 2000
#define KEEP 16

static gpupart_device *open_shared(gpupart_context *ctx) { return tsan_device(ctx, 1 * GiB, GPUPART_DEVICE_SHARED); }

/* The child: asks for the floor. A refusal after the library's bounded wait (EBUSY: the
 * responder did not give back in time, on a loaded machine) is asked again, a few times. */
static int child(const char *dir) {
  gpupart_context *ctx = tsan_context(dir);
  gpupart_device *dev = open_shared(ctx);
  gpupart_partition_desc d = {.name = "crit", .guarantee = 800 * MiB};
  gpupart_partition *crit = NULL;
  gpupart_result rc = GPUPART_EBUSY;
  for (int tries = 0; tries < 10 && rc == GPUPART_EBUSY; tries++) rc = gpupart_partition_create(dev, &d, &crit);
  if (rc != GPUPART_OK) tsan_die("child: the floor was refused", rc);
  gpupart_allocation *a = NULL;
  tsan_ok(gpupart_alloc(crit, 800 * MiB, 0, &a), "child: the floor is usable");
  tsan_ok(gpupart_free(a), "child: free");
  tsan_ok(gpupart_device_close(dev), "child: device_close");
  tsan_ok(gpupart_context_destroy(ctx), "child: context_destroy");
  return 0;
}

typedef tsan_worker worker;

static atomic_int stop;

static void *allocate(void *arg) {
  worker *w = arg;
  gpupart_allocation *held[KEEP];
  int n = 0;
  for (uint64_t i = 0; i < MIN_OPS || !atomic_load(&stop); i++) {
    if (n == KEEP || (n && tsan_rand(&w->rng) % 2)) {
      tsan_free(&w->t, held[--n]);
      continue;
    }
    uint64_t size = 1 + tsan_rand(&w->rng) % MiB; /* at most 32 MiB live in 64 */
    gpupart_result rc = gpupart_alloc(w->p, size, 0, &held[n]);
    if (rc == GPUPART_OK) {
      w->t.allocs++;
      n++;
    } else {
      w->t.odd++;
    }
  }
  while (n) tsan_free(&w->t, held[--n]);
  return NULL;
}

typedef struct looker {
  gpupart_partition *p;
  uint64_t looks, odd;
} looker;

static void *look(void *arg) {
  looker *k = arg;
  for (uint64_t i = 0; i < MIN_OPS || !atomic_load(&stop); i++) {
    uint64_t available = 0, chargeable = 0;
    if (gpupart_partition_available(k->p, &available) != GPUPART_OK ||
        gpupart_partition_chargeable(k->p, &chargeable) != GPUPART_OK || available > 1 * GiB || chargeable > 1 * GiB)
      k->odd++;
    k->looks++;
  }
  return NULL;
}

static int run_child(const char *self, const char *dir) {
  pid_t pid = fork();
  if (pid < 0) tsan_die("fork", GPUPART_OK);
  if (pid == 0) {
    execl(self, self, "child", dir, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) tsan_die("waitpid", GPUPART_OK);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void remove_folder(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[512];
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
  char dir[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gpupart-tsan-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) tsan_die("mkdtemp", GPUPART_OK);
  gpupart_context *ctx = tsan_context(dir);
  gpupart_device *dev = open_shared(ctx);
  gpupart_partition *cache = tsan_partition(dev, "cache", 0, 0);
  gpupart_allocation *big = NULL;
  tsan_ok(gpupart_alloc(cache, 900 * MiB, 0, &big), "the cached block");
  tsan_ok(gpupart_free(big), "free of the cached block"); /* its block stays, empty */
  worker w[WORKERS];
  looker k[LOOKERS] = {{.p = cache}, {.p = cache}};
  pthread_t t[WORKERS], tk[LOOKERS];
  gpupart_partition_desc wd = {.name = "work", .limit = 64 * MiB, .growth = GPUPART_GROWTH_OFF};
  gpupart_partition *work = NULL;
  tsan_ok(gpupart_partition_create(dev, &wd, &work), "the preallocated partition");
  for (int i = 0; i < WORKERS; i++) w[i] = (worker){.p = work, .rng = 88172645463325252ull * (uint64_t)(i + 1)};
  for (int i = 0; i < WORKERS; i++) tsan_start(&t[i], allocate, &w[i]);
  for (int i = 0; i < LOOKERS; i++) tsan_start(&tk[i], look, &k[i]);
  int child_status = run_child("/proc/self/exe", dir);
  atomic_store(&stop, 1);
  for (int i = 0; i < WORKERS; i++) tsan_join(t[i]);
  for (int i = 0; i < LOOKERS; i++) {
    tsan_join(tk[i]);
    tsan_expect_eq(k[i].odd, 0, "ledger reads that failed or were out of range");
  }
  tsan_expect_eq((uint64_t)child_status, 0, "the child's exit status (its floor)");
  gpupart_stats c = tsan_stats(cache), s = tsan_stats(work);
  tsan_expect_eq(c.driver_frees, 1, "the cached block given back (driver_frees of cache)");
  uint64_t allocs = 0, frees = 0;
  for (int i = 0; i < WORKERS; i++) {
    tsan_expect_eq(w[i].t.odd, 0, "calls that failed");
    allocs += w[i].t.allocs;
    frees += w[i].t.frees;
  }
  tsan_expect_eq(s.total_allocations, allocs, "total_allocations");
  tsan_expect_eq(s.total_frees, frees, "total_frees");
  tsan_expect_eq(s.failed_allocations, 0, "failed_allocations");
  tsan_expect_eq(s.driver_allocs, 1, "driver_allocs of the preallocated partition (no slow path)");
  tsan_expect_eq(s.live_allocations, 0, "live_allocations");
  tsan_expect_eq(s.in_use, 0, "in_use");
  tsan_ok(gpupart_device_check(dev), "device_check");
  printf("work: %" PRIu64 " allocations\n", allocs);
  tsan_ok(gpupart_device_close(dev), "device_close");
  tsan_ok(gpupart_context_destroy(ctx), "context_destroy");
  remove_folder(dir);
  return tsan_finish("tsan_responder");
}
