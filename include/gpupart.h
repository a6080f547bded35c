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
 *     thread still uses it.
 *  7. Structs can grow (docs/api.md, "Extending structs"): fields are only ever appended,
 *     and every function that takes or fills a struct has a `_sized` twin taking the
 *     caller's sizeof; the plain name is a variadic macro over a static inline function
 *     that passes this header's sizeof, so any valid argument works, compound literals
 *     included (`gpupart_device_open(ctx, &(gpupart_device_desc){.backend =
 *     GPUPART_BACKEND_SIM, .memory_fraction = 0.5}, &dev)`; since 0.3). A larger
 *     input struct than the library knows must have its unknown tail zero (else EINVAL:
 *     built against a newer gpupart), a smaller one gets its missing fields as defaults;
 *     an output struct gets what the library knows and a zeroed tail. A size below the
 *     struct's 0.2 layout is EINVAL. Programs in other languages call the `_sized`
 *     symbols with their own struct sizes. The plain names are also exported as real
 *     functions (declared as `gpupart_result (name)(...)`, so the macro does not touch
 *     the declaration), for code that takes their address or looks them up with dlsym:
 *     those take and fill the 0.2 layouts, whatever header the caller was built with.
 *     Since 0.3 the library's symbols are versioned, and a program built against 0.1
 *     keeps 0.1's layouts from the plain names it calls (docs/api.md, "ABI policy"). */
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
#define GPUPART_VERSION_MINOR 3
#define GPUPART_VERSION_PATCH 0

/* ---- results ---------------------------------------------------------------------- */

/* X(name, value, message): the one table that the enum, gpupart_result_name and
 * gpupart_result_str are generated from. */
#define GPUPART_RESULT_TABLE(X)                                                  \
  X(GPUPART_OK, 0, "success")                                                    \
  X(GPUPART_EINVAL, -1, "invalid argument")                                      \
  X(GPUPART_ENOMEM, -2, "out of host memory")                                    \
  X(GPUPART_EDEVMEM, -3, "the driver refused device memory")                     \
  X(GPUPART_ELIMIT, -4, "partition limit or device budget reached")              \
  X(GPUPART_ENOBACKEND, -5, "backend not built or its driver library not found") \
  X(GPUPART_ENODEV, -6, "no such device")                                        \
  X(GPUPART_EBACKEND, -7, "a driver call failed")                                \
  X(GPUPART_ENOTSUP, -8, "not supported by this backend")                        \
  X(GPUPART_ECONFIG, -9, "invalid configuration")                                \
  X(GPUPART_EBUSY, -10, "object still in use")                                   \
  X(GPUPART_EEXIST, -11, "a partition with that name exists")                    \
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
/* The driver's own error code behind the calling thread's last failure (a VkResult, a
 * cl_int, a CUresult, as a signed number), or 0 when that failure did not come from a
 * driver call (every failure sets it, so it never describes an older one). The message
 * of gpupart_last_error names the same code. Added in 0.2. */
GPUPART_API int64_t gpupart_last_native_error(void);
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
/* gpupart_context_desc.flags: record no trace even where GPUPART_TRACE or the file's
 * `trace` asks for one (the option is still read and checked): for a context that only
 * looks, as the gpupart command's do, so that it never writes a trace of its own. */
#define GPUPART_CONTEXT_NO_TRACE 0x2u

typedef enum gpupart_log_level {
  GPUPART_LOG_ERROR = 1,
  GPUPART_LOG_WARN,
  GPUPART_LOG_INFO,
  GPUPART_LOG_DEBUG
} gpupart_log_level;
/* Receives the library's log lines (no trailing newline). May be called from any thread
 * that calls into gpupart; must not call back into gpupart. Each refused allocation
 * (ELIMIT, EDEVMEM) is a GPUPART_LOG_INFO line "allocation refused (CODE): MESSAGE",
 * MESSAGE being what gpupart_last_error returns; at most 5 a second per device handle,
 * the next line logged counting those left out. The OOM sequence's steps and reclaim
 * calls (INFO), dead members a shared ledger reaped and budget mismatches (WARN) are
 * logged too, as rate-limited (docs/design.md, Events). */
typedef void (*gpupart_log_fn)(gpupart_log_level level, const char *message, void *user);

typedef struct gpupart_context_desc {
  uint32_t flags;                               /* GPUPART_CONTEXT_*; 0 = read the environment and config file */
  const char *config_path;                      /* NULL = $GPUPART_CONFIG, else none */
  const char *config_text;                      /* same syntax as the file, applied after it; NULL = none */
  const char *ledger_dir;                       /* shared ledgers' folder; NULL = $GPUPART_LEDGER_DIR, else /dev/shm */
  gpupart_log_fn log;                           /* NULL = silent, or stderr when GPUPART_VERBOSE=1 */
  void *log_user;                               /* passed to log */
  void *(*host_alloc)(size_t size, void *user); /* both NULL = malloc/free; set both or none */
  void (*host_free)(void *ptr, void *user);
  void *host_user; /* passed to host_alloc and host_free */
} gpupart_context_desc;

