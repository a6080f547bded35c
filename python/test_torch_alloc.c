/* libgpupart_torch's entry points called as PyTorch's CUDAPluggableAllocator calls them:
 * the library is dlopen'ed by path and gpupart_torch_alloc / gpupart_torch_free looked up
 * by name with the allocator's exact function types, on a gpupart CUDA device over the
 * CUDA driver test double (GPUPART_TEST_CUDA_DOUBLE, set by meson). Asserts on what
 * gpupart's partition and the double's driver counters say. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "cuda_test.h"
#include "gpupart_cuda.h"

#define MiB (1ull << 20)

typedef struct CUstream_st *cudaStream_t; /* as cuda_runtime_api.h declares it */
typedef void *(*torch_alloc_fn)(size_t size, int device, cudaStream_t stream);
typedef void (*torch_free_fn)(void *ptr, size_t size, int device, cudaStream_t stream);

static struct {
  void *lib;
  torch_alloc_fn alloc;
  torch_free_fn free;
  gpupart_result (*set_partition)(int, gpupart_partition *);
  gpupart_allocation *(*allocation)(const void *);
  uint64_t (*live)(void);
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_partition *p;
} t;

static void *sym(const char *name) {
  void *s = dlsym(t.lib, name);
  cr_assert_not_null(s, "libgpupart_torch has no %s", name);
  return s;
}

