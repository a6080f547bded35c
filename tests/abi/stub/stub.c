/* A stand-in for a libgpupart.so.0 of before symbol versioning (0.1 and 0.2 had none):
 * every name 0.2 exported, unversioned, with no body worth calling. The frozen-ABI
 * clients link against it, so their references are unversioned, as those of a program
 * built for 0.1 or 0.2 are; they run against the real library (LD_LIBRARY_PATH), whose
 * dynamic linker binds each unversioned reference to the symbol's oldest version
 * (docs/api.md, "ABI policy"). A client that finds this stub at run time instead reads
 * gpupart_version() as 0 and stops. Types do not matter to the linker, so each name is
 * an int function of no arguments. */
/* A list of macro calls, which clang-format cannot lay out: */
/* clang-format off */
#define STUB(name) int name(void); int name(void) { return 0; }

STUB(gpupart_alloc) STUB(gpupart_alloc_ex) STUB(gpupart_alloc_ex_sized) STUB(gpupart_alloc_info)
STUB(gpupart_alloc_info_sized) STUB(gpupart_allocation_get_info) STUB(gpupart_allocation_get_info_sized)
STUB(gpupart_backend_name) STUB(gpupart_context_create) STUB(gpupart_context_create_sized)
STUB(gpupart_context_destroy) STUB(gpupart_device_budget) STUB(gpupart_device_check)
STUB(gpupart_device_close) STUB(gpupart_device_get_info) STUB(gpupart_device_get_info_sized)
STUB(gpupart_device_get_stats) STUB(gpupart_device_get_stats_sized) STUB(gpupart_device_open)
STUB(gpupart_device_open_sized) STUB(gpupart_device_reset_peak) STUB(gpupart_enumerate)
STUB(gpupart_enumerate_sized) STUB(gpupart_free) STUB(gpupart_last_error) STUB(gpupart_last_native_error)
STUB(gpupart_partition_at) STUB(gpupart_partition_count) STUB(gpupart_partition_create)
STUB(gpupart_partition_create_sized) STUB(gpupart_partition_destroy) STUB(gpupart_partition_find)
STUB(gpupart_partition_get_stats) STUB(gpupart_partition_get_stats_sized) STUB(gpupart_partition_name)
STUB(gpupart_partition_reset_peak) STUB(gpupart_partition_resize) STUB(gpupart_partition_trim)
STUB(gpupart_result_name) STUB(gpupart_result_str) STUB(gpupart_version) STUB(gpupart_version_string)
    /* clang-format on */
