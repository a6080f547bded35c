/* The virtual memory management calls of the CUDA driver test double (the rest of the
 * double is cuda_double.c; its knobs and counters are in cuda_double_vmm.h). Written
 * from the driver API reference, with the rules a caller must get right:
 *  - cuMemAddressReserve gives a PROT_NONE host range (size and hint a multiple of the
 *    host page size, alignment a power of two or 0 for the minimum granularity);
 *    cuMemAddressFree takes exactly that range back, and only once nothing is mapped
 *    in it (the reference does not say what the driver does then; the double refuses);
 *  - cuMemCreate makes pinned device memory, its size a multiple of the minimum
 *    granularity, counted against the device like cuMemAlloc (cuMemGetInfo sees it);
 *    other allocation types, host locations, Windows and fabric handle types, tile-pool
 *    usage and GPUDirect RDMA are refused as on a device without them;
 *  - cuMemMap maps a handle at offset 0 (the only offset the reference allows) into a
 *    range that lies in one reservation, is granularity-aligned and not mapped yet; the
 *    mapping has no access until cuMemSetAccess, which, like cuMemUnmap, takes a range
 *    made of whole mappings and nothing else;
 *  - a physical allocation lives while a handle to it is unreleased or a mapping of it
 *    remains: cuMemRelease of a mapped handle defers the free to the last cuMemUnmap, and
 *    cuMemRetainAllocationHandle takes a new reference (to the handle that mapped it);
 *  - a POSIX file descriptor exported from a handle imports, in this process, as a new
 *    handle of the same allocation (counted once); from another process, as a handle of
 *    that process's allocation, counted there and not here.
 * Calls made with no current context are allowed (the reference does not ask for one)
 * but counted, so tests can check that a caller pushes its context as it should. */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_double.h"
#include "cuda_double_internal.h"
#include "cuda_double_vmm.h"

#define MAX_RESERVATIONS 1024
#define MAX_ALLOCATIONS 8192
#define MAX_HANDLES 16384
#define MAX_MAPPINGS 16384
#define DEFAULT_GRANULARITY ((uint64_t)2 << 20)
#define MEMFD_PREFIX "cuda_double_dev"

typedef struct reservation {
  uintptr_t base;
  size_t size; /* 0: a free slot */
} reservation;

typedef struct allocation {
  int fd;      /* the memfd that holds the bytes */
  size_t size; /* 0: a free slot */
  int device, charged, handle_types, handles;
  dev_t st_dev;
  ino_t st_ino;
} allocation;

typedef struct handle_rec {
  CUmemGenericAllocationHandle value; /* 0: a free slot; values are never reused */
  int alloc, refs, maps;              /* alive while refs or maps */
} handle_rec;

typedef struct mapping {
  uintptr_t base;
  size_t size; /* 0: a free slot */
  int handle;
  unsigned char access[CUDA_DOUBLE_MAX_DEVICES]; /* CUmemAccess_flags of each device */
} mapping;

static reservation reservations[MAX_RESERVATIONS];
static allocation allocations[MAX_ALLOCATIONS];
static handle_rec handles[MAX_HANDLES];
static mapping mappings[MAX_MAPPINGS];
static CUmemGenericAllocationHandle next_handle = 0x1000;
static cuda_double_vmm_counters vstats;

cuda_double_vmm_counters *cuda_double_vmm_stats(void);
cuda_double_vmm_counters *cuda_double_vmm_stats(void) { return &vstats; }

/* ---- knobs and checks ---------------------------------------------------------------- */

static int no_vmm(void) { return cuda_double__env("GPUPART_TEST_CUDA_NO_VMM", 0) != 0; }
static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

static size_t granularity(int recommended) {
  uint64_t min = round_up(cuda_double__env("GPUPART_TEST_CUDA_GRANULARITY", DEFAULT_GRANULARITY), page_size());
  if (min == 0) min = page_size();
  if (!recommended) return (size_t)min;
  uint64_t rec = round_up(cuda_double__env("GPUPART_TEST_CUDA_GRANULARITY_RECOMMENDED", min), min);
  return (size_t)(rec ? rec : min);
}

/* The refusal every call starts with, or CUDA_SUCCESS. Lock held. */
static CUresult entry(void) {
  if (!cuda_double__initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (no_vmm()) return CUDA_ERROR_NOT_SUPPORTED;
  if (cuda_double__current_device() < 0) vstats.no_context_calls++;
  return CUDA_SUCCESS;
}

/* Whether the double can make what prop describes: pinned memory on a device that
 * exists, exportable as nothing or a POSIX file descriptor. Compression is a hint the
 * driver may ignore (the allocation's properties say what was made): ignored here. */
static CUresult check_prop(const CUmemAllocationProp *prop) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->win32HandleMetaData)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return CUDA_ERROR_NOT_SUPPORTED; /* HOST_(NUMA_)VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED read 0 */
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuda_double__check_device(prop->location.id);
  if (r != CUDA_SUCCESS) return r;
  if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  if (prop->allocFlags.usage || prop->allocFlags.gpuDirectRDMACapable) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

