/* A header in which every public symbol has a comment, in each form check-docs.py
 * accepts; tests/meson.build expects the check to pass on it. */
#ifndef GOOD_H
#define GOOD_H

#ifdef __cplusplus
extern "C" {
#endif

/* A comment above an #if documents the definitions inside it. */
#if defined(GOOD_BUILDING)
#define GPUPART_API __attribute__((visibility("default")))
#else
#define GPUPART_API
#endif

/* One comment over a group with no blank line. */
#define GPUPART_GOOD_A 1
#define GPUPART_GOOD_B 2
#define GPUPART_GOOD_C 3 /* and one beside */
#define GPUPART__INTERNAL 4

/* A type. */
typedef struct good_desc {
  int field;
  void *(*alloc)(unsigned long size, void *user);
} good_desc;

typedef struct good_other {
  int x;
} good_other; /* documented beside its last line */

/* A function over two lines,
 * and its neighbour. */
GPUPART_API int good_function(int a, int b);
GPUPART_API good_desc *good_neighbour(void);
/* A function and the macro that calls it with the caller's struct size. */
GPUPART_API int good_open_sized(good_desc *d, unsigned long size);
#define good_open(d) good_open_sized((d), sizeof(good_desc))
/* A function, the variadic macro that forwards to an inline function, and that function
 * (not checked: static inline functions are internal). */
GPUPART_API int good_close_sized(good_desc *d, unsigned long size);
#define good_close(...) good__inline_close(__VA_ARGS__)
static inline int good__inline_close(good_desc *d) { return good_close_sized(d, sizeof(good_desc)); }
/* A callback type. */
typedef int (*good_fn)(int v);

#ifdef __cplusplus
}
#endif

#endif
