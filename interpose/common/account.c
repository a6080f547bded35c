/* The interposers' mirror accounting (account.h): one gpupart context per process,
 * created on first use from the process's GPUPART_* configuration; one simulated device
 * per real device, of the real device's size and, where the layer found one, with its
 * UUID or PCI bus id, opened through the public API; on it one account-only partition
 * named GPUPART_PARTITION, else after the program, on which each intercepted allocation
 * is a charge of its exact size (no block, no sim call). Nothing here decides a limit: device_open
 * computes the budget and partition_create the limit, as for any gpupart application.
 * What gpupart refuses fails closed (a partition that refuses everything), unless the
 * operator set GPUPART_FAIL_OPEN. */
#include "account.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* One real device's mirror, in a list as long as the process needs (a node is never
 * moved, so device_of may hand out its fields). */
typedef struct mirror {
  struct mirror *next;
  uint32_t key;
  uint64_t total;
  uint8_t uuid[16];
  char pci_bus_id[32];
  char name[256];
  gpupart_device *device;
  gpupart_partition *partition; /* refused: closed_mark, or NULL failing open */
} mirror;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gpupart_context *ctx;
static int ctx_failed;
static gpupart_partition *ctx_refusal; /* what a refused context answers (say_refused) */
static mirror *mirrors;

/* ---- failing closed ----------------------------------------------------------------- */

/* The partition a refusal answers with: its address is the only thing used. */
static char closed_mark;
#define CLOSED ((gpupart_partition *)(void *)&closed_mark)

int gpupart__ip_closed(const gpupart_partition *p) { return p == CLOSED; }

static int is_word(const char *v, const char *const words[4]) {
  for (int i = 0; i < 4; i++)
    if (!strcasecmp(v, words[i])) return 1;
  return 0;
}

/* GPUPART_FAIL_OPEN, read once (docs/unmodified.md): 1 to let a program that gpupart
 * refused run unaccounted, else 0; a value that is neither is failing closed, said. */
static int fail_open(void) {
  static const char *const on[4] = {"1", "true", "yes", "on"}, *const off[4] = {"0", "false", "no", "off"};
  static int known = -1;
  if (known >= 0) return known;
  const char *v = getenv("GPUPART_FAIL_OPEN");
  known = v && is_word(v, on);
  if (v && *v && !known && !is_word(v, off))
    fprintf(stderr,
            "gpupart layer: GPUPART_FAIL_OPEN='%.64s' is not 1/true/yes/on or 0/false/no/off; "
            "failing closed\n",
            v);
  return known;
}

/* Lock held: what a refusal answers, said on stderr (once per refusal: the context's is
 * cached, a device's with its mirror). */
static gpupart_partition *say_refused(const char *what, gpupart_result r, const char *why) {
  int open = fail_open();
  fprintf(stderr, "gpupart layer: %s: %s (%s); %s\n", what, gpupart_result_name(r), why,
          open ? "memory is not accounted (GPUPART_FAIL_OPEN)"
               : "every allocation is refused (GPUPART_FAIL_OPEN=1 would let them through unaccounted)");
  return open ? NULL : CLOSED;
}

/* Set in a forked child while ctx is the parent's. A child that was not made to forget
 * it (the layers' children; the preload's handler forgets, gpupart__ip_forget) holds a
 * copy of the parent's context whose shared ledger share is the parent's: it must neither account on it nor give back
 * through it (releasing its copies of the parent's objects would take the parent's bytes from the ledger while the
 * parent still holds them). Such a child runs unaccounted. */
static atomic_int forked_away_flag;

static int forked_away(void) { return atomic_load_explicit(&forked_away_flag, memory_order_relaxed); }

/* In the child (single-threaded): whatever context there is, is the parent's. */
static void child_after_fork(void) {
  if (ctx) atomic_store(&forked_away_flag, 1);
}

__attribute__((constructor)) static void account_init(void) { pthread_atfork(NULL, NULL, child_after_fork); }

/* Lock held: the process's context, or NULL with *refused the refusal's answer. */
static gpupart_context *context_locked(gpupart_partition **refused) {
  if (!ctx && !ctx_failed) {
    gpupart_result r = gpupart_context_create(NULL, &ctx);
    if (r) ctx_refusal = say_refused("context_create", r, gpupart_last_error());
    ctx_failed = r != GPUPART_OK;
  }
  *refused = ctx_refusal;
  return ctx;
}

/* The layers' context reads the program's configuration: an option for a device as the
 * library resolves it (gpupart_context_option). */
int gpupart__ip_option(gpupart_backend backend, uint32_t index, const char *name, char *out, size_t n) {
  gpupart_partition *refused = NULL;
  pthread_mutex_lock(&lock);
  gpupart_context *c = forked_away() ? NULL : context_locked(&refused);
  int rc = c && gpupart_context_option(c, backend, index, name, out, n) == GPUPART_OK ? 0 : -1;
  pthread_mutex_unlock(&lock);
  return rc;
}

