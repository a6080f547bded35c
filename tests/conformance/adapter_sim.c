/* Conformance adapter of the sim backend: host-backed blocks, so bytes are moved with
 * memcpy at the allocation's device address. Its instrumented driver is the simulator's
 * own: max_blocks refuses new blocks, and the free memory it reports is what gpupart
 * does not hold. */
#include <stdio.h>
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

/* A total of its own, so this simulated device is never another test's (same index and
 * total would be the same device). */
#define INSTRUMENTED_TOTAL (768ull << 20)

static gpupart_result sim_open_instrumented(gpupart_context **ctx, const gpupart_device_desc *base,
                                            uint64_t max_live_blocks, gpupart_device **out, char *why, size_t why_len) {
  gpupart_sim_desc desc = {
      .total_bytes = INSTRUMENTED_TOTAL, .host_backed = 1, .max_blocks = (uint32_t)max_live_blocks};
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  *out = NULL;
  gpupart_result rc = gpupart_context_create(&cd, ctx);
  gpupart_device_desc d = *base;
  d.backend = GPUPART_BACKEND_SIM;
  d.backend_desc = &desc;
  if (rc == GPUPART_OK) rc = gpupart_device_open(*ctx, &d, out);
  if (rc) snprintf(why, why_len, "%s", gpupart_last_error());
  return rc;
}

static int sim_driver_bytes(gpupart_device *dev, uint64_t *bytes) {
  gpupart_device_info info;
  if (gpupart_device_get_info(dev, &info)) return -1;
  *bytes = info.total_bytes - info.free_bytes;
  return 0;
}

const conformance_adapter conformance_sim = {.backend = GPUPART_BACKEND_SIM,
                                             .open = sim_open,
                                             .write = sim_write,
                                             .read = sim_read,
                                             .open_instrumented = sim_open_instrumented,
                                             .driver_bytes = sim_driver_bytes};
