/* gpupart check-config FILE: validates one configuration file on its own (no environment),
 * printing every error as FILE:LINE: message, so a file can be checked before it is
 * deployed, in CI or in a container build. */
#include <string.h>

#include "cli.h"
#include "config.h"

static const char help[] =
    "usage: gpupart check-config FILE\n"
    "\n"
    "Validates a gpupart INI configuration file: sections, keys, every value, and the\n"
    "partitions it declares. The environment is not read. Each error is printed to\n"
    "standard error as FILE:LINE: message.\n"
    "\n"
    "exit status: 0 the file is valid, 1 it has errors or cannot be read, 2 bad usage\n";

static void report(const char *message, void *user) {
  (void)user;
  fprintf(stderr, "%s\n", message);
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
  printf("%s: ok\n", argv[1]);
  return EXIT_OK;
}
