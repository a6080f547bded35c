/* One reading of the shared ledgers for gpupart top, metrics and exporter (observe.h):
 * the core's snapshot of each ledger file, the device labels worked out from each
 * identity key ("sim:I:T", "uuid:U", "pci:B", "BACKEND:I") and, for UUID and PCI keys,
 * from the devices present, and the JSON form that top --json prints. */
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "cli.h"
#include "identity.h"
#include "introspect.h"
#include "observe.h"
#include "options.h"

/* The ledger_dir a device opened with this configuration would use (GPUPART_LEDGER_DIR,
 * else the configuration file, else the option's default), copied to out; "" when the
 * configuration cannot be read (its error was printed). */
static void configured_dir(char *out, size_t n) {
  gpupart_context *ctx = NULL;
  gpupart_result rc = cli_context(&ctx);
  out[0] = '\0';
  if (rc == GPUPART_OK) gpupart__introspect_ledger_dir(ctx, out, n);
  else cli_failure("configuration", rc);
  gpupart_context_destroy(ctx);
}

const char *observe_ledger_dir(const char *option) {
  static char dir[4096];
  const char *env = getenv("GPUPART_LEDGER_DIR");
  if (option && *option) return option;
  configured_dir(dir, sizeof dir);
  if (*dir) return dir;
  return env && *env ? env : gpupart__options[GPUPART__OPT_LEDGER_DIR].def;
}

/* The devices of every backend present, enumerated once. */
static const gpupart_device_info *present(uint32_t *n) {
  static gpupart_device_info infos[64];
  static uint32_t count;
  static int done;
  if (!done) {
    gpupart_context *ctx = NULL;
    count = sizeof infos / sizeof infos[0];
    if (cli_context(&ctx) || gpupart_enumerate(ctx, GPUPART_BACKEND_AUTO, infos, &count)) count = 0;
    if (count > sizeof infos / sizeof infos[0]) count = sizeof infos / sizeof infos[0];
    gpupart_context_destroy(ctx);
    done = 1;
  }
  *n = count;
  return infos;
}

/* A device present whose identity is d's key: its backend, index, UUID and memory. */
static void match_present(observed_device *d) {
  uint32_t n;
  const gpupart_device_info *infos = present(&n);
  for (uint32_t i = 0; i < n; i++) {
    gpupart__identity id;
    gpupart__identity_of(&infos[i], &id);
    if (strcmp(id.key, d->s->identity) != 0) continue;
    snprintf(d->backend, sizeof d->backend, "%s", gpupart_backend_name(infos[i].backend));
    d->index = infos[i].index;
    d->total = infos[i].total_bytes;
    d->free = infos[i].free_bytes;
    if (!gpupart__uuid_is_zero(infos[i].uuid)) gpupart__uuid_format(infos[i].uuid, d->uuid);
    return;
  }
}

/* The labels the key itself spells out; the devices present for the rest. */
static void label(observed_device *d) {
  const char *k = d->s->identity;
  char name[16];
  unsigned idx;
  d->index = -1;
  d->total = d->free = UINT64_MAX;
  if (strncmp(k, "uuid:", 5) == 0) snprintf(d->uuid, sizeof d->uuid, "%s", k + 5);
  if (strncmp(k, "uuid:", 5) == 0 || strncmp(k, "pci:", 4) == 0) match_present(d);
  else if (sscanf(k, "%15[a-z]:%u", name, &idx) == 2 && gpupart__backend_from_name(name) >= 0)
    snprintf(d->backend, sizeof d->backend, "%s", name), d->index = idx;
}

int observe(const char *dir, observation *o) {
  struct timeval tv;
  memset(o, 0, sizeof *o);
  snprintf(o->dir, sizeof o->dir, "%s", dir);
  gettimeofday(&tv, NULL);
  o->time = (double)tv.tv_sec + tv.tv_usec / 1e6;
  int rc = gpupart__ledger_shm_scan_all(dir, OBSERVE_LOCK_TIMEOUT_MS, &o->snaps, &o->n, &o->unread);
  if (rc) return rc;
  o->dev = calloc(o->n ? o->n : 1, sizeof *o->dev);
  if (!o->dev) return observe_free(o), GPUPART_ENOMEM;
  for (uint32_t i = 0; i < o->n; i++) {
    o->dev[i].s = &o->snaps[i];
    if (o->snaps[i].status == GPUPART_OK) label(&o->dev[i]);
    else o->dev[i].index = -1, o->dev[i].total = o->dev[i].free = UINT64_MAX;
  }
  return GPUPART_OK;
}

