/* The shared ledgers (observe.h) as Prometheus text 0.0.4 or OpenMetrics 1.0.0, for
 * gpupart metrics and the exporter. Each family has a gpupart_ prefix, a unit suffix,
 * HELP and TYPE lines, and labels naming the device (device = its key, backend, index,
 * uuid), the partition, and for a member's figures its pid, member id and command. A
 * partition's series carry no pid: a shared partition outlives the process that made it,
 * and its series must stay one series. The two formats differ only in the family's
 * metadata (OpenMetrics names a counter's family without its _total, and says the unit of
 * a _bytes family in a UNIT line) and in the closing "# EOF" OpenMetrics requires. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"

typedef enum scope { LEDGER, DEVICE, PARTITION, MEMBER, SHARE } scope; /* SHARE: one member of one partition */

/* One sample's value: 1 and *v set, or 0 for no sample. */
typedef int (*value_fn)(const observed_device *d, uint32_t i, uint64_t *v);

typedef struct family {
  const char *name, *help;
  scope scope;
  value_fn value;
} family;

static int ends_with(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n > k && strcmp(name + n - k, suffix) == 0;
}

/* A family whose name ends in _total is a counter; every other one a gauge. */
static int is_counter(const char *name) { return ends_with(name, "_total"); }

#define FIG(fn, expr)                                                \
  static int fn(const observed_device *d, uint32_t i, uint64_t *v) { \
    (void)i;                                                         \
    *v = (expr);                                                     \
    return 1;                                                        \
  }
FIG(up, d->s->status == GPUPART_OK)
FIG(budget, d->s->budget)
FIG(guarantees, d->s->guarantees)
FIG(reserved, d->s->reserved)
FIG(peak, d->s->peak_reserved)
FIG(members, d->s->members)
FIG(dead, d->s->dead_members)
FIG(dead_reserved, d->s->dead_reserved)
FIG(requests, d->s->requests)
FIG(requested, d->s->requested)
FIG(p_limit, d->s->entry[i].figures.limit)
FIG(p_guarantee, d->s->entry[i].figures.guarantee)
FIG(p_reserved, d->s->entry[i].figures.reserved)
FIG(p_peak, d->s->entry[i].figures.peak_reserved)
FIG(m_reserved, d->s->member[i].reserved)
FIG(m_alive, (uint64_t)d->s->member[i].alive)
FIG(m_partitions, d->s->member[i].entries)
FIG(p_in_use, d->s->entry[i].in_use)
FIG(m_in_use, d->s->member[i].sum.in_use)
FIG(s_in_use, d->s->share[i].c.in_use)
FIG(s_failures, d->s->share[i].c.failures)
FIG(s_driver_allocs, d->s->share[i].c.driver_allocs)
FIG(s_driver_frees, d->s->share[i].c.driver_frees)
#undef FIG

/* Only for a ledger that was read: a busy or refused file has no sample but ledger_up's. */
static int consistent(const observed_device *d, uint32_t i, uint64_t *v) {
  (void)i;
  return *v = (uint64_t)d->s->consistent, d->s->status == GPUPART_OK;
}

static int driver_total(const observed_device *d, uint32_t i, uint64_t *v) {
  (void)i;
  return *v = d->total, d->total != UINT64_MAX;
}

static int driver_free(const observed_device *d, uint32_t i, uint64_t *v) {
  (void)i;
  return *v = d->free, d->free != UINT64_MAX;
}

