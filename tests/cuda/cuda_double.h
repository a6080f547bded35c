/* The CUDA driver test double's counters (tests/cuda/cuda_double.c, built as
 * libcuda_double.so): what the tests read through the exported cuda_double_stats() to
 * assert on the backend's driver calls. This is a test double, not a CUDA driver: it
 * serves the driver API the gpupart backend and its tests use over host memory.
 *
 * Knobs (environment variables, read at each call):
 *   GPUPART_TEST_CUDA_DEVICES=N          devices (default 1, at most CUDA_DOUBLE_MAX_DEVICES)
 *   GPUPART_TEST_CUDA_TOTAL=BYTES        memory of each device (default 4 GiB)
 *   GPUPART_TEST_CUDA_DRIVER_VERSION=V   cuDriverGetVersion (default 13000; 10020 in the
 *                                        old-driver build); symbols newer are not offered
 *   GPUPART_TEST_CUDA_INIT_ERROR=CODE    cuInit returns CODE (e.g. 100, CUDA_ERROR_NO_DEVICE)
 *   GPUPART_TEST_CUDA_FAIL_ALLOC_AT=N    the Nth cuMemAlloc_v2 call fails (1-based) ...
 *   GPUPART_TEST_CUDA_FAIL_ALLOC_CODE=C  ... with C (default 2, CUDA_ERROR_OUT_OF_MEMORY)
 *   GPUPART_TEST_CUDA_MAX_LIVE=N         cuMemAlloc_v2 is out of memory while N allocations live
 *   GPUPART_TEST_CUDA_PROC=null|fail     cuGetProcAddress_v2 returns success with a NULL
 *                                        pointer, or CUDA_ERROR_NOT_FOUND, for every symbol
 * The virtual memory management calls have their own knobs and counters: cuda_double_vmm.h. */
#ifndef GPUPART_TESTS_CUDA_DOUBLE_H
#define GPUPART_TESTS_CUDA_DOUBLE_H

#include <stdint.h>

#define CUDA_DOUBLE_MAX_DEVICES 72 /* past the 64 that a fixed table of the preload once held */

typedef struct cuda_double_counters {
  uint64_t alloc_calls, alloc_failures, free_calls;
  uint64_t live_allocs, live_bytes, peak_bytes; /* over every context */
  uint64_t legacy_calls;                        /* unversioned entry points (cuMemAlloc, ...) that were called */
  uint64_t no_context_calls;                    /* calls refused because no context was current */
  uint64_t bad_context_calls;                   /* calls refused for an unknown or destroyed context */
  uint64_t proc_queries, proc_null_returns, proc_refusals; /* cuGetProcAddress_v2 */
  uint64_t push_calls, pop_calls;                          /* that succeeded */
  uint64_t init_calls;
  int primary_refs[CUDA_DOUBLE_MAX_DEVICES]; /* reference count of each primary context */
  int created_alive;                         /* contexts of cuCtxCreate_v2 not yet destroyed */
} cuda_double_counters;

/* Exported by the double; tests find it with dlsym. */
typedef cuda_double_counters *(*cuda_double_stats_fn)(void);

#endif
