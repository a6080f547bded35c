/* What `gpupart tune`'s files share: the settings it searches (one table row each,
 * tune_search.c), a configuration tried (a candidate) with the figures its replay gave,
 * and the search's state. cmd_tune.c reads the command line and prints; tune_search.c
 * replays configurations (bench/replay.h, the same replay as gpupart-bench's "configured"
 * policy) and ranks them; tune_text.c writes a configuration as GPUPART_* lines and as an
 * INI section, the same text the replay was given. */
#ifndef GPUPART_TOOLS_TUNE_H
#define GPUPART_TOOLS_TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "replay.h"

/* The settings searched, in the order they are printed. A new one is one entry here and
 * one row of the table in tune_search.c. */
typedef enum tune_dim_id {
  TUNE_ALLOW_GROWTH,
  TUNE_INITIAL_BLOCK,
  TUNE_MAX_BLOCK,
  TUNE_GROWTH_FACTOR,
  TUNE_RELEASE_THRESHOLD,
  TUNE_EXPANDABLE,
  TUNE_DIMS
} tune_dim_id;

typedef enum tune_kind {
  TUNE_BOOL,      /* 0 false, 1 true */
  TUNE_BYTES,     /* bytes */
  TUNE_FACTOR,    /* thousandths: 1500 is 1.5 */
  TUNE_THRESHOLD, /* bytes; 0 is "none" */
} tune_kind;

#define TUNE_END UINT64_MAX       /* ends a list of values */
#define TUNE_GRANULE (2ull << 20) /* the library's default granularity: sizes and limits are whole granules */

typedef struct tune_dim {
  const char *key; /* the INI key, in [gpupart] */
  const char *env; /* the variable */
  tune_kind kind;
  uint64_t def;       /* the library's default (docs/configuration.md) */
  uint64_t coarse[8]; /* the first grid, TUNE_END-terminated */
  uint64_t fine[10];  /* what refinement tries, one setting at a time, TUNE_END-terminated */
  int growth_only;    /* meaningless when preallocating (left at the default then) */
  int blocks_only;    /* meaningless to an expandable partition, which has no growth blocks */
} tune_dim;

const tune_dim *tune_dim_get(tune_dim_id d);

typedef enum tune_objective { TUNE_MEMORY, TUNE_CALLS, TUNE_BALANCED } tune_objective;

/* One configuration tried. limits[i] is the size declared for partition name i of the
 * workload (GPUPART_PARTITIONS), 0 = not declared. */
typedef struct tune_candidate {
  uint64_t v[TUNE_DIMS];
  uint64_t *limits;
  bench_result r; /* its replay's figures */
  int error;      /* the configuration could not be replayed (r.message says why) */
  int is_default; /* the library's defaults, nothing declared */
  uint32_t order; /* when it was tried: the last tie-break */
} tune_candidate;

/* Where the search is: called after each configuration replayed. */
typedef void (*tune_progress_fn)(const char *stage, size_t done, size_t planned, void *user);

typedef struct tune_search {
  bench_workload *w; /* every stream named (unnamed allocations: "p0") */
  uint64_t budget;   /* bytes: memory_limit of every configuration; 0 = none */
  tune_objective objective;
  int declarable;    /* every partition name can be declared (GPUPART_PARTITIONS syntax) */
  int prealloc_ok;   /* preallocation is searched (one process, every name declarable) */
  int expandable_ok; /* expandable partitions are searched (the simulated device has virtual memory) */
  tune_candidate *c;
  size_t n, cap;
  size_t replays;       /* replays run, sub-workloads' included */
  bench_workload *only; /* per name: its operations alone (made when first needed) */
  int default_only;     /* replay the default configuration alone (a budget below the live bytes) */
  tune_progress_fn progress;
  void *progress_user;
} tune_search;

/* ---- tune_search.c ---- */
/* Prepares a search of w, which must outlive it (its unnamed allocations are named "p0"). */
void tune_search_init(tune_search *s, bench_workload *w, uint64_t budget, tune_objective objective);
/* Runs every stage. 0, or -1 when not even the default configuration could be replayed
 * (with the message in err). */
int tune_search_run(tune_search *s, char *err, size_t n);
/* Whether c served every allocation and may be recommended (its peak reserved no more than
 * the default's, where the default served every allocation). */
int tune_eligible(const tune_search *s, const tune_candidate *c);
/* The candidates in the objective's order, eligible ones first; the caller frees the array. */
tune_candidate **tune_ranked(const tune_search *s, size_t *count);
const tune_candidate *tune_default(const tune_search *s);
/* Whether c declares a size for some partition. */
int tune_limited(const tune_search *s, const tune_candidate *c);
const char *tune_objective_name(tune_objective o);
void tune_search_free(tune_search *s);

/* ---- tune_text.c ---- */
/* The configuration c as the INI text the replay read ([gpupart] and [partition NAME]
 * sections), and as GPUPART_* lines; settings left at the library's default are not
 * written. Both return the length written (output cut at n, always terminated). */
size_t tune_ini(const tune_search *s, const tune_candidate *c, char *out, size_t n);
size_t tune_env(const tune_search *s, const tune_candidate *c, char *out, size_t n);
/* One line describing c's settings: its mode (growth, expandable or prealloc), the
 * settings it changes and its partition sizes ("growth initial_block=8MiB p0:2666MiB"). */
void tune_describe(const tune_search *s, const tune_candidate *c, char *out, size_t n);
/* A setting's value as configuration writes it ("8MiB", "1.5", "none", "false"). */
void tune_value_text(const tune_dim *d, uint64_t v, char *out, size_t n);
/* Bytes as configuration writes them: whole GiB, MiB or KiB where exact, else bytes. */
void tune_bytes_text(uint64_t v, char *out, size_t n);
/* Whether name can be declared in GPUPART_PARTITIONS and a [partition NAME] section. */
int tune_name_declarable(const char *name);

/* ---- cmd_tune.c, tune_print.c: one run of the command ---- */
typedef struct tune_run {
  tune_search s;
  const char *const *traces;
  int ntraces;
  size_t top;           /* rows shown besides the default's */
  uint64_t peak_in_use; /* the trace's, bytes as requested */
  double seconds;
  tune_search *unbudgeted; /* where the budget was not met: the same search without it */
  const tune_candidate *unbudgeted_best;
} tune_run;

void tune_print_text(const tune_run *t);
void tune_print_json(const tune_run *t);

#endif
