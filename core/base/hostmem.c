/* Host memory for gpupart's own metadata: the default allocator and the zeroing,
 * overflow-checked helpers that every core file uses. */
#include "hostmem.h"

#include <stdlib.h>
#include <string.h>

static void *default_alloc(size_t size, void *user) {
  (void)user;
  return malloc(size);
}

static void default_free(void *ptr, void *user) {
  (void)user;
  free(ptr);
}

static const gpupart__hostmem default_hostmem = {default_alloc, default_free, NULL};

const gpupart__hostmem *gpupart__hostmem_default(void) { return &default_hostmem; }

void *gpupart__host_calloc(const gpupart__hostmem *m, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes) || bytes == 0) return NULL;
  void *p = m->alloc(bytes, m->user);
  if (p) memset(p, 0, bytes);
  return p;
}

void gpupart__host_free(const gpupart__hostmem *m, void *p) {
  if (p) m->free(p, m->user);
}

char *gpupart__strdup(const gpupart__hostmem *m, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = gpupart__host_calloc(m, 1, n);
  if (d) memcpy(d, s, n);
  return d;
}
