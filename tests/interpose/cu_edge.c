/* An unmodified CUDA driver-API program for the preload library's hostile-input tests:
 * like cu_fill it knows nothing of gpupart and is linked against a libcuda.so.1 (the test
 * double). It makes the calls a careless or unusual program makes and prints what each
 * returned, then what cuMemGetInfo says is free, so a test sees both that nothing
 * crashed and that no accounting was left behind.
 *
 *   cu_edge bad      NULL arguments, zero sizes, frees of unknown, NULL and freed
 *                    pointers, cuMemFreeAsync then cuMemFree, managed memory with flags
 *                    the driver refuses, a pitch with an invalid element size
 *                    ("bad calls done", then "after bad calls: free F total T")
 *   cu_edge pitch    cuMemAllocPitch_v2 whose width * height overflows 64 bits
 *                    ("pitch overflow code C", "driver allocs N")
 *   cu_edge context  32 1 MiB blocks in a created context, the context destroyed (the
 *                    driver frees them), then 1 MiB blocks in a new one until refused
 *                    ("after destroy N code C") */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define MIB ((size_t)1 << 20)

static void report(const char *what) {
  size_t free_b = 0, total_b = 0;
  CUresult r = cuMemGetInfo_v2(&free_b, &total_b);
  printf("%s: code %d free %zu total %zu\n", what, (int)r, free_b, total_b);
}

static void driver_count(void) {
  void *p = dlsym(RTLD_DEFAULT, "cuda_double_stats"); /* the test double only */
  unsigned long long *(*stats)(void);
  if (!p) return;
  memcpy(&stats, &p, sizeof p);
  printf("driver allocs %llu\n", stats()[0]);
}

static void bad_frees(void) {
  CUdeviceptr p = 0, q = 0;
  printf("free NULL %d\n", (int)cuMemFree_v2(0));
  printf("free unknown %d\n", (int)cuMemFree_v2((CUdeviceptr)0x1000));
  if (cuMemAlloc_v2(&p, MIB) == CUDA_SUCCESS) {
    CUresult first = cuMemFree_v2(p);
    printf("free %d, again %d\n", (int)first, (int)cuMemFree_v2(p));
  }
  if (cuMemAllocAsync(&q, MIB, NULL) == CUDA_SUCCESS) {
    CUresult first = cuMemFreeAsync(q, NULL);
    printf("free async %d, then free %d\n", (int)first, (int)cuMemFree_v2(q));
  }
  printf("free async NULL %d\n", (int)cuMemFreeAsync(0, NULL));
}

static void bad_allocs(void) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  CUmemoryPool pool = NULL;
  printf("alloc NULL %d, zero %d\n", (int)cuMemAlloc_v2(NULL, MIB), (int)cuMemAlloc_v2(&p, 0));
  printf("pitch NULL %d %d, zero %d, element %d\n", (int)cuMemAllocPitch_v2(NULL, &pitch, 64, 64, 4),
         (int)cuMemAllocPitch_v2(&p, NULL, 64, 64, 4), (int)cuMemAllocPitch_v2(&p, &pitch, 0, 64, 4),
         (int)cuMemAllocPitch_v2(&p, &pitch, 64, 64, 3));
  printf("managed NULL %d, flags %d\n", (int)cuMemAllocManaged(NULL, MIB, CU_MEM_ATTACH_GLOBAL),
         (int)cuMemAllocManaged(&p, MIB, 0x80));
  printf("async NULL %d, zero %d\n", (int)cuMemAllocAsync(NULL, MIB, NULL), (int)cuMemAllocAsync(&p, 0, NULL));
  printf("pool bad %d\n", (int)cuMemAllocFromPoolAsync(&p, MIB, (CUmemoryPool)&pool, NULL));
  printf("info NULL %d, total NULL %d\n", (int)cuMemGetInfo_v2(NULL, NULL), (int)cuDeviceTotalMem_v2(NULL, 0));
}

static void bad_lookups(void) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  printf("proc NULL symbol %d\n", (int)cuGetProcAddress_v2(NULL, &fn, CUDA_VERSION, 0, &status));
  printf("proc NULL pfn %d\n", (int)cuGetProcAddress_v2("cuMemAlloc", NULL, CUDA_VERSION, 0, &status));
  printf("proc NULL status %d\n", (int)cuGetProcAddress_v2("cuMemAlloc", &fn, CUDA_VERSION, 0, NULL));
  CUresult r = cuGetProcAddress_v2("cuNoSuchCall", &fn, CUDA_VERSION, 0, &status);
  printf("proc unknown %d status %d\n", (int)r, (int)status);
  /* the legacy-stream flag names the function the program links (under the preload, its hook) */
  r = cuGetProcAddress_v2("cuMemAllocAsync", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
  printf("proc legacy stream %d status %d, the linked function: %s\n", (int)r, (int)status,
         fn && fn == dlsym(RTLD_DEFAULT, "cuMemAllocAsync") ? "yes" : "no");
}

static int bad(void) {
  bad_frees();
  bad_allocs();
  bad_lookups();
  printf("bad calls done\n");
  report("after bad calls");
  return 0;
}

static int pitch_overflow(void) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  CUresult r = cuMemAllocPitch_v2(&p, &pitch, ((size_t)1 << 63) + MIB, 2, 4);
  printf("pitch overflow code %d\n", (int)r);
  if (r == CUDA_SUCCESS) cuMemFree_v2(p);
  driver_count();
  return 0;
}

static int context_reuse(CUdevice dev) {
  CUcontext c = NULL;
  CUdeviceptr p[256];
  int n = 0;
  CUresult r = CUDA_SUCCESS;
  if (cuCtxCreate_v2(&c, 0, dev)) return 1;
  for (int i = 0; i < 32; i++)
    if (cuMemAlloc_v2(&p[i], MIB)) return 1;
  if (cuCtxDestroy_v2(c) || cuCtxCreate_v2(&c, 0, dev)) return 1;
  while (n < 256 && (r = cuMemAlloc_v2(&p[n], MIB)) == CUDA_SUCCESS) n++;
  printf("after destroy %d code %d\n", n, (int)r);
  return 0;
}

int main(int argc, char **argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  if (argc < 2) return fprintf(stderr, "usage: cu_edge bad|pitch|context\n"), 2;
  if (cuInit(0) || cuDeviceGet(&dev, 0)) return fprintf(stderr, "cu_edge: no device\n"), 1;
  if (strcmp(argv[1], "context") == 0) return context_reuse(dev);
  if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return fprintf(stderr, "cu_edge: no context\n"), 1;
  if (strcmp(argv[1], "pitch") == 0) return pitch_overflow();
  return bad();
}
