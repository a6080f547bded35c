/* Memory shares assigned by an orchestrator: HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>] values
 * (and HIP_DEVICE_MEMORY_LIMIT[_<i>], its AMD hook's), NVIDIA MPS's
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT list, Slurm's SLURM_SHARD_MEM_PER_GPU list, KAI's
 * GPU_PORTION and the cgroup v2 dmem.max of the process's cgroup and its ancestors. None of this text is gpupart's own,
 * and all of it is read as hostile input: a value that does not parse is a warning (kept for `gpupart config` and the
 * log) and is ignored, never a crash and never a context that fails to start because another tool wrote something
 * gpupart cannot read. The variables' text comes from core/config/config.c, the only reader of the environment; this
 * file reads the two cgroup files. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CGROUP_FILE_MAX 8192 /* a larger cgroup file is refused, never read in part */
#define CGROUP_DEPTH_MAX 32  /* cgroup levels walked up from the process's own */

gpupart__cgroup_paths gpupart__cgroup = {"/proc/self/cgroup", "/sys/fs/cgroup"};

/* Keeps a warning about an ignored value (the first GPUPART__MAX_SHARE_WARNINGS). */
void gpupart__share_warn(gpupart__config *c, const char *fmt, ...) {
  if (c->nshare_warnings == GPUPART__MAX_SHARE_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->share_warnings[c->nshare_warnings++], GPUPART__MSG_MAX, fmt, ap);
  va_end(ap);
}

gpupart__share *gpupart__share_add(gpupart__config *c, gpupart__share_kind kind, const char *source) {
  if (c->nshares == GPUPART__MAX_SHARES) {
    gpupart__share_warn(c, "%s: more than %d shares: ignored", source, GPUPART__MAX_SHARES);
    return NULL;
  }
  gpupart__share *s = &c->shares[c->nshares++];
  *s = (gpupart__share){.kind = kind};
  snprintf(s->source, sizeof s->source, "%s", source);
  return s;
}

/* Digits, then an optional unit of one letter among units (K, M, G, T: powers of 1024),
 * case-insensitive; no unit means unit_none bytes. Nothing else: no sign, no
 * space, no hexadecimal, no decimal point. 0, or -1 on garbage or overflow. */
static int parse_size(const char *s, uint64_t unit_none, const char *units, uint64_t *out) {
  uint64_t v = 0, mult = unit_none;
  const char *p = s;
  if (!isdigit((unsigned char)*p)) return -1;
  for (; isdigit((unsigned char)*p); p++)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v)) return -1;
  if (*p) {
    const char *u = strchr(units, toupper((unsigned char)*p));
    if (!u || p[1]) return -1;
    mult = 1ull << (10 * (strchr("KMGT", *u) - "KMGT" + 1));
  }
  return __builtin_mul_overflow(v, mult, out) ? -1 : 0;
}

/* ---- HAMi ----------------------------------------------------------------------- */

#define HAMI_CUDA "CUDA_DEVICE_MEMORY_LIMIT"
#define HAMI_HIP "HIP_DEVICE_MEMORY_LIMIT"

/* "4096m", "4g", "1048576k", "1073741824" as HAMi-core reads them: k, m, g in any case as
 * powers of 1024 (and t, which HAMi's AMD hook also takes), bytes without a unit; 0 (as
 * "0m") sets no limit. name is the variable: CUDA_DEVICE_MEMORY_LIMIT[_<i>] or
 * HIP_DEVICE_MEMORY_LIMIT[_<i>]. */
void gpupart__share_hami(gpupart__config *c, const char *name, const char *value) {
  int hip = strncmp(name, HAMI_HIP, strlen(HAMI_HIP)) == 0;
  const char *base = hip ? HAMI_HIP : HAMI_CUDA;
  const char *suffix = name + strlen(base);
  uint64_t bytes, index = 0;
  if (strncmp(name, base, strlen(base)) != 0) return;
  if (*suffix && (suffix[0] != '_' || parse_size(suffix + 1, 1, "", &index) || index > UINT32_MAX)) {
    gpupart__share_warn(c, "%s: not a device index after %s_: ignored", GPUPART__ECHO(name), base);
    return;
  }
  if (parse_size(value, 1, hip ? "KMGT" : "KMG", &bytes)) {
    gpupart__share_warn(c, "%s: '%s' is not an amount (4096m, 4g, bytes): ignored", GPUPART__ECHO(name),
                        GPUPART__ECHO(value));
    return;
  }
  gpupart__share_kind kind = hip ? GPUPART__SHARE_HIP : GPUPART__SHARE_HAMI;
  if (*suffix) kind = hip ? GPUPART__SHARE_HIP_DEVICE : GPUPART__SHARE_HAMI_DEVICE;
  gpupart__share *s = gpupart__share_add(c, kind, name);
  if (!s) return;
  s->all = !*suffix;
  s->by_index = !!*suffix;
  s->index = (uint32_t)index;
  s->bytes = bytes;
}

