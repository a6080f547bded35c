/* Loading the configuration: the only place that reads the environment (secure_getenv,
 * so a set-uid program ignores it), and the place that reads the INI file named by the
 * descriptor or $GPUPART_CONFIG. Values land in two layers (environment, file) with their
 * sources; lookups for a device walk them in precedence order. A load that finds any error
 * is thrown away whole, so a context never runs on part of a configuration. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

/* Variables of these prefixes belong to the benchmark and test scripts and to the Python
 * package (GPUPART_PYTHON_LIBRARY names the libgpupart it loads), not the library. */
static const char *const foreign_prefixes[] = {"GPUPART_TEST_", "GPUPART_BENCH_", "GPUPART_PYTHON_"};
/* Variables that the interposers (interpose/) read themselves, not the library. */
static const char *const interposer_vars[] = {"GPUPART_PARTITION", "GPUPART_PRELOAD_ARENA", "GPUPART_FAIL_OPEN"};

/* ---- the environment ------------------------------------------------------------ */

/* One B:I=value or value entry of a variable's per-device form. */
static int env_entry(gpupart__layer *l, gpupart__opt o, const char *entry, gpupart__source src, gpupart__errors *e) {
  char err[GPUPART__ERR_MAX], sel_text[64];
  const char *eq = strchr(entry, '=');
  if (!eq) {
    if (gpupart__layer_set(l, o, NULL, entry, src, err, sizeof err))
      return gpupart__errors_add(e, 0, "%s: %s", src.name, err);
    return 0;
  }
  gpupart__selector sel;
  snprintf(sel_text, sizeof sel_text, "%.*s", (int)(eq - entry), entry);
  if (gpupart__parse_selector(sel_text, &sel, err, sizeof err) ||
      gpupart__layer_set(l, o, &sel, eq + 1, src, err, sizeof err))
    return gpupart__errors_add(e, 0, "%s: device '%s': %s", src.name, GPUPART__ECHO(sel_text), err);
  return 0;
}

/* "0,5": digits, one comma, digits and nothing else is a decimal comma, not two entries. */
static int decimal_comma(const char *t) {
  size_t a = strspn(t, "0123456789"), b = a && t[a] == ',' ? strspn(t + a + 1, "0123456789") : 0;
  return b && !t[a + 1 + b];
}

/* "80%" or "0=50%,cuda:1=0.9" (a bare entry is the value for every other device). */
static int env_per_device(gpupart__layer *l, gpupart__opt o, const char *text, gpupart__errors *e) {
  gpupart__source src = {gpupart__options[o].env, 0};
  char entry[GPUPART__PATH_MAX];
  const char *p = text;
  if (decimal_comma(text) && gpupart__options[o].type != GPUPART__T_BOOL)
    return gpupart__errors_add(e, 0,
                               "%s: '%s' has a decimal comma: write a decimal point (',' separates per-device entries)",
                               src.name, GPUPART__ECHO(text));
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len >= sizeof entry) return gpupart__errors_add(e, 0, "%s: an entry is too long", src.name);
    snprintf(entry, sizeof entry, "%.*s", (int)len, p);
    if (env_entry(l, o, entry, src, e)) return -1;
    if (!comma) return 0;
    p = comma + 1;
  }
}

static int env_partitions(gpupart__layer *l, const char *text, gpupart__errors *e) {
  char err[GPUPART__ERR_MAX];
  uint32_t before = l->nparts;
  if (gpupart__parse_partitions(text, l->parts, GPUPART__MAX_PARTS, &l->nparts, err, sizeof err))
    return gpupart__errors_add(e, 0, "GPUPART_PARTITIONS: %s", err);
  for (uint32_t i = before; i < l->nparts; i++) l->parts[i].src = (gpupart__source){"GPUPART_PARTITIONS", 0};
  return 0;
}

static int env_option(gpupart__layer *l, gpupart__opt o, gpupart__errors *e) {
  const gpupart__option *opt = &gpupart__options[o];
  const char *text = secure_getenv(opt->env);
  if (!text || !*text) return 0; /* `export GPUPART_X=` means unset, as shells write it */
  if (opt->type == GPUPART__T_PARTITIONS) return env_partitions(l, text, e);
  if (opt->where & GPUPART__IN_DEVICE) return env_per_device(l, o, text, e);
  char err[GPUPART__ERR_MAX];
  if (gpupart__layer_set(l, o, NULL, text, (gpupart__source){opt->env, 0}, err, sizeof err))
    return gpupart__errors_add(e, 0, "%s: %s", opt->env, err);
  return 0;
}

