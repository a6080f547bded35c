/* gpupart: growth arenas and ratio partitions of GPU memory on every vendor's GPU.
 *
 * One vendor-neutral core holds every policy (growth, preallocation, partition limits
 * and guarantees, the out-of-memory sequence, statistics); the CUDA, OpenCL, Vulkan and
 * simulated backends only hand out large driver blocks. This header is the whole public
 * contract; the native interop headers (gpupart_opencl.h, gpupart_vulkan.h,
 * gpupart_cuda.h) add the vendor handles.
 *
 * Conventions, true of every function below unless its comment says otherwise:
 *  1. Handles are opaque. Each handle's comment names the call that creates it and the
 *     call that destroys it.
 *  2. Descriptor structs are zero-initialisable: a 0 field means the documented default.
 *  3. Fallible calls return a gpupart_result (GPUPART_OK or a negative code) and write
 *     their out-parameter last: on success the result, on failure NULL (or zeroes).
 *  4. On failure, gpupart_last_error() on the same thread explains what went wrong.
 *  5. Destroy and free functions accept NULL. Destroying a parent that still has
 *     children (devices of a context, allocations of a partition) is GPUPART_EBUSY and
 *     frees nothing.
 *  6. Every call is thread-safe, but an object may not be destroyed while another
 *     thread still uses it. */
#ifndef GPUPART_H
#define GPUPART_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GPUPART_BUILDING) && defined(__GNUC__)
#define GPUPART_API __attribute__((visibility("default")))
#else
#define GPUPART_API
#endif

#define GPUPART_VERSION_MAJOR 0
#define GPUPART_VERSION_MINOR 1
#define GPUPART_VERSION_PATCH 0

/* ---- results ---------------------------------------------------------------------- */

/* X(name, value, message): the one table that the enum, gpupart_result_name and
 * gpupart_result_str are generated from. */
#define GPUPART_RESULT_TABLE(X)                                                         \
  X(GPUPART_OK, 0, "success")                                                           \
  X(GPUPART_EINVAL, -1, "invalid argument")                                             \
  X(GPUPART_ENOMEM, -2, "out of host memory")                                           \
  X(GPUPART_EDEVMEM, -3, "the driver refused device memory")                           \
  X(GPUPART_ELIMIT, -4, "partition limit or device budget reached")                    \
  X(GPUPART_ENOBACKEND, -5, "backend not built or its driver library not found")      \
  X(GPUPART_ENODEV, -6, "no such device")                                               \
  X(GPUPART_EBACKEND, -7, "a driver call failed")                                       \
  X(GPUPART_ENOTSUP, -8, "not supported by this backend")                               \
  X(GPUPART_ECONFIG, -9, "invalid configuration")                                       \
  X(GPUPART_EBUSY, -10, "object still in use")                                          \
  X(GPUPART_EEXIST, -11, "a partition with that name exists")                          \
  X(GPUPART_ECORRUPT, -12, "an invariant check failed")

/* Result of every fallible call: GPUPART_OK (0) or a negative error code.
 *  EINVAL     invalid argument (NULL handle, bad alignment, size 0, double free, ...)
 *  ENOMEM     out of host memory
 *  EDEVMEM    the driver refused device memory
 *  ELIMIT     a partition limit or the device budget refused it (no driver call made)
 *  ENOBACKEND backend not built, or its driver library not found
 *  ENODEV     no such device
 *  EBACKEND   a driver call failed for another reason (the driver's code is in the message)
 *  ENOTSUP    not supported by this backend
 *  ECONFIG    invalid configuration (environment, file or descriptor)
 *  EBUSY      object still in use (live allocations, open devices)
 *  EEXIST     a partition with that name exists
 *  ECORRUPT   an invariant check failed */
typedef enum gpupart_result {
#define GPUPART__RESULT_ENUM(name, value, msg) name = value,
  GPUPART_RESULT_TABLE(GPUPART__RESULT_ENUM)
#undef GPUPART__RESULT_ENUM
} gpupart_result;

/* The enumerator's name, e.g. "GPUPART_ELIMIT"; "GPUPART_UNKNOWN" for other values.
 * Never NULL; the string is static. */
GPUPART_API const char *gpupart_result_name(gpupart_result r);
/* A short English description, e.g. "partition limit or device budget reached";
 * "unknown result" for other values. Never NULL; the string is static. */