/* ---- NVIDIA MPS -------------------------------------------------------------------- */

#define MPS "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
#define UUID_TEXT 41 /* "GPU-" and 36 characters, and the NUL */

/* "1G", "512MB": digits, one of K, M, G, T (powers of 1024) and an optional B, as NVIDIA's
 * MPS documentation writes them; a value without a unit is not documented, so refused. */
static int mps_amount(const char *text, uint64_t *out) {
  char buf[32];
  size_t len = strlen(text);
  if (len < 2 || len >= sizeof buf) return -1;
  memcpy(buf, text, len + 1);
  if (toupper((unsigned char)buf[len - 1]) == 'B' && isalpha((unsigned char)buf[len - 2])) buf[--len] = 0;
  if (!isalpha((unsigned char)buf[len - 1])) return -1;
  return parse_size(buf, 1, "KMGT", out);
}

/* A GPU UUID as CUDA_VISIBLE_DEVICES takes it: "GPU-" then hex digits and dashes, the
 * whole UUID or its first characters. */
static int is_uuid(const char *s) {
  size_t len = strlen(s);
  return len > 4 && len < UUID_TEXT && strncasecmp(s, "GPU-", 4) == 0 &&
         strspn(s + 4, "0123456789abcdefABCDEF-") == len - 4;
}

/* One DEVICE=AMOUNT entry: DEVICE an ordinal or a GPU UUID. */
static void mps_entry(gpupart__config *c, const char *entry) {
  char dev[64] = "";
  const char *eq = strchr(entry, '=');
  uint64_t bytes, index = 0;
  if (eq) snprintf(dev, sizeof dev, "%.*s", (int)(eq - entry < 63 ? eq - entry : 63), entry);
  int ordinal = eq && parse_size(dev, 1, "", &index) == 0 && index <= UINT32_MAX;
  if (!eq || (!ordinal && !is_uuid(dev)) || mps_amount(eq + 1, &bytes)) {
    gpupart__share_warn(c, MPS ": entry '%s' is not DEVICE=AMOUNT (0=1G, GPU-<uuid>=512MB): ignored",
                        GPUPART__ECHO(entry));
    return;
  }
  gpupart__share *s = gpupart__share_add(c, GPUPART__SHARE_MPS, MPS);
  if (!s) return;
  s->by_index = ordinal;
  s->index = (uint32_t)index;
  s->bytes = bytes;
  if (!ordinal) snprintf(s->key, sizeof s->key, "%s", dev);
}

/* Calls fn for each comma-separated entry of value (from variable name); an entry too
 * long for any valid form is a warning. */
static void each_entry(gpupart__config *c, const char *name, const char *value,
                       void (*fn)(gpupart__config *, const char *)) {
  char entry[128];
  for (const char *p = value;;) {
    size_t len = strcspn(p, ",");
    if (len >= sizeof entry) {
      gpupart__share_warn(c, "%s: an entry is too long: ignored", name);
    } else {
      snprintf(entry, sizeof entry, "%.*s", (int)len, p);
      fn(c, entry);
    }
    if (!p[len]) return;
    p += len + 1;
  }
}

/* "0=1G,1=512MB", "GPU-7ce23cd8-...=1G": comma-separated entries. */
void gpupart__share_mps(gpupart__config *c, const char *value) { each_entry(c, MPS, value, mps_entry); }

/* "GPU-" and the 16 bytes as 8-4-4-4-12 hex digits, as nvidia-smi writes a GPU's UUID. */
static void uuid_text(const uint8_t *u, char out[UUID_TEXT]) {
  char *o = out + 4;
  memcpy(out, "GPU-", 4);
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
    o += sprintf(o, "%02x", u[i]);
  }
}

/* Whether key (a whole UUID or its first characters) is the device's UUID. */
static int uuid_names(const char *key, const uint8_t *uuid) {
  static const uint8_t none[16];
  char text[UUID_TEXT];
  if (!uuid || !memcmp(uuid, none, sizeof none)) return 0;
  uuid_text(uuid, text);
  return strncasecmp(key, text, strlen(key)) == 0;
}