/* Creates a context. desc NULL = all defaults. The strings in desc are copied. This is
 * the read point of the configuration: the GPUPART_* variables and the file are read and
 * checked here, once; a later change of the environment does not affect the context (each
 * device open warns through log when known variables changed since). Errors: EINVAL (out NULL, only one of
 * host_alloc/host_free set), ENOMEM, ECONFIG (bad configuration, message names the source). */
GPUPART_API gpupart_result gpupart_context_create_sized(const gpupart_context_desc *desc, size_t desc_size,
                                                        gpupart_context **out);
#define gpupart_context_create(...) gpupart__inline_context_create(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_context_create)(const gpupart_context_desc *desc, gpupart_context **out);
static inline gpupart_result gpupart__inline_context_create(const gpupart_context_desc *desc, gpupart_context **out) {
  return gpupart_context_create_sized(desc, sizeof(gpupart_context_desc), out);
}
/* Destroys a context and unloads its backends. EBUSY (nothing freed) while devices are
 * open. NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_context_destroy(gpupart_context *ctx);
/* Since 0.3: the value configuration option `name` (its INI key: "expandable",
 * "max_block", ...) takes for device `index` (physical: GPUPART_DEVICE's visible list is
 * not applied) of `backend` (not AUTO), as ctx's configuration resolves it when that
 * device opens: its variable over the file over the default, per-device entries
 * (`cuda:0=1`) and [device] sections for that device included; what only an open device
 * decides is not applied (an orchestrator's share, the operator's ceilings on
 * memory_fraction and memory_limit, the granularity raised to the driver's). Written
 * into out (n bytes, NUL-terminated) in the option's own syntax as `gpupart config` shows
 * it: booleans "true" or "false", bytes as a plain number ("none" where unset and
 * without default), "device" the index itself. For programs and layers that
 * open devices in a context of their own (GPUPART_CONTEXT_IGNORE_ENV) and still follow
 * the program's configuration. EINVAL for a NULL argument, an n of 0, AUTO or an unknown
 * backend, a name that is no option with one value (the message says so), or an out too
 * small (the message says how many bytes it needs). */
GPUPART_API gpupart_result gpupart_context_option(gpupart_context *ctx, gpupart_backend backend, uint32_t index,
                                                  const char *name, char *out, size_t n);

/* What a backend reports about one device. */
typedef struct gpupart_device_info {
  gpupart_backend backend;
  uint32_t index; /* index within the backend */
  char name[256];
  char vendor[64];
  uint8_t uuid[16]; /* zero where the backend has none; names the physical device */
  uint64_t total_bytes;
  uint64_t free_bytes;      /* UINT64_MAX where the backend cannot tell */
  uint64_t max_block_bytes; /* largest single driver allocation */
  uint64_t min_alignment;   /* alignment of every driver block's base */
  /* Appended in 0.2: */
  uint64_t block_granularity; /* every driver block is a multiple of it (a power of two, at least
                                 min_alignment; CUDA's VMM granularity is 2 MiB); the device's
                                 granularity is raised to it */
  char pci_bus_id[32];        /* "dddd:bb:dd.f" where the backend can tell, else "" */
  /* Fields appended after 0.2 go here; a caller built against an older header gets the
   * fields it knows. */
} gpupart_device_info;

/* Lists devices. *count is in: the capacity of infos (ignored when infos is NULL); out:
 * the number of devices found, which may exceed the capacity (then only the capacity is
 * written). backend == AUTO lists every backend present except sim; a named backend that
 * is not built or whose driver is missing is ENOBACKEND. info_size is the caller's
 * sizeof(gpupart_device_info), the stride of infos. Errors: EINVAL (also info_size below
 * the 0.2 layout), ENOBACKEND, EBACKEND, ENOMEM. */
GPUPART_API gpupart_result gpupart_enumerate_sized(gpupart_context *ctx, gpupart_backend backend,
                                                   gpupart_device_info *infos, size_t info_size, uint32_t *count);
#define gpupart_enumerate(...) gpupart__inline_enumerate(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_enumerate)(gpupart_context *ctx, gpupart_backend backend, gpupart_device_info *infos,
                                              uint32_t *count);
static inline gpupart_result gpupart__inline_enumerate(gpupart_context *ctx, gpupart_backend backend,
                                                       gpupart_device_info *infos, uint32_t *count) {
  return gpupart_enumerate_sized(ctx, backend, infos, sizeof(gpupart_device_info), count);
}

#define GPUPART_GROWTH_DEFAULT 0 /* configuration, else on */
#define GPUPART_GROWTH_ON 1      /* grow on demand */
#define GPUPART_GROWTH_OFF 2     /* preallocate each partition's limit at creation */

