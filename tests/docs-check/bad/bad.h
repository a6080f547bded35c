/* A header with one undocumented public function; tests/meson.build expects
 * check-docs.py to fail on it. */
#ifndef BAD_H
#define BAD_H

/* Documented. */
int bad_documented(void);

/* A comment separated by a blank line documents nothing. */

#define GPUPART_API /* documented beside */
GPUPART_API int bad_undocumented(void);

#endif