/* ---- KAI --------------------------------------------------------------------------- */

/* "0.50": the part of one GPU KAI's binder gives a pod that shares it (a number above 0
 * and at most 1, with at most 9 decimals; KAI writes two). */
static int parse_portion(const char *text, double *out) {
  uint64_t whole, frac = 0;
  double scale = 1;
  const char *dot = strchr(text, '.');
  char head[8];
  size_t n = dot ? (size_t)(dot - text) : strlen(text);
  if (n == 0 || n >= sizeof head) return -1;
  snprintf(head, sizeof head, "%.*s", (int)n, text);
  if (parse_size(head, 1, "", &whole)) return -1;
  if (dot && (!dot[1] || strlen(dot + 1) > 9 || parse_size(dot + 1, 1, "", &frac))) return -1;
  for (size_t i = dot ? strlen(dot + 1) : 0; i > 0; i--) scale *= 10;
  *out = (double)whole + (double)frac / scale;
  return *out > 0 && *out <= 1 ? 0 : -1;
}

void gpupart__share_kai(gpupart__config *c, const char *value) {
  double portion;
  if (parse_portion(value, &portion)) {
    gpupart__share_warn(c, "GPU_PORTION: '%s' is not a portion of a GPU above 0 and at most 1 (0.50): ignored",
                        GPUPART__ECHO(value));
    return;
  }
  gpupart__share *s = gpupart__share_add(c, GPUPART__SHARE_KAI, "GPU_PORTION");
  if (!s) return;
  s->all = 1;
  s->portion = portion;
}

/* ---- Slurm ---------------------------------------------------------------------- */

/* A PCI address as Slurm writes it: "0000:3b:00.0" (hex digits, ':', '.'). */
static int is_pci(const char *s) {
  size_t len = strlen(s);
  return len >= 7 && len < 32 && strspn(s, "0123456789abcdefABCDEF:.") == len && strchr(s, ':') && strchr(s, '.');
}

/* One ADDRESS=AMOUNT entry (or AMOUNT alone, for every GPU of the job); MiB by default. */
static void slurm_entry(gpupart__config *c, const char *entry) {
  char addr[64] = "";
  const char *eq = strchr(entry, '='), *amount = eq ? eq + 1 : entry;
  uint64_t bytes;
  if (eq) snprintf(addr, sizeof addr, "%.*s", (int)(eq - entry < 63 ? eq - entry : 63), entry);
  if ((eq && !is_pci(addr)) || parse_size(amount, 1ull << 20, "KMGT", &bytes)) {
    gpupart__share_warn(c, "SLURM_SHARD_MEM_PER_GPU: entry '%s' is not ADDRESS=AMOUNT (0000:3b:00.0=4096M): ignored",
                        GPUPART__ECHO(entry));
    return;
  }
  gpupart__share *s = gpupart__share_add(c, GPUPART__SHARE_SLURM, "SLURM_SHARD_MEM_PER_GPU");
  if (s) {
    s->all = !eq;
    s->bytes = bytes;
    snprintf(s->key, sizeof s->key, "%s", addr);
  }
}

/* "0000:3b:00.0=3072M,0000:af:00.0=3072M": comma-separated entries. */
void gpupart__share_slurm(gpupart__config *c, const char *value) {
  each_entry(c, "SLURM_SHARD_MEM_PER_GPU", value, slurm_entry);
}

/* ---- cgroup v2 dmem.max ---------------------------------------------------------- */

/* Reads a regular file of less than cap bytes without blocking: 0; -1 when it is missing
 * or not a regular file (the kernel has no dmem controller); -2 when it is larger, holds a
 * NUL byte, or cannot be read (a cut line could read as a smaller number). */
static int read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0) return -1;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return -1;
  }
  size_t len = 0;
  ssize_t r;
  while (len < cap - 1 && (r = read(fd, buf + len, cap - 1 - len)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      close(fd);
      return -2;
    }
    len += (size_t)r;
  }
  close(fd);
  buf[len] = 0;
  return len == cap - 1 || memchr(buf, 0, len) ? -2 : 0;
}

/* The process's cgroup v2 path from "0::/a/b" in /proc/self/cgroup: absolute, no "..",
 * no "." component and no control character; -1 otherwise. */