GPUPART_API const char *gpupart_result_str(gpupart_result r);
/* Detail of the calling thread's last failure (which object, which sizes, the driver's
 * own error code). Never NULL; "" when no call on this thread has failed yet. Valid until
 * the next gpupart call on this thread. */
GPUPART_API const char *gpupart_last_error(void);
/* "MAJOR.MINOR.PATCH" of the library that is linked (not of the header). Static. */
GPUPART_API const char *gpupart_version_string(void);
/* The same as one number: MAJOR * 10000 + MINOR * 100 + PATCH. */
GPUPART_API uint32_t gpupart_version(void);

/* ---- backends and devices --------------------------------------------------------- */

/* A driver family. AUTO chooses by configuration, else the first present of cuda,
 * vulkan, opencl, sim. */
typedef enum gpupart_backend {
  GPUPART_BACKEND_AUTO = 0,
  GPUPART_BACKEND_SIM,
  GPUPART_BACKEND_OPENCL,
  GPUPART_BACKEND_VULKAN,
  GPUPART_BACKEND_CUDA,
} gpupart_backend;
/* "auto", "sim", "opencl", "vulkan", "cuda"; "unknown" for other values. Static. */
GPUPART_API const char *gpupart_backend_name(gpupart_backend b);

/* A library instance: holds the configuration, the loaded backends and every device.
 * Created by gpupart_context_create, destroyed by gpupart_context_destroy. There is no
 * global state outside contexts; several contexts in one process are independent. */
typedef struct gpupart_context gpupart_context;
/* One physical GPU opened through one backend, with this process's budget on it.
 * Created by gpupart_device_open, destroyed by gpupart_device_close. */
typedef struct gpupart_device gpupart_device;
/* A named share of a device's budget with a limit, an optional guarantee and its own
 * arena. Created by gpupart_partition_create (or by configuration when the device opens),
 * destroyed by gpupart_partition_destroy or by gpupart_device_close. */
typedef struct gpupart_partition gpupart_partition;
/* A range of device memory handed to the caller. Created by gpupart_alloc or
 * gpupart_alloc_ex, destroyed by gpupart_free. */
typedef struct gpupart_allocation gpupart_allocation;

/* gpupart_context_desc.flags: read no GPUPART_* variable and no config file. */
#define GPUPART_CONTEXT_IGNORE_ENV 0x1u

typedef enum gpupart_log_level {
  GPUPART_LOG_ERROR = 1,
  GPUPART_LOG_WARN,
  GPUPART_LOG_INFO,
  GPUPART_LOG_DEBUG
} gpupart_log_level;
/* Receives the library's log lines (no trailing newline). May be called from any thread
 * that calls into gpupart; must not call back into gpupart. */
typedef void (*gpupart_log_fn)(gpupart_log_level level, const char *message, void *user);

typedef struct gpupart_context_desc {
  uint32_t flags;           /* GPUPART_CONTEXT_*; 0 = read the environment and config file */
  const char *config_path;  /* NULL = $GPUPART_CONFIG, else none */
  const char *config_text;  /* same syntax as the file, applied after it; NULL = none */
  const char *ledger_dir;   /* shared ledgers' folder; NULL = $GPUPART_LEDGER_DIR, else /dev/shm */
  gpupart_log_fn log;       /* NULL = silent, or stderr when GPUPART_VERBOSE=1 */
  void *log_user;           /* passed to log */
  void *(*host_alloc)(size_t size, void *user); /* both NULL = malloc/free; set both or none */
  void (*host_free)(void *ptr, void *user);
  void *host_user;          /* passed to host_alloc and host_free */
} gpupart_context_desc;

/* Creates a context. desc NULL = all defaults. The strings in desc are copied.
 * Errors: EINVAL (out NULL, only one of host_alloc/host_free set), ENOMEM, ECONFIG (bad
 * configuration, message names the source). */
GPUPART_API gpupart_result gpupart_context_create(const gpupart_context_desc *desc,
                                                  gpupart_context **out);
