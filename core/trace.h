/* Trace recording (GPUPART_TRACE=FILE, or `trace = FILE`): a context that has it writes
 * every allocation and free of the application as the .ops trace that gpupart-bench
 * replays (bench/traces/README.md): a `#` header, then `a <id> <size> <partition>` and
 * `f <id>` lines, ids unique within the file. When it is off, the allocation paths pay
 * one branch on a field of the partition (gpupart_partition.trace, NULL), which shares
 * the partition lock's cache line. When it is on, one mutex of the trace serialises the
 * buffered writes. */
#ifndef GPUPART_CORE_TRACE_H
#define GPUPART_CORE_TRACE_H

#include <stdint.h>

#include "gpupart.h"
#include "hostmem.h"

typedef struct gpupart__trace gpupart__trace;

/* Opens the trace file named by path (every "%p" is the process id, "%%" a '%'), with
 * O_CLOEXEC and mode 0600, locks (flock) and truncates it, and writes its header; or,
 * when another context of this process records to that file already, shares its trace
 * (released by as many closes). A file another process holds locked is left alone:
 * this process records to path.<pid> (said on stderr). A file an earlier trace of this
 * process closed, unchanged since, is appended to with the ids going on, not truncated.
 * src names where path was set, for the message. OK with *out, ECONFIG (the file cannot
 * be created or written; the message names it and why) or ENOMEM. */
int gpupart__trace_open(const gpupart__hostmem *m, const char *path, const char *src, gpupart__trace **out);
/* Flushes; the last close of t also closes the file and frees t. NULL is a no-op. */
void gpupart__trace_close(gpupart__trace *t);
/* Records the allocation of size bytes in partition p whose handle's node is r: draws
 * the next id, stores it with the node (gpupart__tlsf_aux) and buffers its line. No
 * gpupart lock held; before the handle is returned to the caller. */
void gpupart__trace_alloc(gpupart__trace *t, const gpupart_partition *p, uint64_t *aux, uint64_t size);
/* Records the free of the allocation whose id was read from its node before it was freed. */
void gpupart__trace_free(gpupart__trace *t, uint64_t id);

#endif
