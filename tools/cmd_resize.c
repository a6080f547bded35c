/* gpupart resize: the operator's change of a shared ledger from outside (a controller
 * growing a share from monitoring, an administrator making room): a partition's limit and
 * guarantee, or the device's budget, written into the ledger file of the ledger folder
 * without joining it as a member (core/ledger/resize.h). The device is picked among the
 * folder's ledgers as `gpupart top` lists them; the members see the new figures at their
 * next reservation. What each partition became is read back from the ledger and printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "observe.h"
#include "options.h"
#include "resize.h"

static const char help[] =
    "usage: gpupart resize [--ledger-dir DIR] [--device D] [--wait MS] PARTITION --limit AMOUNT\n"
    "                      [--guarantee AMOUNT]\n"
    "       gpupart resize [--ledger-dir DIR] [--device D] [--wait MS] --budget AMOUNT\n"
    "\n"
    "Changes a shared device's ledger from outside, without joining it: a partition's limit\n"
    "(and guarantee), or the device's budget. The processes using the partition see the new\n"
    "figures at once. A shrink below what they hold asks them to give back their cached\n"
    "blocks (their responders answer at once) and waits; when they still hold more, nothing\n"
    "is changed and the holders are named. A job started later with the partition's\n"
    "original figures joins it, the ledger's figures applying. A budget change recomputes\n"
    "every limit and guarantee given as a share of the budget (\"30%\" in the configuration,\n"
    "--limit 50% here) from the new budget, all at once or not at all; those given in\n"
    "bytes keep their bytes. It prints what each partition became.\n"
    "\n"
    "  PARTITION         the partition's name\n"
    "  --limit AMOUNT    its new limit: bytes (\"3GiB\") or a share of the budget (\"50%\")\n"
    "  --guarantee AMOUNT\n"
    "                    its new guarantee (default: kept, lowered to the limit)\n"
    "  --budget AMOUNT   the device's new budget, in bytes; at least the guarantees' sum\n"
    "                    (shares recomputed) and every limit in bytes\n"
    "  --device D        which ledger: an index or backend:index as `gpupart top` shows it,\n"
    "                    the device's UUID or identity key, or the ledger's file name\n"
    "                    (default: the folder's only ledger)\n"
    "  --wait MS         how long members get to give back above a shrink (default 2000)\n"
    "  --ledger-dir DIR  the ledger folder (default: the one programs use:\n"
    "                    GPUPART_LEDGER_DIR, else the configuration's ledger_dir,\n"
    "                    else /dev/shm)\n"
    "\n"
    "exit status: 0 changed, 1 a checked failure (no such device or partition, a figure\n"
    "             the budget or guarantees do not allow, the ledger unreadable),\n"
    "             2 bad usage, 3 refused: the members still hold more than the new figure\n";

enum { EXIT_HELD = 3 };

typedef struct resize_args {
  const char *dir, *device, *partition, *limit, *guarantee, *budget;
  int wait_ms;
} resize_args;

static int parse_wait(const char *v, int *out) {
  char *end;
  long ms = strtol(v, &end, 10);
  if (end == v || *end || ms < 0 || ms > 60000) return cli_usage_error("resize", "--wait '%s': want 0 to 60000", v);
  *out = (int)ms;
  return EXIT_OK;
}

static int parse_option(int argc, char **argv, int *i, resize_args *a) {
  static const char *const names[] = {"--ledger-dir", "--device", "--limit", "--guarantee", "--budget"};
  const char **slots[] = {&a->dir, &a->device, &a->limit, &a->guarantee, &a->budget};
  const char *v;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    int r = cli_option(argc, argv, i, names[k], 1, &v);
    if (r > 0) *slots[k] = v;
    if (r) return r < 0 ? EXIT_USAGE : EXIT_OK;
  }
  int r = cli_option(argc, argv, i, "--wait", 1, &v);
  if (r > 0) return parse_wait(v, &a->wait_ms);
  if (r < 0) return EXIT_USAGE;
  if (argv[*i][0] == '-' || a->partition) return cli_usage_error("resize", "unknown argument '%s'", argv[*i]);
  a->partition = argv[*i];
  return EXIT_OK;
}

static int parse_args(int argc, char **argv, resize_args *a) {
  for (int i = 1; i < argc; i++)
    if (parse_option(argc, argv, &i, a)) return EXIT_USAGE;
  if (a->budget && (a->partition || a->limit || a->guarantee))
    return cli_usage_error("resize", "--budget changes the device: no PARTITION, --limit or --guarantee with it");
  if (a->device && !*a->device) return cli_usage_error("resize", "--device needs a value");
  if (!a->budget && (!a->partition || !a->limit))
    return cli_usage_error("resize", "name a PARTITION and its --limit, or give --budget");
  return EXIT_OK;
}

/* An amount in bytes, or a share of of (0: shares refused): *out its bytes, *fraction the
 * share (0 for bytes), which the ledger keeps and follows. */