/* Destroys a context and unloads its backends. EBUSY (nothing freed) while devices are
 * open. NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_context_destroy(gpupart_context *ctx);

/* What a backend reports about one device. */
typedef struct gpupart_device_info {
  gpupart_backend backend;
  uint32_t index;            /* index within the backend */
  char name[256];
  char vendor[64];
  uint8_t uuid[16];          /* zero where the backend has none */
  uint64_t total_bytes;
  uint64_t free_bytes;       /* UINT64_MAX where the backend cannot tell */
  uint64_t max_block_bytes;  /* largest single driver allocation */
  uint64_t min_alignment;    /* alignment of every driver block's base */
} gpupart_device_info;

/* Lists devices. *count is in: the capacity of infos (ignored when infos is NULL); out:
 * the number of devices found, which may exceed the capacity (then only the capacity is
 * written). backend == AUTO lists every backend present except sim; a named backend that
 * is not built or whose driver is missing is ENOBACKEND. Errors: EINVAL, ENOBACKEND,
 * EBACKEND. */
GPUPART_API gpupart_result gpupart_enumerate(gpupart_context *ctx, gpupart_backend backend,
                                             gpupart_device_info *infos, uint32_t *count);

#define GPUPART_GROWTH_DEFAULT 0 /* configuration, else on */
#define GPUPART_GROWTH_ON 1      /* grow on demand */
#define GPUPART_GROWTH_OFF 2     /* preallocate each partition's limit at creation */

typedef struct gpupart_device_desc {
  gpupart_backend backend;   /* AUTO = config/env choice, else first present of cuda, vulkan, opencl, sim */
  uint32_t index;            /* device index within the backend */
  double memory_fraction;    /* 0 = config, else 1.0: share of total memory this process may use, (0, 1] */
  uint64_t memory_limit;     /* 0 = none: absolute cap; the budget is the smaller of the two */
  uint64_t headroom;         /* 0 = config, else 0: bytes left to the driver and other libraries */
  int growth;                /* GPUPART_GROWTH_*: the default policy of this device's partitions */
  uint64_t granularity;      /* 0 = config, else 2 MiB: a power of two; limits round down, blocks round up to it */
  const void *backend_desc;  /* e.g. const gpupart_sim_desc *, or adopted native handles; NULL = backend defaults */
  uint32_t flags;            /* GPUPART_DEVICE_SHARED */
} gpupart_device_desc;

/* Account this device in a ledger shared by every process of the same user that opens the
   same device with this flag (or with GPUPART_SHARED=1): the budget and the guarantees then
   hold across processes; creating a partition whose name another process already created
   joins it (its descriptor must match or leave limit and guarantee 0), and its limit is
   shared by all members; a member that dies has its bytes returned to the ledger.
   gpupart_partition_find also finds partitions that other processes created (reading their
   stats; allocating through the handle makes this process a member); destroying a
   partition leaves it, and it disappears when its last member leaves or dies.
   Not implemented yet: gpupart_device_open returns ENOTSUP when it is set. */
#define GPUPART_DEVICE_SHARED 0x1u

/* Opens device desc->index of desc->backend and computes this process's budget:
 * min(total * memory_fraction, memory_limit) - headroom, rounded down to the granularity.
 * desc NULL = defaults. Partitions declared in configuration are created, in order.
 * Errors: EINVAL (bad field: fraction outside (0, 1], granularity not a power of two,
 * budget of zero), ENOBACKEND, ENODEV, EBACKEND, ECONFIG, ENOTSUP (DEVICE_SHARED). */
GPUPART_API gpupart_result gpupart_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                               gpupart_device **out);
/* Destroys every partition of the device, then closes it. EBUSY (nothing freed) while
 * any partition has live allocations. NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_device_close(gpupart_device *dev);
/* The device's info as its backend reported it at open; free_bytes is queried anew. */
GPUPART_API gpupart_result gpupart_device_get_info(const gpupart_device *dev, gpupart_device_info *out);
/* This process's budget on the device in bytes; 0 for NULL. */
GPUPART_API uint64_t gpupart_device_budget(const gpupart_device *dev);

/* The simulated backend: a device with no memory behind it (or host memory, for tests
 * that write data), with knobs to emulate real drivers' limits and failures. Pass it as
 * gpupart_device_desc.backend_desc with backend SIM. */
