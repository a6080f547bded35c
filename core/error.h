/* The thread-local failure message behind gpupart_last_error, and the helpers every
 * failure path uses to set it and return its code in one statement. */
#ifndef GPUPART_CORE_ERROR_H
#define GPUPART_CORE_ERROR_H

#include "gpupart.h"

#if defined(__GNUC__)
#define GPUPART__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GPUPART__PRINTF(f, a)
#endif

/* Formats the calling thread's message and returns code, so failure paths read
 * `return gpupart__fail(GPUPART_EINVAL, "size is 0");`. */
gpupart_result gpupart__fail(gpupart_result code, const char *fmt, ...) GPUPART__PRINTF(2, 3);
/* Appends to the calling thread's message (used to add context on the way up). */
void gpupart__error_append(const char *fmt, ...) GPUPART__PRINTF(1, 2);
/* Sets the message without a code (for calls that return void, such as gpupart_free). */
void gpupart__error_set(const char *fmt, ...) GPUPART__PRINTF(1, 2);

#endif
