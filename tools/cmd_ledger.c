/* gpupart ledger create | remove: the operator's ledger. Before any job runs, `create`
 * reads the configuration as a program would (GPUPART_CONFIG, GPUPART_*) and makes each
 * device's shared ledger with the operator's budget and partitions (limits and floors),
 * without staying a member: the file persists, a floor is held before its job starts, and
 * jobs joining get the ledger's figures whatever their own configuration says. `remove`
 * ends it. It is what a systemd unit, a Kubernetes init container or a Slurm prolog runs
 * (docs/deploy.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "introspect.h"
#include "reach.h"

static const char help[] = "usage: gpupart ledger create [--ledger-dir DIR] [--device BACKEND:INDEX]\n"
                           "       gpupart ledger remove [--ledger-dir DIR] [--device BACKEND:INDEX] [--force]\n"
                           "\n"
                           "create: reads the configuration as a program would (GPUPART_CONFIG, GPUPART_*) and makes\n"
                           "the device's shared ledger with that budget and the configured partitions (their limits\n"
                           "and guarantees) before any job runs, without staying a member: the file persists, each\n"
                           "declared guarantee is held for its partition before its job starts, and a job joining\n"
                           "the ledger gets its budget and partitions whatever its own configuration says (a\n"
                           "mismatch is a warning naming both figures). Jobs use it when they run shared\n"
                           "(GPUPART_SHARED=1) with the same ledger folder.\n"
                           "remove: ends it (the file goes); refused, naming them, while live jobs hold bytes in it,\n"
                           "unless --force.\n"
                           "\n"
                           "  --ledger-dir DIR  the ledger folder (default: the one programs use: GPUPART_LEDGER_DIR,\n"
                           "                    else the configuration's ledger_dir, else /dev/shm)\n"
                           "  --device B:I      this physical device, e.g. cuda:0 or sim:0 (default: the device that\n"
                           "                    opening index 0 gets: GPUPART_BACKEND, GPUPART_DEVICE)\n"
                           "  --force           remove: even while jobs hold bytes (they keep running on a ledger of\n"
                           "                    their own figures)\n"
                           "\n"
                           "exit status: 0 done, 1 refused or failed (the message says why), 2 bad usage\n";

typedef struct ledger_args {
  int create, force, exact;
  const char *dir;
  gpupart_device_desc desc;
} ledger_args;

static int parse_option(int argc, char **argv, int *i, ledger_args *a) {
  const char *v;
  int r;
  if ((r = cli_option(argc, argv, i, "--force", 0, &v)) > 0) a->force = 1;
  else if (!r && (r = cli_option(argc, argv, i, "--ledger-dir", 1, &v)) > 0) a->dir = v;
  else if (!r && (r = cli_option(argc, argv, i, "--device", 1, &v)) > 0) {
    gpupart__selector sel;
    char err[GPUPART__ERR_MAX];
    if (gpupart__parse_selector(v, &sel, err, sizeof err)) return cli_usage_error("ledger", "--device: %s", err);
    a->desc.backend = sel.backend;
    a->desc.index = sel.index;
    a->exact = 1;
  }
  if (r < 0) return EXIT_USAGE;
  if (!r) return cli_usage_error("ledger", "unknown argument '%s'", argv[*i]);
  return EXIT_OK;
}

static int parse_args(int argc, char **argv, ledger_args *a) {
  if (argc < 2) return cli_usage_error("ledger", "create or remove?");
  if (strcmp(argv[1], "create") == 0) a->create = 1;
  else if (strcmp(argv[1], "remove") != 0) return cli_usage_error("ledger", "unknown action '%s'", argv[1]);
  for (int i = 2; i < argc; i++) {
    int rc = parse_option(argc, argv, &i, a);
    if (rc) return rc;
  }
  if (a->create && a->force) return cli_usage_error("ledger", "--force is for remove");
  if (a->dir && !*a->dir) return cli_usage_error("ledger", "--ledger-dir: an empty folder name");
  return EXIT_OK;
}

static int run(gpupart_context *ctx, const ledger_args *a) {
  char path[4096], size[32];
  uint64_t budget = 0;
  uint32_t nparts = 0;
  int shared = 1;
  int rc = a->create ? gpupart__introspect_ledger_create(ctx, &a->desc, a->exact, path, sizeof path, &budget, &nparts,
                                                         &shared)
                     : gpupart__introspect_ledger_remove(ctx, &a->desc, a->exact, a->force, path, sizeof path);
  if (rc) return cli_failure(a->create ? "ledger create" : "ledger remove", rc);
  if (!a->create) return printf("removed %s\n", path), EXIT_OK;
  human_bytes(budget, size, sizeof size);
  printf("created %s: budget %s, %u partition%s\n", path, size, nparts, nparts == 1 ? "" : "s");
  if (!shared)
    fprintf(stderr, "gpupart: warning: this configuration does not say shared (GPUPART_SHARED=1, shared = true): "
                    "jobs use the ledger only when they run shared in its folder\n");
  return EXIT_OK;
}

int cmd_ledger(int argc, char **argv) {
  ledger_args a = {0};
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  gpupart_context *ctx;
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_NO_TRACE, .ledger_dir = a.dir};
  gpupart_result r = gpupart_context_create(&d, &ctx);
  if (r) return cli_failure("configuration", r);
  rc = run(ctx, &a);
  gpupart_context_destroy(ctx);
  return rc;
}
