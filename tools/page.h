/* The exporter's status page: one self-contained HTML document (no scripts, no external
 * assets) drawing each shared device's partitions as bars, which reloads itself. */
#ifndef GPUPART_TOOLS_PAGE_H
#define GPUPART_TOOLS_PAGE_H

#include <stdio.h>

#include "observe.h"

#define PAGE_REFRESH_SECONDS 2

/* The page of o. */
void page_html(FILE *f, const observation *o);

#endif