typedef struct gpupart_device_desc {
  gpupart_backend backend;  /* AUTO = config/env choice, else first present of cuda, vulkan, opencl, sim */
  uint32_t index;           /* program index: the index-th device GPUPART_DEVICE lists, else this index */
  double memory_fraction;   /* 0 = config, else 1.0: share of total memory this process may use, (0, 1];
                               lowered to the operator's memory_fraction_max where one is set */
  uint64_t memory_limit;    /* 0 = config, else an orchestrator's share, else none: absolute cap; the
                               budget is the smaller of the two; lowered to memory_limit_max where set */
  uint64_t headroom;        /* 0 = config, else 0: bytes left to the driver and other libraries */
  int growth;               /* GPUPART_GROWTH_*: the default policy of this device's partitions */
  uint64_t granularity;     /* 0 = config, else 2 MiB: a power of two; limits round down, blocks round up to it */
  const void *backend_desc; /* e.g. const gpupart_sim_desc *, or adopted native handles; NULL = backend defaults */
  uint32_t flags;           /* GPUPART_DEVICE_SHARED */
  /* --- 0.2 --- */
  /* The backend that backend_desc is for; AUTO = backend. A backend_desc whose backend
   * cannot be proven (both AUTO), or that is not the backend the device opens through
   * (e.g. GPUPART_BACKEND chose another), is EINVAL: a descriptor is never read as
   * another backend's. */
  gpupart_backend backend_desc_type;
  uint32_t backend_desc_size; /* sizeof(*backend_desc) as compiled; 0 = the 0.2 size of that struct */
} gpupart_device_desc;

/* Account this device in a ledger shared by every process of the same user that opens the
   same physical device with this flag (or with GPUPART_SHARED=1): a file in the ledger
   folder (gpupart_context_desc.ledger_dir, GPUPART_LEDGER_DIR, else /dev/shm), mode 0600.
   The first process fixes the budget and later ones adopt it; reservations and guarantees
   then hold across processes; partition names are unique across them (EEXIST); a process
   that dies, even killed, has its bytes returned. A ledger file of another user, with
   group or other permissions, or not written by this library is refused (ECONFIG,
   ECORRUPT). Creating a partition whose name another process already created joins it
   (its descriptor must give the same limit and guarantee, or leave limit, fraction,
   guarantee and guarantee_fraction 0; else EEXIST), and its limit is shared by all
   members; gpupart_partition_find also finds partitions other processes created and
   joins them, and gpupart_partition_count/_at list every partition of the ledger (at
   joins one this process has none of, in the ledger's order); destroying a partition leaves it, and it disappears when
   its last member leaves or dies. limit, guarantee, reserved and peak_reserved in stats are then partition-wide
   (device-wide) across processes; the other figures this process's. An OOM sequence that the budget refuses asks the
   other processes to trim at their next allocation that misses its free blocks. */
#define GPUPART_DEVICE_SHARED 0x1u

/* Opens device desc->index of desc->backend and computes this process's budget. The index
 * is the program's: with GPUPART_DEVICE="2,0" (a visible-device list, as
 * CUDA_VISIBLE_DEVICES) index 0 opens device 2, index 1 device 0, index 2 is ENODEV; no
 * two program indexes open the same device. The budget is
 * min(total * memory_fraction, memory_limit) - headroom, rounded down to the granularity,
 * after the operator's ceilings (GPUPART_MEMORY_FRACTION_MAX, GPUPART_MEMORY_LIMIT_MAX) have
 * lowered the two where they ask for more (docs/configuration.md, "Precedence").
 * A device already open in ctx (the same physical device by UUID, else PCI bus id, else
 * backend and index) is not given a second budget: this handle shares the first open's
 * budget and ledger (reservations and guarantees add up across handles, partition names
 * are unique across them), and a different figure asked for is reported through the log
 * callback at GPUPART_LOG_WARN. desc NULL = defaults. Partitions declared in
 * configuration are created, in order, by the first open of the device.
 * Errors: EINVAL (bad field: fraction outside (0, 1], granularity not a power of two,
 * budget of zero, unknown backend, a backend_desc of another or unknown backend),
 * ENOBACKEND, ENODEV (also past the visible list), EBACKEND, ECONFIG (also: the shared
 * ledger cannot be opened, is another user's or not 0600, or its folder is full),
 * ECORRUPT (a shared ledger file that is not one). Since 0.3: EBUSY when a shared ledger's
 * lock stays held past the bounded wait (the message names the holder). A zero budget is
 * ECONFIG when the input that makes it came from a variable or the file, and the message
 * names that input. */
GPUPART_API gpupart_result gpupart_device_open_sized(gpupart_context *ctx, const gpupart_device_desc *desc,
                                                     size_t desc_size, gpupart_device **out);
#define gpupart_device_open(...) gpupart__inline_device_open(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_device_open)(gpupart_context *ctx, const gpupart_device_desc *desc,
                                                gpupart_device **out);
static inline gpupart_result gpupart__inline_device_open(gpupart_context *ctx, const gpupart_device_desc *desc,
                                                         gpupart_device **out) {
  return gpupart_device_open_sized(ctx, desc, sizeof(gpupart_device_desc), out);
}
/* Destroys every partition of the device, then closes it. EBUSY (nothing freed) while
 * any partition has live allocations or an allocation is in progress on the device (e.g.
 * from a reclaim callback), or a gpupart_free on it is still releasing a view or block.
 * NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_device_close(gpupart_device *dev);
/* The device's info as its backend reported it at open; free_bytes is queried anew. */
GPUPART_API gpupart_result gpupart_device_get_info_sized(const gpupart_device *dev, gpupart_device_info *out,
                                                         size_t out_size);