static int cgroup_path(gpupart__config *c, const char *text, char *out, size_t n) {
  const char *line = strncmp(text, "0::", 3) == 0 ? text : strstr(text, "\n0::");
  if (!line) return -1; /* no cgroup v2 hierarchy */
  line += line[0] == '\n' ? 4 : 3;
  size_t len = strcspn(line, "\n");
  snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), line);
  int bad = len >= n || out[0] != '/' || strstr(out, "/../") || strstr(out, "/./") ||
            (len >= 3 && !strcmp(out + len - 3, "/..")) || (len >= 2 && !strcmp(out + len - 2, "/."));
  for (const char *p = out; !bad && *p; p++) bad = (unsigned char)*p < 0x20 || *p == 0x7f;
  if (bad)
    gpupart__share_warn(c, "%s: the cgroup path '%s' is refused: dmem.max is not read", gpupart__cgroup.proc_cgroup,
                        GPUPART__ECHO(out));
  return bad ? -1 : 0;
}

/* Keeps the smaller limit of one region across cgroup levels. */
static void dmem_limit(gpupart__config *c, const char *region, uint64_t bytes, const char *source) {
  for (uint32_t i = 0; i < c->nshares; i++) {
    gpupart__share *s = &c->shares[i];
    if (s->kind != GPUPART__SHARE_DMEM || strcmp(s->key, region)) continue;
    if (bytes < s->bytes) {
      s->bytes = bytes;
      snprintf(s->source, sizeof s->source, "%s", source);
    }
    return;
  }
  gpupart__share *s = gpupart__share_add(c, GPUPART__SHARE_DMEM, source);
  if (s) {
    s->bytes = bytes;
    snprintf(s->key, sizeof s->key, "%s", region);
  }
}

/* One "<region> <bytes|max>" line; "max" is no limit and is skipped. */
static void dmem_line(gpupart__config *c, const char *line, const char *source) {
  char region[128], value[32], extra[2];
  uint64_t bytes;
  if (!*line) return;
  if (sscanf(line, "%127s %31s %1s", region, value, extra) != 2 || strlen(line) > 160) {
    gpupart__share_warn(c, "%s: line '%s' is not '<region> <bytes|max>': ignored", source, GPUPART__ECHO(line));
    return;
  }
  if (!strcmp(value, "max")) return;
  if (parse_size(value, 1, "", &bytes)) {
    gpupart__share_warn(c, "%s: region %s: '%s' is not a number of bytes: ignored", source, GPUPART__ECHO(region),
                        GPUPART__ECHO(value));
    return;
  }
  dmem_limit(c, region, bytes, source);
}

static void dmem_file(gpupart__config *c, const char *dir, const char *cgroup) {
  char path[GPUPART__PATH_MAX + 32], source[160], buf[CGROUP_FILE_MAX];
  snprintf(path, sizeof path, "%s%s/dmem.max", gpupart__cgroup.root, dir);
  int rc = read_small(path, buf, sizeof buf);
  if (rc == -2)
    gpupart__share_warn(c, "%s: unreadable, larger than %d bytes or holding a NUL byte: ignored", GPUPART__ECHO(path),
                        CGROUP_FILE_MAX - 1);
  if (rc) return;
  snprintf(source, sizeof source, "dmem.max of cgroup %s", GPUPART__ECHO(cgroup[0] ? cgroup : "/"));
  for (char *line = buf, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    dmem_line(c, line, source);
  }
}

/* dmem.max of the process's cgroup and of each ancestor up to the root: the kernel
 * enforces the smallest limit on the path, so the smallest per region is kept. */
