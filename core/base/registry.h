/* The one list of backends. Every place that needs to walk the backends (the core's
 * tables and device choice, gpupart_backend_name, the gpupart command, the benchmark
 * targets, the conformance suite) expands GPUPART__BACKENDS instead of listing them by
 * hand, so adding a backend is one folder under backends/, one line here and its lines
 * in backends/meson.build (which adds -DGPUPART_HAVE_<ID> when it is built). This header
 * needs only gpupart.h, so test programs outside the core may include it. */
#ifndef GPUPART_CORE_REGISTRY_H
#define GPUPART_CORE_REGISTRY_H

#include <stddef.h>

#include "gpupart.h"

/* X(ID, name, rank): ID is the suffix of GPUPART_BACKEND_<ID> and of GPUPART_HAVE_<ID>;
 * name is the backend's name in configuration and output, and its table is
 * gpupart__<name>_ops; rank orders AUTO: the highest rank is tried first, and rank 0
 * (sim) is only the last resort of gpupart_device_open, never listed by an AUTO
 * enumeration. In enum order. */
#define GPUPART__BACKENDS(X) X(SIM, sim, 0) X(OPENCL, opencl, 1) X(VULKAN, vulkan, 2) X(CUDA, cuda, 3)

/* The simulated backend is always built. */
#ifndef GPUPART_HAVE_SIM
#define GPUPART_HAVE_SIM 1
#endif

/* GPUPART__IF_BUILT(ID, yes, no) expands to yes when GPUPART_HAVE_<ID> is defined to 1
 * (meson's -DGPUPART_HAVE_<ID>), else to no: the Linux kernel's IS_ENABLED trick, so a
 * GPUPART__BACKENDS expansion can leave out what this build lacks without an #ifdef per
 * backend. The tokens of the branch not taken are dropped, so no undefined symbol is
 * referenced. */
#define GPUPART__IF_BUILT(ID, yes, no) GPUPART__IF_(GPUPART__IS_SET(GPUPART_HAVE_##ID), yes, no)
#define GPUPART__IS_SET(x) GPUPART__IS_SET_(x)
#define GPUPART__IS_SET_(v) GPUPART__IS_SET__(GPUPART__PLACEHOLDER_##v)
#define GPUPART__IS_SET__(arg_or_junk) GPUPART__SECOND(arg_or_junk 1, 0, ~)
#define GPUPART__PLACEHOLDER_1 ~,
#define GPUPART__SECOND(a, b, ...) b
#define GPUPART__IF_(c, yes, no) GPUPART__IF__(c, yes, no)
#define GPUPART__IF__(c, yes, no) GPUPART__IF_##c(yes, no)
#define GPUPART__IF_1(yes, no) yes
#define GPUPART__IF_0(yes, no) no

/* Number of gpupart_backend values, AUTO included (for tables indexed by backend). */
#define GPUPART__BACKEND_X_COUNT(ID, name, rank) +1
#define GPUPART__BACKEND_COUNT (1 GPUPART__BACKENDS(GPUPART__BACKEND_X_COUNT))

/* Every backend, in enum order, as an array's initialiser: a walk over the backends is
 * `static const gpupart_backend all[] = {GPUPART__BACKEND_IDS};`, never a loop to a
 * named last one. */
#define GPUPART__BACKEND_X_ID(ID, name, rank) GPUPART_BACKEND_##ID,
#define GPUPART__BACKEND_IDS GPUPART__BACKENDS(GPUPART__BACKEND_X_ID)

/* The backend named s ("sim", "opencl", ...: case-insensitive; never auto), or -1. */
int gpupart__backend_from_name(const char *s);

/* "cuda, vulkan, opencl or sim": every backend in AUTO's order, for messages. */
void gpupart__backend_names(char *buf, size_t n);

/* The backends in the order AUTO tries them (highest rank first); returns how many were
 * written to out (room for GPUPART__BACKEND_COUNT). last_resort: include rank 0 (sim). */
unsigned gpupart__backend_auto_order(gpupart_backend *out, int last_resort);

#endif
