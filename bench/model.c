/* The figures a row derives from its counts, in one place for gpupart-bench and `gpupart
 * tune`: fragmentation (1 - peak in use / peak reserved), driver calls per 10k operations,
 * and the driver time those calls would cost on a real GPU, priced per call with the
 * median cuMemAlloc and cuMemFree (BENCH_MODEL_ALLOC_US, BENCH_MODEL_FREE_US): the sim
 * backend counts calls but costs nothing, so the price is what makes its figures comparable
 * with a GPU's. */
#include "replay.h"

void bench_derive(bench_result *out) {
  out->fragmentation = out->peak_reserved ? 1.0 - (double)out->peak_in_use / (double)out->peak_reserved : 0;
  out->modeled_driver_ms =
      ((double)out->driver_allocs * BENCH_MODEL_ALLOC_US + (double)out->driver_frees * BENCH_MODEL_FREE_US) / 1000.0;
  out->driver_calls_per_10k =
      out->ops ? (double)(out->driver_allocs + out->driver_frees) * 10000.0 / (double)out->ops : 0;
}