typedef struct gpupart_sim_desc {
  uint64_t total_bytes;         /* 0 = $GPUPART_SIM_TOTAL, else 16 GiB */
  uint64_t max_block_bytes;     /* 0 = total_bytes */
  uint64_t min_alignment;       /* 0 = 256; a power of two */
  uint32_t max_blocks;          /* 0 = unlimited (real Vulkan drivers: 4096) */
  uint32_t fail_block_alloc_at; /* 1-based driver call that fails with EDEVMEM; 0 = never */
  int host_backed;              /* 1 = blocks are host memory and device_address is a host
                                   pointer, so tests can write and read them */
} gpupart_sim_desc;             /* sim devices with the same index and total_bytes are the same device */

/* ---- partitions ------------------------------------------------------------------- */

/* Asked, in the OOM sequence, to free memory of partition p (e.g. caches the application
   keeps there); bytes_wanted is the shortfall. Runs on the allocating thread with no
   gpupart lock held, so it may free allocations of any partition; it is never re-entered
   (an allocation made inside it skips the callbacks), and one partition's callback never
   runs on two threads at once. Return 0; other values are reserved. */
typedef int (*gpupart_reclaim_fn)(gpupart_partition *p, uint64_t bytes_wanted, void *user);

typedef struct gpupart_partition_desc {
  const char *name;           /* copied; unique per device; NULL = "p<index>" */
  double fraction;            /* share of the device budget, (0, 1]; 0 = use limit */
  uint64_t limit;             /* bytes, used when fraction == 0; both 0 = whole budget */
  double guarantee_fraction;  /* floor as a share of the budget; 0 = use guarantee */
  uint64_t guarantee;         /* floor in bytes; both 0 = best effort (no floor) */
  int growth;                 /* GPUPART_GROWTH_*; DEFAULT = the device's */
  uint64_t initial_block;     /* 0 = 2 MiB */
  uint64_t max_block;         /* 0 = 1 GiB, capped by the backend's max_block_bytes */
  double growth_factor;       /* 0 = 2.0; at least 1.0 */
  uint64_t release_threshold; /* empty cached blocks kept beyond it go back to the driver when
                                 an allocation is freed; 0 = keep them all until trim, the OOM
                                 sequence, or a growth that would otherwise raise the partition's
                                 reserved peak while they sit unused; 1 = release every emptied
                                 block at once */
  gpupart_reclaim_fn reclaim; /* optional: asked to free memory in the OOM sequence */
  void *reclaim_user;         /* passed to reclaim */
} gpupart_partition_desc;

/* Creates a partition on dev. Limits and guarantees are rounded down to the device's
 * granularity. desc NULL = defaults (the whole budget, no guarantee).
 * Errors: EINVAL (fraction outside (0, 1], guarantee above the limit, limit rounding to 0,
 * growth_factor below 1), EEXIST (name taken), ELIMIT (guarantees would sum past the
 * budget, or a preallocated limit exceeds what the budget can grant), EDEVMEM (a
 * preallocated partition the driver cannot back; nothing is left behind), ENOMEM. */
GPUPART_API gpupart_result gpupart_partition_create(gpupart_device *dev, const gpupart_partition_desc *desc,
                                                    gpupart_partition **out);
/* Returns every block to the driver and frees the partition. EBUSY (nothing freed) while
 * allocations are live. NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_partition_destroy(gpupart_partition *p);
/* The partition of dev named name, or NULL (also for NULL arguments). */
GPUPART_API gpupart_partition *gpupart_partition_find(gpupart_device *dev, const char *name);
/* Number of partitions of dev; 0 for NULL. */
GPUPART_API uint32_t gpupart_partition_count(const gpupart_device *dev);
/* The i-th partition in creation (and configuration) order, or NULL when out of range. */
GPUPART_API gpupart_partition *gpupart_partition_at(gpupart_device *dev, uint32_t i);
/* The partition's name (owned by the partition), or NULL for NULL. */
GPUPART_API const char *gpupart_partition_name(const gpupart_partition *p);
/* Changes the limit at run time. new_limit is rounded down to the granularity; 0 is EINVAL.
 * Growing checks the budget as creation does (ELIMIT), and a preallocated partition
 * reserves the difference (EDEVMEM when the driver refuses, limit unchanged). Shrinking
 * first trims, then returns EBUSY with the limit unchanged (the trim stays done) if the
 * blocks still held exceed the new limit. The guarantee is clamped down to the new limit. */
