/* The trace replay that gpupart-bench and `gpupart tune` share (the library bench_replay,
 * built from bench/): workloads of preparsed operations, the trace loader (one process's
 * file, or several processes' files interleaved into one workload), the replay of a
 * workload under a configuration as the application would meet it (its partitions found
 * by the names the trace recorded, one context and device per process, a shared ledger
 * between them), and the per-call price of a real GPU's driver. It uses the public API
 * only, so the gpupart command can link it without any of the core's private headers. */
#ifndef GPUPART_BENCH_REPLAY_H
#define GPUPART_BENCH_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpupart.h"

#define BENCH_MIB (1ull << 20)
#define BENCH_GIB (1ull << 30)
#define BENCH_PARTS 3 /* partitions of the "partitions" policy */
#define BENCH_NO_NAME UINT32_MAX
/* The largest request a trace may make (64 PiB): beyond any device, and small enough that
 * sums of live bytes never overflow. */
#define BENCH_MAX_REQUEST (1ull << 56)

/* The per-call price of a real GPU's driver (median cuMemAlloc and cuMemFree, in
 * microseconds): driver calls counted on the sim backend are priced with it. */
#define BENCH_MODEL_ALLOC_US 80.0
#define BENCH_MODEL_FREE_US 450.0

/* One operation. size > 0 allocates size bytes into slot; size 0 frees what slot holds.
 * part is the operation's stream (bench_workload.streams). */
typedef struct bench_op {
  uint64_t size;
  uint32_t slot;
  uint32_t part;
} bench_op;

/* Where allocations go. name: the partition name the trace recorded (an index into
 * bench_workload.names), or BENCH_NO_NAME; process: the trace file (0 for one file and for
 * built-in workloads); lane: the partition of the "partitions" policy (the name's index
 * mod BENCH_PARTS, or round-robin for allocations without a name). */
typedef struct bench_stream {
  uint32_t name, process, lane;
} bench_stream;

typedef struct bench_workload {
  char name[64];
  bench_op *ops;
  size_t n, cap;
  uint32_t slots;    /* slots used: slot indices are below it */
  uint64_t max_size; /* largest request */
  double scale;      /* sizes were multiplied by it (1 = as generated) */
  char **names;      /* partition names as recorded (decoded), in order of first use */
  uint32_t nnames;
  bench_stream *streams; /* every op's part indexes it */
  uint32_t nstreams, processes;
} bench_workload;

/* One result row: every metric of the benchmark contract (docs/benchmarks.md). */
typedef struct bench_result {
  char backend[32], workload[64], policy[16];
  uint64_t ops;
  double scale;
  double ns_per_op, p50_ns, p99_ns;
  double cpu_ns_per_op; /* thread CPU time instead of wall time: blind to preemption */
  uint64_t driver_allocs, driver_frees;
  uint64_t peak_in_use, peak_reserved;
  double fragmentation, modeled_driver_ms, driver_calls_per_10k;
  uint64_t floor_reserved;    /* smallest single arena that serves the workload (floor.c) */
  double floor_fragmentation; /* 1 - the workload's peak / floor_reserved: what placement alone costs */
  uint64_t failed;
  int error;         /* the policy could not be set up on this target */
  char message[200]; /* why */
} bench_result;

/* The program name messages start with ("gpupart-bench"; `gpupart tune` sets its own). */
extern const char *bench_program;
_Noreturn void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *bench_xmalloc(size_t n);
void *bench_xcalloc(size_t n, size_t size);
void *bench_xrealloc(void *p, size_t n);
uint64_t bench_round_up(uint64_t v, uint64_t pow2);
uint64_t bench_now_ns(void);

/* ---- workloads.c ---- */
void bench_workload_free(bench_workload *w);
/* The index of partition name `name` in w->names, added when new. */
uint32_t bench_name_of(bench_workload *w, const char *name);
/* Highest sum of live request sizes, each rounded up to align, over the first n ops. */
uint64_t bench_workload_peak(const bench_workload *w, size_t n, uint64_t align);
/* The operations of w whose stream has partition name `name` (and the frees of their
 * slots), as a workload of their own with w's names and streams. */
void bench_workload_only(const bench_workload *w, uint32_t name, bench_workload *out);

/* ---- trace.c, together.c ---- */
/* Loads an .ops or .ops.gz trace; 0, or -1 with a message on stderr. */
int bench_trace_load(const char *path, bench_workload *out);
/* Loads n traces as the processes of one run (process i is paths[i]), interleaved in
 * proportion to their lengths: operation k of a file of m operations comes at (k + 1/2)/m of
 * the run, ties in file order. Partition names are shared across files (one name, one
 * shared partition). 0, or -1 with a message on stderr. */
int bench_trace_load_together(const char *const *paths, int n, bench_workload *out);

/* ---- model.c ---- */
/* Fills the derived figures of a row (fragmentation, modeled driver time, driver calls per
 * 10k operations) from its counts. */
void bench_derive(bench_result *out);

/* ---- replay.c: a workload under a configuration, as the application meets it ---- */

/* The device a replay runs on and the configuration it reads. */
typedef struct bench_replay_setup {
  const char *config_text; /* INI text applied as gpupart_context_desc.config_text; NULL = none */
  int read_env;            /* 1: the GPUPART_* variables and GPUPART_CONFIG apply, as in the application */
  gpupart_backend backend; /* SIM: the replay's simulated device (bench_replay_sim) */
  uint32_t index;
} bench_replay_setup;

typedef struct bench_replayer {
  const bench_workload *w;
  uint32_t processes;
  gpupart_context **ctx;        /* one per process */
  gpupart_device **dev;         /* one per process */
  gpupart_partition **parts;    /* one per stream: the partition its name has in its process */
  gpupart_allocation **handles; /* one per slot */
  gpupart_sim_desc sim;         /* the device, when the setup's backend is SIM */
  char ledger_dir[256];         /* "", or a private folder for shared ledgers, removed at close */
} bench_replayer;

/* The simulated device every configured replay of w runs on: 64 GiB, or the power of two
 * at least twice w's peak in use when that is more. */
void bench_replay_sim(const bench_workload *w, gpupart_sim_desc *out);
/* Opens one context and device per process of w under s and finds each stream's partition
 * by its name (gpupart_partition_create with the name alone: the configured partition when
 * configuration declares it; "p0", the name gpupart gives a program's first unnamed
 * partition, for allocations without a name). Several processes share a ledger
 * (GPUPART_DEVICE_SHARED), so a name is one partition across them. A shared ledger
 * (several processes, or GPUPART_SHARED where the environment is read) goes to a fresh
 * private folder, never the user's own; nothing is recorded (GPUPART_TRACE is not
 * followed). 0, or -1 with err set (close r either way). */
int bench_replayer_open(bench_replayer *r, const bench_workload *w, const bench_replay_setup *s, char *err, size_t n);
/* Replays ops; returns how many allocations were refused. */
uint64_t bench_replayer_run(bench_replayer *r, const bench_op *ops, size_t n);
/* The figures of the replay so far: driver calls of every process, the (shared) ledger's
 * peak reserved, and as peak in use the trace's own (first n ops, bytes as requested). */
void bench_replayer_collect(const bench_replayer *r, size_t n, bench_result *out);
/* Frees what is live, closes every device and context, removes the ledger folder. */
void bench_replayer_close(bench_replayer *r);

#endif