#define NAME_BYTES 64 /* a partition name a shared ledger holds, NUL included */
#define NAME_HASH 9   /* "~" and 8 hex digits */

/* name, or where it is too long for a shared ledger (64 bytes or more) its first bytes
 * (not cutting a UTF-8 character) then "~" and the FNV-1a hash of the whole name: the
 * same in every process, so that programs with one long name still share a partition
 * and a long name is never left unaccounted. */
static void fit_name(const char *name, char out[NAME_BYTES]) {
  size_t len = strlen(name), keep = NAME_BYTES - 1 - NAME_HASH;
  uint32_t h = 2166136261u;
  if (len < NAME_BYTES) {
    memcpy(out, name, len + 1);
    return;
  }
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)name[i]) * 16777619u;
  while (keep > 0 && ((uint8_t)name[keep] & 0xC0) == 0x80) keep--;
  snprintf(out, NAME_BYTES, "%.*s~%08x", (int)keep, name, (unsigned)h);
}

/* GPUPART_PARTITION, else the program's name (a program started with an empty argv[0]
 * has none: "unnamed"), fitted to a shared ledger's names. */
static void partition_name(char out[NAME_BYTES]) {
  const char *n = getenv("GPUPART_PARTITION");
  if (!n || !*n) n = program_invocation_short_name;
  fit_name(n && *n ? n : "unnamed", out);
}

/* Creating a partition whose name another process of the shared ledger holds joins it
 * (the descriptor leaves limit and guarantee to the partition), so every process under
 * the layer with the same name shares one limit, whatever its own configuration says:
 * the process that made the partition fixed its figures (a configured partition of that
 * name is then not made again: core/config/settings.c). EEXIST remains only where this process
 * already holds the name on that GPU through another device handle, which the mirror
 * cache rules out for the layers' own opens; should it happen, this process takes its
 * own "NAME.PID", sharing the device budget only, and says so on stderr. */
static gpupart_partition *partition_open(gpupart_device *dev) {
  char name[NAME_BYTES], own[NAME_BYTES], with_pid[NAME_BYTES + 24];
  partition_name(name);
  gpupart_partition_desc pd = {.name = name, .release_threshold = 1};
  gpupart_partition *p = NULL;
  gpupart_result r = gpupart_partition_create(dev, &pd, &p);
  if (r == GPUPART_EEXIST) {
    snprintf(with_pid, sizeof with_pid, "%s.%ld", name, (long)getpid());
    fit_name(with_pid, own);
    fprintf(stderr, "gpupart layer: partition '%s' cannot be joined (%s); this process uses its own '%s'\n", name,
            gpupart_last_error(), own);
    pd.name = own;
    r = gpupart_partition_create(dev, &pd, &p);
  }
  return r ? say_refused("partition_create", r, gpupart_last_error()) : p;
}

static gpupart_partition *mirror_open(mirror *m) {
  gpupart_partition *refused = NULL;
  if (!context_locked(&refused)) return refused;
  gpupart_sim_desc sd = {.total_bytes = m->total};
  memcpy(sd.uuid, m->uuid, sizeof sd.uuid);
  memcpy(sd.pci_bus_id, m->pci_bus_id, sizeof sd.pci_bus_id);
  memcpy(sd.name, m->name, sizeof sd.name);
  gpupart_device_desc dd = {
      .backend = GPUPART_BACKEND_SIM, .index = m->key, .backend_desc = &sd, .backend_desc_size = sizeof sd};
  gpupart_device *dev = NULL;
  gpupart_result r = gpupart_device_open(ctx, &dd, &dev);
  if (r) return say_refused("device_open", r, gpupart_last_error());
  m->device = dev;
  return partition_open(dev);
}

static int has_uuid(const mirror *m) {
  static const uint8_t zero[16];
  return memcmp(m->uuid, zero, sizeof zero) != 0;
}

/* Whether a and b are one GPU as gpupart names devices (core/base/identity.c): by UUID where
 * one is known, else by bus id. */
static int same_gpu(const mirror *a, const mirror *b) {
  if (has_uuid(a) || has_uuid(b)) return !memcmp(a->uuid, b->uuid, sizeof a->uuid);
  return a->pci_bus_id[0] && !strncmp(a->pci_bus_id, b->pci_bus_id, sizeof a->pci_bus_id);
}

/* Lock held: the cached mirror of the same key and total, else (a GPU that another key
 * reached, e.g. through a second platform) of the same GPU, or NULL. */
static mirror *mirror_find(const mirror *want) {
  for (mirror *m = mirrors; m; m = m->next)
    if (m->key == want->key && m->total == want->total) return m;
  for (mirror *m = mirrors; m; m = m->next)
    if (same_gpu(m, want)) return m;
  return NULL;
}

