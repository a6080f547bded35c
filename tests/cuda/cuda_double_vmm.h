/* The virtual-memory side of the CUDA driver test double (tests/cuda/cuda_double_vmm.c):
 * its counters, which tests read through the exported cuda_double_vmm_stats(), and its
 * knobs. The calls it serves are the driver's virtual memory management API
 * (cuMemAddressReserve / Free, cuMemCreate / Release, cuMemMap / Unmap, cuMemSetAccess /
 * GetAccess, cuMemGetAllocationGranularity, cuMemRetainAllocationHandle,
 * cuMemGetAllocationPropertiesFromHandle, cuMemExportToShareableHandle /
 * ImportFromShareableHandle with POSIX file descriptors) and
 * cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and a few
 * others). Physical allocations are memfds and mappings are MAP_SHARED views of them,
 * so two mappings of one allocation really alias; a mapping is PROT_NONE until
 * cuMemSetAccess grants access, as a device mapping is.
 *
 * Knobs (environment variables, read at each call):
 *   GPUPART_TEST_CUDA_GRANULARITY=BYTES   CU_MEM_ALLOC_GRANULARITY_MINIMUM (default 2 MiB;
 *                                         rounded up to the host page size)
 *   GPUPART_TEST_CUDA_GRANULARITY_RECOMMENDED=BYTES  ..._RECOMMENDED (default: the minimum;
 *                                         rounded up to a multiple of the minimum)
 *   GPUPART_TEST_CUDA_NO_VMM=1            the devices lack virtual memory management: the
 *                                         attribute reads 0 and every VMM call returns
 *                                         CUDA_ERROR_NOT_SUPPORTED (as on some vGPU profiles)
 *   GPUPART_TEST_CUDA_FAIL_CREATE_AT=N    the Nth cuMemCreate call fails (1-based) with
 *                                         CUDA_ERROR_OUT_OF_MEMORY
 *   GPUPART_TEST_CUDA_FAIL_MAP_AT=N       the Nth cuMemMap call fails with
 *                                         CUDA_ERROR_OUT_OF_MEMORY
 * Created allocations count against the device's memory (GPUPART_TEST_CUDA_TOTAL and
 * cuMemGetInfo) like cuMemAlloc, from cuMemCreate until the allocation is freed: when
 * every handle to it is released and every mapping of it is unmapped. */
#ifndef GPUPART_TESTS_CUDA_DOUBLE_VMM_H
#define GPUPART_TESTS_CUDA_DOUBLE_VMM_H

#include <stdint.h>

typedef struct cuda_double_vmm_counters {
  uint64_t reserve_calls, address_free_calls;
  uint64_t create_calls, create_failures, release_calls;
  uint64_t map_calls, map_failures, unmap_calls, set_access_calls;
  uint64_t retain_calls, export_calls, import_calls;
  uint64_t no_context_calls; /* VMM calls made with no current context (the driver does
                                not document that they need one; callers push theirs) */
  uint64_t live_reservations, reserved_bytes;
  uint64_t live_allocations, allocation_bytes, peak_allocation_bytes; /* physical, charged */
  uint64_t live_handles; /* handle values not yet released (or still mapped) */
  uint64_t live_mappings, mapped_bytes;
} cuda_double_vmm_counters;

/* Exported by the double; tests find it with dlsym (or call it where they link the double). */
typedef cuda_double_vmm_counters *(*cuda_double_vmm_stats_fn)(void);

#endif