static int is_foreign(const char *name) {
  for (size_t i = 0; i < sizeof foreign_prefixes / sizeof foreign_prefixes[0]; i++)
    if (strncmp(name, foreign_prefixes[i], strlen(foreign_prefixes[i])) == 0) return 1;
  for (size_t i = 0; i < sizeof interposer_vars / sizeof interposer_vars[0]; i++)
    if (strcmp(name, interposer_vars[i]) == 0) return 1;
  return 0;
}

/* A misspelt variable would otherwise change nothing, silently: every name is judged,
 * however long (a name past any known one is unknown; its echo is shortened). A
 * set-user-ID program reads no variable (secure_getenv), so it judges none either. */
static int env_unknown(gpupart__errors *e) {
  if (getauxval(AT_SECURE)) return 0;
  for (char **v = environ; v && *v; v++) {
    const char *eq = strchr(*v, '=');
    char name[64];
    if (strncmp(*v, "GPUPART_", 8) != 0 || !eq) continue;
    size_t len = (size_t)(eq - *v);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), *v);
    if (len < sizeof name && (gpupart__option_by_env(name) >= 0 || is_foreign(name))) continue;
    char full[GPUPART__PATH_MAX];
    snprintf(full, sizeof full, "%.*s", (int)(len < sizeof full ? len : sizeof full - 1), *v);
    gpupart__errors_add(e, 0, "%s: unknown variable (see docs/configuration.md for the list)", GPUPART__ECHO(full));
    return -1;
  }
  return 0;
}

/* ---- other frameworks' variables, and changes after the read ------------------------ */

static int falsy(const char *v) {
  return !strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "off");
}

/* What gpupart calls the setting that variable name = value asks another framework for. */
static void foreign_hint(const char *name, const char *value, char *hint, size_t n) {
  if (!strcmp(name, "TF_FORCE_GPU_ALLOW_GROWTH"))
    snprintf(hint, n, "GPUPART_ALLOW_GROWTH=%s", falsy(value) ? "false" : "true");
  else if (!strcmp(name, "XLA_PYTHON_CLIENT_PREALLOCATE"))
    snprintf(hint, n, "GPUPART_ALLOW_GROWTH=%s", falsy(value) ? "true" : "false");
  else if (!strcmp(name, "XLA_PYTHON_CLIENT_MEM_FRACTION") || !strcmp(name, "XLA_CLIENT_MEM_FRACTION"))
    snprintf(hint, n, "GPUPART_MEMORY_FRACTION=%s", GPUPART__ECHO(value));
  else if (!strcmp(name, "XLA_PYTHON_CLIENT_ALLOCATOR") && !strcmp(value, "platform"))
    snprintf(hint, n, "GPUPART_RELEASE_THRESHOLD=1");
  else if (!strcmp(name, "PYTORCH_CUDA_ALLOC_CONF"))
    snprintf(hint, n,
             "no one-to-one equivalent: GPUPART_RELEASE_THRESHOLD, GPUPART_GRANULARITY, "
             "GPUPART_ALLOW_GROWTH (docs/configuration.md)");
  else snprintf(hint, n, "no gpupart equivalent");
}

static int is_other_framework(const char *name) {
  return !strncmp(name, "TF_FORCE_GPU_ALLOW_GROWTH=", 26) || !strncmp(name, "XLA_PYTHON_CLIENT_", 18) ||
         !strncmp(name, "XLA_CLIENT_MEM_FRACTION=", 24) || !strncmp(name, "PYTORCH_CUDA_ALLOC_CONF=", 24);
}

/* Notes (never applies) the memory variables of TensorFlow, JAX and PyTorch. */
static void env_foreign(gpupart__config *c) {
  for (char **v = environ; v && *v && c->nforeign < GPUPART__MAX_FOREIGN; v++) {
    const char *eq = strchr(*v, '=');
    if (!eq || !is_other_framework(*v)) continue;
    gpupart__foreign *f = &c->foreign[c->nforeign++];
    char name[GPUPART__PATH_MAX];
    size_t len = (size_t)(eq - *v);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), *v);
    snprintf(f->name, sizeof f->name, "%s", GPUPART__ECHO(name));
    snprintf(f->value, sizeof f->value, "%s", GPUPART__ECHO(eq + 1));
    foreign_hint(name, eq + 1, f->hint, sizeof f->hint);
  }
}

