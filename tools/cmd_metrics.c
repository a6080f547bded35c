/* gpupart metrics: one reading of the shared ledgers as Prometheus text (metrics.h), on
 * standard output or written whole into a file for node_exporter's textfile collector. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "metrics.h"

static const char help[] = "usage: gpupart metrics [--output FILE] [--ledger-dir DIR]\n"
                           "\n"
                           "Prints every shared device of this user (the ledger files of the ledger folder) as\n"
                           "Prometheus text: budget, guarantees, reserved bytes and peak per device; limit,\n"
                           "guarantee, reserved bytes and peak per partition; reserved bytes per member process\n"
                           "(metric names in gpupart(1)).\n"
                           "\n"
                           "  --output FILE     write to FILE instead, whole: into a temporary file beside it,\n"
                           "                    then renamed over it (for node_exporter's textfile collector,\n"
                           "                    FILE ending in .prom). FILE must be a regular file or not\n"
                           "                    exist: a symbolic link, FIFO, device or folder is refused\n"
                           "  --ledger-dir DIR  the ledger folder (default: the one programs use:\n"
                           "                    GPUPART_LEDGER_DIR, else the configuration's ledger_dir,\n"
                           "                    else /dev/shm)\n"
                           "\n"
                           "exit status: 0 success, 1 the folder cannot be read or FILE cannot be written,\n"
                           "             2 bad usage\n";

static int parse_args(int argc, char **argv, const char **output, const char **dir) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--output", 1, &v)) > 0) *output = v;
    else if (!r && (r = cli_option(argc, argv, &i, "--ledger-dir", 1, &v)) > 0) *dir = v;
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("metrics", "unknown argument '%s'", argv[i]);
  }
  if (*output && !**output) return cli_usage_error("metrics", "--output needs a file name");
  return EXIT_OK;
}

static int write_failed(const char *what, const char *path, int err, char *tmp) {
  if (tmp) unlink(tmp);
  fprintf(stderr, "gpupart: metrics: %s %s: %s\n", what, path, strerror(err));
  return EXIT_CHECKED;
}

/* What path is, when it exists and is not a regular file, for the refusal; else NULL.
 * Renaming over a symbolic link, a FIFO or a device node would replace it with a
 * regular file (run as root: /dev/null), so --output writes regular files only. */
static const char *not_regular(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return NULL;
  if (S_ISLNK(st.st_mode)) return "a symbolic link (name the file it points to)";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device node";
  return "not a regular file";
}

/* o into path, whole: a temporary file in its folder (readable as umask allows), renamed
 * over path, which must be a regular file or not exist. */
static int write_whole(const observation *o, const char *path) {
  const char *kind = not_regular(path);
  if (kind) {
    fprintf(stderr, "gpupart: metrics: %s is %s: --output writes regular files only\n", path, kind);
    return EXIT_CHECKED;
  }
  size_t n = strlen(path) + 8;
  char *tmp = malloc(n);
  if (!tmp) return write_failed("cannot write", path, ENOMEM, NULL);
  snprintf(tmp, n, "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) return free(tmp), write_failed("cannot create a temporary file beside", path, errno, NULL);
  mode_t mask = umask(0);
  umask(mask);
  FILE *f = fdopen(fd, "w");
  if (!f) return close(fd), write_failed("cannot write", path, errno, tmp), free(tmp), EXIT_CHECKED;
  metrics_text(f, o);
  int bad = fchmod(fd, 0666 & ~mask) != 0 || fflush(f) != 0 || fsync(fd) != 0;
  int err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
  int rc = bad ? write_failed("cannot write", path, err, tmp) : EXIT_OK;
  free(tmp);
  return rc;
}

int cmd_metrics(int argc, char **argv) {
  const char *output = NULL, *dir = NULL;
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &output, &dir);
  if (rc) return rc;
  observation o;
  gpupart_result r = observe(observe_ledger_dir(dir), &o);
  if (r) return cli_failure("metrics", r);
  observe_warn_unread("metrics", &o);
  if (output) rc = write_whole(&o, output);
  else metrics_text(stdout, &o), rc = fflush(stdout) ? EXIT_CHECKED : EXIT_OK;
  observe_free(&o);
  return rc;
}
