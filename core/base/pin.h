/* Keeping the vendor libraries a backend call loads (a loader, the drivers it loads, the
 * libraries those need) loaded for the rest of the process's life (core/base/pin.c). */
#ifndef GPUPART_CORE_PIN_H
#define GPUPART_CORE_PIN_H

#include <stddef.h>

#include "hostmem.h"

/* The shared objects loaded when a backend call began. */
typedef struct gpupart__pin_mark {
  size_t count;            /* objects loaded then */
  unsigned long long subs; /* objects unloaded so far (dl_phdr_info.dlpi_subs) */
} gpupart__pin_mark;

/* Marks the shared objects loaded now, before a backend call that may load drivers. */
void gpupart__pin_begin(gpupart__pin_mark *mark);

/* After that call: every shared object loaded since the mark becomes RTLD_NODELETE, so no
 * dlclose (gpupart's, or a loader's when its last instance goes) unloads it. Best
 * effort: host memory that cannot be had pins nothing. Returns how many were pinned. */
size_t gpupart__pin_end(const gpupart__hostmem *mem, const gpupart__pin_mark *mark);

#endif
