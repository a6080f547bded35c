/* Helpers of the configuration suites (config, config_user, config_operator): a clean
 * environment before each test, and a temporary INI file, so that what the machine's
 * environment holds never reaches a test. */
#ifndef GPUPART_TESTS_CONFIG_ENV_H
#define GPUPART_TESTS_CONFIG_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

extern char **environ;

/* Unsets every variable whose name starts with one of the n prefixes. */
static inline void test_unset_env(const char *const *prefixes, size_t n) {
  for (int again = 1; again;) {
    again = 0;
    for (char **v = environ; *v && !again; v++)
      for (size_t i = 0; i < n && !again; i++)
        if (strncmp(*v, prefixes[i], strlen(prefixes[i])) == 0) {
          char name[4096];
          snprintf(name, sizeof name, "%.*s", (int)(strcspn(*v, "=")), *v);
          unsetenv(name);
          again = 1; /* environ changed under the walk: start again */
        }
  }
}

/* Writes text to a new /tmp/gpupart-<tag>-*.ini, whose name is left in path (n bytes;
 * the suite unlinks it). */
static inline const char *test_write_ini(char *path, size_t n, const char *tag, const char *text) {
  snprintf(path, n, "/tmp/gpupart-%s-XXXXXX.ini", tag); /* a mkstemps template */
  int fd = mkstemps(path, 4);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

#endif