#define gpupart_device_get_info(...) gpupart__inline_device_get_info(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_device_get_info)(const gpupart_device *dev, gpupart_device_info *out);
static inline gpupart_result gpupart__inline_device_get_info(const gpupart_device *dev, gpupart_device_info *out) {
  return gpupart_device_get_info_sized(dev, out, sizeof(gpupart_device_info));
}
/* This process's budget on the device in bytes, shared by every handle of the same
 * physical device in the context (the first open's); 0 for NULL. Since 0.3: with a shared
 * ledger, the ledger's budget as it is now (`gpupart resize --budget` changes it). */
GPUPART_API uint64_t gpupart_device_budget(const gpupart_device *dev);

/* The simulated backend: a device with no memory behind it (or host memory, for tests
 * that write data), with knobs to emulate real drivers' limits and failures. Pass it as
 * gpupart_device_desc.backend_desc with backend (or backend_desc_type) SIM, and
 * backend_desc_size = sizeof(gpupart_sim_desc) (0 = its 0.2 layout). */
typedef struct gpupart_sim_desc {
  uint64_t total_bytes;         /* 0 = the sim_total option ($GPUPART_SIM_TOTAL), else 16 GiB */
  uint64_t max_block_bytes;     /* 0 = total_bytes */
  uint64_t min_alignment;       /* 0 = 256; a power of two */
  uint32_t max_blocks;          /* 0 = unlimited (real Vulkan drivers: 4096) */
  uint32_t fail_block_alloc_at; /* 1-based driver call that fails with EDEVMEM; 0 = never */
  int host_backed;              /* 1 = blocks are host memory and device_address is a host
                                   pointer, so tests can write and read them */
  /* Appended in 0.2: */
  uint64_t block_granularity; /* 0 = min_alignment; a power of two: reported in
                                 gpupart_device_info.block_granularity, as CUDA's VMM granularity */
  uint64_t block_round_up;    /* 0 = none; a power of two: the driver silently rounds every block
                                 up to a multiple of it and allocates more than asked (as some
                                 real drivers do); the core accounts what was allocated */
  /* Appended after 0.2 (a 0.2 client's smaller struct gets both as none): a sim device that
   * stands for a real one (the OpenCL and Vulkan layers' mirrors, docs/unmodified.md). */
  uint8_t uuid[16];    /* all zero = none: the device reports its own UUID (its index's low
                          byte, then 0x5a in the last byte) and is named by index and
                          total_bytes. Else it reports this UUID and is the device of that
                          UUID, so its ledger (the shared ledger file too) is the one a
                          real backend's open of that GPU uses */
  char pci_bus_id[32]; /* "" = none (NUL-terminated: EINVAL otherwise); else reported in
                          gpupart_device_info.pci_bus_id (and
                          uuid as given, zero included): with a zero uuid the device is
                          named by this bus id, as a real device without a UUID is */
  /* Since 0.3 (an older client's smaller struct gets it as none): */
  char name[256]; /* "" = "gpupart simulated device"; else (NUL-terminated: EINVAL
                     otherwise) the name the device reports in gpupart_device_info.name
                     and that traces record: a mirror's is the real device's (the
                     interposers pass the driver's name of the GPU) */
  /* Since 0.3: the emulated virtual memory of expandable partitions. */
  uint64_t vm_granule; /* 0 = 2 MiB (CUDA's usual granularity), or min_alignment where that is
                          larger; a power of two, at least min_alignment: the granule that
                          mappings take */
  int no_vm;           /* nonzero: the device has no virtual memory (as OpenCL, or a CUDA
                          vGPU profile without it): expandable partitions keep blocks */
} gpupart_sim_desc;    /* in one context, sim devices with the same index and total_bytes are the same device;
                          a sim device with a uuid or pci_bus_id is named by it, as any device */

/* ---- partitions ------------------------------------------------------------------- */

/* Asked, in the OOM sequence, to free memory of partition p (e.g. caches the application
   keeps there); bytes_wanted is the shortfall as it is when this callback is called: the
   block the request needs less what the limit and budget can still grant (the whole
   block when the driver refused), at least one granule. The allocation is retried after
   each callback and no further callback is asked once it fits. Runs on the allocating thread with no
   gpupart lock held, so it may free allocations of any partition; it is never re-entered
   (an allocation made inside it skips the callbacks), and one partition's callback never
   runs on two threads at once. It may not destroy the partition whose allocation called
   it (or its own), nor close the device: gpupart_partition_destroy and
   gpupart_device_close return GPUPART_EBUSY then ("allocation in progress"), because
   the allocation goes on after the callback returns. Return 0; other values are reserved. */
typedef int (*gpupart_reclaim_fn)(gpupart_partition *p, uint64_t bytes_wanted, void *user);

