/* gpupart check-config FILE: validates one configuration file on its own (no environment),
 * printing every error as FILE:LINE: message, so a file can be checked before it is
 * deployed, in CI or in a container build. A valid file is then held against this
 * machine: what can never apply here (a [device cuda:0] section where no CUDA driver
 * loads) is a warning, since the file may be meant for another machine. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "reach.h"

static const char help[] = "usage: gpupart check-config FILE\n"
                           "\n"
                           "Validates a gpupart INI configuration file: sections, keys, every value, and the\n"
                           "partitions it declares. The environment is not read. Each error is printed to\n"
                           "standard error as FILE:LINE: message.\n"
                           "\n"
                           "A valid file is then held against this machine: a [device] section or a partition's\n"
                           "device that can never apply here (its backend not built, its driver not loadable,\n"
                           "or no such device index) is printed as FILE:LINE: warning: ..., and the file is\n"
                           "still ok (it may be meant for another machine).\n"
                           "\n"
                           "exit status: 0 the file is valid, 1 it has errors or cannot be read, 2 bad usage\n";

static void report(const char *message, void *user) {
  (void)user;
  fprintf(stderr, "%s\n", message);
}

static void warn(const gpupart__unreachable *u, void *user) {
  fprintf(stderr, "%s:%d: warning: %s can never apply on this machine: %s\n", (const char *)user, u->src.line, u->what,
          u->why);
}

/* The file's text (already checked: a regular file of at most 1 MiB), or NULL. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text = f ? calloc(1, GPUPART__FILE_MAX + 1) : NULL;
  if (text && fread(text, 1, GPUPART__FILE_MAX, f) == 0 && ferror(f)) text[0] = '\0';
  if (f) fclose(f);
  return text;
}

/* The valid file, applied as a context's only configuration, against this machine's
 * backends; returns how many of its devices can never apply here. */
static int machine_warnings(const char *path) {
  char *text = read_text(path);
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE, .config_text = text};
  gpupart_context *ctx = NULL;
  int n = 0;
  if (text && gpupart_context_create(&d, &ctx) == GPUPART_OK)
    n = (int)gpupart__config_unreachable(ctx, 0, warn, (void *)path);
  gpupart_context_destroy(ctx);
  free(text);
  return n;
}

int cmd_check_config(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  if (argc != 2) return cli_usage_error("check-config", "expects exactly one FILE");
  if (argv[1][0] == '-' && argv[1][1]) return cli_usage_error("check-config", "unknown option '%s'", argv[1]);
  int errors = gpupart__config_check_file(argv[1], report, NULL);
  if (errors) {
    fprintf(stderr, "%s: %d error%s\n", argv[1], errors, errors == 1 ? "" : "s");
    return EXIT_CHECKED;
  }
  int warnings = machine_warnings(argv[1]);
  if (warnings) printf("%s: ok (%d warning%s about this machine)\n", argv[1], warnings, warnings == 1 ? "" : "s");
  else printf("%s: ok\n", argv[1]);
  return EXIT_OK;
}