static const family families[] = {
    {"gpupart_ledger_up", "1 when the shared ledger file was read; 0 when it was busy or refused", LEDGER, up},
    {"gpupart_ledger_consistent", "1 when every invariant of the shared ledger held when read", LEDGER, consistent},
    {"gpupart_device_budget_bytes", "Bytes the processes sharing the device may take from it", DEVICE, budget},
    {"gpupart_device_guarantee_bytes", "Sum of the partitions' guarantees on the device", DEVICE, guarantees},
    {"gpupart_device_reserved_bytes", "Bytes the partitions hold from the driver", DEVICE, reserved},
    {"gpupart_device_peak_reserved_bytes", "Most bytes the partitions held from the driver at once", DEVICE, peak},
    {"gpupart_device_members", "Device handles (of any process) sharing the device", DEVICE, members},
    {"gpupart_device_dead_members", "Members whose process is gone, not reaped yet (their bytes are counted nowhere)",
     DEVICE, dead},
    {"gpupart_device_dead_reserved_bytes", "Bytes the dead members' shares still record, left out of every figure",
     DEVICE, dead_reserved},
    {"gpupart_device_give_back_requests",
     "Give-back requests pending on the device (processes waiting for others' memory)", DEVICE, requests},
    {"gpupart_device_give_back_requested_bytes", "Bytes the pending give-back requests ask, summed", DEVICE, requested},
    {"gpupart_device_driver_total_bytes", "Device memory as the driver reports it", DEVICE, driver_total},
    {"gpupart_device_driver_free_bytes", "Free device memory as the driver reports it", DEVICE, driver_free},
    {"gpupart_partition_limit_bytes", "Most bytes the partition may hold", PARTITION, p_limit},
    {"gpupart_partition_guarantee_bytes", "Bytes kept for the partition whoever else allocates", PARTITION,
     p_guarantee},
    {"gpupart_partition_reserved_bytes", "Bytes the partition holds from the driver", PARTITION, p_reserved},
    {"gpupart_partition_peak_reserved_bytes", "Most bytes the partition held from the driver at once", PARTITION,
     p_peak},
    {"gpupart_partition_in_use_bytes", "Bytes in the partition's live allocations, all its members together", PARTITION,
     p_in_use},
    {"gpupart_member_reserved_bytes", "Bytes the partitions of one device handle hold from the driver", MEMBER,
     m_reserved},
    {"gpupart_member_alive", "1 while the member's process lives", MEMBER, m_alive},
    {"gpupart_member_partitions", "Partitions the member holds a share of (created or joined)", MEMBER, m_partitions},
    {"gpupart_member_in_use_bytes", "Bytes in the live allocations of one device handle, all its partitions together",
     MEMBER, m_in_use},
    {"gpupart_member_partition_in_use_bytes", "Bytes in one member's live allocations of one partition", SHARE,
     s_in_use},
    {"gpupart_allocation_failures_total", "Allocations of one member in one partition refused with ELIMIT or EDEVMEM",
     SHARE, s_failures},
    {"gpupart_driver_allocations_total", "Blocks one member's partition obtained from the driver", SHARE,
     s_driver_allocs},
    {"gpupart_driver_frees_total", "Blocks one member's partition gave back to the driver", SHARE, s_driver_frees},
};

/* A label value: backslash, quote and newline escaped; a byte that is not UTF-8 becomes
 * U+FFFD. */
static void label_value(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    size_t n = *p >= 0x80 ? cli_utf8_len(p) : 1;
    if (*p == '\\' || *p == '"') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (!n) fputs("\xef\xbf\xbd", f);
    else fwrite(p, 1, n, f), p += n - 1;
  }
  fputc('"', f);
}

static void label(FILE *f, const char *sep, const char *name, const char *value) {
  fprintf(f, "%s%s=", sep, name);
  label_value(f, value);
}

static void device_labels(FILE *f, const observed_device *d) {
  char index[24] = "";
  if (d->index >= 0) snprintf(index, sizeof index, "%lld", (long long)d->index);
  label(f, "", "device", d->s->identity);
  label(f, ",", "backend", d->backend);
  label(f, ",", "index", index);
  label(f, ",", "uuid", d->uuid);
}

static void pid_label(FILE *f, int64_t pid) {
  char s[24];
  snprintf(s, sizeof s, "%lld", (long long)pid);
  label(f, ",", "pid", s);
}

static void member_labels(FILE *f, const gpupart__ledger_snapshot_member *m) {
  char comm[64], id[24];
  observe_comm(m, comm, sizeof comm);
  pid_label(f, m->pid);
  snprintf(id, sizeof id, "%llu", (unsigned long long)m->id);
  label(f, ",", "member", id);
  label(f, ",", "command", comm);
}

/* A partition's name, and the workload that made it where the ledger says (a DRA
 * claim's claim, namespace and pod: each label only when known). */
static void partition_labels(FILE *f, const gpupart__ledger_snapshot_entry *e) {
  label(f, ",", "partition", e->name);
  if (e->labels.claim[0]) label(f, ",", "claim", e->labels.claim);
  if (e->labels.namespace[0]) label(f, ",", "namespace", e->labels.namespace);
  if (e->labels.pod[0]) label(f, ",", "pod", e->labels.pod);
}