typedef struct gpupart_partition_desc {
  const char *name;           /* copied; unique per physical device, across its handles; NULL = "p<index>" */
  double fraction;            /* share of the device budget, (0, 1]; 0 = use limit */
  uint64_t limit;             /* bytes, used when fraction == 0; both 0 = whole budget */
  double guarantee_fraction;  /* floor as a share of the budget; 0 = use guarantee */
  uint64_t guarantee;         /* floor in bytes; both 0 = best effort (no floor) */
  int growth;                 /* GPUPART_GROWTH_*; DEFAULT = the device's */
  uint64_t initial_block;     /* 0 = the device's initial_block option (GPUPART_INITIAL_BLOCK, since
                                 0.3), else 2 MiB. Since 0.3 also the smallest mapping an
                                 expandable partition's growth makes */
  uint64_t max_block;         /* 0 = the device's max_block option (GPUPART_MAX_BLOCK, since 0.3),
                                 else 1 GiB; capped by the backend's max_block_bytes; for a
                                 preallocated partition a nonzero max_block is also the block size
                                 of the reservation (0 = GPUPART_PREALLOC_BLOCK, else one block as
                                 large as the driver allows) */
  double growth_factor;       /* 0 = the device's growth_factor option (GPUPART_GROWTH_FACTOR,
                                 since 0.3), else 2.0; at least 1.0 */
  uint64_t release_threshold; /* empty cached blocks kept beyond it go back to the driver when
                                 an allocation is freed; 0 = keep them all until trim, the OOM
                                 sequence, or a growth that would otherwise raise the partition's
                                 reserved peak while they sit unused; 1 = release every emptied
                                 block at once */
  gpupart_reclaim_fn reclaim; /* optional: asked to free memory in the OOM sequence */
  void *reclaim_user;         /* passed to reclaim */
  /* Since 0.3 (an older client's smaller struct gets 0): */
  uint32_t flags; /* GPUPART_PARTITION_*; 0 = thread-safe, expandable as the device's option says */
} gpupart_partition_desc;

/* Since 0.3: gpupart_partition_desc.flags: the caller synchronizes, as with VMA's
   VMA_ALLOCATOR_CREATE_EXTERNALLY_SYNCHRONIZED_BIT, and the partition takes no lock at
   all. The caller must never let two threads at once into
   calls that reach the partition: allocations from it, frees and get_info of its
   allocations, its charges and their releases, its stats, reset_peak, resize, trim and destroy, and the device's calls
   that visit every partition (device stats, check, dump, trim, reset_peak, close, and
   allocations from the device's other partitions, whose out-of-memory sequence may give
   this partition's empty blocks back). A default partition pays no locked instruction
   either while one thread uses it; this flag saves the rest of the lock's few
   instructions. Misuse is undefined behaviour in a release build of the library
   (corrupted accounting); a debug build (without NDEBUG) catches two threads inside at
   once and aborts with a message. A
   partition that configuration declared is always synchronized. */
#define GPUPART_PARTITION_UNSYNCHRONIZED 0x1u

/* Since 0.3: gpupart_partition_desc.flags. EXPANDABLE: the partition is expandable even
 * when the device's option (GPUPART_EXPANDABLE, INI expandable; off by default) is not; the partition is one reserved
 * address range, sized from its limit, that grows in place by mapping physical granules
 * and gives wholly free granules at its top back at trim (CUDA virtual memory, emulated
 * on sim; Vulkan partitions keep growth blocks in this release); a preallocated one maps its whole limit at creation.
 * Where the backend or device has no virtual memory the partition keeps growth blocks
 * (gpupart config says so for the configured device). */
#define GPUPART_PARTITION_EXPANDABLE 0x2u
/* Since 0.3: with EXPANDABLE, creation fails with GPUPART_ENOTSUP (the message says why)
 * instead of falling back to growth blocks where there is no virtual memory. It implies
 * EXPANDABLE: set alone, it asks for an expandable partition as the pair does. */
#define GPUPART_PARTITION_EXPANDABLE_REQUIRED 0x4u

/* Creates a partition on dev. Limits and guarantees are rounded down to the device's
 * granularity. desc NULL = defaults (the whole budget, no guarantee). A name that
 * configuration declared for this device (GPUPART_PARTITIONS, [partition NAME]) returns
 * OK and the partition configuration made, with the configuration's limit, guarantee and
 * growth (it is the operator's word; the log says so, at WARN when desc asked for other
 * values), once: a second create of that name is EEXIST. desc's reclaim callback is
 * installed on it when it has none.
 * Errors: EINVAL (fraction outside (0, 1], guarantee above the limit, limit rounding to 0,
 * growth_factor below 1, a flags bit that is no GPUPART_PARTITION_*), EEXIST (name taken
 * on the device, through any handle of it), ELIMIT (guarantees of all the device's
 * handles would sum past the budget, a guarantee only preallocated partitions' bytes
 * could cover, or a preallocated limit exceeds what the budget can grant), EBUSY (since
 * 0.3: a guarantee whose bytes other partitions hold and did not give back at creation:
 * their empty blocks and reclaim callbacks, and in a shared ledger the other processes'
 * responders, asked and waited for at most 2 s; the message names the holders; nothing
 * is left behind), EDEVMEM (a preallocated partition the driver cannot back; nothing is
 * left behind), ENOMEM. */