/* ---- records ------------------------------------------------------------------------- */

static int find_handle(CUmemGenericAllocationHandle value) {
  for (int i = 0; value && i < MAX_HANDLES; i++)
    if (handles[i].value == value && handles[i].refs > 0) return i;
  return -1;
}

static int free_handle_slot(void) {
  for (int i = 0; i < MAX_HANDLES; i++)
    if (handles[i].value == 0) return i;
  return -1;
}

static int free_allocation_slot(void) {
  for (int i = 0; i < MAX_ALLOCATIONS; i++)
    if (allocations[i].size == 0) return i;
  return -1;
}

static int mapping_at(uintptr_t p) {
  for (int i = 0; i < MAX_MAPPINGS; i++)
    if (mappings[i].size && p >= mappings[i].base && p - mappings[i].base < mappings[i].size) return i;
  return -1;
}

static int reservation_holding(uintptr_t p, size_t n) {
  for (int i = 0; i < MAX_RESERVATIONS; i++) {
    const reservation *v = &reservations[i];
    if (v->size && p >= v->base && n <= v->size && p - v->base <= v->size - n) return i;
  }
  return -1;
}

/* Whether any mapping overlaps [p, p + n). */
static int any_mapped(uintptr_t p, size_t n) {
  for (int i = 0; i < MAX_MAPPINGS; i++)
    if (mappings[i].size && mappings[i].base < p + n && p < mappings[i].base + mappings[i].size) return 1;
  return 0;
}

/* Whether [p, p + n) is made of whole mappings, with no gap and nothing cut. */
static int whole_mappings(uintptr_t p, size_t n) {
  if (n == 0 || p + n < p) return 0;
  for (uintptr_t at = p; at < p + n;) {
    int m = mapping_at(at);
    if (m < 0 || mappings[m].base != at || mappings[m].size > p + n - at) return 0;
    at += mappings[m].size;
  }
  return 1;
}

static void free_allocation(int a) {
  allocation *al = &allocations[a];
  close(al->fd);
  if (al->charged) cuda_double__uncharge(al->device, al->size);
  if (al->charged) vstats.allocation_bytes -= al->size;
  vstats.live_allocations--;
  memset(al, 0, sizeof *al);
}

/* A handle with no reference and no mapping goes; its allocation with its last one. */
static void settle_handle(int h) {
  handle_rec *hr = &handles[h];
  if (hr->refs > 0 || hr->maps > 0) return;
  int a = hr->alloc;
  memset(hr, 0, sizeof *hr);
  vstats.live_handles--;
  if (--allocations[a].handles == 0) free_allocation(a);
}

static int new_handle(int a, CUmemGenericAllocationHandle *out) {
  int h = free_handle_slot();
  if (h < 0) return -1;
  handles[h] = (handle_rec){next_handle++, a, 1, 0};
  allocations[a].handles++;
  vstats.live_handles++;
  *out = handles[h].value;
  return 0;
}

/* ---- physical memory ----------------------------------------------------------------- */

/* A memfd for device's memory. Handles are no file descriptors in the driver, so where
 * the double runs out of them it lifts its soft limit to the hard one once. */
static int make_memfd(int device, size_t size) {
  char name[64];
  snprintf(name, sizeof name, MEMFD_PREFIX "%d", device);
  int fd = memfd_create(name, MFD_CLOEXEC);
  struct rlimit rl;
  if (fd < 0 && errno == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) fd = memfd_create(name, MFD_CLOEXEC);
  }
  if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static void note_allocation(int a, int fd, size_t size, int device, int charged, int types) {
  struct stat st = {0};
  fstat(fd, &st);
  allocations[a] = (allocation){fd, size, device, charged, types, 0, st.st_dev, st.st_ino};
  vstats.live_allocations++;
  if (charged) vstats.allocation_bytes += size;
  if (vstats.allocation_bytes > vstats.peak_allocation_bytes) vstats.peak_allocation_bytes = vstats.allocation_bytes;
}

