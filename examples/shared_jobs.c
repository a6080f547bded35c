/* shared_jobs: two jobs, two processes, one device shared by ratio through the shared
 * ledger (GPUPART_DEVICE_SHARED). Each job's partition is guaranteed half of the device
 * and may grow to all of it. Job B (a child process) takes its half and keeps working;
 * job A (this process) takes its half, finds it cannot take more while B runs, then B is
 * killed mid-run with SIGKILL (as an OOM killer or a scheduler would), and A gets B's
 * bytes back at once: the ledger finds the dead member and returns what it held.
 *
 *   shared_jobs [BACKEND]     (default sim; e.g. cuda on a machine with a GPU)
 *
 * The ledger lives in a fresh folder under /tmp (GPUPART_LEDGER_DIR is the usual way to
 * choose it), removed at the end. Running the two jobs as two separate programs works the
 * same: start each with GPUPART_SHARED=1 and the same GPUPART_LEDGER_DIR. Exit 0 when
 * every step did what it says. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupart.h"

#define MiB (1024ull * 1024ull)

static char ledger_dir[] = "/tmp/gpupart-shared-jobs-XXXXXX";
static gpupart_backend backend = GPUPART_BACKEND_SIM;
static pid_t job_b_pid; /* 0 once job B is reaped */

static void kill_job_b(void) {
  if (!job_b_pid) return;
  kill(job_b_pid, SIGKILL);
  waitpid(job_b_pid, NULL, 0);
  job_b_pid = 0;
}

static int fail(const char *what) {
  fprintf(stderr, "shared_jobs: %s: %s\n", what, gpupart_last_error());
  return 1;
}

/* Opens the shared device and this job's partition: half guaranteed, all allowed. */
static int open_job(const char *name, gpupart_context **ctx, gpupart_device **dev, gpupart_partition **p) {
  gpupart_context_desc cd = {.ledger_dir = ledger_dir};
  static gpupart_sim_desc sim = {.total_bytes = 1024 * MiB};
  gpupart_device_desc dd = {.backend = backend, .flags = GPUPART_DEVICE_SHARED};
  if (backend == GPUPART_BACKEND_SIM) dd.backend_desc = &sim;
  gpupart_partition_desc pd = {.name = name, .guarantee_fraction = 0.5, .release_threshold = 1};
  if (gpupart_context_create(&cd, ctx) || gpupart_device_open(*ctx, &dd, dev)) return fail("open");
  if (gpupart_partition_create(*dev, &pd, p)) return fail("partition");
  return 0;
}

/* Job B: takes its half, says so on ready, and works until it is killed. */
static void job_b(int ready) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p;
  gpupart_allocation *a = NULL;
  if (open_job("job-b", &ctx, &dev, &p)) _exit(2);
  if (gpupart_alloc(p, gpupart_device_budget(dev) / 2, 0, &a)) _exit(fail("job B alloc"));
  printf("job B (pid %d): holds %llu MiB, working\n", (int)getpid(),
         (unsigned long long)(gpupart_device_budget(dev) / 2 / MiB));
  fflush(stdout);
  char c = 1;
  if (write(ready, &c, 1) != 1) _exit(3);
  for (;;) pause(); /* mid-run, never closing: its bytes come back only through the ledger */
}

static pid_t start_job_b(void) {
  int r[2];
  char c;
  if (pipe(r)) return -1;
  pid_t pid = fork();
  if (pid == 0) close(r[0]), job_b(r[1]);
  close(r[1]);
  if (pid > 0 && read(r[0], &c, 1) != 1) pid = -1;
  close(r[0]);
  return pid;
}

/* Job A: its half; more is refused while B runs; after B's death, B's half too. */
static int job_a(void) {
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p;
  gpupart_allocation *mine = NULL, *more = NULL;
  if (open_job("job-a", &ctx, &dev, &p)) return 1;
  uint64_t half = gpupart_device_budget(dev) / 2;
  if (gpupart_alloc(p, half, 0, &mine)) return fail("job A alloc");
  gpupart_result rc = gpupart_alloc(p, half, 0, &more);
  printf("job A: holds %llu MiB; %llu MiB more while B runs: %s\n", (unsigned long long)(half / MiB),
         (unsigned long long)(half / MiB), gpupart_result_str(rc));
  if (rc != GPUPART_ELIMIT) return fprintf(stderr, "shared_jobs: job A got B's half while B ran\n"), 1;
  kill_job_b();
  printf("job B killed mid-run\n");
  if (gpupart_alloc(p, half, 0, &more)) return fail("job A after B's death");
  gpupart_stats s;
  gpupart_device_get_stats(dev, &s);
  printf("job A: now holds %llu MiB of the device's %llu (B's bytes came back)\n",
         (unsigned long long)(s.reserved / MiB), (unsigned long long)(gpupart_device_budget(dev) / MiB));
  gpupart_free(more), gpupart_free(mine);
  if (gpupart_device_check(dev) || gpupart_device_close(dev) || gpupart_context_destroy(ctx)) return fail("close");
  return s.reserved == 2 * half ? 0 : 1;
}

static void remove_ledger_dir(void) {
  DIR *d = opendir(ledger_dir);
  char path[512];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", ledger_dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(ledger_dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "sim") != 0) {
    if (strcmp(argv[1], "cuda") == 0) backend = GPUPART_BACKEND_CUDA;
    else if (strcmp(argv[1], "vulkan") == 0) backend = GPUPART_BACKEND_VULKAN;
    else if (strcmp(argv[1], "opencl") == 0) backend = GPUPART_BACKEND_OPENCL;
    else return fprintf(stderr, "usage: shared_jobs [sim|cuda|vulkan|opencl]\n"), 2;
  }
  if (!mkdtemp(ledger_dir)) return perror("shared_jobs: mkdtemp"), 1;
  job_b_pid = start_job_b(); /* before this process opens the device: see docs/design.md */
  if (job_b_pid < 0) job_b_pid = 0;
  int rc = job_b_pid ? job_a() : (fprintf(stderr, "shared_jobs: job B did not start\n"), 1);
  kill_job_b(); /* when job A failed first */
  remove_ledger_dir();
  printf("%s\n", rc ? "FAILED" : "OK");
  return rc;
}