GPUPART_API gpupart_result gpupart_partition_create_sized(gpupart_device *dev, const gpupart_partition_desc *desc,
                                                          size_t desc_size, gpupart_partition **out);
#define gpupart_partition_create(...) gpupart__inline_partition_create(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_partition_create)(gpupart_device *dev, const gpupart_partition_desc *desc,
                                                     gpupart_partition **out);
static inline gpupart_result gpupart__inline_partition_create(gpupart_device *dev, const gpupart_partition_desc *desc,
                                                              gpupart_partition **out) {
  return gpupart_partition_create_sized(dev, desc, sizeof(gpupart_partition_desc), out);
}
/* Returns every block to the driver and frees the partition (with a shared ledger, this
 * process leaves it; it goes with its last member). EBUSY (nothing freed) while
 * allocations are live, while one is in progress on it (in the out-of-memory sequence,
 * e.g. from a reclaim callback, or a gpupart_free still releasing its view or block), or
 * from its own reclaim callback. NULL is a no-op returning OK. */
GPUPART_API gpupart_result gpupart_partition_destroy(gpupart_partition *p);
/* The partition of dev (this handle) named name, or NULL (also for NULL arguments). With
 * a shared ledger, a partition of that name that only other processes have is joined and
 * returned (GPUPART_DEVICE_SHARED); NULL when joining fails (gpupart_last_error says). */
GPUPART_API gpupart_partition *gpupart_partition_find(gpupart_device *dev, const char *name);
/* Number of partitions of dev; 0 for NULL. With a shared ledger: every partition of the
 * ledger, this handle's and other processes' (GPUPART_DEVICE_SHARED). */
GPUPART_API uint32_t gpupart_partition_count(const gpupart_device *dev);
/* The i-th partition in creation (and configuration) order, or NULL when out of range.
 * With a shared ledger, past this handle's own come the other processes' partitions,
 * joined as gpupart_partition_find joins them (each then is one of this handle's). */
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
  uint64_t tag;       /* the caller's label, shown in failure messages */
} gpupart_alloc_desc;

/* gpupart_alloc with flags and a tag. Errors as gpupart_alloc, plus EINVAL for unknown flags. */
GPUPART_API gpupart_result gpupart_alloc_ex_sized(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                                  size_t desc_size, gpupart_allocation **out);
#define gpupart_alloc_ex(...) gpupart__inline_alloc_ex(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_alloc_ex)(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                             gpupart_allocation **out);
static inline gpupart_result gpupart__inline_alloc_ex(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                                      gpupart_allocation **out) {
  return gpupart_alloc_ex_sized(p, desc, sizeof(gpupart_alloc_desc), out);
}
/* Frees an allocation: OK, and OK for NULL. A handle freed a second time, or freed after
 * its allocation's record was reused (up to 255 reuses of that record, so at least 255
 * later frees of its partition), is GPUPART_EINVAL (the message names the partition),
 * counted in gpupart_stats.double_frees and otherwise ignored (accounting unchanged); the
 * partition must still exist. Ignoring the result is fine: a double free changes nothing. */
GPUPART_API gpupart_result gpupart_free(gpupart_allocation *a);

typedef struct gpupart_allocation_info {
  gpupart_partition *partition;
  uint64_t size;   /* as requested */
  uint64_t offset; /* within the block */
  uint64_t block_size;
  uint64_t device_address; /* CUdeviceptr, Vulkan buffer device address, SVM or sim address; 0 where none */
  void *native_block;      /* CUdeviceptr base, VkDeviceMemory, cl_mem, or sim base */
} gpupart_allocation_info;
/* Describes a live allocation. EINVAL for NULL or a freed handle. */
GPUPART_API gpupart_result gpupart_allocation_get_info_sized(const gpupart_allocation *a, gpupart_allocation_info *out,
                                                             size_t out_size);
#define gpupart_allocation_get_info(...) gpupart__inline_allocation_get_info(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_allocation_get_info)(const gpupart_allocation *a, gpupart_allocation_info *out);
static inline gpupart_result gpupart__inline_allocation_get_info(const gpupart_allocation *a,
                                                                 gpupart_allocation_info *out) {
  return gpupart_allocation_get_info_sized(a, out, sizeof(gpupart_allocation_info));
}

/* gpupart_alloc_ex that also describes the new allocation (what gpupart_allocation_get_info
 * would say: offset, device address, block) from the same call, under the same lock,
 * so the caller needs no second call. desc_size and info_size are the caller's sizeof of
 * the two structs (the gpupart_alloc_info macro passes them): a smaller struct than this
 * library's 0.2 layout is EINVAL; a larger desc must be zero past this library's size;
 * a larger info gets its tail zeroed (the ABI rule of every _sized call). Errors as gpupart_alloc_ex, plus EINVAL for a
 * NULL desc or info; on failure *out is NULL and info is untouched. */
GPUPART_API gpupart_result gpupart_alloc_info_sized(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                                    size_t desc_size, gpupart_allocation **out,
                                                    gpupart_allocation_info *info, size_t info_size);