void observe_free(observation *o) {
  free(o->snaps);
  free(o->dev);
  o->snaps = NULL;
  o->dev = NULL;
  o->n = 0;
}

void observe_comm(const gpupart__ledger_snapshot_member *m, char *out, size_t n) { snprintf(out, n, "%s", m->command); }

void observe_warn_unread(const char *command, const observation *o) {
  char d[sizeof o->dir];
  if (!o->unread) return;
  cli_text(o->dir, d, sizeof d);
  fprintf(stderr,
          "gpupart: %s: warning: %s holds %u ledger files more than the %u read at once, not shown: remove the "
          "stale ones\n",
          command, d, o->unread, GPUPART__SNAPSHOT_FILES);
}

const char *observe_status(const gpupart__ledger_snapshot *s) {
  return s->status == GPUPART_OK ? "ok" : s->status == GPUPART_EBUSY ? "busy" : "refused";
}

/* ---- JSON ---- */

static void json_u64_or_null(FILE *f, uint64_t v) {
  if (v == UINT64_MAX) fputs("null", f);
  else fprintf(f, "%llu", (unsigned long long)v);
}

static void json_str_or_null(FILE *f, const char *s) {
  if (*s) json_string(f, s);
  else fputs("null", f);
}

static void json_partitions(FILE *f, const gpupart__ledger_snapshot *s) {
  for (uint32_t i = 0; i < s->entries; i++) {
    const gpupart__ledger_snapshot_entry *e = &s->entry[i];
    fprintf(f, "%s\n      {\"name\": ", i ? "," : "");
    json_string(f, e->name);
    fprintf(f,
            ", \"limit\": %llu, \"guarantee\": %llu, \"reserved\": %llu, \"in_use\": %llu, \"peak_reserved\": %llu, "
            "\"member\": %llu, \"pid\": %lld, \"claim\": ",
            (unsigned long long)e->figures.limit, (unsigned long long)e->figures.guarantee,
            (unsigned long long)e->figures.reserved, (unsigned long long)e->in_use,
            (unsigned long long)e->figures.peak_reserved, (unsigned long long)e->member, (long long)e->pid);
    json_str_or_null(f, e->labels.claim);
    fputs(", \"namespace\": ", f);
    json_str_or_null(f, e->labels.namespace);
    fputs(", \"pod\": ", f);
    json_str_or_null(f, e->labels.pod);
    fputc('}', f);
  }
}

static void json_counters(FILE *f, const gpupart__ledger_counters *c) {
  fprintf(f, "\"in_use\": %llu, \"allocation_failures\": %llu, \"driver_allocations\": %llu, \"driver_frees\": %llu",
          (unsigned long long)c->in_use, (unsigned long long)c->failures, (unsigned long long)c->driver_allocs,
          (unsigned long long)c->driver_frees);
}

static void json_members(FILE *f, const gpupart__ledger_snapshot *s) {
  for (uint32_t i = 0; i < s->members; i++) {
    const gpupart__ledger_snapshot_member *m = &s->member[i];
    char comm[64];
    observe_comm(m, comm, sizeof comm);
    fprintf(f, "%s\n      {\"id\": %llu, \"pid\": %lld, \"command\": ", i ? "," : "", (unsigned long long)m->id,
            (long long)m->pid);
    json_str_or_null(f, comm);
    fprintf(f, ", \"alive\": %s, \"partitions\": %u, \"reserved\": %llu, ", m->alive ? "true" : "false", m->entries,
            (unsigned long long)m->reserved);
    json_counters(f, &m->sum);
    fputs("}", f);
  }
}

