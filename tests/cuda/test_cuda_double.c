/* The CUDA driver test double's virtual memory management (cuda_double_vmm.c), tested on
 * its own: the double is compiled into this suite, which calls the driver API directly.
 * What the CUDA backend and the preload library will rely on: mappings of one
 * allocation alias (a write through one is read through another, by the host, by
 * cuMemcpy and by cuMemsetD8), created memory counts in cuMemGetInfo once however often
 * it is mapped, exported or retained, it is freed when the last handle is released and
 * the last mapping unmapped, and the driver's rules (whole mappings, granularity, offset
 * 0, access before use, nothing mapped at cuMemAddressFree) are enforced. Criterion
 * runs each test in its own process, so the double starts fresh and knobs stay local. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_double.h"
#include "cuda_double_vmm.h"

#define G ((size_t)64 << 10) /* the granularity the tests ask for */
#define RW CU_MEM_ACCESS_FLAGS_PROT_READWRITE

cuda_double_vmm_counters *cuda_double_vmm_stats(void);
cuda_double_counters *cuda_double_stats(void);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev); /* cuda.h 13 names only _v4 */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

static cuda_double_vmm_counters *vs(void) { return cuda_double_vmm_stats(); }

static void with_context(void) {
  CUcontext c = NULL;
  cr_assert_eq(cuInit(0), CUDA_SUCCESS);
  cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  cr_assert_eq(cuCtxPushCurrent(c), CUDA_SUCCESS);
}

static void setup(void) {
  setenv("GPUPART_TEST_CUDA_GRANULARITY", "65536", 1);
  setenv("GPUPART_TEST_CUDA_TOTAL", "16777216", 1); /* 16 MiB: 256 granules */
  with_context();
}

TestSuite(cuda_double_vmm, .init = setup);

static CUmemAllocationProp prop_of(int device, int handle_types) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
  return p;
}

static CUmemGenericAllocationHandle create(size_t size, int handle_types) {
  CUmemAllocationProp p = prop_of(0, handle_types);
  CUmemGenericAllocationHandle h = 0;
  cr_assert_eq(cuMemCreate(&h, size, &p, 0), CUDA_SUCCESS);
  cr_assert_neq(h, 0);
  return h;
}

static CUdeviceptr reserve(size_t size) {
  CUdeviceptr p = 0;
  cr_assert_eq(cuMemAddressReserve(&p, size, 0, 0, 0), CUDA_SUCCESS);
  cr_assert_eq(p % G, 0, "the default alignment is the granularity");
  return p;
}

static void grant(CUdeviceptr p, size_t size, int device, CUmemAccess_flags flags) {
  CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}, .flags = flags};
  cr_assert_eq(cuMemSetAccess(p, size, &d, 1), CUDA_SUCCESS);
}

static void map_rw(CUdeviceptr p, size_t size, CUmemGenericAllocationHandle h) {
  cr_assert_eq(cuMemMap(p, size, 0, h, 0), CUDA_SUCCESS);
  grant(p, size, 0, RW);
}

static size_t free_bytes(void) {
  size_t f = 0, t = 0;
  cr_assert_eq(cuMemGetInfo(&f, &t), CUDA_SUCCESS);
  return f;
}

static void expect_nothing_held(void) {
  cr_expect_eq(vs()->live_allocations, 0, "%llu allocations left", (unsigned long long)vs()->live_allocations);
  cr_expect_eq(vs()->live_handles, 0);
  cr_expect_eq(vs()->live_mappings, 0);
  cr_expect_eq(vs()->allocation_bytes, 0);
  cr_expect_eq(free_bytes(), (size_t)16 << 20, "all the device's memory is free again");
}

/* ---- granularity, attributes, properties ------------------------------------------------ */