#define gpupart_alloc_info(...) gpupart__inline_alloc_info(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_alloc_info)(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                               gpupart_allocation **out, gpupart_allocation_info *info);
static inline gpupart_result gpupart__inline_alloc_info(gpupart_partition *p, const gpupart_alloc_desc *desc,
                                                        gpupart_allocation **out, gpupart_allocation_info *info) {
  return gpupart_alloc_info_sized(p, desc, sizeof(gpupart_alloc_desc), out, info, sizeof(gpupart_allocation_info));
}

/* ---- account-only charges (since 0.3) -------------------------------------------- */

/* Since 0.3: bytes charged against a partition with no memory behind them: a charge.
 * Created by gpupart_partition_charge, ended by gpupart_charge_release. */
typedef struct gpupart_charge gpupart_charge;

/* Since 0.3: charges bytes against partition p, with no arena behind them, for code that
 * gets its memory elsewhere and wants gpupart's accounting of it: an interposer that lets
 * the driver allocate (libgpupart_preload.so, the OpenCL and Vulkan layers), a framework
 * with its own allocator, memory imported from another process. Exactly bytes (no
 * rounding, no block, no driver call) are reserved in the device's ledger for p, as a
 * block would be: they count against p's limit, the device budget less the other
 * partitions' unused guarantees (their floors), this process's ceiling, and with a
 * shared ledger (GPUPART_DEVICE_SHARED) against every process's bytes; they count in p's
 * in_use, peak_in_use, reserved, peak_reserved and live_allocations, the device's peak,
 * `gpupart top` and gpupart_partition_available. A partition used only for charges (an
 * account-only partition) holds no block at all. A charge refused by the budget first
 * runs the allocation's out-of-memory sequence (cached empty blocks, then reclaim
 * callbacks unless the request is made from one); one above p's whole limit or above
 * this process's ceiling, which nothing could make room for, is refused at once. The charge is given back by
 * gpupart_charge_release, once; gpupart_partition_destroy is EBUSY while charges are live.
 * Errors: EINVAL (NULL p or out, bytes 0; in a child forked from the process that opened
 * a shared device, which is no member of its ledger), ELIMIT (the partition limit, the device budget
 * or the process's ceiling refused it; the message names the cause and, shared, the
 * holders, as an allocation's does; counted in failed_allocations), ENOMEM (host memory),
 * or a shared ledger's own code (EBUSY, ECORRUPT). On failure *out is NULL and nothing is
 * charged. Thread-safe; a charge takes the device's slow lock (not the allocation fast
 * path's lock alone): it is meant for driver-sized requests, not for small objects. */
GPUPART_API gpupart_result gpupart_partition_charge(gpupart_partition *p, uint64_t bytes, gpupart_charge **out);
/* Since 0.3: gives back what gpupart_partition_charge took: OK, and OK for NULL. A charge
 * released a second time, or after its record was reused (up to 255 reuses of that
 * record, so at least 255 later releases of its partition), is GPUPART_EINVAL (the message
 * names the partition), counted in gpupart_stats.double_frees and otherwise ignored; the
 * partition must still exist. */
GPUPART_API gpupart_result gpupart_charge_release(gpupart_charge *c);
/* Since 0.3: what p could still charge now, in bytes, into *out: exactly what the ledger
 * would grant it (not rounded to the granularity, unlike gpupart_partition_available,
 * and not counting the free bytes of its blocks, which serve allocations only): its
 * limit less what every member of the partition holds, within the device budget less
 * what every partition (of every process, with a shared ledger) holds and less the
 * others' unused guarantees, and within this process's ceiling. A snapshot. EINVAL for
 * NULL p or out; a shared ledger that cannot be read is its code (EBUSY, ECORRUPT). */
GPUPART_API gpupart_result gpupart_partition_chargeable(const gpupart_partition *p, uint64_t *out);
/* Since 0.3: the bytes of a live charge (what gpupart_partition_charge was asked for), or
 * 0 for NULL or a released charge. */
GPUPART_API uint64_t gpupart_charge_size(const gpupart_charge *c);

/* ---- statistics ------------------------------------------------------------------- */

typedef struct gpupart_stats {
  uint64_t limit, guarantee;
  uint64_t in_use, peak_in_use;     /* bytes of live allocations, as requested */
  uint64_t reserved, peak_reserved; /* bytes held from the driver; since 0.3 also live charges' bytes */
  uint64_t live_allocations, total_allocations, total_frees;
  uint64_t driver_allocs, driver_frees; /* blocks obtained from / returned to the driver */
  uint64_t failed_allocations;          /* calls that returned ELIMIT or EDEVMEM */
  uint64_t largest_free;                /* largest range allocatable without a driver call */
  /* --- 0.2 --- */
  uint64_t double_frees; /* gpupart_free calls refused as a double free */
} gpupart_stats;

/* A consistent snapshot of one partition's figures. */
GPUPART_API gpupart_result gpupart_partition_get_stats_sized(const gpupart_partition *p, gpupart_stats *out,
                                                             size_t out_size);
