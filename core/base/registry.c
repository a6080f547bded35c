/* The names the library answers to: its version, and its backends from the one list in
 * registry.h (their names, in both directions, and the order AUTO tries them in). Which
 * backends this build contains, and their tables, is the context's business
 * (context.c): nothing here refers to a backend's code. */
#include "registry.h"

#include <stdio.h>
#include <strings.h>

#define GPUPART__STR2(x) #x
#define GPUPART__STR(x) GPUPART__STR2(x)

const char *gpupart_version_string(void) {
  return GPUPART__STR(GPUPART_VERSION_MAJOR) "." GPUPART__STR(GPUPART_VERSION_MINOR) "." GPUPART__STR(
      GPUPART_VERSION_PATCH);
}

uint32_t gpupart_version(void) {
  return GPUPART_VERSION_MAJOR * 10000u + GPUPART_VERSION_MINOR * 100u + GPUPART_VERSION_PATCH;
}

#define GPUPART__NAME(ID, name, rank) [GPUPART_BACKEND_##ID] = #name,
static const char *const names[GPUPART__BACKEND_COUNT] = {[GPUPART_BACKEND_AUTO] = "auto",
                                                          GPUPART__BACKENDS(GPUPART__NAME)};
#undef GPUPART__NAME

#define GPUPART__RANK(ID, name, rank) [GPUPART_BACKEND_##ID] = rank,
static const int ranks[GPUPART__BACKEND_COUNT] = {[GPUPART_BACKEND_AUTO] = -1, GPUPART__BACKENDS(GPUPART__RANK)};
#undef GPUPART__RANK

const char *gpupart_backend_name(gpupart_backend b) {
  return (unsigned)b < GPUPART__BACKEND_COUNT ? names[b] : "unknown";
}

int gpupart__backend_from_name(const char *s) {
  for (int b = 1; b < GPUPART__BACKEND_COUNT; b++)
    if (strcasecmp(s, names[b]) == 0) return b;
  return -1;
}

unsigned gpupart__backend_auto_order(gpupart_backend *out, int last_resort) {
  int top = 0;
  for (int b = 0; b < GPUPART__BACKEND_COUNT; b++)
    if (ranks[b] > top) top = ranks[b];
  unsigned n = 0;
  for (int r = top; r >= (last_resort ? 0 : 1); r--)
    for (int b = 1; b < GPUPART__BACKEND_COUNT; b++)
      if (ranks[b] == r) out[n++] = (gpupart_backend)b;
  return n;
}

void gpupart__backend_names(char *buf, size_t n) {
  gpupart_backend order[GPUPART__BACKEND_COUNT];
  unsigned count = gpupart__backend_auto_order(order, 1);
  size_t used = 0;
  if (n) buf[0] = '\0';
  for (unsigned i = 0; i < count && used < n; i++) {
    const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
    used += (size_t)snprintf(buf + used, n - used, "%s%s", sep, names[order[i]]);
  }
}