/* FNV-1a of a variable's value; 0 is kept for "unset". */
static uint64_t value_hash(const char *v) {
  uint64_t h = 1469598103934665603ull;
  if (!v || !*v) return 0;
  for (; *v; v++) h = (h ^ (unsigned char)*v) * 1099511628211ull;
  return h ? h : 1;
}

static void env_snapshot(gpupart__config *c) {
  c->env_read = 1;
  for (int o = 0; o < GPUPART__OPT_COUNT; o++) c->env_hash[o] = value_hash(secure_getenv(gpupart__options[o].env));
}

int gpupart__config_env_changed(const gpupart__config *c, char *buf, size_t n) {
  int count = 0;
  size_t used = 0;
  if (n) buf[0] = 0;
  for (int o = 0; c->env_read && o < GPUPART__OPT_COUNT; o++) {
    const char *name = gpupart__options[o].env;
    if (value_hash(secure_getenv(name)) == c->env_hash[o]) continue;
    if (used < n) used += (size_t)snprintf(buf + used, n - used, "%s%s", count ? ", " : "", name);
    count++;
  }
  return count;
}

/* ---- shares assigned by an orchestrator --------------------------------------------- */

#define HAMI "CUDA_DEVICE_MEMORY_LIMIT"
#define HAMI_HIP "HIP_DEVICE_MEMORY_LIMIT"

/* Every variable prefix_<i> that is set, in environ's order. Names are found in environ,
 * values read with secure_getenv. */
static void hami_devices(gpupart__config *c, const char *prefix) {
  size_t n = strlen(prefix);
  for (char **v = environ; v && *v; v++) {
    const char *eq = strchr(*v, '=');
    char name[96];
    if (!eq || strncmp(*v, prefix, n) != 0 || (*v)[n] != '_' || (size_t)(eq - *v) >= sizeof name) continue;
    snprintf(name, sizeof name, "%.*s", (int)(eq - *v), *v);
    const char *value = secure_getenv(name);
    if (value && *value) gpupart__share_hami(c, name, value);
  }
}

/* The order of precedence among the orchestrators' shares (docs/configuration.md): the
 * Kubernetes DRA device metadata files (dra_metadata_dir), HAMi's
 * CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_MEMORY_LIMIT, its AMD HIP_DEVICE_MEMORY_LIMIT_<i>
 * and HIP_DEVICE_MEMORY_LIMIT, NVIDIA MPS's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, Slurm's
 * SLURM_SHARD_MEM_PER_GPU, KAI's GPU_PORTION, then the cgroup's dmem.max. */
static void load_shares(const gpupart__hostmem *m, gpupart__config *c) {
  const gpupart__value *root = &c->env.global[GPUPART__OPT_DRA_METADATA_DIR];
  const char *v;
  gpupart__share_dra(c, m, root->set ? root->str : gpupart__options[GPUPART__OPT_DRA_METADATA_DIR].def,
                     secure_getenv("POD_NAME"), secure_getenv("GPUPART_PARTITION"));
  hami_devices(c, HAMI);
  if ((v = secure_getenv(HAMI)) && *v) gpupart__share_hami(c, HAMI, v);
  hami_devices(c, HAMI_HIP);
  if ((v = secure_getenv(HAMI_HIP)) && *v) gpupart__share_hami(c, HAMI_HIP, v);
  if ((v = secure_getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")) && *v) gpupart__share_mps(c, v);
  if ((v = secure_getenv("SLURM_SHARD_MEM_PER_GPU")) && *v) gpupart__share_slurm(c, v);
  if ((v = secure_getenv("GPU_PORTION")) && *v) gpupart__share_kai(c, v);
  gpupart__share_dmem(c);
}

static int load_env(gpupart__config *c, gpupart__errors *e) {
  env_snapshot(c);
  env_foreign(c);
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if ((gpupart__options[o].where & GPUPART__IN_ENV) && env_option(&c->env, (gpupart__opt)o, e)) return -1;
  return env_unknown(e);
}

/* ---- the file ------------------------------------------------------------------- */

static int read_error(const char *what, const char *path, const char *why, gpupart__errors *e) {
  gpupart__errors_add(e, 0, "%s: cannot read '%s': %s", what, GPUPART__ECHO(path), why);
  return -1;
}

static const char *file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "something else";
}

/* Opens path for reading without ever blocking (a FIFO with no writer would block an
 * ordinary open forever), and refuses anything but a regular file. */
static FILE *open_regular(const char *what, const char *path, gpupart__errors *e) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  char why[96];
  if (fd < 0) {
    read_error(what, path, strerror(errno), e);
    return NULL;
  }
  if (fstat(fd, &st)) snprintf(why, sizeof why, "%s", strerror(errno));
  else if (!S_ISREG(st.st_mode)) snprintf(why, sizeof why, "it is %s, not a regular file", file_kind(st.st_mode));
  else why[0] = 0;
  if (why[0]) {
    close(fd);
    read_error(what, path, why, e);
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    read_error(what, path, strerror(errno), e);
  }
  return f;
}