/* Loads the library as PyTorch does and binds device 0 to a partition of `limit` bytes. */
static void setup_limit(uint64_t limit) {
  const char *path = getenv("GPUPART_TEST_TORCH_ALLOC");
  cr_assert(path && *path, "GPUPART_TEST_TORCH_ALLOC is not set (run with meson test)");
  t.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(t.lib, "%s", dlerror());
  void *a = sym("gpupart_torch_alloc"), *f = sym("gpupart_torch_free"), *s = sym("gpupart_torch_set_partition");
  void *al = sym("gpupart_torch_allocation"), *l = sym("gpupart_torch_live");
  memcpy(&t.alloc, &a, sizeof a), memcpy(&t.free, &f, sizeof f), memcpy(&t.set_partition, &s, sizeof s);
  memcpy(&t.allocation, &al, sizeof al), memcpy(&t.live, &l, sizeof l);
  t.ctx = cuda_test_context(NULL);
  cr_assert_not_null(t.ctx, "%s", gpupart_last_error());
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_CUDA};
  cr_assert_eq(gpupart_device_open(t.ctx, &d, &t.dev), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_partition_desc pd = {.name = "torch", .limit = limit};
  cr_assert_eq(gpupart_partition_create(t.dev, &pd, &t.p), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(t.set_partition(0, t.p), GPUPART_OK);
}

static void setup(void) { setup_limit(64 * MiB); }

static void teardown(void) {
  t.set_partition(0, NULL);
  cr_expect_eq(gpupart_device_close(t.dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(t.ctx), GPUPART_OK);
  const cuda_test_api *cu = cuda_test_api_get(NULL, 0);
  if (cu && cu->stats) cr_expect_eq(cu->stats->live_allocs, 0, "memory left at the driver");
}

static gpupart_stats stats(void) {
  gpupart_stats s;
  cr_assert_eq(gpupart_partition_get_stats(t.p, &s), GPUPART_OK);
  return s;
}

TestSuite(torch_alloc, .init = setup, .fini = teardown);

Test(torch_alloc, alloc_returns_the_allocations_cuda_pointer_and_free_returns_it) {
  cudaStream_t stream = (cudaStream_t)(uintptr_t)0x10; /* any stream: gpupart is not stream-ordered */
  void *ptr = t.alloc(3 * MiB, 0, stream);
  cr_assert_not_null(ptr, "%s", gpupart_last_error());
  gpupart_allocation *a = t.allocation(ptr);
  cr_assert_not_null(a);
  cr_expect_eq((uintptr_t)gpupart_cuda_ptr(a), (uintptr_t)ptr);
  cr_expect_eq(stats().in_use, 3 * MiB);
  cr_expect_eq(t.live(), 1);
  t.free(ptr, 3 * MiB, 0, stream);
  gpupart_stats s = stats();
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.total_frees, 1);
  cr_expect_eq(t.live(), 0);
  cr_expect_null(t.allocation(ptr));
}

Test(torch_alloc, the_memory_holds_what_is_copied_into_it) {
  void *ptr = t.alloc(4096, 0, NULL);
  cr_assert_not_null(ptr);
  char in[4096], out[4096];
  memset(in, 0x3c, sizeof in);
  cr_assert_eq(cuda_test_copy(t.dev, t.allocation(ptr), in, sizeof in, 1), 0);
  cr_assert_eq(cuda_test_copy(t.dev, t.allocation(ptr), out, sizeof out, 0), 0);
  cr_expect_eq(memcmp(in, out, sizeof in), 0);
  t.free(ptr, 4096, 0, NULL);
}

Test(torch_alloc, an_unbound_device_gets_null) {
  cr_expect_null(t.alloc(MiB, 1, NULL));
  cr_expect_null(t.alloc(MiB, -1, NULL));
  cr_expect_null(t.alloc(MiB, 64, NULL));
  cr_expect_eq(t.set_partition(64, t.p), GPUPART_EINVAL);
  cr_expect_eq(stats().total_allocations, 0);
}

Test(torch_alloc, past_the_partition_limit_alloc_is_null_with_the_reason) {
  void *keep = t.alloc(48 * MiB, 0, NULL);
  cr_assert_not_null(keep);
  cr_expect_null(t.alloc(32 * MiB, 0, NULL));
  cr_expect(strstr(gpupart_last_error(), "torch"), "%s", gpupart_last_error());
  cr_expect_eq(stats().failed_allocations, 1);
  t.free(keep, 48 * MiB, 0, NULL);
}

Test(torch_alloc, abort_on_failure_ends_the_process_at_the_refusal, .signal = SIGABRT) {
  void (*set_abort)(int) = NULL;
  void *s = sym("gpupart_torch_set_abort_on_failure");
  memcpy(&set_abort, &s, sizeof s);
  set_abort(1);
  cr_expect_not_null(t.alloc(MiB, 0, NULL)); /* a granted allocation is unaffected */
  t.alloc(128 * MiB, 0, NULL);               /* past the limit: aborts with gpupart's message */
}

Test(torch_alloc, unknown_and_null_pointers_are_ignored_by_free) {
  void *ptr = t.alloc(MiB, 0, NULL);
  t.free(NULL, 0, 0, NULL);
  t.free((char *)ptr + 256, MiB, 0, NULL);
  cr_expect_eq(stats().live_allocations, 1);
  t.free(ptr, MiB, 0, NULL);
  t.free(ptr, MiB, 0, NULL); /* a second free of the same pointer is not a gpupart double free */
  gpupart_stats s = stats();
  cr_expect_eq(s.live_allocations, 0);
  cr_expect_eq(s.total_frees, 1);
}

Test(torch_alloc, zero_byte_requests_get_distinct_pointers) {
  void *a = t.alloc(0, 0, NULL), *b = t.alloc(0, 0, NULL);
  cr_assert(a && b && a != b);
  t.free(a, 0, 0, NULL), t.free(b, 0, 0, NULL);
  cr_expect_eq(stats().live_allocations, 0);
}

Test(torch_alloc, thousands_of_live_allocations_are_all_found_again) {
  enum { N = 3000 };
  static void *ptrs[N];
  for (int i = 0; i < N; i++) {
    ptrs[i] = t.alloc(4096, 0, NULL);
    cr_assert_not_null(ptrs[i], "allocation %d: %s", i, gpupart_last_error());
  }
  cr_expect_eq(t.live(), N);
  for (int i = 0; i < N; i += 2) t.free(ptrs[i], 4096, 0, NULL); /* every other, then the rest */
  for (int i = 1; i < N; i += 2) cr_assert_not_null(t.allocation(ptrs[i]), "allocation %d lost", i);
  for (int i = N - 1; i > 0; i -= 2) t.free(ptrs[i], 4096, 0, NULL);
  gpupart_stats s = stats();
  cr_expect_eq(t.live(), 0);
  cr_expect_eq(s.in_use, 0);
  cr_expect_eq(s.total_frees, N);
}