void gpupart__share_dmem(gpupart__config *c) {
  char path[GPUPART__PATH_MAX], buf[CGROUP_FILE_MAX];
  if (read_small(gpupart__cgroup.proc_cgroup, buf, sizeof buf) || cgroup_path(c, buf, path, sizeof path)) return;
  if (!strcmp(path, "/")) path[0] = 0;
  char dir[GPUPART__PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  for (int depth = 0; depth < CGROUP_DEPTH_MAX; depth++) {
    dmem_file(c, dir, dir);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
  }
}

/* ---- Kubernetes DRA device metadata (dra.c) ------------------------------------------ */

static void dra_take(gpupart__config *c, const gpupart__dra_device *dev) {
  char source[160];
  /* Kubernetes names may be 253 bytes; the source keeps a readable head of each. */
  snprintf(source, sizeof source, "DRA claim %.40s/%.60s request %.38s", dev->namespace, dev->claim, dev->request);
  gpupart__share *s = gpupart__share_add(c, GPUPART__SHARE_DRA, source);
  if (!s) return;
  c->dra[c->ndra] = *dev;
  s->dra = ++c->ndra;
  s->bytes = dev->has_memory ? dev->memory : 0; /* none: the CDI-injected GPUPART_* variables */
  snprintf(s->key, sizeof s->key, "%.*s", (int)sizeof s->key - 1, dev->key); /* matching reads dev->key */
}

/* Whether s is a Kubernetes object name (a DNS subdomain: 1 to 253 of a-z 0-9 . -). */
static int k8s_name(const char *s) {
  size_t n = strlen(s);
  return n && n <= 253 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

/* The pod's name and the claim's partition, kept for the devices of DRA claims. */
static void dra_context(gpupart__config *c, const char *pod, const char *partition) {
  if (pod && *pod && !k8s_name(pod))
    gpupart__share_warn(c, "POD_NAME=%s: not a Kubernetes name: the metrics carry no pod label", GPUPART__ECHO(pod));
  else if (pod) snprintf(c->dra_pod, sizeof c->dra_pod, "%s", pod);
  if (partition && strlen(partition) < sizeof c->dra_partition)
    snprintf(c->dra_partition, sizeof c->dra_partition, "%s", partition);
}

void gpupart__share_dra(gpupart__config *c, const gpupart__hostmem *m, const char *root, const char *pod,
                        const char *partition) {
  gpupart__dra_scan *scan = gpupart__host_calloc(m, 1, sizeof *scan);
  if (!scan) {
    gpupart__share_warn(c, "%s: out of host memory: the DRA device metadata is not read", GPUPART__ECHO(root));
    return;
  }
  gpupart__dra_scan_root(m, root, scan);
  for (uint32_t i = 0; i < scan->nwarnings; i++) gpupart__share_warn(c, "%s", scan->warnings[i]);
  for (uint32_t i = 0; i < scan->ndevices; i++) dra_take(c, &scan->devices[i]);
  if (scan->ndevices) dra_context(c, pod, partition);
  gpupart__host_free(m, scan);
}

/* ---- which share a device gets --------------------------------------------------- */

/* Whether a '/'-separated component of region (drm/0000:03:00.0/vram0) is the address. */
static int region_names(const char *region, const char *pci) {
  size_t len = strlen(pci);
  for (const char *p = region; len && p; p = strchr(p, '/') ? strchr(p, '/') + 1 : NULL)
    if (!strncasecmp(p, pci, len) && (p[len] == '/' || !p[len])) return 1;
  return 0;
}

typedef struct target {
  const gpupart__config *c;
  uint32_t index;
  const char *pci;
  const uint8_t *uuid;
} target;

static int names(const gpupart__share *s, const target *t) {
  if (s->all) return 1;
  if (s->by_index) return s->index == t->index;
  if (s->kind == GPUPART__SHARE_MPS) return uuid_names(s->key, t->uuid);
  if (s->kind == GPUPART__SHARE_DRA) return s->dra && gpupart__dra_names(&t->c->dra[s->dra - 1], t->uuid, t->pci);
  if (s->kind == GPUPART__SHARE_SLURM) return *t->pci && !strcasecmp(s->key, t->pci);
  return *t->pci && region_names(s->key, t->pci);
}

uint64_t gpupart__share_bytes(const gpupart__share *s, uint64_t total) {
  if (!(s->portion > 0)) return s->bytes;
  if (s->portion >= 1) return total;
  return (uint64_t)((double)total * s->portion); /* below 2^64: the portion is below 1 */
}

const gpupart__share *gpupart__config_share_for(const gpupart__config *c, uint32_t index, const char *pci,
                                                const uint8_t *uuid, uint64_t total) {
  const target t = {c, index, pci ? pci : "", uuid};
  const gpupart__share *best = NULL;
  uint64_t best_bytes = 0;
  for (uint32_t i = 0; i < c->nshares; i++) {
    const gpupart__share *s = &c->shares[i];
    if (best && s->kind != best->kind) break;
    uint64_t bytes = gpupart__share_bytes(s, total);
    if (!bytes || !names(s, &t) || (best && bytes >= best_bytes)) continue;
    best = s;
    best_bytes = bytes;
  }
  return best;
}

const gpupart__share *gpupart__config_share(const gpupart__config *c, uint32_t index, const char *pci) {
  return gpupart__config_share_for(c, index, pci, NULL, 0);
}
