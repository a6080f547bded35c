/* Helpers of the configuration suites (config, config_user, config_operator,
 * config_policy): a clean environment before each test, a temporary INI file, so that
 * what the machine's environment holds never reaches a test, and the context whose log
 * the suites read. */
#ifndef GPUPART_TESTS_CONFIG_ENV_H
#define GPUPART_TESTS_CONFIG_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpupart.h"

extern char **environ;

/* The folder of Kubernetes DRA device metadata that the suites' contexts read when the
 * test runner named none (under meson test, tests/run-pinned names an empty folder of the
 * test's own): one that does not exist, never the machine's
 * /var/run/kubernetes.io/dra-device-attributes, which a context that reads the
 * environment would read by default. */
#define TEST_NO_DRA_DIR "/nonexistent/gpupart-tests/dra-device-attributes"

/* Unsets every variable whose name starts with one of the n prefixes; the DRA metadata
 * folder stays pinned whatever the prefixes remove: to what it was, else TEST_NO_DRA_DIR. */
static inline void test_unset_env(const char *const *prefixes, size_t n) {
  char dra[4096];
  const char *pinned = getenv("GPUPART_DRA_METADATA_DIR");
  snprintf(dra, sizeof dra, "%s", pinned && *pinned ? pinned : TEST_NO_DRA_DIR);
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
  setenv("GPUPART_DRA_METADATA_DIR", dra, 1);
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

/* The suites' INI file: written by test_write_config (tag names the suite in its name),
 * unlinked after each test by test_remove_config. */
static char test_config_path[64];

static inline const char *test_write_config(const char *tag, const char *text) {
  return test_write_ini(test_config_path, sizeof test_config_path, tag, text);
}

static inline void test_remove_config(void) {
  if (test_config_path[0]) unlink(test_config_path);
}

/* A suite's init: no GPUPART_* variable of the machine's reaches its tests. */
static inline void test_clear_gpupart_env(void) {
  static const char *const prefixes[] = {"GPUPART_"};
  test_unset_env(prefixes, 1);
}

/* Expects context creation from d to fail with ECONFIG, its message holding a (and b,
 * unless NULL). */
static inline void test_context_fails(const gpupart_context_desc *d, const char *a, const char *b) {
  gpupart_context *ctx = (gpupart_context *)1;
  cr_assert_eq(gpupart_context_create(d, &ctx), GPUPART_ECONFIG, "%s", gpupart_last_error());
  cr_expect_null(ctx);
  cr_expect(strstr(gpupart_last_error(), a), "'%s' lacks '%s'", gpupart_last_error(), a);
  if (b) cr_expect(strstr(gpupart_last_error(), b), "'%s' lacks '%s'", gpupart_last_error(), b);
}

/* Every line the library logged (newline-separated, cut at the buffer's end), and how
 * many of them were warnings; a test clears them when it starts reading afresh. */
static char test_log_text[16384];
static int test_log_warnings;

static inline void test_log_capture(gpupart_log_level level, const char *message, void *user) {
  (void)user;
  if (level == GPUPART_LOG_WARN) test_log_warnings++;
  strncat(test_log_text, message, sizeof test_log_text - strlen(test_log_text) - 2);
  strcat(test_log_text, "\n");
}

/* A context that reads the environment and the file as a program's does, its log captured. */
static inline gpupart_context *test_env_context(void) {
  gpupart_context_desc d = {.log = test_log_capture};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  return ctx;
}

#endif