/* Lock held: want's mirror, opened and listed; without host memory for it, a refusal. */
static gpupart_partition *mirror_add(const mirror *want) {
  mirror *m = malloc(sizeof *m);
  if (!m) return say_refused("mirror", GPUPART_ENOMEM, "out of host memory");
  *m = *want;
  m->partition = mirror_open(m);
  m->next = mirrors;
  mirrors = m;
  return m->partition;
}

static void copy_string(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

gpupart_partition *gpupart__ip_partition_of(const gpupart__ip_device *d) {
  mirror want = {.key = d->key, .total = d->total};
  if (d->uuid) memcpy(want.uuid, d->uuid, sizeof want.uuid);
  copy_string(want.pci_bus_id, sizeof want.pci_bus_id, d->pci_bus_id);
  copy_string(want.name, sizeof want.name, d->name);
  pthread_mutex_lock(&lock);
  mirror *m = mirror_find(&want);
  gpupart_partition *p = m ? m->partition : mirror_add(&want);
  pthread_mutex_unlock(&lock);
  return p;
}

gpupart_partition *gpupart__ip_partition_for(uint32_t key, uint64_t total, const uint8_t uuid[16]) {
  return gpupart__ip_partition_of(&(gpupart__ip_device){.key = key, .total = total, .uuid = uuid});
}

gpupart_partition *gpupart__ip_partition(uint32_t key, uint64_t total) {
  return gpupart__ip_partition_for(key, total, NULL);
}

uint64_t gpupart__ip_limit(gpupart_partition *p) {
  gpupart_stats s;
  return p == CLOSED || gpupart_partition_get_stats(p, &s) ? 0 : s.limit;
}

uint64_t gpupart__ip_in_use(gpupart_partition *p) {
  gpupart_stats s;
  return p == CLOSED || gpupart_partition_get_stats(p, &s) ? 0 : s.in_use;
}

/* The mirror device whose partition p is, or NULL. */
static gpupart_device *device_of(const gpupart_partition *p) {
  gpupart_device *dev = NULL;
  pthread_mutex_lock(&lock);
  for (mirror *m = mirrors; m && !dev; m = m->next)
    if (m->partition == p) dev = m->device;
  pthread_mutex_unlock(&lock);
  return dev;
}

static uint64_t less(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* The number after key in a device dump, or 0 where there is none (the granularity the
 * device rounds limits to is said only there). */
static uint64_t json_u64(const char *text, const char *key) {
  const char *at = text ? strstr(text, key) : NULL;
  return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}

/* gpupart_partition_chargeable: with a shared ledger it reads every member's bytes and
 * every process's use of the budget (the other partitions' unused guarantees left out),
 * to the byte, as charges take them. */
uint64_t gpupart__ip_available(gpupart_partition *p) {
  uint64_t bytes = 0;
  return p != CLOSED && gpupart_partition_chargeable(p, &bytes) == GPUPART_OK ? bytes : 0;
}

/* Whether a limit holds the partition below the device: its limit is at least one
 * granule short of the device's size (without GPUPART_MEMORY_LIMIT, a fraction or a
 * partition size, the limit is the size rounded down to the granularity). Asked only of
 * a charge past the limit (never on the way of one that fits). */
static int limited(gpupart_partition *p) {
  gpupart_device *dev = device_of(p);
  char *json = NULL;
  if (!dev || gpupart_device_dump(dev, 0, &json, NULL) != GPUPART_OK) return 1;
  uint64_t total = json_u64(json, ", \"total\": "), granule = json_u64(json, ", \"granularity\": ");
  gpupart_dump_free(json);
  return less(total, gpupart__ip_limit(p)) >= (granule ? granule : 1);
}

int gpupart__ip_account(gpupart_partition *p, uint64_t size, gpupart_charge **out) {
  *out = NULL;
  if (forked_away()) return 0;
  if (p == CLOSED) return -1;
  gpupart_result r = gpupart_partition_charge(p, size, out);
  /* past the limit without one below the device: more than the device itself holds,
   * which only the driver can judge (lavapipe and oversubscribed managed memory take more
   * than the device's size); with a limit it is refused, whatever the driver would say */
  if (r == GPUPART_ELIMIT) return size > gpupart__ip_limit(p) && !limited(p) ? 0 : -1;
  return 0; /* OK, or a ledger that cannot be used now (its message): the driver answers */
}

void gpupart__ip_unaccount(gpupart_charge *c) {
  if (c && !forked_away()) (void)gpupart_charge_release(c);
}

void gpupart__ip_forget(void) {
  pthread_mutex_init(&lock, NULL);
  atomic_store(&forked_away_flag, 0);
  ctx = NULL;
  ctx_failed = 0;
  ctx_refusal = NULL;
  while (mirrors) { /* the records only: their devices and partitions are the parent's */
    mirror *m = mirrors;
    mirrors = m->next;
    free(m);
  }
}