/* The labels of sample i of a family of scope sc. */
static void labels(FILE *f, const observed_device *d, scope sc, uint32_t i) {
  if (sc == LEDGER) label(f, "", "file", d->s->file), label(f, ",", "device", d->s->identity);
  else device_labels(f, d);
  if (sc == PARTITION) partition_labels(f, &d->s->entry[i]); /* no pid: the series outlives its maker */
  if (sc == MEMBER) member_labels(f, &d->s->member[i]);
  if (sc == SHARE) {
    partition_labels(f, &d->s->entry[d->s->share[i].entry]);
    member_labels(f, &d->s->member[d->s->share[i].member]);
  }
}

static uint32_t samples(const observed_device *d, scope sc) {
  if (sc == LEDGER) return 1;
  if (d->s->status != GPUPART_OK) return 0;
  return sc == DEVICE ? 1 : sc == PARTITION ? d->s->entries : sc == SHARE ? d->s->shares : d->s->members;
}

/* The label sets one family wrote for one device. A sample whose labels repeat an earlier
 * one's is left out, since the exposition format wants each series once: two partition
 * names alike but for bytes that are not UTF-8 (each one U+FFFD), or a damaged ledger (two
 * shares of one member in one partition, a member id twice). */
#define SEEN_SLOTS 2048u /* over twice the samples of one device in one family (512 shares) */
typedef struct seen {
  char *slot[SEEN_SLOTS];
} seen;

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* Whether labels were written already; else they are remembered (a copy that cannot be
 * made is not: the sample is still written). */
static int repeats(seen *z, const char *labels) {
  for (uint32_t i = fnv1a(labels) & (SEEN_SLOTS - 1);; i = (i + 1) & (SEEN_SLOTS - 1)) {
    if (!z->slot[i]) return z->slot[i] = strdup(labels), 0;
    if (strcmp(z->slot[i], labels) == 0) return 1;
  }
}

static void device_samples(FILE *f, const family *fam, const observed_device *d) {
  seen z = {{NULL}};
  char buf[4096];
  for (uint32_t i = 0; i < samples(d, fam->scope); i++) {
    uint64_t v;
    FILE *m = fam->value(d, i, &v) ? fmemopen(buf, sizeof buf, "w") : NULL;
    if (!m) continue;
    labels(m, d, fam->scope, i);
    fclose(m);
    if (!repeats(&z, buf)) fprintf(f, "%s{%s} %llu\n", fam->name, buf, (unsigned long long)v);
  }
  for (uint32_t k = 0; k < SEEN_SLOTS; k++) free(z.slot[k]);
}

/* A HELP text: backslash and newline escaped, and in OpenMetrics the double quote too. */
static void help_text(FILE *f, const char *s, int om) {
  for (; *s; s++) {
    if (*s == '\\' || (om && *s == '"')) fprintf(f, "\\%c", *s);
    else if (*s == '\n') fputs("\\n", f);
    else fputc(*s, f);
  }
}

/* The HELP and TYPE lines of a family (and its UNIT line in OpenMetrics). A counter's
 * samples end in _total; OpenMetrics names its family without that suffix. */
static void family_head(FILE *f, const char *name, const char *help, int om) {
  int counter = is_counter(name);
  int base = (int)strlen(name) - (om && counter ? 6 : 0); /* the family's name: name[0, base) */
  fprintf(f, "# HELP %.*s ", base, name);
  help_text(f, help, om);
  fprintf(f, "\n# TYPE %.*s %s\n", base, name, counter ? "counter" : "gauge");
  if (om && ends_with(name, "_bytes")) fprintf(f, "# UNIT %.*s bytes\n", base, name);
}

static void family_text(FILE *f, const family *fam, const observation *o, int om) {
  family_head(f, fam->name, fam->help, om);
  for (uint32_t k = 0; k < o->n; k++) device_samples(f, fam, &o->dev[k]);
}

static void write_families(FILE *f, const observation *o, int om) {
  family_head(f, "gpupart_ledgers", "Shared ledger files of this user read from the ledger folder", om);
  fprintf(f, "gpupart_ledgers %u\n", o->n);
  family_head(f, "gpupart_unread_ledgers", "Ledger files of the folder past those read at once, in no other series",
              om);
  fprintf(f, "gpupart_unread_ledgers %u\n", o->unread);
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) family_text(f, &families[i], o, om);
}

void metrics_text(FILE *f, const observation *o) { write_families(f, o, 0); }

void metrics_openmetrics(FILE *f, const observation *o) {
  write_families(f, o, 1);
  fputs("# EOF\n", f);
}