Test(cuda_double_vmm, granularity_is_2_mib_by_default_and_set_by_the_knobs) {
  CUmemAllocationProp p = prop_of(0, 0);
  size_t g = 0;
  unsetenv("GPUPART_TEST_CUDA_GRANULARITY");
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  cr_expect_eq(g, (size_t)2 << 20);
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  cr_expect_eq(g, (size_t)2 << 20);
  setenv("GPUPART_TEST_CUDA_GRANULARITY", "65536", 1);
  setenv("GPUPART_TEST_CUDA_GRANULARITY_RECOMMENDED", "200000", 1);
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  cr_expect_eq(g, G);
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  cr_expect_eq(g, 4 * G, "the recommended granularity is a multiple of the minimum");
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)7), CUDA_ERROR_INVALID_VALUE);
  cr_expect_eq(cuMemGetAllocationGranularity(NULL, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
}

Test(cuda_double_vmm, properties_other_than_pinned_device_memory_are_refused) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = prop_of(0, 0);
  p.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_INVALID_VALUE);
  p = prop_of(0, 0);
  p.location.type = CU_MEM_LOCATION_TYPE_HOST;
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  p = prop_of(3, 0);
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_INVALID_DEVICE, "only one device by default");
  p = prop_of(0, CU_MEM_HANDLE_TYPE_FABRIC);
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED, "PyTorch tries fabric first and falls back");
  p = prop_of(0, 0);
  p.allocFlags.gpuDirectRDMACapable = 1;
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED, "the attribute says no");
  p = prop_of(0, 0);
  cr_expect_eq(cuMemCreate(&h, G / 2, &p, 0), CUDA_ERROR_INVALID_VALUE, "not a multiple of the granularity");
  cr_expect_eq(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
  cr_expect_eq(cuMemCreate(&h, G, &p, 1), CUDA_ERROR_INVALID_VALUE, "flags must be 0");
  cr_expect_eq(cuMemCreate(&h, G, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  cr_expect_eq(vs()->create_failures, vs()->create_calls);
  expect_nothing_held();
}

Test(cuda_double_vmm, the_vmm_attribute_reads_1_and_the_knob_turns_vmm_off) {
  int v = -1;
  cr_expect_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  cr_expect_eq(v, 1);
  cr_expect_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0), CUDA_SUCCESS);
  cr_expect_eq(v, 0);
  cr_expect_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
               CUDA_ERROR_INVALID_DEVICE);
  cr_expect_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0), CUDA_ERROR_INVALID_VALUE,
               "an attribute the double does not model is refused, not invented");
  setenv("GPUPART_TEST_CUDA_NO_VMM", "1", 1);
  cr_expect_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  cr_expect_eq(v, 0);
  CUmemAllocationProp p = prop_of(0, 0);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  size_t g = 0;
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  cr_expect_eq(cuMemAddressReserve(&va, G, 0, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
  cr_expect_eq(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_NOT_SUPPORTED);
}

Test(cuda_double_vmm, cuGetProcAddress_offers_the_vmm_calls_from_their_cuda_version) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult st;
  cr_expect_eq(cuGetProcAddress_v2("cuMemCreate", &fn, 12000, 0, &st), CUDA_SUCCESS);
  cr_expect_eq(fn, (void *)cuMemCreate);
  cr_expect_eq(cuGetProcAddress_v2("cuMemUnmap", &fn, 10020, 0, &st), CUDA_SUCCESS);
  cr_expect_eq(fn, (void *)cuMemUnmap);
  cr_expect_eq(cuGetProcAddress_v2("cuDeviceGetAttribute", &fn, 12000, 0, &st), CUDA_SUCCESS);
  cr_expect_eq(cuGetProcAddress_v2("cuMemsetD8", &fn, 12000, 0, &st), CUDA_SUCCESS);
  cr_expect_eq(fn, (void *)cuMemsetD8);
  cr_expect_eq(cuGetProcAddress_v2("cuMemRetainAllocationHandle", &fn, 10020, 0, &st), CUDA_ERROR_NOT_FOUND);
  cr_expect_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "introduced in CUDA 11.0");
}

