/* The CUDA preload library's metering of virtual memory (interpose/cuda/cu_vmm.c), on an
 * unmodified program that maps cuMemCreate granules as PyTorch's expandable segments do
 * (tests/interpose/cu_vmm.c), linked against the driver test double as libcuda.so.1:
 * granules past the limit are CUDA_ERROR_OUT_OF_MEMORY, by the linked names and through
 * cuGetProcAddress_v2; a handle retained and mapped twice counts once; releasing gives
 * the bytes back (cuMemGetInfo says so, and the program maps as much again). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "interpose_test.h"

#define MIB (1024ull * 1024ull)

static const char *preload(void) {
  static char env[4096];
  snprintf(env, sizeof env, "%s LD_PRELOAD='%s'", ip_test_child_env(), ip_test_path("GPUPART_TEST_CU_PRELOAD"));
  return env;
}

static int count_of(const char *out, const char *what, int *code) {
  char key[64];
  int n = -1;
  snprintf(key, sizeof key, "%s ", what);
  const char *at = strstr(out, key);
  *code = -1;
  if (at) sscanf(at + strlen(key), "%d code %d", &n, code);
  return n;
}

static void expect_limit_holds(const char *route) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s GPUPART_MEMORY_LIMIT=64MiB %s %s 2 200", preload(),
              ip_test_path("GPUPART_TEST_CU_VMM"), route);
  int n = count_of(out, "mapped", &code);
  cr_assert_eq(code, 2, "CUDA_ERROR_OUT_OF_MEMORY past the limit: %s", out);
  cr_expect(n >= 24 && n <= 32, "64 MiB holds up to 32 granules of 2 MiB (less the mirror's block tail): %d\n%s", n,
            out);
  uint64_t info = ip_test_field(strstr(out, "info:"), "free"), aliased = ip_test_field(strstr(out, "aliased:"), "free");
  cr_expect_lt(info, 2 * MIB + 1, "cuMemGetInfo counts the granules: %s", out);
  cr_expect_eq(aliased, info, "a handle retained and mapped twice counts once: %s", out);
  cr_expect_geq(ip_test_field(strstr(out, "after release:"), "free"), 60 * MIB, "released: %s", out);
  cr_expect_eq(count_of(out, "again", &code), n, "as many again after releasing: %s", out);
}

Test(cu_preload_vmm, cu_mem_create_past_the_limit_is_out_of_memory) { expect_limit_holds("link"); }

Test(cu_preload_vmm, the_cu_get_proc_address_route_is_metered_too) { expect_limit_holds("proc"); }

Test(cu_preload_vmm, without_a_limit_the_program_maps_as_before) {
  char out[4096];
  int code = 0;
  ip_test_run(out, sizeof out, "env %s %s link 2 100", preload(), ip_test_path("GPUPART_TEST_CU_VMM"));
  cr_expect_eq(count_of(out, "mapped", &code), 100, "%s", out);
  cr_expect_eq(count_of(out, "again", &code), 100, "%s", out);
}
