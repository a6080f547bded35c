/* Result names and messages, generated from the one table in gpupart.h, and the
 * thread-local detail message of the last failure. Only the failure path writes the
 * message, so successful calls cost nothing here. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static _Thread_local int64_t last_native; /* the driver's code of the last failure, 0 = none */

const char *gpupart_result_name(gpupart_result r) {
  switch (r) {
#define GPUPART__NAME_CASE(name, value, msg) \
  case name: return #name;
    GPUPART_RESULT_TABLE(GPUPART__NAME_CASE)
#undef GPUPART__NAME_CASE
  }
  return "GPUPART_UNKNOWN";
}

const char *gpupart_result_str(gpupart_result r) {
  switch (r) {
#define GPUPART__STR_CASE(name, value, msg) \
  case name: return msg;
    GPUPART_RESULT_TABLE(GPUPART__STR_CASE)
#undef GPUPART__STR_CASE
  }
  return "unknown result";
}

const char *gpupart_last_error(void) { return last_error; }

int64_t gpupart_last_native_error(void) { return last_native; }

static void vformat_at(size_t at, const char *fmt, va_list ap) {
  if (at >= sizeof last_error) return;
  vsnprintf(last_error + at, sizeof last_error - at, fmt, ap);
}

gpupart_result gpupart__fail(gpupart_result code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat_at(0, fmt, ap);
  va_end(ap);
  last_native = 0;
  return code;
}

gpupart_result gpupart__fail_native(gpupart_result code, int64_t native, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat_at(0, fmt, ap);
  va_end(ap);
  last_native = native;
  return code;
}

int gpupart__say(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (n) vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  return -1;
}

void gpupart__error_set(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat_at(0, fmt, ap);
  va_end(ap);
}

void gpupart__error_append(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat_at(strlen(last_error), fmt, ap);
  va_end(ap);
}
