/* The simulated backend: devices with no memory behind them, so every policy runs and is
 * tested with no driver at all. Blocks are ranges of a private address space (a 1 TiB
 * device costs nothing), or host memory when the descriptor asks for it, so tests can
 * write and read data. The descriptor's knobs emulate real drivers' limits (largest
 * allocation, block count, alignment, block granularity, a driver that allocates more
 * than asked) and inject a driver failure at a chosen call; given a UUID or PCI bus id it
 * reports them, and so stands for that real device in its ledger (the interposers'
 * mirrors). Its bookkeeping is host memory of the context's allocator (env->mem);
 * host-backed blocks, which stand for device memory, come from posix_memalign. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend.h"
#include "error.h"
#include "extstruct.h"
#include "identity.h"

#define SIM_DEFAULT_TOTAL (16ull << 30)
#define SIM_DEFAULT_ALIGN 256ull
#define SIM_ADDRESS_BASE (1ull << 40)
#define SIM_DEFAULT_VM_GRANULE (2ull << 20)
/* gpupart_sim_desc as 0.1 and 0.2 published it, and as this library knows it. */
#define SIM_DESC_SIZE_0_1 GPUPART__END(gpupart_sim_desc, host_backed)
#define SIM_DESC_SIZE_0_2 GPUPART__END(gpupart_sim_desc, block_round_up)
#define SIM_DESC_SIZE sizeof(gpupart_sim_desc)

typedef struct sim_device sim_device;
typedef struct sim_state sim_state;
struct sim_device {
  sim_device *next; /* in the state's registry */
  uint32_t refs;
  uint32_t index;
  gpupart_sim_desc desc; /* defaults applied */
  uint64_t used;         /* bytes in live blocks */
  uint64_t blocks;       /* live blocks */
  uint64_t calls;        /* block_alloc calls so far */
  uint64_t next_address; /* bump pointer of the private address space */
  sim_state *state;      /* its lock guards every field above */
};

struct sim_state {
  const gpupart__hostmem *mem; /* the context's allocator */
  uint64_t sim_total;          /* the sim_total option: total_bytes of a descriptor that leaves it 0 */
  pthread_mutex_t lock;
  sim_device *devices; /* open devices; the same (index, total) is the same device */
};

static int sim_load(const gpupart__backend_env *env, const char *library, void **state) {
  (void)library;
  sim_state *s = gpupart__host_calloc(env->mem, 1, sizeof *s);
  if (!s) return gpupart__fail(GPUPART_ENOMEM, "sim: out of host memory");
  s->mem = env->mem;
  s->sim_total = env->sim_total;
  pthread_mutex_init(&s->lock, NULL);
  *state = s;
  return GPUPART_OK;
}

