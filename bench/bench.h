/* gpupart-bench's shared definitions: a workload is an array of preparsed operations
 * (allocate into a slot, free a slot) so that the timed loops do nothing but call the
 * allocator; a target is one device of one backend; a policy replays a workload on a
 * target and yields one result row with every metric of the benchmark contract
 * (docs/benchmarks.md). Built in, trace-loaded and micro workloads all use these types. */
#ifndef GPUPART_BENCH_H
#define GPUPART_BENCH_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "gpupart.h"
#include "replay.h"

/* Builds a workload: slots of freed allocations are reused, so the handle array stays as
 * small as the live set and the replay touches memory the way an application does. */
typedef struct bench_builder {
  bench_workload *w;
  uint32_t *free_slots;
  uint32_t nfree, cap_free;
  uint64_t allocs; /* allocations emitted, for the round-robin partition choice */
} bench_builder;

/* Deterministic generator (splitmix64): every run replays the same operations. */
typedef struct bench_rng {
  uint64_t s;
} bench_rng;

/* ---- util.c ---- */
/* What the figures were measured on: the CPU (/proc/cpuinfo's model name, or "unknown"),
 * the meson build type and optimization level, and the compiler that built the benchmark
 * (the library is built in the same project, with the same build type). */
typedef struct bench_machine {
  char cpu[160];
  const char *build_type, *optimization, *compiler;
} bench_machine;
void bench_machine_get(bench_machine *m);
uint64_t bench_rand(bench_rng *r);
uint64_t bench_uniform(bench_rng *r, uint64_t lo, uint64_t hi); /* inclusive */
uint64_t bench_log_uniform(bench_rng *r, uint64_t lo, uint64_t hi);
int bench_chance(bench_rng *r, unsigned percent);

/* ---- workloads.c ---- */
void bench_builder_init(bench_builder *b, bench_workload *w, const char *name);
void bench_builder_finish(bench_builder *b);
/* An allocation on the round-robin streams (the built-in workloads, unnamed trace lines). */
uint32_t bench_emit_alloc(bench_builder *b, uint64_t size);
/* An allocation on stream `stream` (bench_workload.streams). */
uint32_t bench_emit_alloc_to(bench_builder *b, uint64_t size, uint32_t stream);
/* The index of stream (name, process) with the given lane, added when new. */
uint32_t bench_stream_of(bench_workload *w, uint32_t name, uint32_t process, uint32_t lane);
void bench_emit_free(bench_builder *b, uint32_t slot);
/* floor.c: the smallest single-block arena that serves w's first n operations with
 * every range aligned to align (a power of two; the target's min_alignment), and in
 * *fragmentation what placement in it costs: 1 - its peak in use / its size, in [0, 1). */
uint64_t bench_floor_bytes(const bench_workload *w, size_t n, uint64_t align, double *fragmentation);
/* A copy of w with every size multiplied by factor (at least 1 byte). */
void bench_workload_scaled(const bench_workload *w, double factor, bench_workload *out);
/* Names of the built-in workloads, NULL-terminated. */
const char *const *bench_builtin_names(void);
/* Generates a built-in workload; 0, or -1 for an unknown name. */
int bench_builtin(const char *name, bench_workload *out);

/* ---- trace.c ---- */
/* The directory of the bundled traces (set at build time). */
const char *bench_trace_dir(void);

/* ---- targets.c ---- */
typedef struct bench_target {
  gpupart_backend backend;
  uint32_t index;
  gpupart_sim_desc sim;     /* used when backend is SIM */
  gpupart_device_info info; /* as enumerated */
  uint64_t mem_cap;         /* workloads are scaled to peak below it; 0 = no scaling */
  size_t ops_cap;           /* default cap on replayed ops; 0 = none */
} bench_target;

/* Fills up to max targets for which (sim, opencl, vulkan, cuda, or all); returns the
 * count. Backends that are not built, do not load or have no device are skipped, with
 * a line on stderr when they were asked for by name. */
int bench_targets_find(const char *which, bench_target *out, int max);
const void *bench_target_desc(const bench_target *t);
/* $GPUPART_CUDA_LIBRARY, or NULL for the system's libcuda.so.1. */
const char *bench_cuda_library(void);
/* A context that ignores the environment, so results do not depend on the caller's
 * (except for where the CUDA driver is: bench_cuda_library). */