static void json_shares(FILE *f, const gpupart__ledger_snapshot *s) {
  for (uint32_t i = 0; i < s->shares; i++) {
    const gpupart__ledger_snapshot_share *sh = &s->share[i];
    fprintf(f, "%s\n      {\"partition\": ", i ? "," : "");
    json_string(f, s->entry[sh->entry].name);
    fprintf(f, ", \"member\": %llu, \"pid\": %lld, \"reserved\": %llu, ", (unsigned long long)s->member[sh->member].id,
            (long long)s->member[sh->member].pid, (unsigned long long)sh->reserved);
    json_counters(f, &sh->c);
    fputs("}", f);
  }
}

/* The pending give-back requests, in the order they are served. */
static void json_requests(FILE *f, const gpupart__ledger_snapshot *s) {
  for (uint32_t i = 0; i < s->requests; i++) {
    const gpupart__ledger_snapshot_request *q = &s->request[i];
    fprintf(f, "%s\n      {\"ticket\": %llu, \"pid\": %lld, \"command\": ", i ? "," : "", (unsigned long long)q->ticket,
            (long long)q->pid);
    json_str_or_null(f, q->command);
    fprintf(f, ", \"need\": %llu, \"priority\": %u, \"ms_left\": %llu}", (unsigned long long)q->need, q->priority,
            (unsigned long long)q->ms_left);
  }
}

static void json_figures(FILE *f, const observed_device *d) {
  const gpupart__ledger_snapshot *s = d->s;
  if (s->status != GPUPART_OK) {
    fputs(", \"budget\": null, \"guarantees\": null, \"reserved\": null, \"peak_reserved\": null, "
          "\"dead_members\": null, \"dead_reserved\": null",
          f);
    return;
  }
  fprintf(f,
          ", \"budget\": %llu, \"guarantees\": %llu, \"reserved\": %llu, \"peak_reserved\": %llu, "
          "\"dead_members\": %u, \"dead_reserved\": %llu",
          (unsigned long long)s->budget, (unsigned long long)s->guarantees, (unsigned long long)s->reserved,
          (unsigned long long)s->peak_reserved, s->dead_members, (unsigned long long)s->dead_reserved);
}

static void json_device(FILE *f, const observed_device *d) {
  const gpupart__ledger_snapshot *s = d->s;
  fputs("\n    {\"file\": ", f);
  json_string(f, s->file);
  fputs(", \"identity\": ", f);
  json_str_or_null(f, s->identity);
  fputs(", \"backend\": ", f);
  json_str_or_null(f, d->backend);
  fputs(", \"index\": ", f);
  if (d->index < 0) fputs("null", f);
  else fprintf(f, "%lld", (long long)d->index);
  fputs(", \"uuid\": ", f);
  json_str_or_null(f, d->uuid);
  fprintf(f, ", \"status\": \"%s\", \"error\": ", observe_status(s));
  json_str_or_null(f, s->status ? s->why : "");
  fprintf(f, ", \"consistent\": %s, \"inconsistency\": ", s->consistent ? "true" : "false");
  json_str_or_null(f, s->status == GPUPART_OK && !s->consistent ? s->why : "");
  json_figures(f, d);
  fputs(", \"driver_total\": ", f);
  json_u64_or_null(f, d->total);
  fputs(", \"driver_free\": ", f);
  json_u64_or_null(f, d->free);
  fputs(",\n     \"partitions\": [", f);
  json_partitions(f, s);
  fputs("],\n     \"members\": [", f);
  json_members(f, s);
  fputs("],\n     \"shares\": [", f);
  json_shares(f, s);
  fputs("],\n     \"requests\": [", f);
  json_requests(f, s);
  fputs("]}", f);
}

void observe_json(FILE *f, const observation *o) {
  fputs("{\"ledger_dir\": ", f);
  json_string(f, o->dir);
  fprintf(f, ", \"time\": %.3f, \"unread_ledgers\": %u, \"devices\": [", o->time, o->unread);
  for (uint32_t i = 0; i < o->n; i++) fputs(i ? "," : "", f), json_device(f, &o->dev[i]);
  fputs(o->n ? "\n  ]}\n" : "]}\n", f);
}