static CUresult create(size_t size, const CUmemAllocationProp *prop, CUmemGenericAllocationHandle *handle) {
  uint64_t fail_at = cuda_double__env("GPUPART_TEST_CUDA_FAIL_CREATE_AT", 0);
  int a = free_allocation_slot();
  if ((fail_at && vstats.create_calls == fail_at) || a < 0 || free_handle_slot() < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  int device = prop->location.id;
  CUresult r = cuda_double__charge(device, size);
  int fd = r == CUDA_SUCCESS ? make_memfd(device, size) : -1;
  if (r == CUDA_SUCCESS && fd < 0) {
    cuda_double__uncharge(device, size);
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r != CUDA_SUCCESS) return r;
  note_allocation(a, fd, size, device, 1, (int)prop->requestedHandleTypes);
  new_handle(a, handle); /* a slot was checked free above */
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS) {
    vstats.create_calls++;
    if (!handle || flags) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) r = check_prop(prop);
    if (r == CUDA_SUCCESS && (size == 0 || size % granularity(0))) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) r = create(size, prop, handle);
    if (r != CUDA_SUCCESS) vstats.create_failures++;
  }
  cuda_double__unlock();
  return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  cuda_double__lock();
  CUresult r = entry();
  int h = r == CUDA_SUCCESS ? find_handle(handle) : -1;
  if (r == CUDA_SUCCESS) vstats.release_calls++;
  if (r == CUDA_SUCCESS && h < 0) r = CUDA_ERROR_INVALID_VALUE; /* undefined in the driver */
  if (r == CUDA_SUCCESS) {
    handles[h].refs--;
    settle_handle(h);
  }
  cuda_double__unlock();
  return r;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity_out, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS && (!granularity_out || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) r = check_prop(prop);
  if (r == CUDA_SUCCESS) *granularity_out = granularity(option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  cuda_double__unlock();
  return r;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  cuda_double__lock();
  CUresult r = entry();
  int h = r == CUDA_SUCCESS ? find_handle(handle) : -1;
  if (r == CUDA_SUCCESS && (!prop || h < 0)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    const allocation *al = &allocations[handles[h].alloc];
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = al->device;
    prop->requestedHandleTypes = (CUmemAllocationHandleType)al->handle_types;
  }
  cuda_double__unlock();
  return r;
}

/* ---- address reservations ------------------------------------------------------------ */

/* size bytes of PROT_NONE address space aligned to align, at hint where it is free. */
static void *reserve_va(size_t size, size_t align, uintptr_t hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (hint && hint % align == 0) {
    void *p = mmap((void *)hint, size, PROT_NONE, flags, -1, 0);
    if (p == (void *)hint) return p;
    if (p != MAP_FAILED) munmap(p, size);
  }
  if (size + align < size) return NULL;
  char *p = mmap(NULL, size + align, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t start = (uintptr_t)round_up((uintptr_t)p, align), end = (uintptr_t)p + size + align;
  if (start > (uintptr_t)p) munmap(p, start - (uintptr_t)p);
  if (end > start + size) munmap((void *)(start + size), end - (start + size));
  return (void *)start;
}

static CUresult reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr) {
  int slot = -1;
  for (int i = 0; i < MAX_RESERVATIONS && slot < 0; i++)
    if (reservations[i].size == 0) slot = i;
  size_t align = alignment ? alignment : granularity(0);
  if (align < page_size()) align = page_size();
  void *p = slot >= 0 ? reserve_va(size, align, (uintptr_t)addr) : NULL;
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  reservations[slot] = (reservation){(uintptr_t)p, size};
  vstats.live_reservations++;
  vstats.reserved_bytes += size;
  *ptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS) {
    vstats.reserve_calls++;
    if (!ptr || flags || size == 0 || size % page_size() || addr % page_size() || (alignment & (alignment - 1)))
      r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) r = reserve(ptr, size, alignment, addr);
  }
  cuda_double__unlock();
  return r;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  cuda_double__lock();
  CUresult r = entry();
  int v = -1;
  for (int i = 0; r == CUDA_SUCCESS && i < MAX_RESERVATIONS && v < 0; i++)
    if (reservations[i].size && reservations[i].base == (uintptr_t)ptr && reservations[i].size == size) v = i;
  if (r == CUDA_SUCCESS) vstats.address_free_calls++;
  if (r == CUDA_SUCCESS && (v < 0 || any_mapped((uintptr_t)ptr, size))) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    munmap((void *)(uintptr_t)ptr, size);
    reservations[v].size = 0;
    vstats.live_reservations--;
    vstats.reserved_bytes -= size;
  }
  cuda_double__unlock();
  return r;
}

/* ---- mappings ------------------------------------------------------------------------ */