GPUPART_API gpupart_result gpupart_partition_resize(gpupart_partition *p, uint64_t new_limit);
/* Gives every empty cached block back to the driver (never preallocated blocks). */
GPUPART_API gpupart_result gpupart_partition_trim(gpupart_partition *p);

/* ---- allocations ------------------------------------------------------------------ */

/* Allocates size bytes from partition p. alignment (a power of two; 0 = the backend's
 * minimum) applies to device_address where the backend has one, else to the offset.
 * Errors: EINVAL (NULL, size 0, alignment not a power of two, a size that no single
 * driver allocation could ever hold or that overflows when rounded), ELIMIT (the
 * partition limit or the device budget refused it; no driver call made), EDEVMEM (the
 * driver refused), ENOMEM. A refused allocation obtains no block; only
 * failed_allocations changes (and what the OOM sequence released on its way). */
GPUPART_API gpupart_result gpupart_alloc(gpupart_partition *p, uint64_t size, uint64_t alignment,
                                         gpupart_allocation **out);

#define GPUPART_ALLOC_NO_RECLAIM 0x1u /* skip the reclaim callbacks (for callers holding their own cache locks) */

typedef struct gpupart_alloc_desc {
  uint64_t size;      /* bytes; required */
  uint64_t alignment; /* a power of two; 0 = backend minimum */
  uint32_t flags;     /* GPUPART_ALLOC_* */
  uint64_t tag;       /* the caller's label, shown in failure messages and dumps */
} gpupart_alloc_desc;

/* gpupart_alloc with flags and a tag. Errors as gpupart_alloc, plus EINVAL for unknown flags. */
GPUPART_API gpupart_result gpupart_alloc_ex(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                            gpupart_allocation **out);
/* Frees an allocation. NULL is a no-op. A handle freed a second time before 128 later
 * frees of its partition is reported through gpupart_last_error and otherwise ignored
 * (accounting unchanged); the partition must still exist. */
GPUPART_API void gpupart_free(gpupart_allocation *a);

typedef struct gpupart_allocation_info {
  gpupart_partition *partition;
  uint64_t size;            /* as requested */
  uint64_t offset;          /* within the block */
  uint64_t block_size;
  uint64_t device_address;  /* CUdeviceptr, Vulkan buffer device address, SVM or sim address; 0 where none */
  void *native_block;       /* CUdeviceptr base, VkDeviceMemory, cl_mem, or sim base */
} gpupart_allocation_info;
/* Describes a live allocation. EINVAL for NULL or a freed handle. */
GPUPART_API gpupart_result gpupart_allocation_get_info(const gpupart_allocation *a, gpupart_allocation_info *out);

/* ---- statistics ------------------------------------------------------------------- */

typedef struct gpupart_stats {
  uint64_t limit, guarantee;
  uint64_t in_use, peak_in_use;         /* bytes of live allocations, as requested */
  uint64_t reserved, peak_reserved;     /* bytes held from the driver */
  uint64_t live_allocations, total_allocations, total_frees;
  uint64_t driver_allocs, driver_frees; /* blocks obtained from / returned to the driver */
  uint64_t failed_allocations;          /* calls that returned ELIMIT or EDEVMEM */
  uint64_t largest_free;                /* largest range allocatable without a driver call */
} gpupart_stats;

/* A consistent snapshot of one partition's figures. */
GPUPART_API gpupart_result gpupart_partition_get_stats(const gpupart_partition *p, gpupart_stats *out);
/* Device figures: limit = budget, guarantee = sum of guarantees, current figures and
 * counts summed over partitions (including destroyed ones' counts), peaks the device's
 * own peaks, largest_free the largest of any partition's. */
GPUPART_API gpupart_result gpupart_device_get_stats(const gpupart_device *dev, gpupart_stats *out);
/* Sets peak_in_use and peak_reserved of p to their current values. NULL is a no-op. */
GPUPART_API void gpupart_partition_reset_peak(gpupart_partition *p);
/* Full invariant walk (every arena's sub-allocator, counters against what the arenas
 * hold, reserved within limits and budget, guarantees intact): OK or ECORRUPT with the
 * first broken invariant in gpupart_last_error. */
GPUPART_API gpupart_result gpupart_device_check(const gpupart_device *dev);

#ifdef __cplusplus
}
#endif

#endif /* GPUPART_H */