static void sim_unload(void *state) {
  sim_state *s = state;
  if (!s) return;
  pthread_mutex_destroy(&s->lock);
  gpupart__host_free(s->mem, s);
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static int check_pow2(const char *what, uint64_t v) {
  if (!v || is_pow2(v)) return GPUPART_OK;
  return gpupart__fail(GPUPART_EINVAL, "sim: %s %llu is not a power of two", what, (unsigned long long)v);
}

/* The caller's descriptor (in, size bytes as compiled, 0 = its 0.2 layout; NULL = all
 * defaults), checked by the struct rule, with defaults applied: total_bytes 0 is
 * sim_total (the option the core resolved), else 16 GiB. */
static int sim_apply_defaults(const void *in, size_t size, uint64_t sim_total, gpupart_sim_desc *out) {
  int rc = gpupart__backend_desc_in(out, SIM_DESC_SIZE, in, size, SIM_DESC_SIZE_0_2, "sim: gpupart_sim_desc");
  if (rc) return rc;
  if (!memchr(out->pci_bus_id, '\0', sizeof out->pci_bus_id))
    return gpupart__fail(GPUPART_EINVAL, "sim: pci_bus_id is not NUL-terminated within its 32 bytes");
  if (!memchr(out->name, '\0', sizeof out->name))
    return gpupart__fail(GPUPART_EINVAL, "sim: name is not NUL-terminated within its 256 bytes");
  if (!out->total_bytes) out->total_bytes = sim_total ? sim_total : SIM_DEFAULT_TOTAL;
  if (!out->max_block_bytes || out->max_block_bytes > out->total_bytes) out->max_block_bytes = out->total_bytes;
  if (!out->min_alignment) out->min_alignment = SIM_DEFAULT_ALIGN;
  rc = check_pow2("min_alignment", out->min_alignment);
  if (rc == GPUPART_OK) rc = check_pow2("block_granularity", out->block_granularity);
  if (rc == GPUPART_OK) rc = check_pow2("block_round_up", out->block_round_up);
  if (out->block_granularity < out->min_alignment) out->block_granularity = out->min_alignment;
  if (!out->vm_granule)
    out->vm_granule = out->min_alignment > SIM_DEFAULT_VM_GRANULE ? out->min_alignment : SIM_DEFAULT_VM_GRANULE;
  if (rc == GPUPART_OK) rc = check_pow2("vm_granule", out->vm_granule);
  if (rc == GPUPART_OK && out->vm_granule < out->min_alignment)
    rc = gpupart__fail(GPUPART_EINVAL, "sim: vm_granule is below min_alignment");
  return rc;
}

static void sim_fill_info(const gpupart_sim_desc *d, uint32_t index, uint64_t used, gpupart_device_info *out) {
  memset(out, 0, sizeof *out);
  out->backend = GPUPART_BACKEND_SIM;
  out->index = index;
  strcpy(out->name, d->name[0]       ? d->name
                    : d->host_backed ? "gpupart simulated device (host-backed)"
                                     : "gpupart simulated device");
  strcpy(out->vendor, "gpupart");
  if (!gpupart__uuid_is_zero(d->uuid) || d->pci_bus_id[0]) { /* it stands for a real device */
    memcpy(out->uuid, d->uuid, sizeof out->uuid);
    memcpy(out->pci_bus_id, d->pci_bus_id, sizeof out->pci_bus_id);
  } else {
    gpupart__sim_uuid(index, out->uuid);
  }
  out->total_bytes = d->total_bytes;
  out->free_bytes = d->total_bytes - used;
  out->max_block_bytes = d->max_block_bytes;
  out->min_alignment = d->min_alignment;
  out->block_granularity = d->block_granularity;
}

/* The simulated backend always has one device (index 0) with the default descriptor;
 * open accepts any index, since a simulated device exists once it is described. */
static int sim_enumerate(void *state, gpupart_device_info *out, uint32_t *count) {
  (void)state;
  if (out && *count >= 1) {
    gpupart_sim_desc d;
    sim_apply_defaults(NULL, 0, 0, &d);
    sim_fill_info(&d, 0, 0, out);
  }
  *count = 1;
  return GPUPART_OK;
}

static sim_device *sim_find(sim_state *s, uint32_t index, uint64_t total) {
  for (sim_device *d = s->devices; d; d = d->next)
    if (d->index == index && d->desc.total_bytes == total) return d;
  return NULL;
}

static int same_settings(const gpupart_sim_desc *a, const gpupart_sim_desc *b) {
  return a->total_bytes == b->total_bytes && a->max_block_bytes == b->max_block_bytes &&
         a->min_alignment == b->min_alignment && a->max_blocks == b->max_blocks &&
         a->fail_block_alloc_at == b->fail_block_alloc_at && a->host_backed == b->host_backed &&
         a->block_granularity == b->block_granularity && a->block_round_up == b->block_round_up &&
         a->vm_granule == b->vm_granule && a->no_vm == b->no_vm && !memcmp(a->uuid, b->uuid, sizeof a->uuid) &&
         !memcmp(a->pci_bus_id, b->pci_bus_id, sizeof a->pci_bus_id) && !strcmp(a->name, b->name);
}

/* The device (index, total) once; opening it again with other knobs is an error, since
 * they describe the same device. Lock held. */
static int sim_attach(sim_state *s, uint32_t index, const gpupart_sim_desc *desc, sim_device **out) {
  sim_device *d = sim_find(s, index, desc->total_bytes);
  if (d && !same_settings(&d->desc, desc))
    return gpupart__fail(GPUPART_EINVAL, "sim: device %u of %llu bytes is open with other settings", index,
                         (unsigned long long)desc->total_bytes);
  if (!d && (d = gpupart__host_calloc(s->mem, 1, sizeof *d))) {
    *d = (sim_device){.next = s->devices, .index = index, .desc = *desc, .next_address = SIM_ADDRESS_BASE, .state = s};
    s->devices = d;
  }
  if (!d) return gpupart__fail(GPUPART_ENOMEM, "sim: out of host memory");
  d->refs++;
  *out = d;
  return GPUPART_OK;
}

static int sim_open(void *state, uint32_t index, const void *native_desc, size_t native_size, void **out) {
  sim_state *s = state;
  gpupart_sim_desc desc;
  int rc = sim_apply_defaults(native_desc, native_size, s->sim_total, &desc);
  if (rc) return rc;
  sim_device *d = NULL;
  pthread_mutex_lock(&s->lock);
  rc = sim_attach(s, index, &desc, &d);
  pthread_mutex_unlock(&s->lock);
  if (rc == GPUPART_OK) *out = d;
  return rc;
}

static void sim_unlink(sim_state *s, sim_device *dev) {
  for (sim_device **p = &s->devices; *p; p = &(*p)->next)
    if (*p == dev) {
      *p = dev->next;
      return;
    }
}

static void sim_close(void *devp) {
  sim_device *d = devp;
  sim_state *s = d->state;
  pthread_mutex_lock(&s->lock);
  int last = --d->refs == 0;
  if (last) sim_unlink(s, d);
  pthread_mutex_unlock(&s->lock);
  if (last) gpupart__host_free(s->mem, d);
}

static int sim_info(void *devp, gpupart_device_info *out) {
  sim_device *d = devp;
  pthread_mutex_lock(&d->state->lock);
  sim_fill_info(&d->desc, d->index, d->used, out);
  pthread_mutex_unlock(&d->state->lock);
  return GPUPART_OK;
}

static int sim_mem_info(void *devp, uint64_t *free_bytes, uint64_t *total_bytes) {
  sim_device *d = devp;
  pthread_mutex_lock(&d->state->lock);
  *free_bytes = d->desc.total_bytes - d->used;
  *total_bytes = d->desc.total_bytes;
  pthread_mutex_unlock(&d->state->lock);
  return GPUPART_OK;
}

/* Why the simulated driver refuses a block of size bytes, or NULL. */
static const char *sim_refusal(const sim_device *d, uint64_t size) {
  if (d->desc.fail_block_alloc_at && d->calls == d->desc.fail_block_alloc_at)
    return "injected failure (fail_block_alloc_at)";
  if (size > d->desc.max_block_bytes) return "larger than max_block_bytes";
  if (size > d->desc.total_bytes - d->used) return "out of device memory";
  if (d->desc.max_blocks && d->blocks >= d->desc.max_blocks) return "max_blocks reached";
  return NULL;
}

static int sim_back(sim_device *d, uint64_t size, gpupart_block *out) {
  if (d->desc.host_backed) {
    uint64_t a = d->desc.min_alignment < sizeof(void *) ? sizeof(void *) : d->desc.min_alignment;
    void *p = NULL;
    if (size > SIZE_MAX || posix_memalign(&p, (size_t)a, (size_t)size))
      return gpupart__fail(GPUPART_EDEVMEM, "sim: host backing of %llu bytes refused", (unsigned long long)size);
    out->native = p;
    out->device_address = (uint64_t)(uintptr_t)p;
    return GPUPART_OK;
  }
  out->device_address = d->next_address;
  out->native = (void *)(uintptr_t)d->next_address;
  d->next_address += size;
  return GPUPART_OK;
}

/* What the simulated driver allocates for a request of size bytes (block_round_up). */
static uint64_t sim_actual(const sim_device *d, uint64_t size) {
  uint64_t r = d->desc.block_round_up;
  return r && size <= UINT64_MAX - (r - 1) ? (size + r - 1) & ~(r - 1) : size;
}

static int sim_block_alloc(void *devp, uint64_t asked, gpupart_block *out) {
  sim_device *d = devp;
  pthread_mutex_lock(&d->state->lock);
  d->calls++;
  uint64_t size = sim_actual(d, asked);
  const char *why = sim_refusal(d, size);
  int rc = GPUPART_OK;
  if (asked % d->desc.block_granularity) /* a real driver (cuMemCreate) rejects it as invalid */
    rc = gpupart__fail(GPUPART_EBACKEND, "sim: block of %llu bytes is not a multiple of block_granularity %llu",
                       (unsigned long long)asked, (unsigned long long)d->desc.block_granularity);
  else if (why)
    rc = gpupart__fail(GPUPART_EDEVMEM, "sim: block of %llu bytes refused: %s", (unsigned long long)size, why);
  else rc = sim_back(d, size, out);
  if (rc == GPUPART_OK) {
    out->size = size;
    out->host_pointer = d->desc.host_backed ? out->native : NULL;
    out->backend_data = NULL;
    d->used += size;
    d->blocks++;
  }
  pthread_mutex_unlock(&d->state->lock);
  return rc;
}

static void sim_block_free(void *devp, gpupart_block *block) {
  sim_device *d = devp;
  if (d->desc.host_backed) free(block->native);
  pthread_mutex_lock(&d->state->lock);
  d->used -= block->size;
  d->blocks--;
  pthread_mutex_unlock(&d->state->lock);
}

/* ---- emulated virtual memory (expandable partitions) ----
 * A reserved range is a stretch of the private address space (or, host-backed, an
 * inaccessible host mapping); mapping a chunk charges the device's used bytes as a block
 * would (and makes host-backed memory readable and writable), so every figure an
 * expandable partition shows on sim is the one a real driver would. */

static int sim_vm_granule(void *devp, uint64_t *granule) {
  sim_device *d = devp;
  if (d->desc.no_vm) return gpupart__fail(GPUPART_ENOTSUP, "sim: the device has no virtual memory (no_vm)");
  *granule = d->desc.vm_granule;
  return GPUPART_OK;
}

static int sim_vm_reserve(void *devp, uint64_t size, gpupart_block *out) {
  sim_device *d = devp;
  *out = (gpupart_block){.size = size};
  if (d->desc.host_backed) {
    void *p = size > SIZE_MAX ? MAP_FAILED
                              : mmap(NULL, (size_t)size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return gpupart__fail(GPUPART_EDEVMEM, "sim: no host range of %llu bytes", (unsigned long long)size);
    out->native = out->host_pointer = p;
    out->device_address = (uint64_t)(uintptr_t)p;
    return GPUPART_OK;
  }
  pthread_mutex_lock(&d->state->lock);
  uint64_t g = d->desc.vm_granule, at = (d->next_address + g - 1) & ~(g - 1);
  d->next_address = at + size;
  pthread_mutex_unlock(&d->state->lock);
  out->device_address = at;
  out->native = (void *)(uintptr_t)at;
  return GPUPART_OK;
}

static void sim_vm_unreserve(void *devp, gpupart_block *range) {
  sim_device *d = devp;
  if (d->desc.host_backed) munmap(range->native, (size_t)range->size);
}

/* Host-backed: the chunk's pages become readable and writable (fresh, zeroed) or go back
 * to inaccessible. */
static int sim_vm_protect(gpupart_block *range, uint64_t offset, uint64_t size, int on) {
  void *at = (char *)range->native + offset;
  void *p = mmap(at, (size_t)size, on ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (on ? 0 : MAP_NORESERVE), -1, 0);
  return p == at ? 0 : -1;
}

static void sim_vm_unmap(void *devp, gpupart_block *range, uint64_t offset, uint64_t size, void *handle);

static int sim_vm_map(void *devp, gpupart_block *range, uint64_t offset, uint64_t size, void **handle) {
  sim_device *d = devp;
  pthread_mutex_lock(&d->state->lock);
  d->calls++;
  const char *why = sim_refusal(d, size);
  if (!why) {
    d->used += size;
    d->blocks++;
  }
  pthread_mutex_unlock(&d->state->lock);
  if (why)
    return gpupart__fail(GPUPART_EDEVMEM, "sim: mapping of %llu bytes refused: %s", (unsigned long long)size, why);
  if (d->desc.host_backed && sim_vm_protect(range, offset, size, 1)) {
    sim_vm_unmap(devp, range, offset, size, NULL);
    return gpupart__fail(GPUPART_EDEVMEM, "sim: host mapping of %llu bytes refused", (unsigned long long)size);
  }
  *handle = NULL;
  return GPUPART_OK;
}

static void sim_vm_unmap(void *devp, gpupart_block *range, uint64_t offset, uint64_t size, void *handle) {
  sim_device *d = devp;
  (void)handle;
  if (d->desc.host_backed) sim_vm_protect(range, offset, size, 0);
  pthread_mutex_lock(&d->state->lock);
  d->used -= size;
  d->blocks--;
  pthread_mutex_unlock(&d->state->lock);
}

/* A 0.1 program's descriptor: its fields are the first ones of today's, the rest 0. */
static int sim_open_0_1(void *state, uint32_t index, const void *desc, void **dev) {
  gpupart_sim_desc d;
  memset(&d, 0, sizeof d);
  memcpy(&d, desc, SIM_DESC_SIZE_0_1);
  return sim_open(state, index, &d, sizeof d, dev);
}

const gpupart_backend_ops gpupart__sim_ops = {
    .abi_version = GPUPART__BACKEND_ABI,
    .struct_size = sizeof(gpupart_backend_ops),
    .name = "sim",
    .id = GPUPART_BACKEND_SIM,
    .caps = GPUPART__CAP_FREE_MEMORY | GPUPART__CAP_DEVICE_ADDRESS | GPUPART__CAP_HOST_POINTER | GPUPART__CAP_VM,
    .load = sim_load,
    .unload = sim_unload,
    .enumerate = sim_enumerate,
    .open = sim_open,
    .close = sim_close,
    .info = sim_info,
    .mem_info = sim_mem_info,
    .block_alloc = sim_block_alloc,
    .block_free = sim_block_free,
    .open_0_1 = sim_open_0_1,
    .vm_granule = sim_vm_granule,
    .vm_reserve = sim_vm_reserve,
    .vm_unreserve = sim_vm_unreserve,
    .vm_map = sim_vm_map,
    .vm_unmap = sim_vm_unmap,
};
