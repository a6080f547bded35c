/* An unmodified CUDA driver-API program for the preload library's arena-mode tests: like
 * cu_fill it knows nothing of gpupart and is linked against a libcuda.so.1 (the test
 * double). It runs the sequence of calls its arguments spell, one line of output each, so
 * that a test can drive the exact order of allocations, frees and context changes that a
 * defect needs and check after each step what the program sees.
 *
 *   cu_seq OP...
 *   a:BYTES     cuMemAlloc_v2 into the next slot ("a SLOT code C", then " at J" where the
 *               pointer is the one an earlier slot J had)
 *   p:W:H       cuMemAllocPitch_v2 of H rows of W bytes, 4-byte elements, next slot
 *   m:BYTES     cuMemAllocManaged (global) into the next slot
 *   f:SLOT      cuMemFree_v2 of the slot's pointer ("f SLOT code C")
 *   F:SLOT      cuMemFreeAsync of the slot's pointer on the NULL stream
 *   o:SLOT:OFF  cuMemFree_v2 of the slot's pointer plus OFF bytes (not freeing the slot)
 *   w:SLOT      cuMemcpyHtoD_v2 of the slot's last byte ("w SLOT code C")
 *   i           cuMemGetInfo_v2 ("info code C free F total T held H": H the bytes the
 *               program's live slots hold, as it asked for them)
 *   d           the test double's counters ("driver allocs A frees F live B peak P": P the
 *               most bytes the driver held at once)
 *   c[:DEV]     cuCtxCreate (cuda.h's: cuCtxCreate_v4 from CUDA 13) on device DEV (0),
 *               made current ("c code C")
 *   x           cuCtxDestroy_v2 of the last created context ("x code C")
 *   P:DEV       device DEV's primary context made current ("P DEV code C")
 *   n           no context current (cuCtxSetCurrent(NULL))
 *   t:N         4 threads at once, each N times: up to 8 live allocations of 1 byte to
 *               4 MiB (sizes from a fixed seed per thread), one freed at random when 8
 *               live, all freed at the end ("t code C": C 0 unless a call other than a
 *               refusal of memory failed, or a free failed)
 *   R           cuDevicePrimaryCtxReset_v2 of device 0 ("R code C"): the driver frees
 *               every allocation of its primary context (the program's slots of it are
 *               counted as freed)
 * It starts with cuInit and device 0's primary context current. Exit status 0 unless an
 * argument is not an operation. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 1024

static CUdeviceptr slot[MAX_SLOTS];
static size_t bytes[MAX_SLOTS];
static int live[MAX_SLOTS], nslots;
static CUcontext created;

static size_t held(void) {
  size_t h = 0;
  for (int i = 0; i < nslots; i++) h += live[i] ? bytes[i] : 0;
  return h;
}

static void info(void) {
  size_t free_b = 0, total_b = 0;
  CUresult r = cuMemGetInfo_v2(&free_b, &total_b);
  printf("info code %d free %zu total %zu held %zu\n", (int)r, free_b, total_b, held());
}

static void driver(void) {
  void *p = dlsym(RTLD_DEFAULT, "cuda_double_stats");
  unsigned long long *(*stats)(void);
  if (!p) return;
  memcpy(&stats, &p, sizeof p);
  printf("driver allocs %llu frees %llu live %llu peak %llu\n", stats()[0], stats()[2], stats()[4], stats()[5]);
}

/* The earlier slot whose pointer slot i's is, or -1. */
static int same_as(int i) {
  for (int j = 0; j < i; j++)
    if (slot[j] == slot[i]) return j;
  return -1;
}

static void allocated(char kind, CUresult r, size_t size) {
  int at = r == CUDA_SUCCESS && nslots < MAX_SLOTS ? same_as(nslots) : -1;
  printf("%c %d code %d", kind, nslots, (int)r);
  printf(at < 0 ? "\n" : " at %d\n", at);
  if (nslots == MAX_SLOTS) return;
  bytes[nslots] = size;
  live[nslots] = r == CUDA_SUCCESS;
  nslots++;
}

static void freed(char kind, int i, CUresult r) {
  printf("%c %d code %d\n", kind, i, (int)r);
  if (r == CUDA_SUCCESS) live[i] = 0;
}

static CUresult primary(int dev) {
  CUcontext c = NULL;
  CUresult r = cuDevicePrimaryCtxRetain(&c, dev);
  return r ? r : cuCtxSetCurrent(c);
}

/* Device 0's primary context reset: its memory is gone (every slot but those of a created
 * context, which the program does not mix with a reset here). */
static void reset(void) {
  CUresult r = cuDevicePrimaryCtxReset(0);
  printf("R code %d\n", (int)r);
  for (int i = 0; r == CUDA_SUCCESS && i < nslots; i++) live[i] = 0;
}

