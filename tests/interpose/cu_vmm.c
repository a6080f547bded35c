/* An unmodified CUDA driver-API program for the preload library's tests that takes its
 * memory as PyTorch's expandable segments do: one cuMemAddressReserve range, physical
 * granules from cuMemCreate mapped one after another with cuMemMap and cuMemSetAccess.
 * It knows nothing of gpupart and is linked against a libcuda.so.1 (the test double).
 *
 *   cu_vmm ROUTE MIB COUNT
 * ROUTE: link (the linked names) or proc (every VMM entry through cuGetProcAddress_v2,
 * as the CUDA runtime and PyTorch find them). It maps up to COUNT granules of MIB MiB
 * ("mapped N code C", C the first refusal or 0), prints what cuMemGetInfo says ("info:
 * free F"), retains, maps twice and releases the first granule's handle (which must
 * count once), unmaps and releases everything ("after release: free F"), and maps again
 * ("again N code C"). Exit status 0 unless a call that must succeed failed. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX 4096

typedef struct api {
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
  CUresult (*info)(size_t *, size_t *);
} api;

static api cu;

static void *proc(const char *name, int version) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st;
  if (cuGetProcAddress_v2(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) {
    fprintf(stderr, "cuGetProcAddress_v2(%s) failed\n", name);
    exit(2);
  }
  return p;
}

static void resolve(const char *route) {
  if (strcmp(route, "proc") == 0) {
    *(void **)&cu.reserve = proc("cuMemAddressReserve", 10020);
    *(void **)&cu.address_free = proc("cuMemAddressFree", 10020);
    *(void **)&cu.create = proc("cuMemCreate", 10020);
    *(void **)&cu.release = proc("cuMemRelease", 10020);
    *(void **)&cu.map = proc("cuMemMap", 10020);
    *(void **)&cu.unmap = proc("cuMemUnmap", 10020);
    *(void **)&cu.set_access = proc("cuMemSetAccess", 10020);
    *(void **)&cu.retain = proc("cuMemRetainAllocationHandle", 11000);
    *(void **)&cu.info = proc("cuMemGetInfo", 3020);
    return;
  }
  cu = (api){
      cuMemAddressReserve,         cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap, cuMemSetAccess,
      cuMemRetainAllocationHandle, cuMemGetInfo_v2};
}

static CUmemAllocationProp prop(void) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  return p;
}

static CUmemGenericAllocationHandle handles[MAX];

/* Maps up to count granules of size at base; returns how many, the first refusal in *code. */
static int map_all(CUdeviceptr base, size_t size, int count, CUresult *code) {
  CUmemAllocationProp p = prop();
  CUmemAccessDesc access = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  *code = CUDA_SUCCESS;
  for (int i = 0; i < count; i++) {
    if ((*code = cu.create(&handles[i], size, &p, 0)) != CUDA_SUCCESS) return i;
    if (cu.map(base + (CUdeviceptr)i * size, size, 0, handles[i], 0) != CUDA_SUCCESS ||
        cu.set_access(base + (CUdeviceptr)i * size, size, &access, 1) != CUDA_SUCCESS)
      exit(3);
  }
  return count;
}

static void unmap_all(CUdeviceptr base, size_t size, int n) {
  for (int i = 0; i < n; i++)
    if (cu.unmap(base + (CUdeviceptr)i * size, size) != CUDA_SUCCESS || cu.release(handles[i]) != CUDA_SUCCESS) exit(4);
}

static size_t free_now(void) {
  size_t f = 0, t = 0;
  return cu.info(&f, &t) == CUDA_SUCCESS ? f : 0;
}

/* The first granule's handle retained and mapped a second time: still one allocation. */
static void alias_first(CUdeviceptr base, CUdeviceptr spare, size_t size) {
  CUmemGenericAllocationHandle again = 0;
  if (cu.retain(&again, (void *)(uintptr_t)base) != CUDA_SUCCESS || cu.map(spare, size, 0, again, 0) != CUDA_SUCCESS)
    exit(5);
  printf("aliased: free %zu\n", free_now());
  if (cu.unmap(spare, size) != CUDA_SUCCESS || cu.release(again) != CUDA_SUCCESS) exit(6);
}

int main(int argc, char **argv) {
  if (argc != 4) return fprintf(stderr, "usage: cu_vmm link|proc MIB COUNT\n"), 2;
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 1;
  resolve(argv[1]);
  size_t size = (size_t)strtoull(argv[2], NULL, 10) << 20;
  int count = atoi(argv[3]);
  if (count < 1 || count > MAX - 1) return 2;
  CUdeviceptr base = 0;
  if (cu.reserve(&base, size * (size_t)(count + 1), 0, 0, 0) != CUDA_SUCCESS) return 1;
  CUresult code;
  int n = map_all(base, size, count, &code);
  printf("mapped %d code %d\ninfo: free %zu\n", n, (int)code, free_now());
  if (n > 0) alias_first(base, base + (CUdeviceptr)count * size, size);
  unmap_all(base, size, n);
  printf("after release: free %zu\n", free_now());
  n = map_all(base, size, count, &code);
  printf("again %d code %d\n", n, (int)code);
  unmap_all(base, size, n);
  cu.address_free(base, size * (size_t)(count + 1));
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
