/* An unmodified CUDA driver-API program for the preload library's tests: it knows nothing
 * of gpupart (only <cuda.h>, and dlfcn for the routes that resolve the driver as loaders
 * do) and is linked against a libcuda.so.1 (here the test double built under that soname).
 *
 *   cu_fill ROUTE KIND MIB COUNT [hold|fork|threads]
 * ROUTE: link  (calls the linked names), proc (everything through the linked
 *              cuGetProcAddress_v2), dlsym (dlopen libcuda.so.1, dlsym each _v2 name),
 *              cudart (dlopen, dlsym cuGetProcAddress_v2 only, then everything through it,
 *              as the CUDA runtime does), ptds (as proc, asking for the per-thread default
 *              stream variants); proc and ptds also print whether cuMemAlloc asked for at
 *              CUDA 3.1 is the driver's legacy entry point;
 * KIND:  plain (cuMemAlloc_v2), pitch (cuMemAllocPitch_v2: rows of 4 bytes, MIB MiB / 512 of
 *        them, so that a 512-byte pitch makes the block MIB MiB),
 *        managed, async (cuMemAllocAsync / cuMemFreeAsync), pool (cuMemAllocFromPoolAsync on
 *        the device's default pool).
 * It prints what cuMemGetInfo and cuDeviceTotalMem say, allocates up to COUNT blocks of
 * MIB MiB ("allocated N code C", C the first refusal or 0), frees them ("after free ..."),
 * allocates again ("again N code C"); with hold it prints "holding pid P" after the first
 * round and waits for a line on stdin first; with fork it forks after the first round, the
 * child allocates up to COUNT blocks more ("child allocated N code C") and ends without
 * freeing them, and the parent, once the child is gone, tries again ("parent after the
 * child N code C"); with threads, before the first round, 4 threads allocate and free one
 * block each COUNT times at once ("threads: R refused"). Where the driver is the test double, it also
 * prints how many allocations reached it ("driver allocs N"). Exit status 0 unless a call
 * that must succeed failed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, readlink, RTLD_DEFAULT when built outside meson */
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_BLOCKS 4096

typedef struct api {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*get_info)(size_t *, size_t *);
  CUresult (*total_mem)(size_t *, CUdevice);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
  CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned);
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
  CUresult (*alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  CUresult (*default_pool)(CUmemoryPool *, CUdevice);
  CUresult (*free)(CUdeviceptr);
  CUresult (*free_async)(CUdeviceptr, CUstream);
} api;

static api cu;
static CUmemoryPool pool;
static cuuint64_t proc_flags = CU_GET_PROC_ADDRESS_DEFAULT;

static void link_route(void) {
  cu = (api){cuInit,
             cuDeviceGet,
             cuDevicePrimaryCtxRetain,
             cuCtxSetCurrent,
             cuMemGetInfo_v2,
             cuDeviceTotalMem_v2,
             cuMemAlloc_v2,
             cuMemAllocPitch_v2,
             cuMemAllocManaged,
             cuMemAllocAsync,
             cuMemAllocFromPoolAsync,
             cuDeviceGetDefaultMemPool,
             cuMemFree_v2,
             cuMemFreeAsync};
}

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* Fills slot with name through cuGetProcAddress (base name) or dlsym (exported name). */
static void resolve(void *slot, gpa_fn gpa, void *lib, const char *base, const char *exported) {
  void *p = NULL;
  if (gpa) gpa(base, &p, CUDA_VERSION, proc_flags, NULL);
  else p = dlsym(lib, exported);
  if (!p) fprintf(stderr, "cu_fill: %s not found\n", exported), exit(3);
  memcpy(slot, &p, sizeof p);
}