typedef struct worker {
  pthread_t thread;
  CUcontext context;
  unsigned seed;
  int count, failed;
} worker;

static unsigned next_random(unsigned *seed) { return *seed = *seed * 1103515245u + 12345u, *seed >> 8; }

static void *work(void *arg) {
  worker *w = arg;
  CUdeviceptr p[8];
  int n = 0;
  if (cuCtxSetCurrent(w->context)) return w->failed = 1, NULL;
  for (int i = 0; i < w->count; i++) {
    if (n == 8) {
      int k = (int)(next_random(&w->seed) % 8);
      if (cuMemFree_v2(p[k])) w->failed = 1;
      p[k] = p[--n];
    }
    CUresult r = cuMemAlloc_v2(&p[n], 1 + next_random(&w->seed) % (4u << 20));
    if (r == CUDA_SUCCESS) n++;
    else if (r != CUDA_ERROR_OUT_OF_MEMORY) w->failed = 1;
  }
  while (n > 0)
    if (cuMemFree_v2(p[--n])) w->failed = 1;
  return NULL;
}

static void threads(int count) {
  worker w[4];
  int failed = 0;
  CUcontext c = NULL;
  cuCtxGetCurrent(&c);
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){.context = c, .seed = 7u + (unsigned)i, .count = count};
    if (pthread_create(&w[i].thread, NULL, work, &w[i])) w[i].failed = 1, w[i].count = -1;
  }
  for (int i = 0; i < 4; i++)
    if (w[i].count >= 0) pthread_join(w[i].thread, NULL), failed |= w[i].failed;
  printf("t code %d\n", failed);
}

static int slot_arg(const char *s) {
  int i = atoi(s);
  return i >= 0 && i < nslots ? i : 0;
}

static int alloc_op(char op, const char *arg) {
  CUdeviceptr p = 0;
  size_t size = strtoull(arg, NULL, 0), pitch = 0, height = 0;
  CUresult r;
  if (op == 'p') {
    const char *h = strchr(arg, ':');
    height = h ? strtoull(h + 1, NULL, 0) : 1;
    r = cuMemAllocPitch_v2(&p, &pitch, size, height, 4);
    size = pitch * height;
  } else if (op == 'm') {
    r = cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL);
  } else {
    r = cuMemAlloc_v2(&p, size);
  }
  if (nslots < MAX_SLOTS) slot[nslots] = p;
  allocated(op, r, size);
  return 0;
}

static int free_op(char op, const char *arg) {
  int i = slot_arg(arg);
  const char *off = strchr(arg, ':');
  unsigned char byte = 1;
  if (op == 'f') freed(op, i, cuMemFree_v2(slot[i]));
  else if (op == 'F') freed(op, i, cuMemFreeAsync(slot[i], NULL));
  else if (op == 'o') printf("o %d code %d\n", i, (int)cuMemFree_v2(slot[i] + (off ? strtoull(off + 1, NULL, 0) : 0)));
  else printf("w %d code %d\n", i, (int)cuMemcpyHtoD_v2(slot[i] + bytes[i] - 1, &byte, 1));
  return 0;
}

/* cuCtxCreate as a program built against this cuda.h calls it. */
static CUresult create(int dev) {
#if CUDA_VERSION >= 13000
  return cuCtxCreate(&created, NULL, 0, dev); /* cuCtxCreate_v4 */
#else
  return cuCtxCreate(&created, 0, dev);
#endif
}

static int context_op(char op, const char *arg) {
  if (op == 'c') printf("c code %d\n", (int)create(atoi(arg)));
  else if (op == 'x') printf("x code %d\n", (int)cuCtxDestroy_v2(created));
  else if (op == 'P') printf("P %d code %d\n", atoi(arg), (int)primary(atoi(arg)));
  else if (op == 'R') reset();
  else printf("n code %d\n", (int)cuCtxSetCurrent(NULL));
  return 0;
}

static int run(const char *op) {
  if (!op[0]) return fprintf(stderr, "cu_seq: an empty operation\n"), 2;
  const char *arg = op[1] == ':' ? op + 2 : op + 1;
  if (strchr("apm", op[0])) return alloc_op(op[0], arg);
  if (strchr("fFow", op[0])) return free_op(op[0], arg);
  if (strchr("cxPnR", op[0])) return context_op(op[0], arg);
  if (op[0] == 'i') return info(), 0;
  if (op[0] == 'd') return driver(), 0;
  if (op[0] == 't') return threads(atoi(arg)), 0;
  return fprintf(stderr, "cu_seq: unknown operation '%s'\n", op), 2;
}

int main(int argc, char **argv) {
  if (cuInit(0) || primary(0)) return fprintf(stderr, "cu_seq: no device\n"), 1;
  for (int i = 1; i < argc; i++) {
    int rc = run(argv[i]);
    fflush(stdout);
    if (rc) return rc;
  }
  return 0;
}
