/* Conformance adapter of the sim backend: host-backed blocks, so bytes are moved with
 * memcpy at the allocation's device address. */
#include <string.h>

#include "conformance.h"

static gpupart_sim_desc sim_desc = {.total_bytes = 1ull << 30, .host_backed = 1};

static gpupart_result sim_open(gpupart_context *ctx, const gpupart_device_desc *base, gpupart_device **out) {
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_SIM;
  d.backend_desc = &sim_desc;
  return gpupart_device_open(ctx, &d, out);
}

static void *address_of(const gpupart_allocation *a) {
  gpupart_allocation_info info;
  if (gpupart_allocation_get_info(a, &info)) return NULL;
  return (void *)(uintptr_t)info.device_address;
}

static int sim_write(gpupart_device *dev, const gpupart_allocation *a, const void *data, uint64_t size) {
  (void)dev;
  void *p = address_of(a);
  if (!p) return -1;
  memcpy(p, data, size);
  return 0;
}

static int sim_read(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size) {
  (void)dev;
  void *p = address_of(a);
  if (!p) return -1;
  memcpy(data, p, size);
  return 0;
}

const conformance_adapter conformance_sim = {
    .backend = GPUPART_BACKEND_SIM, .open = sim_open, .write = sim_write, .read = sim_read};