static void lookup_route(gpa_fn gpa, void *lib) {
  void *plain[3]; /* asked for first, as a runtime asks for both variants: unused */
  if (gpa && proc_flags != CU_GET_PROC_ADDRESS_DEFAULT) {
    gpa("cuMemAllocAsync", &plain[0], CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    gpa("cuMemFreeAsync", &plain[1], CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    gpa("cuMemAllocFromPoolAsync", &plain[2], CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
  }
#define R(field, base, exported) resolve(&cu.field, gpa, lib, base, exported)
  R(init, "cuInit", "cuInit");
  R(device_get, "cuDeviceGet", "cuDeviceGet");
  R(retain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
  R(set_current, "cuCtxSetCurrent", "cuCtxSetCurrent");
  R(get_info, "cuMemGetInfo", "cuMemGetInfo_v2");
  R(total_mem, "cuDeviceTotalMem", "cuDeviceTotalMem_v2");
  R(alloc, "cuMemAlloc", "cuMemAlloc_v2");
  R(alloc_pitch, "cuMemAllocPitch", "cuMemAllocPitch_v2");
  R(alloc_managed, "cuMemAllocManaged", "cuMemAllocManaged");
  R(alloc_async, "cuMemAllocAsync", "cuMemAllocAsync");
  R(alloc_pool, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync");
  R(default_pool, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool");
  R(free, "cuMemFree", "cuMemFree_v2");
  R(free_async, "cuMemFreeAsync", "cuMemFreeAsync");
#undef R
}

static void choose_route(const char *route) {
  void *lib = NULL;
  gpa_fn gpa = NULL;
  if (strcmp(route, "link") == 0) {
    link_route();
    return;
  }
  if (strcmp(route, "ptds") == 0) proc_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (strcmp(route, "proc") == 0 || strcmp(route, "ptds") == 0) {
    void *legacy = NULL, *exported = dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuMemAlloc");
    gpa = cuGetProcAddress_v2;
    gpa("cuMemAlloc", &legacy, 3010, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    printf("cuMemAlloc at 3010 is the legacy entry: %s\n", legacy && legacy == exported ? "yes" : "no");
  } else if (!(lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
    fprintf(stderr, "cu_fill: %s\n", dlerror()), exit(3);
  if (strcmp(route, "cudart") == 0) {
    void *p = dlsym(lib, "cuGetProcAddress_v2");
    if (!p) fprintf(stderr, "cu_fill: no cuGetProcAddress_v2\n"), exit(3);
    memcpy(&gpa, &p, sizeof p);
  }
  lookup_route(gpa, lib);
}

static CUresult allocate(const char *kind, CUdeviceptr *p, size_t bytes) {
  size_t pitch = 0;
  if (strcmp(kind, "pitch") == 0) return cu.alloc_pitch(p, &pitch, 4, bytes / 512, 4);
  if (strcmp(kind, "managed") == 0) return cu.alloc_managed(p, bytes, CU_MEM_ATTACH_GLOBAL);
  if (strcmp(kind, "async") == 0) return cu.alloc_async(p, bytes, NULL);
  if (strcmp(kind, "pool") == 0) return cu.alloc_pool(p, bytes, pool, NULL);
  return cu.alloc(p, bytes);
}

static CUresult release(const char *kind, CUdeviceptr p) {
  return strcmp(kind, "async") == 0 || strcmp(kind, "pool") == 0 ? cu.free_async(p, NULL) : cu.free(p);
}

static CUdeviceptr blocks[MAX_BLOCKS];

/* Allocates up to count blocks into blocks[first..]; returns how many, the first refusal
 * in *code. */
static int fill(const char *kind, size_t bytes, int first, int count, CUresult *code) {
  int n = 0;
  *code = CUDA_SUCCESS;
  if (count > MAX_BLOCKS - first) count = MAX_BLOCKS - first;
  while (n < count && (*code = allocate(kind, &blocks[first + n], bytes)) == CUDA_SUCCESS) n++;
  return n;
}

/* The fork round: n blocks are held; returns how many the parent holds after it. */
static int fork_round(const char *kind, size_t bytes, int count, int n) {
  CUresult code;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int more = fill(kind, bytes, n, count, &code);
    printf("child allocated %d code %d\n", more, (int)code);
    fflush(stdout);
    _exit(0);
  }
  if (pid < 0 || waitpid(pid, NULL, 0) != pid) return fprintf(stderr, "cu_fill: fork failed\n"), -1;
  int more = fill(kind, bytes, n, count, &code);
  printf("parent after the child %d code %d\n", more, (int)code);
  return n + more;
}

static void report(const char *what) {
  size_t free_b = 0, total_b = 0;
  CUresult r = cu.get_info(&free_b, &total_b);
  printf("%s: code %d free %zu total %zu\n", what, (int)r, free_b, total_b);
}

typedef struct worker {
  pthread_t thread;
  const char *kind;
  size_t bytes;
  int count, refused, failed;
} worker;

static CUcontext context;

static void *work(void *arg) {
  worker *w = arg;
  CUdeviceptr p;
  if (cu.set_current(context)) return w->failed = 1, NULL;
  for (int i = 0; i < w->count; i++) {
    CUresult r = allocate(w->kind, &p, w->bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) w->refused++;
    else if (r != CUDA_SUCCESS || release(w->kind, p) != CUDA_SUCCESS) w->failed = 1;
  }
  return NULL;
}

static int threads_round(const char *kind, size_t bytes, int count) {
  worker w[4];
  int refused = 0, failed = 0;
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){.kind = kind, .bytes = bytes, .count = count};
    if (pthread_create(&w[i].thread, NULL, work, &w[i])) return -1;
  }
  for (int i = 0; i < 4; i++) pthread_join(w[i].thread, NULL), refused += w[i].refused, failed |= w[i].failed;
  printf("threads: %d refused\n", refused);
  report("after threads");
  return failed ? -1 : 0;
}

static int empty(const char *kind, int n) {
  for (int i = 0; i < n; i++)
    if (release(kind, blocks[i]) != CUDA_SUCCESS) return fprintf(stderr, "cu_fill: free failed\n"), -1;
  return 0;
}

static void driver_count(void) {
  void *p = dlsym(RTLD_DEFAULT, "cuda_double_stats"); /* the test double only */
  if (!p) return;
  unsigned long long *(*stats)(void);
  memcpy(&stats, &p, sizeof p);
  printf("driver allocs %llu\n", stats()[0]); /* alloc_calls, its first counter */
  unsigned long long (*ptsz)(void);
  if (!(p = dlsym(RTLD_DEFAULT, "cuda_double_ptsz_calls"))) return;
  memcpy(&ptsz, &p, sizeof p);
  printf("driver ptsz calls %llu\n", ptsz());
}

/* RTLD_NEXT from the program finds the first object after it, as RTLD_DEFAULT does for a
 * name the program does not define (a preloaded library's dlsym, when there is one). */
static void next_lookup(void) {
  void *next = dlsym(RTLD_NEXT, "dlsym"), *first = dlsym(RTLD_DEFAULT, "dlsym");
  printf("RTLD_NEXT finds the first definition: %s\n", next && next == first ? "yes" : "no");
}

static int setup(void) {
  CUdevice dev = 0;
  size_t total = 0;
  if (cu.init(0) || cu.device_get(&dev, 0) || cu.retain(&context, dev) || cu.set_current(context)) return -1;
  if (cu.default_pool(&pool, dev)) return -1;
  CUresult r = cu.total_mem(&total, dev);
  printf("device total: code %d bytes %zu\n", (int)r, total);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 5) return fprintf(stderr, "usage: cu_fill ROUTE KIND MIB COUNT [hold]\n"), 2;
  const char *kind = argv[2];
  size_t bytes = strtoull(argv[3], NULL, 0) << 20;
  int count = atoi(argv[4]), hold = argc > 5 && strcmp(argv[5], "hold") == 0;
  int forks = argc > 5 && strcmp(argv[5], "fork") == 0, threads = argc > 5 && strcmp(argv[5], "threads") == 0;
  if (count > MAX_BLOCKS) count = MAX_BLOCKS;
  choose_route(argv[1]);
  if (setup()) return fprintf(stderr, "cu_fill: no device\n"), 1;
  next_lookup();
  report("start");
  if (threads && threads_round(kind, bytes, count)) return fprintf(stderr, "cu_fill: a thread failed\n"), 1;
  CUresult code;
  int n = fill(kind, bytes, 0, count, &code);
  printf("allocated %d code %d\n", n, (int)code);
  report("full");
  driver_count();
  if (hold) {
    char line[16];
    printf("holding pid %ld\n", (long)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
  }
  if (forks && (n = fork_round(kind, bytes, count, n)) < 0) return 1;
  if (empty(kind, n)) return 1;
  report("after free");
  n = fill(kind, bytes, 0, count, &code);
  printf("again %d code %d\n", n, (int)code);
  return empty(kind, n) ? 1 : 0;
}
