/* The INI parser's stand-in where libgpupart is built without inih (-Dini=disabled, for
 * machines where libinih cannot be installed, such as the one scripts/gpu-check runs on):
 * every configuration file and every config_text is refused with one clear error, so
 * gpupart_context_create returns GPUPART_ECONFIG instead of silently ignoring a policy.
 * The environment variables and the descriptors' fields work as in every build. */
#include "config.h"

int gpupart__ini_parse(gpupart__layer *l, const char *text, const char *name, gpupart__errors *e) {
  (void)l;
  (void)text;
  gpupart__errors_add(e, 0,
                      "%s: this libgpupart was built without INI support (meson -Dini=disabled): "
                      "configuration files and config_text are refused",
                      name);
  return 1;
}