#define gpupart_partition_get_stats(...) gpupart__inline_partition_get_stats(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_partition_get_stats)(const gpupart_partition *p, gpupart_stats *out);
static inline gpupart_result gpupart__inline_partition_get_stats(const gpupart_partition *p, gpupart_stats *out) {
  return gpupart_partition_get_stats_sized(p, out, sizeof(gpupart_stats));
}

/* --- 0.2 --- */
/* What p could still allocate now, in bytes, into *out: the free bytes of its own blocks
 * (reserved less in use, fragmentation not counted) plus what the ledger would grant it in
 * new blocks, rounded down to the granularity: its limit less what every member of the
 * partition holds, within the device budget less what every partition (of every process,
 * with a shared ledger) holds and less the unused guarantees of the others. The figure a
 * cudaMemGetInfo-like "free" of the partition is; a snapshot, which other threads and
 * processes may take first, and the driver may still refuse (it is not asked).
 * EINVAL for NULL p or out. Since 0.3: a shared ledger that cannot be read is its code
 * (EBUSY: its lock held past the wait, by a stopped process; ECORRUPT: its file lost). */
GPUPART_API gpupart_result gpupart_partition_available(const gpupart_partition *p, uint64_t *out);
/* Device figures: limit = budget, guarantee = sum of guarantees, current figures and
 * counts summed over partitions (including destroyed ones' counts), peaks the device's
 * own peaks, largest_free the largest of any partition's. limit, guarantee and
 * peak_reserved are the ledger's, so they cover every handle of the physical device in
 * the context; the other figures cover this handle's partitions. The device's
 * peak_in_use is an upper bound of the highest sum of the partitions' in-use bytes, kept
 * without a device-wide write per allocation: never below it, and above it by less than
 * two granules (gpupart_device_desc.granularity) for each partition holding bytes at that
 * moment (less than one each right after gpupart_device_reset_peak; exact where every
 * partition holds a multiple of the granularity). A partition's own peaks are exact. */
GPUPART_API gpupart_result gpupart_device_get_stats_sized(const gpupart_device *dev, gpupart_stats *out,
                                                          size_t out_size);
#define gpupart_device_get_stats(...) gpupart__inline_device_get_stats(__VA_ARGS__)
GPUPART_API gpupart_result(gpupart_device_get_stats)(const gpupart_device *dev, gpupart_stats *out);
static inline gpupart_result gpupart__inline_device_get_stats(const gpupart_device *dev, gpupart_stats *out) {
  return gpupart_device_get_stats_sized(dev, out, sizeof(gpupart_stats));
}
/* Sets peak_in_use and peak_reserved of p to their current values. NULL is a no-op. */
GPUPART_API void gpupart_partition_reset_peak(gpupart_partition *p);
/* Starts the device's peak_in_use again from the bytes in use now (TensorFlow's
 * reset_memory_stats): within one granule per partition of their sum (see
 * gpupart_device_get_stats). The partitions' own peaks and the device's peak_reserved
 * are left as they are. EINVAL for NULL. */
GPUPART_API gpupart_result gpupart_device_reset_peak(gpupart_device *dev);
/* Full invariant walk (every arena's sub-allocator, counters against what the arenas
 * hold, reserved within limits and budget, guarantees intact): OK or ECORRUPT with the
 * first broken invariant in gpupart_last_error. */
GPUPART_API gpupart_result gpupart_device_check(const gpupart_device *dev);

/* gpupart_device_dump flags: also list every live allocation of every partition. */
#define GPUPART_DUMP_ALLOCATIONS 0x1u

/* A JSON document (one object, UTF-8, schema in docs/dump.md) describing device: its
 * backend, index, UUID, total, budget, guarantees, reserved, in use and peaks; each of this
 * handle's partitions with its limit, guarantee, reserved, in use, peaks, whether it lives
 * in a shared ledger, and its blocks (size, bytes in use, largest free range); with
 * GPUPART_DUMP_ALLOCATIONS, each partition's live allocations (size, alignment, offset,
 * block, device address, tag). Each partition's figures are one consistent moment (as
 * gpupart_partition_get_stats); the snapshot is copied under the library's locks and
 * formatted after they are released, so the host allocator never runs under them. Safe
 * while other threads allocate and free. *json_out gets the NUL-terminated text, made by
 * the context's host allocator and released with gpupart_dump_free; *length_out (may be
 * NULL) its length without the NUL. Errors: EINVAL (device or json_out NULL, unknown
 * flags), ENOMEM, EBUSY (the device changed too fast for 8 snapshots in a row). Added
 * after 0.2. */
GPUPART_API gpupart_result gpupart_device_dump(gpupart_device *device, uint32_t flags, char **json_out,
                                               size_t *length_out);
/* Releases a text gpupart_device_dump returned, through the host allocator that made it
 * (also after its context was destroyed). NULL is a no-op. Any other pointer (one from
 * malloc, a copy of the text, a pointer into it, a text already released) is undefined
 * behaviour: the allocator is found in a header before the text, which nothing checks. */
GPUPART_API void gpupart_dump_free(char *json);

#ifdef __cplusplus
}
#endif

#endif /* GPUPART_H */
