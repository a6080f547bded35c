/* The backend conformance suite's view of a backend: how to open its device 0 and how to
 * move bytes in and out of an allocation through the driver itself, so the suite can
 * prove that gpupart's ranges are real, disjoint device memory. One adapter per backend
 * (adapter_sim.c, adapter_opencl.c, ...); the table in adapters.c lists those built. */
#ifndef GPUPART_TESTS_CONFORMANCE_H
#define GPUPART_TESTS_CONFORMANCE_H

#include "gpupart.h"

typedef struct conformance_adapter {
  gpupart_backend backend;
  /* Opens the backend's first device with base's policy fields (backend and backend_desc
   * are the adapter's). ENOBACKEND or ENODEV when the driver or device is absent. */
  gpupart_result (*open)(gpupart_context *ctx, const gpupart_device_desc *base, gpupart_device **out);
  /* Copies size bytes into / out of the allocation at its offset 0, through the driver. */
  int (*write)(gpupart_device *dev, const gpupart_allocation *a, const void *data, uint64_t size);
  int (*read)(gpupart_device *dev, const gpupart_allocation *a, void *data, uint64_t size);
  /* Optional: opens the device adopting handles the test created itself, runs a short
   * alloc/write/read cycle, closes, and checks the handles still work. 0 = pass. */
  int (*adopt_roundtrip)(gpupart_context *ctx, char *why, size_t why_len);
  /* Optional: opens the backend's first device in a context of its own (*ctx, which the
   * caller destroys) with the driver instrumented: it refuses every new block while
   * max_live_blocks blocks are live (0 = never), and driver_bytes works on the device.
   * On failure the reason is in why; ENOTSUP (the test is skipped) where this driver
   * cannot be instrumented. */
  gpupart_result (*open_instrumented)(gpupart_context **ctx, const gpupart_device_desc *base, uint64_t max_live_blocks,
                                      gpupart_device **out, char *why, size_t why_len);
  /* Bytes of device memory that gpupart holds on an instrumented device, as the driver
   * itself counts them. 0 = success. */
  int (*driver_bytes)(gpupart_device *dev, uint64_t *bytes);
  /* Optional: the config_text of the contexts the suite creates for this backend (e.g.
   * "[gpupart]\ncuda_library = PATH" to route it to a driver test double); NULL = none. */
  const char *(*context_config)(void);
  /* Optional: called after the device that open returned was closed, to destroy what
   * open created for it (e.g. adopted native handles) and report errors the driver
   * side found meanwhile (e.g. Vulkan validation errors). 0 = pass. */
  int (*release)(char *why, size_t why_len);
  /* The driver's own code (gpupart_last_native_error) when the instrumented driver
   * refuses a block, and its name in the message; 0 / NULL where the refusal carries no
   * code (sim; OpenCL with SVM, whose clSVMAlloc only returns NULL), CONFORMANCE_CODE_VARIES
   * where it depends on the device. */
  int64_t refusal_code;
  const char *refusal_name;
} conformance_adapter;

#define CONFORMANCE_CODE_VARIES INT64_MIN

/* The adapters this build has, indexed by gpupart_backend; NULL where none (adapters.c
 * walks the registry of core/base/registry.h: a backend's adapter is conformance_<name>). */
const conformance_adapter *conformance_adapter_for(gpupart_backend b);

#endif
