/* The thread-local failure message behind gpupart_last_error, and the helpers every
 * failure path uses to set it and return its code in one statement. */
#ifndef GPUPART_CORE_ERROR_H
#define GPUPART_CORE_ERROR_H

#include <stddef.h>
#include <stdint.h>

#include "gpupart.h"

#if defined(__GNUC__)
#define GPUPART__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GPUPART__PRINTF(f, a)
#endif

/* Formats the calling thread's message and returns code, so failure paths read
 * `return gpupart__fail(GPUPART_EINVAL, "size is 0");`. */
gpupart_result gpupart__fail(gpupart_result code, const char *fmt, ...) GPUPART__PRINTF(2, 3);
/* gpupart__fail for a failed driver call: also records the driver's own code (a VkResult,
 * a cl_int, a CUresult) for gpupart_last_native_error. The message names the code too
 * (e.g. "... failed: VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)"); that is up to fmt. gpupart__fail
 * resets the code to 0, so a failure that restates a driver's failure passes it on with
 * gpupart__fail_native(code, gpupart_last_native_error(), ...). */
gpupart_result gpupart__fail_native(gpupart_result code, int64_t native, const char *fmt, ...) GPUPART__PRINTF(3, 4);
/* Writes a message into buf (n bytes; nothing when n is 0) and returns -1, for the calls
 * that say what is wrong into the caller's buffer instead of the thread's message (value
 * parsers, consistency checks): `return gpupart__say(why, n, "...");`. */
int gpupart__say(char *buf, size_t n, const char *fmt, ...) GPUPART__PRINTF(3, 4);
/* Appends to the calling thread's message (used to add context on the way up). */
void gpupart__error_append(const char *fmt, ...) GPUPART__PRINTF(1, 2);
/* Sets the message without a code (for calls that return void, such as gpupart_free). */
void gpupart__error_set(const char *fmt, ...) GPUPART__PRINTF(1, 2);

#endif
