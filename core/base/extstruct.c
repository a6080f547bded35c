/* The copy-in and copy-out of extensible public structs (see extstruct.h): the only code
 * that looks at the size a caller's struct was compiled with, so the rule of docs/api.md
 * ("Extending structs") holds the same way for every descriptor, statistic and info. */
#include "extstruct.h"

#include <string.h>

#include "error.h"

/* The offset of the first nonzero byte of p[from, to), or to when there is none. */
static size_t first_nonzero(const unsigned char *p, size_t from, size_t to) {
  while (from < to && !p[from]) from++;
  return from;
}

gpupart_result gpupart__copy_in(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                                const char *what) {
  memset(dst, 0, dst_size);
  if (!src) return GPUPART_OK;
  if (src_size < min_size)
    return gpupart__fail(GPUPART_EINVAL, "%s has %zu bytes; the smallest layout (gpupart 0.2) has %zu", what, src_size,
                         min_size);
  size_t k = first_nonzero(src, dst_size, src_size);
  if (k < src_size)
    return gpupart__fail(GPUPART_EINVAL,
                         "%s has %zu bytes; this library (%s) knows %zu and byte %zu is not zero: built against a "
                         "newer gpupart?",
                         what, src_size, gpupart_version_string(), dst_size, k);
  memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
  return GPUPART_OK;
}

gpupart_result gpupart__copy_out(void *dst, size_t dst_size, const void *src, size_t src_size, size_t min_size,
                                 const char *what) {
  if (dst_size < min_size)
    return gpupart__fail(GPUPART_EINVAL, "%s has %zu bytes; the smallest layout (gpupart 0.2) has %zu", what, dst_size,
                         min_size);
  size_t n = src_size < dst_size ? src_size : dst_size;
  memcpy(dst, src, n);
  memset((unsigned char *)dst + n, 0, dst_size - n);
  return GPUPART_OK;
}

gpupart_result gpupart__backend_desc_in(void *dst, size_t dst_size, const void *desc, size_t size, size_t min_size,
                                        const char *what) {
  return gpupart__copy_in(dst, dst_size, desc, size ? size : min_size, min_size, what);
}
