/* vmm-cost: what one granule of virtual memory costs the driver, for scripts/gpu-check
 * (docs/benchmarks.md): for each size (2 MiB to 512 MiB, multiples of the device's
 * granularity), the median over ROUNDS of cuMemCreate + cuMemMap + cuMemSetAccess (what an
 * expandable partition's growth does) and of cuCtxSynchronize + cuMemUnmap + cuMemRelease
 * (what its trim does), against cuMemAlloc_v2 and cuMemFree_v2 of the same size. The
 * driver is dlopen'ed (libcuda.so.1, or $GPUPART_CUDA_LIBRARY), nothing is linked; exit
 * 77 (a skip) where there is no driver, no device or no virtual memory management.
 *   gpupart-vmm-cost [ROUNDS]      (default 20) */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENTRIES(X)                                                                                                    \
  X(init, "cuInit", (unsigned int))                                                                                   \
  X(device_get, "cuDeviceGet", (CUdevice *, int))                                                                     \
  X(attribute, "cuDeviceGetAttribute", (int *, CUdevice_attribute, CUdevice))                                         \
  X(retain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))                                                      \
  X(set_current, "cuCtxSetCurrent", (CUcontext))                                                                      \
  X(sync, "cuCtxSynchronize", (void))                                                                                 \
  X(reserve, "cuMemAddressReserve", (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                 \
  X(address_free, "cuMemAddressFree", (CUdeviceptr, size_t))                                                          \
  X(create, "cuMemCreate", (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
  X(release, "cuMemRelease", (CUmemGenericAllocationHandle))                                                          \
  X(map, "cuMemMap", (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))                 \
  X(unmap, "cuMemUnmap", (CUdeviceptr, size_t))                                                                       \
  X(set_access, "cuMemSetAccess", (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                             \
  X(granularity, "cuMemGetAllocationGranularity",                                                                     \
    (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                                        \
  X(alloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                                                  \
  X(free, "cuMemFree_v2", (CUdeviceptr))

static struct {
#define FIELD(f, name, params) CUresult(*f) params;
  ENTRIES(FIELD)
#undef FIELD
} cu;

#define MAX_ROUNDS 1000

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

static int load(void) {
  const char *path = getenv("GPUPART_CUDA_LIBRARY");
  void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fprintf(stderr, "vmm-cost: no CUDA driver (%s): skipped\n", dlerror()), -1;
#define LOOKUP(f, name, params) *(void **)&cu.f = dlsym(lib, name);
  ENTRIES(LOOKUP)
#undef LOOKUP
#define CHECK(f, name, params) \
  if (!cu.f) return fprintf(stderr, "vmm-cost: the driver has no %s: skipped\n", name), -1;
  ENTRIES(CHECK)
#undef CHECK
  return 0;
}

/* One size: medians of the growth and the trim of one granule, and of cuMemAlloc/Free. */
static void measure(CUdeviceptr base, size_t size, const CUmemAllocationProp *prop, int rounds) {
  static double grow[MAX_ROUNDS], trim[MAX_ROUNDS], alloc[MAX_ROUNDS], release[MAX_ROUNDS];
  CUmemAccessDesc access = {.location = prop->location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for (int i = 0; i < rounds; i++) {
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr p = 0;
    double t0 = now_us();
    int bad = cu.create(&h, size, prop, 0) || cu.map(base, size, 0, h, 0) || cu.set_access(base, size, &access, 1);
    double t1 = now_us();
    bad |= cu.sync() || cu.unmap(base, size) || cu.release(h);
    double t2 = now_us();
    bad |= cu.alloc(&p, size);
    double t3 = now_us();
    bad |= cu.free(p);
    double t4 = now_us();
    if (bad) {
      printf("%8zu MiB  a driver call failed\n", size >> 20);
      return;
    }
    grow[i] = t1 - t0;
    trim[i] = t2 - t1;
    alloc[i] = t3 - t2;
    release[i] = t4 - t3;
  }
  printf("%8zu MiB  %12.1f %12.1f %12.1f %12.1f\n", size >> 20, median(grow, rounds), median(trim, rounds),
         median(alloc, rounds), median(release, rounds));
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20, vmm = 0;
  if (rounds < 1 || rounds > MAX_ROUNDS) return fprintf(stderr, "usage: gpupart-vmm-cost [ROUNDS 1..1000]\n"), 2;
  CUdevice dev;
  CUcontext ctx;
  if (load() || cu.init(0) || cu.device_get(&dev, 0)) return 77;
  if (cu.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) || !vmm)
    return fprintf(stderr, "vmm-cost: device 0 has no virtual memory management: skipped\n"), 77;
  if (cu.retain(&ctx, dev) || cu.set_current(ctx)) return 1;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t g = 0;
  if (cu.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) || !g) return 1;
  CUdeviceptr base = 0;
  size_t largest = (size_t)512 << 20;
  if (cu.reserve(&base, largest, 0, 0, 0)) return 1;
  printf("granularity %zu bytes; medians of %d rounds, microseconds\n", g, rounds);
  printf("%12s  %12s %12s %12s %12s\n", "size", "create+map", "sync+unmap", "cuMemAlloc", "cuMemFree");
  for (size_t size = (size_t)2 << 20; size <= largest; size *= 4)
    if (size % g == 0) measure(base, size, &prop, rounds);
  cu.address_free(base, largest);
  return 0;
}