static int amount(const char *what, const char *v, uint64_t of, uint64_t *out, double *fraction) {
  gpupart__amount am;
  char err[256];
  unsigned accept = GPUPART__ACCEPT_BYTES | (of ? GPUPART__ACCEPT_SHARE : 0);
  if (gpupart__parse_amount(v, accept, &am, err, sizeof err)) return cli_usage_error("resize", "%s: %s", what, err);
  *out = am.is_share ? (uint64_t)(am.share * (double)of) : am.bytes;
  *fraction = am.is_share ? am.share : 0;
  if (!*out) return cli_usage_error("resize", "%s '%s' is 0 bytes", what, v);
  return EXIT_OK;
}

/* Whether ledger d is the one --device names. */
static int names(const observed_device *d, const char *want) {
  char sel[48];
  snprintf(sel, sizeof sel, "%s:%lld", d->backend, (long long)d->index);
  if (d->index >= 0 &&
      (!strcmp(want, sel) || (strtoll(want, NULL, 10) == d->index && want[strspn(want, "0123456789")] == '\0')))
    return 1;
  return !strcmp(want, d->s->file) || !strcmp(want, d->s->identity) || (*d->uuid && !strcmp(want, d->uuid));
}

static int pick(const observation *o, const char *want, const observed_device **out) {
  uint32_t found = 0;
  for (uint32_t i = 0; i < o->n; i++)
    if (!want || names(&o->dev[i], want)) {
      *out = &o->dev[i];
      found++;
    }
  if (found == 1) return EXIT_OK;
  if (!want && !found) fprintf(stderr, "gpupart: resize: no shared ledger in %s\n", o->dir);
  else if (!want) fprintf(stderr, "gpupart: resize: %s holds %u ledgers: name one with --device\n", o->dir, found);
  else
    fprintf(stderr, "gpupart: resize: %s ledgers in %s match --device '%s'\n", found ? "several" : "no", o->dir, want);
  return EXIT_CHECKED;
}

/* " (50% of the budget, follows it)" for a figure given as a fraction; "" for bytes. */
static const char *follows(double fraction, char *out, size_t n) {
  if (!fraction) return "";
  snprintf(out, n, " (%g%% of the budget, follows it)", 100.0 * fraction);
  return out;
}

/* What each partition (only, when not NULL) is now, as the ledger says it after the change. */
static void said(const char *dir, const char *file, const char *only) {
  gpupart__ledger_snapshot *s = malloc(sizeof *s);
  if (!s || gpupart__ledger_shm_read(dir, file, OBSERVE_LOCK_TIMEOUT_MS, s) != GPUPART_OK) {
    char why[sizeof s->why];
    cli_text(s ? s->why : "out of memory", why, sizeof why);
    printf("%s: changed (the ledger could not be read back: %s)\n", file, why);
    free(s);
    return;
  }
  if (!only) printf("%s: budget %llu bytes\n", file, (unsigned long long)s->budget);
  for (uint32_t i = 0; i < s->entries; i++) {
    const gpupart__ledger_snapshot_entry *e = &s->entry[i];
    char lf[64], gf[64], name[sizeof e->name];
    if (only && strcmp(only, e->name)) continue;
    cli_text(e->name, name, sizeof name); /* any bytes: the file's */
    printf("%s: partition '%s' limit %llu bytes%s, guarantee %llu bytes%s\n", file, name,
           (unsigned long long)e->figures.limit, follows(e->limit_fraction, lf, sizeof lf),
           (unsigned long long)e->figures.guarantee, follows(e->guarantee_fraction, gf, sizeof gf));
  }
  free(s);
}

static int change(const resize_args *a, const observed_device *d, const char *dir) {
  gpupart__ledger_change c = {.partition = a->partition, .guarantee = GPUPART__LEDGER_KEEP, .wait_ms = a->wait_ms};
  double none;
  int rc = a->budget ? amount("--budget", a->budget, 0, &c.limit, &none)
                     : amount("--limit", a->limit, d->s->budget, &c.limit, &c.limit_fraction);
  if (!rc && a->guarantee) rc = amount("--guarantee", a->guarantee, d->s->budget, &c.guarantee, &c.guarantee_fraction);
  if (rc) return rc;
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, d->s->file);
  rc = gpupart__ledger_change_file(path, &c);
  char why[1024];
  if (rc == GPUPART_EBUSY) fprintf(stderr, "gpupart: resize: refused: %s\n", cli_last_error(why, sizeof why));
  if (rc) return rc == GPUPART_EBUSY ? EXIT_HELD : cli_failure("resize", rc);
  said(dir, d->s->file, a->partition);
  return EXIT_OK;
}

int cmd_resize(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  resize_args a = {.wait_ms = 2000};
  if (parse_args(argc, argv, &a)) return EXIT_USAGE;
  const char *dir = observe_ledger_dir(a.dir);
  observation o;
  int rc = observe(dir, &o);
  if (rc) return cli_failure("resize", rc);
  const observed_device *d = NULL;
  rc = pick(&o, a.device, &d);
  if (rc == EXIT_OK) rc = change(&a, d, o.dir);
  observe_free(&o);
  return rc;
}