static CUresult check_map(uintptr_t p, size_t size, size_t offset, int h, unsigned long long flags) {
  size_t g = granularity(0);
  if (h < 0 || flags || offset != 0 || size == 0 || p % g || size % g) return CUDA_ERROR_INVALID_VALUE;
  if (size > allocations[handles[h].alloc].size) return CUDA_ERROR_INVALID_VALUE;
  if (reservation_holding(p, size) < 0 || any_mapped(p, size)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static CUresult map(uintptr_t p, size_t size, int h) {
  uint64_t fail_at = cuda_double__env("GPUPART_TEST_CUDA_FAIL_MAP_AT", 0);
  int slot = -1;
  for (int i = 0; i < MAX_MAPPINGS && slot < 0; i++)
    if (mappings[i].size == 0) slot = i;
  if ((fail_at && vstats.map_calls == fail_at) || slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = allocations[handles[h].alloc].fd;
  if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  mappings[slot] = (mapping){.base = p, .size = size, .handle = h};
  handles[h].maps++;
  vstats.live_mappings++;
  vstats.mapped_bytes += size;
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS) {
    vstats.map_calls++;
    int h = find_handle(handle);
    r = check_map((uintptr_t)ptr, size, offset, h, flags);
    if (r == CUDA_SUCCESS) r = map((uintptr_t)ptr, size, h);
    if (r != CUDA_SUCCESS) vstats.map_failures++;
  }
  cuda_double__unlock();
  return r;
}

/* Puts the reservation's PROT_NONE placeholder back where mapping m was. */
static void unmap_one(int m) {
  mapping *mp = &mappings[m];
  mmap((void *)mp->base, mp->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  int h = mp->handle;
  vstats.live_mappings--;
  vstats.mapped_bytes -= mp->size;
  memset(mp, 0, sizeof *mp);
  handles[h].maps--;
  settle_handle(h);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  cuda_double__lock();
  CUresult r = entry();
  uintptr_t p = (uintptr_t)ptr;
  if (r == CUDA_SUCCESS) vstats.unmap_calls++;
  if (r == CUDA_SUCCESS && !whole_mappings(p, size)) r = CUDA_ERROR_INVALID_VALUE;
  for (uintptr_t at = p; r == CUDA_SUCCESS && at < p + size;) {
    int m = mapping_at(at);
    at += mappings[m].size;
    unmap_one(m);
  }
  cuda_double__unlock();
  return r;
}

/* ---- access -------------------------------------------------------------------------- */

static int prot_of(const mapping *m) {
  int prot = PROT_NONE;
  for (int d = 0; d < CUDA_DOUBLE_MAX_DEVICES; d++) {
    if (m->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    else if (m->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
  }
  return prot;
}

static CUresult check_location(const CUmemLocation *l) {
  if (l->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  return cuda_double__check_device(l->id) == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult check_access(const CUmemAccessDesc *desc, size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) {
    CUresult r = check_location(&desc[i].location);
    if (r != CUDA_SUCCESS) return r;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  cuda_double__lock();
  CUresult r = entry();
  uintptr_t p = (uintptr_t)ptr;
  if (r == CUDA_SUCCESS) {
    vstats.set_access_calls++;
    r = check_access(desc, count);
  }
  if (r == CUDA_SUCCESS && !whole_mappings(p, size)) r = CUDA_ERROR_INVALID_VALUE;
  for (uintptr_t at = p; r == CUDA_SUCCESS && at < p + size;) {
    mapping *m = &mappings[mapping_at(at)];
    for (size_t i = 0; i < count; i++) m->access[desc[i].location.id] = (unsigned char)desc[i].flags;
    mprotect((void *)m->base, m->size, prot_of(m));
    at += m->size;
  }
  cuda_double__unlock();
  return r;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS && (!flags || !location)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) r = check_location(location);
  int m = r == CUDA_SUCCESS ? mapping_at((uintptr_t)ptr) : -1;
  if (r == CUDA_SUCCESS && m < 0) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *flags = mappings[m].access[location->id];
  cuda_double__unlock();
  return r;
}

int cuda_double__vmm_accessible(uintptr_t p, size_t n, int device, int write) {
  if (n == 0 || p + n < p || device < 0 || device >= CUDA_DOUBLE_MAX_DEVICES) return 0;
  for (uintptr_t at = p; at < p + n;) {
    int m = mapping_at(at);
    if (m < 0) return 0;
    unsigned char a = mappings[m].access[device];
    if (write ? a != CU_MEM_ACCESS_FLAGS_PROT_READWRITE : !(a & CU_MEM_ACCESS_FLAGS_PROT_READ)) return 0;
    at = mappings[m].base + mappings[m].size;
  }
  return 1;
}

/* ---- handles from addresses and file descriptors ------------------------------------- */

#ifndef CUDA_DOUBLE_OLD /* CUDA 11.0 */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  cuda_double__lock();
  CUresult r = entry();
  int m = r == CUDA_SUCCESS ? mapping_at((uintptr_t)addr) : -1;
  if (r == CUDA_SUCCESS) vstats.retain_calls++;
  if (r == CUDA_SUCCESS && (!handle || m < 0)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    handles[mappings[m].handle].refs++;
    *handle = handles[mappings[m].handle].value;
  }
  cuda_double__unlock();
  return r;
}
#endif

CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  cuda_double__lock();
  CUresult r = entry();
  int h = r == CUDA_SUCCESS ? find_handle(handle) : -1;
  if (r == CUDA_SUCCESS) vstats.export_calls++;
  if (r == CUDA_SUCCESS && (!shareable || flags || h < 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    r = CUDA_ERROR_INVALID_VALUE;
  /* Only what cuMemCreate was asked to make exportable can be exported. */
  if (r == CUDA_SUCCESS && !(allocations[handles[h].alloc].handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    r = CUDA_ERROR_INVALID_VALUE;
  int fd = r == CUDA_SUCCESS ? fcntl(allocations[handles[h].alloc].fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (r == CUDA_SUCCESS && fd < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) memcpy(shareable, &fd, sizeof fd);
  cuda_double__unlock();
  return r;
}

/* The device a double's memfd belongs to (its name says), or -1 when fd is not one. */
static int memfd_device(int fd) {
  char path[64], target[256];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return -1;
  target[n] = '\0';
  int device = -1;
  return sscanf(target, "/memfd:" MEMFD_PREFIX "%d", &device) == 1 ? device : -1;
}

/* The allocation fd holds: one of this process's, or one made for another's (not
 * charged here: the exporter's device holds the memory). -1 when none can be. */
static int imported_allocation(int fd) {
  struct stat st;
  int device = memfd_device(fd);
  if (device < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) return -1;
  for (int a = 0; a < MAX_ALLOCATIONS; a++)
    if (allocations[a].size && allocations[a].st_dev == st.st_dev && allocations[a].st_ino == st.st_ino) return a;
  int a = free_allocation_slot(), own = a >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (own < 0) return -1;
  note_allocation(a, own, (size_t)st.st_size, device, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  return a;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type) {
  cuda_double__lock();
  CUresult r = entry();
  if (r == CUDA_SUCCESS) vstats.import_calls++;
  if (r == CUDA_SUCCESS && (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) r = CUDA_ERROR_INVALID_VALUE;
  int a = r == CUDA_SUCCESS ? imported_allocation((int)(intptr_t)os_handle) : -1;
  if (r == CUDA_SUCCESS && a < 0) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && new_handle(a, handle) != 0) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    if (allocations[a].handles == 0) free_allocation(a); /* made for this import */
  }
  cuda_double__unlock();
  return r;
}

/* ---- device attributes --------------------------------------------------------------- */

/* The attributes a virtual-memory caller reads; the double models no other and says so
 * with CUDA_ERROR_INVALID_VALUE, so a caller that needs one is caught. */
CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice dev) {
  CUresult r = cuda_double__check_device(dev);
  if (r == CUDA_SUCCESS && !value) r = CUDA_ERROR_INVALID_VALUE;
  if (r != CUDA_SUCCESS) return r;
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = !no_vmm(); break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
  case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 0; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress_v2's entries --------------------------------------------------- */

/* A list of macro calls, which clang-format cannot lay out: */
/* clang-format off */
#define SYM(name, since, fn) {name, since, (void (*)(void))fn},
static const cuda_double_symbol vmm_symbols[] = {
    SYM("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute)
    SYM("cuMemAddressReserve", 10020, cuMemAddressReserve) SYM("cuMemAddressFree", 10020, cuMemAddressFree)
    SYM("cuMemCreate", 10020, cuMemCreate) SYM("cuMemRelease", 10020, cuMemRelease)
    SYM("cuMemMap", 10020, cuMemMap) SYM("cuMemUnmap", 10020, cuMemUnmap)
    SYM("cuMemSetAccess", 10020, cuMemSetAccess) SYM("cuMemGetAccess", 10020, cuMemGetAccess)
    SYM("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity)
    SYM("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle)
    SYM("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle)
    SYM("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle)
#ifndef CUDA_DOUBLE_OLD
    SYM("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle)
#endif
};
#undef SYM
/* clang-format on */

const cuda_double_symbol *cuda_double__vmm_symbols(size_t *count) {
  *count = sizeof vmm_symbols / sizeof vmm_symbols[0];
  return vmm_symbols;
}