/* ---- aliasing ------------------------------------------------------------------------- */

Test(cuda_double_vmm, two_mappings_of_one_allocation_alias) {
  CUmemGenericAllocationHandle h = create(2 * G, 0);
  CUdeviceptr a = reserve(2 * G), b = reserve(4 * G);
  map_rw(a, 2 * G, h);
  map_rw(b + G, 2 * G, h);
  unsigned char in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = (unsigned char)(i * 7 + 1);
  cr_assert_eq(cuMemcpyHtoD(a + G + 100, in, sizeof in), CUDA_SUCCESS);
  cr_assert_eq(cuMemcpyDtoH(out, b + 2 * G + 100, sizeof out), CUDA_SUCCESS);
  cr_expect_arr_eq(out, in, sizeof in, "a copy into one mapping is read through the other");
  cr_expect_eq(((unsigned char *)(uintptr_t)b)[2 * G + 100], in[0], "and by the host");
  cr_assert_eq(cuMemsetD8(b + G, 0xab, 64), CUDA_SUCCESS);
  cr_expect_eq(((unsigned char *)(uintptr_t)a)[63], 0xab, "a memset through one is seen through the other");
  ((volatile unsigned char *)(uintptr_t)a)[5] = 0x5a;
  cr_assert_eq(cuMemcpyDtoH(out, b + G, 8), CUDA_SUCCESS);
  cr_expect_eq(out[5], 0x5a, "a host write through one is copied out of the other");
  cr_expect_eq(vs()->live_mappings, 2);
  cr_expect_eq(vs()->live_allocations, 1);
  cr_assert_eq(cuMemUnmap(a, 2 * G), CUDA_SUCCESS);
  cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(((unsigned char *)(uintptr_t)b)[G + 5], 0x5a, "the bytes live while one mapping remains");
  cr_assert_eq(cuMemUnmap(b + G, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(a, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(b, 4 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, a_copy_may_span_adjacent_mappings_of_different_allocations) {
  CUmemGenericAllocationHandle h1 = create(G, 0), h2 = create(G, 0);
  CUdeviceptr va = reserve(2 * G);
  cr_assert_eq(cuMemMap(va, G, 0, h1, 0), CUDA_SUCCESS);
  cr_assert_eq(cuMemMap(va + G, G, 0, h2, 0), CUDA_SUCCESS);
  grant(va, 2 * G, 0, RW); /* one call over both mappings, as PyTorch does */
  char *in = malloc(2 * G), *out = calloc(1, 2 * G);
  cr_assert(in && out);
  for (size_t i = 0; i < 2 * G; i++) in[i] = (char)(i % 251);
  cr_expect_eq(cuMemcpyHtoD(va, in, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemcpyDtoH(out, va, 2 * G), CUDA_SUCCESS);
  cr_expect_arr_eq(out, in, 2 * G);
  free(in);
  free(out);
  cr_expect_eq(cuMemUnmap(va, 2 * G), CUDA_SUCCESS, "one unmap may take several whole mappings");
  cr_expect_eq(cuMemRelease(h1), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h2), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, 2 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

/* ---- accounting ----------------------------------------------------------------------- */

Test(cuda_double_vmm, created_memory_counts_once_in_mem_get_info) {
  size_t total = free_bytes();
  CUmemGenericAllocationHandle h = create(4 * G, 0);
  cr_expect_eq(free_bytes(), total - 4 * G, "charged at cuMemCreate");
  CUdeviceptr a = reserve(4 * G), b = reserve(4 * G);
  map_rw(a, 4 * G, h);
  map_rw(b, 4 * G, h);
  cr_expect_eq(free_bytes(), total - 4 * G, "not again at each mapping");
  cr_expect_eq(vs()->allocation_bytes, 4 * G);
  cr_expect_eq(vs()->mapped_bytes, 8 * G);
  cr_expect_eq(vs()->reserved_bytes, 8 * G);
  cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(free_bytes(), total - 4 * G, "released while mapped: the free waits for the unmap");
  cr_assert_eq(cuMemUnmap(a, 4 * G), CUDA_SUCCESS);
  cr_expect_eq(free_bytes(), total - 4 * G, "one mapping is left");
  cr_assert_eq(cuMemUnmap(b, 4 * G), CUDA_SUCCESS);
  cr_expect_eq(free_bytes(), total, "freed with the last mapping");
  cr_expect_eq(cuMemAddressFree(a, 4 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(b, 4 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, created_memory_and_cuMemAlloc_share_the_device) {
  CUmemGenericAllocationHandle h = create(200 * G, 0);
  CUdeviceptr p = 0;
  cr_expect_eq(cuMemAlloc(&p, 60 * G), CUDA_ERROR_OUT_OF_MEMORY, "200 + 60 granules > 256");
  cr_assert_eq(cuMemAlloc(&p, 50 * G), CUDA_SUCCESS);
  CUmemAllocationProp prop = prop_of(0, 0);
  CUmemGenericAllocationHandle h2 = 0;
  cr_expect_eq(cuMemCreate(&h2, 7 * G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "6 granules are left");
  cr_expect_eq(vs()->create_failures, 1);
  cr_assert_eq(cuMemFree(p), CUDA_SUCCESS);
  cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, retained_handles_are_the_mapping_handle_and_are_counted) {
  CUmemGenericAllocationHandle h = create(2 * G, 0), r1 = 0, r2 = 0;
  CUdeviceptr va = reserve(2 * G);
  map_rw(va, 2 * G, h);
  cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "released once already");
  cr_assert_eq(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)(va + G + 17)), CUDA_SUCCESS);
  cr_assert_eq(cuMemRetainAllocationHandle(&r2, (void *)(uintptr_t)va), CUDA_SUCCESS);
  cr_expect_eq(r1, h, "the handle that mapped it");
  cr_expect_eq(r2, h);
  cr_assert_eq(cuMemUnmap(va, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(vs()->live_allocations, 1, "two references are left");
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(vs()->live_allocations, 1);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE, "nothing mapped");
  cr_expect_eq(cuMemAddressFree(va, 2 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, destroying_a_context_does_not_free_created_memory) {
  CUcontext c = NULL;
  cr_assert_eq(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create(G, 0);
  cr_assert_eq(cuCtxDestroy(c), CUDA_SUCCESS);
  cr_expect_eq(vs()->live_allocations, 1, "cuCtxDestroy leaves cuMemCreate allocations alone");
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  expect_nothing_held();
}

/* ---- the driver's rules ----------------------------------------------------------------- */

Test(cuda_double_vmm, map_keeps_the_rules) {
  CUmemGenericAllocationHandle h = create(2 * G, 0);
  CUdeviceptr va = reserve(4 * G);
  cr_expect_eq(cuMemMap(va, 2 * G, G, h, 0), CUDA_ERROR_INVALID_VALUE, "offset must be 0");
  cr_expect_eq(cuMemMap(va + 4096, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "unaligned address");
  cr_expect_eq(cuMemMap(va, 3 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "larger than the allocation");
  cr_expect_eq(cuMemMap(va + 3 * G, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "past the reservation");
  cr_expect_eq(cuMemMap(va, 2 * G, 0, h, 1), CUDA_ERROR_INVALID_VALUE, "flags must be 0");
  cr_expect_eq(cuMemMap(va, 2 * G, 0, h + 12345, 0), CUDA_ERROR_INVALID_VALUE, "not a handle");
  cr_expect_eq(cuMemMap(va, G, 0, h, 0), CUDA_SUCCESS, "a prefix of the allocation");
  cr_expect_eq(cuMemMap(va, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "already mapped there");
  cr_expect_eq(cuMemMap(va + G, 2 * G, 0, h, 0), CUDA_SUCCESS, "next to it");
  cr_expect_eq(vs()->map_failures, 7);
  cr_expect_eq(cuMemUnmap(va, 3 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemMap(va, G, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "a released handle maps nothing");
  cr_expect_eq(cuMemAddressFree(va, 4 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, unmap_takes_whole_mappings_only) {
  CUmemGenericAllocationHandle h2 = create(2 * G, 0), h1 = create(G, 0);
  CUdeviceptr va = reserve(8 * G);
  map_rw(va, 2 * G, h2);
  map_rw(va + 2 * G, G, h1);
  cr_expect_eq(cuMemUnmap(va, G), CUDA_ERROR_INVALID_VALUE, "half of a mapping");
  cr_expect_eq(cuMemUnmap(va + G, 2 * G), CUDA_ERROR_INVALID_VALUE, "a mapping's tail and the next");
  cr_expect_eq(cuMemUnmap(va, 4 * G), CUDA_ERROR_INVALID_VALUE, "past the mapped range");
  cr_expect_eq(cuMemUnmap(va + 4 * G, G), CUDA_ERROR_INVALID_VALUE, "nothing mapped there");
  cr_expect_eq(vs()->live_mappings, 2, "a refused unmap unmaps nothing");
  cr_expect_eq(cuMemAddressFree(va, 8 * G), CUDA_ERROR_INVALID_VALUE, "mappings remain in the range");
  cr_expect_eq(cuMemAddressFree(va, 4 * G), CUDA_ERROR_INVALID_VALUE, "not the reserved size");
  cr_expect_eq(cuMemUnmap(va + 2 * G, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemUnmap(va, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h1), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h2), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, 8 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, 8 * G), CUDA_ERROR_INVALID_VALUE, "freed already");
  expect_nothing_held();
}

Test(cuda_double_vmm, a_mapping_is_inaccessible_until_access_is_set) {
  setenv("GPUPART_TEST_CUDA_DEVICES", "2", 1);
  CUmemGenericAllocationHandle h = create(2 * G, 0);
  CUdeviceptr va = reserve(2 * G);
  char byte = 1;
  unsigned long long flags = 99;
  CUmemLocation dev0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                dev1 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1};
  cr_assert_eq(cuMemMap(va, 2 * G, 0, h, 0), CUDA_SUCCESS);
  cr_expect_eq(cuMemGetAccess(&flags, &dev0, va), CUDA_SUCCESS);
  cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE, "mappings start with no access");
  cr_expect_eq(cuMemcpyHtoD(va, &byte, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc d = {.location = dev0, .flags = RW};
  cr_expect_eq(cuMemSetAccess(va, G, &d, 1), CUDA_ERROR_INVALID_VALUE, "part of a mapping");
  cr_expect_eq(cuMemSetAccess(va, 2 * G, &d, 0), CUDA_ERROR_INVALID_VALUE);
  d.location.id = 2;
  cr_expect_eq(cuMemSetAccess(va, 2 * G, &d, 1), CUDA_ERROR_INVALID_DEVICE);
  grant(va, 2 * G, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
  cr_expect_eq(cuMemcpyDtoH(&byte, va, 1), CUDA_SUCCESS, "read access reads");
  cr_expect_eq(cuMemcpyHtoD(va, &byte, 1), CUDA_ERROR_INVALID_VALUE, "and does not write");
  grant(va, 2 * G, 1, RW); /* a peer */
  cr_expect_eq(cuMemGetAccess(&flags, &dev1, va + G), CUDA_SUCCESS);
  cr_expect_eq(flags, RW);
  cr_expect_eq(cuMemGetAccess(&flags, &dev0, va + G), CUDA_SUCCESS);
  cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READ, "access is per device");
  cr_expect_eq(cuMemUnmap(va, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemGetAccess(&flags, &dev0, va), CUDA_ERROR_INVALID_VALUE, "unmapped");
  cr_expect_eq(cuMemMap(va, 2 * G, 0, h, 0), CUDA_SUCCESS);
  cr_expect_eq(cuMemGetAccess(&flags, &dev1, va), CUDA_SUCCESS);
  cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE, "a new mapping starts with none again");
  cr_expect_eq(cuMemUnmap(va, 2 * G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, 2 * G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_vmm, reserve_keeps_the_rules_and_honours_alignment_and_hints) {
  CUdeviceptr va = 0, again = 0;
  cr_expect_eq(cuMemAddressReserve(&va, G + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE, "not a page multiple");
  cr_expect_eq(cuMemAddressReserve(&va, G, 3 * G, 0, 0), CUDA_ERROR_INVALID_VALUE, "alignment not a power of 2");
  cr_expect_eq(cuMemAddressReserve(&va, G, 0, 0, 1), CUDA_ERROR_INVALID_VALUE, "flags must be 0");
  cr_expect_eq(cuMemAddressReserve(&va, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  cr_assert_eq(cuMemAddressReserve(&va, G, (size_t)1 << 30, 0, 0), CUDA_SUCCESS);
  cr_expect_eq(va % ((size_t)1 << 30), 0);
  cr_assert_eq(cuMemAddressFree(va, G), CUDA_SUCCESS);
  cr_assert_eq(cuMemAddressReserve(&again, G, 0, va, 0), CUDA_SUCCESS);
  cr_expect_eq(again, va, "a free hint is taken");
  cr_assert_eq(cuMemAddressFree(again, G), CUDA_SUCCESS);
  size_t big = (size_t)64 << 30; /* address space only, like PyTorch's reservations */
  cr_assert_eq(cuMemAddressReserve(&va, big, 0, 0, 0), CUDA_SUCCESS);
  cr_expect_eq(free_bytes(), (size_t)16 << 20, "reserving takes no memory");
  cr_assert_eq(cuMemAddressFree(va, big), CUDA_SUCCESS);
  cr_expect_eq(vs()->live_reservations, 0);
}

/* ---- sharing -------------------------------------------------------------------------- */

Test(cuda_double_vmm, an_exported_and_imported_allocation_is_one_allocation) {
  CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), plain = create(G, 0), h2 = 0;
  int fd = -1;
  cr_expect_eq(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               CUDA_ERROR_INVALID_VALUE, "created without the handle type");
  cr_assert_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  cr_assert_eq(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               CUDA_SUCCESS);
  close(fd); /* as PyTorch does right after the import */
  cr_expect_neq(h2, h, "a new handle ...");
  cr_expect_eq(vs()->live_allocations, 2, "... of the same allocation");
  cr_expect_eq(free_bytes(), ((size_t)16 << 20) - 2 * G, "counted once");
  CUdeviceptr a = reserve(G), b = reserve(G);
  map_rw(a, G, h);
  map_rw(b, G, h2);
  cr_assert_eq(cuMemsetD8(a, 0x77, G), CUDA_SUCCESS);
  cr_expect_eq(((unsigned char *)(uintptr_t)b)[G - 1], 0x77, "the imported handle maps the same bytes");
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemUnmap(a, G), CUDA_SUCCESS);
  cr_expect_eq(vs()->live_allocations, 2, "the imported handle holds it");
  cr_expect_eq(cuMemUnmap(b, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h2), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(plain), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(a, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(b, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               CUDA_ERROR_INVALID_VALUE, "not an exported allocation");
  expect_nothing_held();
}

static void send_fd(int sock, int fd) {
  char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  cr_assert_eq(sendmsg(sock, &m, 0), 1);
}

static int receive_fd(int sock) {
  char byte, ctl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
  int fd = -1;
  if (recvmsg(sock, &m, 0) != 1 || !CMSG_FIRSTHDR(&m)) return -1;
  memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
  return fd;
}

/* The importing process: maps what it receives, checks the exporter's byte, writes its
 * own, and says whether its own device was charged (it must not be). */
static int importer(int sock) {
  CUcontext c = NULL;
  if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxPushCurrent(c)) return 8;
  int fd = receive_fd(sock);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}, .flags = RW};
  if (fd < 0 || cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return 1;
  close(fd);
  if (cuMemAddressReserve(&va, G, 0, 0, 0) || cuMemMap(va, G, 0, h, 0) || cuMemSetAccess(va, G, &d, 1)) return 2;
  unsigned char b = 0;
  if (cuMemcpyDtoH(&b, va + 10, 1) || b != 0x42) return 3;
  b = 0x24;
  if (cuMemcpyHtoD(va + 11, &b, 1)) return 4;
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  if (f != t) return 5;
  if (cuMemUnmap(va, G) || cuMemRelease(h) || cuMemAddressFree(va, G)) return 6;
  return vs()->live_allocations == 0 ? 0 : 7;
}

/* Tests that start the double themselves. */
TestSuite(cuda_double_bare);

Test(cuda_double_bare, another_process_imports_the_same_bytes) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  setenv("GPUPART_TEST_CUDA_GRANULARITY", "65536", 1);
  setenv("GPUPART_TEST_CUDA_TOTAL", "16777216", 1);
  pid_t pid = fork(); /* before this process's double starts, so the child's is fresh */
  cr_assert_geq(pid, 0);
  if (pid == 0) _exit(importer(sv[1]));
  setup();
  CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUdeviceptr va = reserve(G);
  map_rw(va, G, h);
  cr_assert_eq(cuMemsetD8(va + 10, 0x42, 1), CUDA_SUCCESS);
  int fd = -1;
  cr_assert_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  send_fd(sv[0], fd);
  close(fd);
  int status = -1;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importer failed at step %d", WEXITSTATUS(status));
  cr_expect_eq(((unsigned char *)(uintptr_t)va)[11], 0x24, "the importer's write is seen here");
  cr_expect_eq(cuMemUnmap(va, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, G), CUDA_SUCCESS);
  expect_nothing_held();
}

/* ---- knobs and counters ----------------------------------------------------------------- */

Test(cuda_double_vmm, injected_create_and_map_failures_leave_nothing_behind) {
  setenv("GPUPART_TEST_CUDA_FAIL_CREATE_AT", "2", 1);
  setenv("GPUPART_TEST_CUDA_FAIL_MAP_AT", "1", 1);
  CUmemGenericAllocationHandle h = create(G, 0), h2 = 0;
  CUmemAllocationProp p = prop_of(0, 0);
  cr_expect_eq(cuMemCreate(&h2, G, &p, 0), CUDA_ERROR_OUT_OF_MEMORY, "the second create");
  CUdeviceptr va = reserve(G);
  cr_expect_eq(cuMemMap(va, G, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY, "the first map");
  cr_expect_eq(vs()->live_mappings, 0);
  cr_expect_eq(cuMemMap(va, G, 0, h, 0), CUDA_SUCCESS, "the second map");
  cr_expect_eq(cuMemUnmap(va, G), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(cuMemAddressFree(va, G), CUDA_SUCCESS);
  expect_nothing_held();
}

Test(cuda_double_bare, calls_without_a_current_context_are_counted) {
  setenv("GPUPART_TEST_CUDA_GRANULARITY", "65536", 1);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = prop_of(0, 0);
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_INITIALIZED, "cuInit first");
  cr_assert_eq(cuInit(0), CUDA_SUCCESS);
  cr_expect_eq(cuMemCreate(&h, G, &p, 0), CUDA_SUCCESS);
  cr_expect_eq(cuMemRelease(h), CUDA_SUCCESS);
  cr_expect_eq(vs()->no_context_calls, 2);
}