/* Reads the whole file into host memory, so the parser and its line count see exactly the
 * bytes on disk (a NUL byte would otherwise cut a line short unnoticed). */
static char *read_file(const gpupart__hostmem *m, const char *what, const char *path, gpupart__errors *e) {
  FILE *f = open_regular(what, path, e);
  if (!f) return NULL;
  char *buf = gpupart__host_calloc(m, 1, GPUPART__FILE_MAX + 1);
  size_t len = buf ? fread(buf, 1, GPUPART__FILE_MAX + 1, f) : 0;
  int failed = !buf || ferror(f), big = len > GPUPART__FILE_MAX;
  fclose(f);
  if (!failed && !big && memchr(buf, 0, len) == NULL) return buf;
  gpupart__host_free(m, buf);
  read_error(what, path,
             !buf     ? "out of host memory"
             : big    ? "larger than 1 MiB"
             : failed ? "read error"
                      : "it contains a NUL byte",
             e);
  return NULL;
}

int gpupart__config_read_file(const gpupart__hostmem *m, gpupart__config *c, const char *what, const char *path,
                              gpupart__errors *e) {
  if (strlen(path) >= sizeof c->file_name) return read_error(what, path, "the path is too long", e);
  snprintf(c->file_name, sizeof c->file_name, "%s", path);
  char *text = read_file(m, what, path, e);
  if (!text) return -1;
  int errors = gpupart__ini_parse(&c->file, text, c->file_name, e);
  gpupart__host_free(m, text);
  return errors ? -1 : 0;
}

static int load_all(const gpupart__hostmem *m, gpupart__config *c, const gpupart_context_desc *d, gpupart__errors *e) {
  if (d->flags & GPUPART_CONTEXT_IGNORE_ENV) /* no variable and no file (include/gpupart.h) */
    return d->config_text && gpupart__ini_parse(&c->file, d->config_text, "config_text", e) ? -1 : 0;
  if (load_env(c, e)) return -1;
  load_shares(m, c);
  const char *path = d->config_path, *what = "config_path";
  if (!path && c->env.global[GPUPART__OPT_CONFIG].set) {
    path = c->env.global[GPUPART__OPT_CONFIG].str;
    what = "GPUPART_CONFIG";
  }
  if (path && gpupart__config_read_file(m, c, what, path, e)) return -1;
  if (d->config_text && gpupart__ini_parse(&c->file, d->config_text, "config_text", e)) return -1;
  return 0;
}

int gpupart__config_load(const gpupart__hostmem *m, const gpupart_context_desc *d, gpupart__config **out) {
  gpupart__config *c = gpupart__host_calloc(m, 1, sizeof *c);
  if (!c) return gpupart__fail(GPUPART_ENOMEM, "context_create: out of host memory");
  gpupart__errors e = {0};
  if (load_all(m, c, d, &e)) {
    gpupart__host_free(m, c);
    if (e.count > 1)
      return gpupart__fail(GPUPART_ECONFIG, "%s (and %d more error%s)", e.first, e.count - 1, e.count > 2 ? "s" : "");
    return gpupart__fail(GPUPART_ECONFIG, "%s", e.first);
  }
  *out = c;
  return GPUPART_OK;
}

void gpupart__config_free(const gpupart__hostmem *m, gpupart__config *c) { gpupart__host_free(m, c); }
