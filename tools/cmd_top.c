/* gpupart top: a live view of every shared device of this user (the shared ledgers in the
 * ledger folder): budget, each partition's limit, guarantee, reserved bytes, in use and
 * peak, each member process with its counters and the give-back requests pending, redrawn every interval with plain
 * ANSI escapes; or one frame
 * (--once), or one JSON snapshot (--json). It only reads the ledgers (observe.h). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "observe.h"

static const char help[] = "usage: gpupart top [--once] [--json] [--interval SECONDS] [--ledger-dir DIR]\n"
                           "\n"
                           "Shows every shared device of this user (each ledger file in the ledger folder):\n"
                           "its budget, each partition's limit, guarantee, reserved bytes, bytes in use and\n"
                           "peak, and each member process (pid, command, reserved, in use, refused allocations,\n"
                           "driver allocations), and the give-back requests pending (pid, command, bytes\n"
                           "asked, priority, time left), redrawn until interrupted.\n"
                           "\n"
                           "  --once            print one frame and exit\n"
                           "  --json            print one JSON snapshot and exit (schema in gpupart(1))\n"
                           "  --interval SECS   time between frames, 0.1 to 3600 (default 2)\n"
                           "  --ledger-dir DIR  the ledger folder (default: the one programs use:\n"
                           "                    GPUPART_LEDGER_DIR, else the configuration's ledger_dir,\n"
                           "                    else /dev/shm)\n"
                           "\n"
                           "A ledger whose lock another process holds for longer than 100 ms is shown as busy;\n"
                           "a file that is not a valid ledger of this user is shown as refused, with why.\n"
                           "\n"
                           "exit status: 0 success, 1 the folder cannot be read, 2 bad usage\n";

typedef struct top_args {
  int once, json;
  double interval;
  const char *dir;
} top_args;

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

static int parse_interval(const char *v, double *out) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || *end || !(d >= 0.1 && d <= 3600))
    return cli_usage_error("top", "--interval '%s': want 0.1 to 3600 seconds", v);
  *out = d;
  return EXIT_OK;
}

static int parse_args(int argc, char **argv, top_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--once", 0, &v)) > 0) a->once = 1;
    else if (!r && (r = cli_option(argc, argv, &i, "--json", 0, &v)) > 0) a->json = 1;
    else if (!r && (r = cli_option(argc, argv, &i, "--ledger-dir", 1, &v)) > 0) a->dir = v;
    else if (!r && (r = cli_option(argc, argv, &i, "--interval", 1, &v)) > 0 && parse_interval(v, &a->interval))
      return EXIT_USAGE;
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("top", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

static const char *size_or_dash(uint64_t v, char *buf, size_t n) {
  if (v == UINT64_MAX) return "-";
  human_bytes(v, buf, n);
  return buf;
}

/* s for the terminal (cli_text), then spaces up to width columns. */
static void cell(const char *s, size_t width) {
  char t[1024];
  cli_text(s, t, sizeof t);
  fputs(t, stdout);
  for (size_t w = cli_width(t); w < width; w++) putchar(' ');
}

static void device_line(const observed_device *d) {
  const gpupart__ledger_snapshot *s = d->s;
  char b[32], g[32], r[32], p[32], t[32], f[32];
  printf("DEVICE "), cell(*s->identity ? s->identity : s->file, 0);
  if (*d->backend) {
    printf("  (%s %lld%s", d->backend, (long long)d->index, *d->uuid ? " " : "");
    cell(d->uuid, 0), printf(")");
  }
  if (s->status) {
    printf("  %s: ", observe_status(s)), cell(s->why, 0), printf("\n");
    return;
  }
  human_bytes(s->budget, b, sizeof b), human_bytes(s->guarantees, g, sizeof g);
  human_bytes(s->reserved, r, sizeof r), human_bytes(s->peak_reserved, p, sizeof p);
  printf("\n  budget %s  guaranteed %s  reserved %s  peak %s", b, g, r, p);
  if (d->total != UINT64_MAX)
    printf("  driver: total %s free %s", size_or_dash(d->total, t, sizeof t), size_or_dash(d->free, f, sizeof f));
  printf("\n");
  if (s->dead_members) {
    human_bytes(s->dead_reserved, r, sizeof r);
    printf("  %u dead member%s: the %s %s held are not counted (returned at a live member's next call)\n",
           s->dead_members, s->dead_members == 1 ? "" : "s", r, s->dead_members == 1 ? "it" : "they");
  }
  if (!s->consistent) printf("  INCONSISTENT: "), cell(s->why, 0), printf("\n");
}

/* The PARTITION column: 24 wide, or as wide as the longest name, so the figures align. */
static size_t name_width(const gpupart__ledger_snapshot *s) {
  size_t w = 24;
  for (uint32_t i = 0; i < s->entries; i++) {
    char t[1024];
    cli_text(s->entry[i].name, t, sizeof t);
    if (cli_width(t) > w) w = cli_width(t);
  }
  return w;
}

