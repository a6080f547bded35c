/* Host memory for gpupart's own metadata. Every host allocation the library makes goes
 * through one of these, so an application that installed its own allocator through
 * gpupart_context_desc sees all of gpupart's host memory. */
#ifndef GPUPART_CORE_HOSTMEM_H
#define GPUPART_CORE_HOSTMEM_H

#include <stddef.h>

typedef struct gpupart__hostmem {
  void *(*alloc)(size_t size, void *user); /* never NULL once set up */
  void (*free)(void *ptr, void *user);     /* accepts NULL */
  void *user;
} gpupart__hostmem;

/* malloc/free, for code that runs before a context exists and for tests. */
const gpupart__hostmem *gpupart__hostmem_default(void);

/* Zeroed allocation of n * size bytes; NULL on overflow or exhaustion. */
void *gpupart__host_calloc(const gpupart__hostmem *m, size_t n, size_t size);
void gpupart__host_free(const gpupart__hostmem *m, void *p);
/* A copy of s in m (NULL for NULL, or when out of memory). */
char *gpupart__strdup(const gpupart__hostmem *m, const char *s);

#endif
