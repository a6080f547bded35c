/* The Prometheus text and OpenMetrics forms of an observation (observe.h), shared by
 * gpupart metrics and gpupart exporter. */
#ifndef GPUPART_TOOLS_METRICS_H
#define GPUPART_TOOLS_METRICS_H

#include <stdio.h>

#include "observe.h"

/* Every metric family of o, in the Prometheus text exposition format 0.0.4 (names and
 * labels in docs/cli.md). */
void metrics_text(FILE *f, const observation *o);
/* The same families in the OpenMetrics text format 1.0.0: counters' families named
 * without _total, a UNIT line for each _bytes family, and the closing "# EOF". */
void metrics_openmetrics(FILE *f, const observation *o);

#endif