gpupart_context *bench_context(void);
/* When set (--shared, micro 6), bench_context puts its ledgers in this folder and
 * bench_device_open opens devices with GPUPART_DEVICE_SHARED. NULL = in-process. */
extern const char *bench_shared_dir;
/* When set (micro 7), bench_context records a trace into this file (`trace =`). */
extern const char *bench_trace_file;
/* A fresh folder under /tmp for shared ledgers (removed at exit), once per run. */
const char *bench_shared_tmpdir(void);
/* Opens the target's device through the public API; NULL with a message on failure. */
gpupart_device *bench_device_open(gpupart_context *ctx, const bench_target *t, char *err, size_t n);

/* ---- timing.c ---- */
uint64_t bench_thread_cpu_ns(void);
/* Per-operation timestamps: the TSC on x86-64 (calibrated against CLOCK_MONOTONIC),
 * CLOCK_MONOTONIC elsewhere. */
void bench_ticks_calibrate(void);
double bench_ns_per_tick(void);
uint64_t bench_tick_overhead(void); /* median cost of an empty timed region, in ticks */
/* p-th percentile (0..100) of n tick samples, in ns after subtracting the overhead.
 * Sorts samples. */
double bench_percentile_ns(uint32_t *samples, size_t n, double p);
/* Pins the calling thread to one CPU; 0 on success (failure is harmless). */
int bench_pin_cpu(int cpu);

/* ---- policies.c ---- */
typedef enum bench_policy {
  BENCH_DRIVER = 0,
  BENCH_GROWTH,
  BENCH_PREALLOC,
  BENCH_PARTITIONS,
  BENCH_CUDAPOOL,   /* CUDA targets only: the driver's stream-ordered pool (cuda_baseline.c) */
  BENCH_EXPANDABLE, /* one expandable partition (virtual memory), where the backend has it */
  BENCH_CONFIGURED, /* the GPUPART_* configuration, partitions by the trace's names (replay.c) */
  BENCH_POLICY_COUNT
} bench_policy;

/* The policies a run compares when none is named: every one but "configured", whose
 * figures depend on the caller's environment. */
#define BENCH_DEFAULT_POLICIES ((1u << BENCH_POLICY_COUNT) - 1 - (1u << BENCH_CONFIGURED))

const char *bench_policy_name(bench_policy p);

/* Replays the first n ops of w under policy p on target t: one warm-up, repeat timed
 * runs (best kept), one per-operation latency pass; every run on a fresh device. */
void bench_run(const bench_target *t, bench_policy p, const bench_workload *w, size_t n, int repeat, bench_result *out);

/* ---- cuda_baseline.c: the driver's stream-ordered pool, loaded with dlopen ---- */
typedef struct bench_cuda_pool bench_cuda_pool;
/* 0, or -1 with err set (no driver, or one without the pool API); close *out either way. */
int bench_cuda_pool_open(uint32_t index, bench_cuda_pool **out, char *err, size_t n);
int bench_cuda_pool_alloc(bench_cuda_pool *p, uint64_t size, uint64_t *ptr);
void bench_cuda_pool_free(bench_cuda_pool *p, uint64_t ptr);
void bench_cuda_pool_sync(bench_cuda_pool *p);
uint64_t bench_cuda_pool_reserved_high(bench_cuda_pool *p); /* CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH */
void bench_cuda_pool_close(bench_cuda_pool *p);

/* ---- report.c ---- */
void bench_print_header(void);
void bench_print_row(const bench_result *r);
int bench_write_json(const char *path, const bench_result *rows, size_t n);
/* Writes `, "cpu": ..., "build_type": ..., "optimization": ..., "compiler": ...` (the
 * machine fields every JSON row carries). */
void bench_json_machine(FILE *f);
int bench_write_csv(const char *path, const bench_result *rows, size_t n);
int bench_write_plot(const char *path, const bench_result *rows, size_t n);

/* ---- micro.c ---- */
typedef struct bench_micro_opts {
  double scale;     /* 1 = full size; smaller runs fewer operations (smoke tests) */
  int repeat;       /* best of */
  const char *json; /* optional: write the figures there */
  const char *only; /* digits of the benchmarks to run ("24"); NULL = all */
} bench_micro_opts;

int bench_micro(const bench_micro_opts *o);

#endif
