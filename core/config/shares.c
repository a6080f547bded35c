/* Memory shares assigned by an orchestrator: HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>] values,
 * Slurm's SLURM_SHARD_MEM_PER_GPU list and the cgroup v2 dmem.max of the process's cgroup
 * and its ancestors. None of this text is gpupart's own, and all of it is read as hostile
 * input: a value that does not parse is a warning (kept for `gpupart config` and the log)
 * and is ignored, never a crash and never a context that fails to start because another
 * tool wrote something gpupart cannot read. The variables' text comes from core/config/config.c,
 * the only reader of the environment; this file reads the two cgroup files. */
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

static void warn(gpupart__config *c, const char *fmt, ...) GPUPART__PRINTF(2, 3);

/* Keeps a warning about an ignored value (the first GPUPART__MAX_SHARE_WARNINGS). */
static void warn(gpupart__config *c, const char *fmt, ...) {
  if (c->nshare_warnings == GPUPART__MAX_SHARE_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->share_warnings[c->nshare_warnings++], GPUPART__MSG_MAX, fmt, ap);
  va_end(ap);
}

static gpupart__share *add(gpupart__config *c, gpupart__share_kind kind, const char *source) {
  if (c->nshares == GPUPART__MAX_SHARES) {
    warn(c, "%s: more than %d shares: ignored", source, GPUPART__MAX_SHARES);
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

/* "4096m", "4g", "1048576k", "1073741824" as HAMi-core reads them: k, m, g in any case as
 * powers of 1024, bytes without a unit; 0 (as "0m") sets no limit. name is the variable. */
void gpupart__share_hami(gpupart__config *c, const char *name, const char *value) {
  const char *suffix = name + strlen("CUDA_DEVICE_MEMORY_LIMIT");
  uint64_t bytes, index = 0;
  if (*suffix && (parse_size(suffix + 1, 1, "", &index) || index > UINT32_MAX || suffix[1] == 0)) {
    warn(c, "%s: not a device index after CUDA_DEVICE_MEMORY_LIMIT_: ignored", GPUPART__ECHO(name));
    return;
  }
  if (parse_size(value, 1, "KMG", &bytes)) {
    warn(c, "%s: '%s' is not an amount (4096m, 4g, bytes): ignored", GPUPART__ECHO(name), GPUPART__ECHO(value));
    return;
  }
  gpupart__share *s = add(c, *suffix ? GPUPART__SHARE_HAMI_DEVICE : GPUPART__SHARE_HAMI, name);
  if (s) {
    s->all = !*suffix;
    s->index = (uint32_t)index;
    s->bytes = bytes;
  }
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
    warn(c, "SLURM_SHARD_MEM_PER_GPU: entry '%s' is not ADDRESS=AMOUNT (0000:3b:00.0=4096M): ignored",
         GPUPART__ECHO(entry));
    return;
  }
  gpupart__share *s = add(c, GPUPART__SHARE_SLURM, "SLURM_SHARD_MEM_PER_GPU");
  if (s) {
    s->all = !eq;
    s->bytes = bytes;
    snprintf(s->key, sizeof s->key, "%s", addr);
  }
}

/* "0000:3b:00.0=3072M,0000:af:00.0=3072M": comma-separated entries. */
void gpupart__share_slurm(gpupart__config *c, const char *value) {
  char entry[128];
  for (const char *p = value;;) {
    size_t len = strcspn(p, ",");
    if (len >= sizeof entry) warn(c, "SLURM_SHARD_MEM_PER_GPU: an entry is too long: ignored");
    else {
      snprintf(entry, sizeof entry, "%.*s", (int)len, p);
      slurm_entry(c, entry);
    }
    if (!p[len]) return;
    p += len + 1;
  }
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
    warn(c, "%s: the cgroup path '%s' is refused: dmem.max is not read", gpupart__cgroup.proc_cgroup,
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
  gpupart__share *s = add(c, GPUPART__SHARE_DMEM, source);
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
    warn(c, "%s: line '%s' is not '<region> <bytes|max>': ignored", source, GPUPART__ECHO(line));
    return;
  }
  if (!strcmp(value, "max")) return;
  if (parse_size(value, 1, "", &bytes)) {
    warn(c, "%s: region %s: '%s' is not a number of bytes: ignored", source, GPUPART__ECHO(region),
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
    warn(c, "%s: unreadable, larger than %d bytes or holding a NUL byte: ignored", GPUPART__ECHO(path),
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

/* ---- which share a device gets --------------------------------------------------- */

/* Whether a '/'-separated component of region (drm/0000:03:00.0/vram0) is the address. */
static int region_names(const char *region, const char *pci) {
  size_t len = strlen(pci);
  for (const char *p = region; len && p; p = strchr(p, '/') ? strchr(p, '/') + 1 : NULL)
    if (!strncasecmp(p, pci, len) && (p[len] == '/' || !p[len])) return 1;
  return 0;
}

static int names(const gpupart__share *s, uint32_t index, const char *pci) {
  if (s->all) return 1;
  if (s->kind == GPUPART__SHARE_HAMI_DEVICE) return s->index == index;
  if (s->kind == GPUPART__SHARE_SLURM) return *pci && !strcasecmp(s->key, pci);
  return *pci && region_names(s->key, pci);
}

const gpupart__share *gpupart__config_share(const gpupart__config *c, uint32_t index, const char *pci) {
  const gpupart__share *best = NULL;
  for (uint32_t i = 0; i < c->nshares; i++) {
    const gpupart__share *s = &c->shares[i];
    if (best && s->kind != best->kind) break;
    if (s->bytes && names(s, index, pci) && (!best || s->bytes < best->bytes)) best = s;
  }
  return best;
}