static void partition_rows(const gpupart__ledger_snapshot *s) {
  size_t w = name_width(s);
  printf("  "), cell("PARTITION", w);
  printf(" %10s %10s %10s %10s %10s %8s\n", "LIMIT", "GUARANTEE", "RESERVED", "IN USE", "PEAK", "PID");
  for (uint32_t i = 0; i < s->entries; i++) {
    const gpupart__ledger_snapshot_entry *e = &s->entry[i];
    char l[32], g[32], r[32], p[32], u[32];
    human_bytes(e->figures.limit, l, sizeof l), human_bytes(e->figures.guarantee, g, sizeof g);
    human_bytes(e->figures.reserved, r, sizeof r), human_bytes(e->figures.peak_reserved, p, sizeof p);
    human_bytes(e->in_use, u, sizeof u);
    printf("  "), cell(e->name, w);
    printf(" %10s %10s %10s %10s %10s %8lld\n", l, g, r, u, p, (long long)e->pid);
  }
}

static void member_rows(const gpupart__ledger_snapshot *s) {
  printf("  %-8s %-16s %-5s %10s %10s %10s %8s %8s\n", "PID", "COMMAND", "ALIVE", "PARTITIONS", "RESERVED", "IN USE",
         "FAILED", "DRIVER");
  for (uint32_t i = 0; i < s->members; i++) {
    const gpupart__ledger_snapshot_member *m = &s->member[i];
    char comm[64], r[32], u[32];
    observe_comm(m, comm, sizeof comm);
    human_bytes(m->reserved, r, sizeof r), human_bytes(m->sum.in_use, u, sizeof u);
    printf("  %-8lld ", (long long)m->pid), cell(*comm ? comm : "-", 16);
    printf(" %-5s %10u %10s %10s %8llu %8llu\n", m->alive ? "yes" : "no", m->entries, r, u,
           (unsigned long long)m->sum.failures, (unsigned long long)m->sum.driver_allocs);
  }
}

/* The give-back requests pending (a floor or a growth waiting for the others' cached
 * memory), in the order they are served; nothing when there is none. */
static void request_rows(const gpupart__ledger_snapshot *s) {
  if (!s->requests) return;
  printf("  %-8s %-16s %10s %8s %9s\n", "PID", "REQUEST BY", "ASKED", "PRIORITY", "TIME LEFT");
  for (uint32_t i = 0; i < s->requests; i++) {
    const gpupart__ledger_snapshot_request *q = &s->request[i];
    char need[32], left[32];
    human_bytes(q->need, need, sizeof need);
    snprintf(left, sizeof left, "%.1f s", (double)q->ms_left / 1000.0);
    printf("  %-8lld ", (long long)q->pid), cell(*q->command ? q->command : "-", 16);
    printf(" %10s %8u %9s\n", need, q->priority, left);
  }
}

static void frame(const observation *o) {
  char when[32];
  time_t t = (time_t)o->time;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
  printf("gpupart top  %s  ledgers in ", when), cell(o->dir, 0), printf(": %u\n", o->n);
  if (o->unread)
    printf("  %u more ledger files are in the folder, not shown (%u are read at once): remove the stale ones\n",
           o->unread, GPUPART__SNAPSHOT_FILES);
  for (uint32_t i = 0; i < o->n; i++) {
    printf("\n");
    device_line(&o->dev[i]);
    if (o->dev[i].s->status) continue;
    partition_rows(o->dev[i].s);
    member_rows(o->dev[i].s);
    request_rows(o->dev[i].s);
  }
  if (!o->n) printf("\nno shared device (programs share a device with GPUPART_SHARED=1)\n");
}

/* One frame or snapshot; EXIT_CHECKED when the folder cannot be read. */
static int show(const top_args *a, int clear) {
  observation o;
  gpupart_result rc = observe(a->dir, &o);
  if (rc) return cli_failure("top", rc);
  if (clear) fputs("\033[H\033[2J", stdout);
  if (a->json) observe_json(stdout, &o);
  else frame(&o);
  fflush(stdout);
  observe_free(&o);
  return EXIT_OK;
}

static void sleep_for(double seconds) {
  struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&t, NULL); /* a signal cuts it short */
}

int cmd_top(int argc, char **argv) {
  top_args a = {.interval = 2};
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  a.dir = observe_ledger_dir(a.dir);
  if (a.once || a.json) return show(&a, 0);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL);
  int tty = isatty(STDOUT_FILENO);
  while (!stop && (rc = show(&a, tty)) == EXIT_OK) {
    if (!tty) printf("\n");
    sleep_for(a.interval);
  }
  return rc;
}
