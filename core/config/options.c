/* The options table and the value parsers. Everything a user can write in a variable or
 * in the INI file goes through these functions, so one syntax holds everywhere: numbers
 * are parsed by hand (strtod would accept locale decimals, hex, "inf" and exponents),
 * every multiplication is overflow-checked, and every failure says what was wrong with
 * the text as written. Errors are written with snprintf into the caller's buffer. */
#include "options.h"

#include "error.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define ENV GPUPART__IN_ENV
#define FILE_ GPUPART__IN_FILE
#define DEV GPUPART__IN_DEVICE

const gpupart__option gpupart__options[GPUPART__OPT_COUNT] = {
    [GPUPART__OPT_CONFIG] = {"config", "GPUPART_CONFIG", GPUPART__T_PATH, ENV, NULL,
                             "path of an INI configuration file"},
    [GPUPART__OPT_BACKEND] = {"backend", "GPUPART_BACKEND", GPUPART__T_BACKENDS, ENV | FILE_, "auto",
                              "auto (cuda, vulkan, opencl, then sim: the first present), or a preference list"},
    [GPUPART__OPT_DEVICE] = {"device", "GPUPART_DEVICE", GPUPART__T_VISIBLE, ENV | FILE_, NULL,
                             "the visible devices: program index i opens the i-th listed index"},
    [GPUPART__OPT_ALLOW_GROWTH] = {"allow_growth", "GPUPART_ALLOW_GROWTH", GPUPART__T_BOOL, ENV | FILE_ | DEV, "true",
                                   "true: grow on demand; false: preallocate each partition"},
    [GPUPART__OPT_MEMORY_FRACTION] = {"memory_fraction", "GPUPART_MEMORY_FRACTION", GPUPART__T_SHARE, ENV | FILE_ | DEV,
                                      "1.0", "share of each device's total this process may use"},
    [GPUPART__OPT_MEMORY_LIMIT] = {"memory_limit", "GPUPART_MEMORY_LIMIT", GPUPART__T_LIMIT, ENV | FILE_ | DEV, "none",
                                   "absolute cap on this process's budget per device"},
    [GPUPART__OPT_MEMORY_FRACTION_MAX] =
        {"memory_fraction_max", "GPUPART_MEMORY_FRACTION_MAX", GPUPART__T_SHARE, ENV | FILE_ | DEV, "1.0",
         "operator's ceiling on memory_fraction, whoever sets it (descriptor included)"},
    [GPUPART__OPT_MEMORY_LIMIT_MAX] = {"memory_limit_max", "GPUPART_MEMORY_LIMIT_MAX", GPUPART__T_LIMIT,
                                       ENV | FILE_ | DEV, "none",
                                       "operator's ceiling on memory_limit, whoever sets it (descriptor included)"},
    [GPUPART__OPT_HEADROOM] = {"headroom", "GPUPART_HEADROOM", GPUPART__T_BYTES, ENV | FILE_ | DEV, "0",
                               "bytes left to the driver and other libraries"},
    [GPUPART__OPT_GRANULARITY] = {"granularity", "GPUPART_GRANULARITY", GPUPART__T_POW2, ENV | FILE_ | DEV, "2MiB",
                                  "limits round down and blocks round up to it (a power of two)"},
    [GPUPART__OPT_RELEASE_THRESHOLD] = {"release_threshold", "GPUPART_RELEASE_THRESHOLD", GPUPART__T_LIMIT,
                                        ENV | FILE_ | DEV, "none",
                                        "cached empty bytes a partition keeps; none = keep all until trim"},
    [GPUPART__OPT_PREALLOC_BLOCK] = {"prealloc_block", "GPUPART_PREALLOC_BLOCK", GPUPART__T_LIMIT, ENV | FILE_ | DEV,
                                     "none", "block size of preallocation; none = the largest the driver allows"},
    [GPUPART__OPT_INITIAL_BLOCK] = {"initial_block", "GPUPART_INITIAL_BLOCK", GPUPART__T_SIZE, ENV | FILE_ | DEV,
                                    "2MiB",
                                    "first block a growing partition takes (rounded up to the granularity); the "
                                    "smallest mapping an expandable one's growth makes"},
    [GPUPART__OPT_MAX_BLOCK] = {"max_block", "GPUPART_MAX_BLOCK", GPUPART__T_SIZE, ENV | FILE_ | DEV, "1GiB",
                                "largest block a growing partition takes (capped by the driver's largest)"},
    [GPUPART__OPT_GROWTH_FACTOR] = {"growth_factor", "GPUPART_GROWTH_FACTOR", GPUPART__T_FACTOR, ENV | FILE_ | DEV,
                                    "2.0", "each new block of a growing partition is the last one times this"},
    [GPUPART__OPT_EXPANDABLE] = {"expandable", "GPUPART_EXPANDABLE", GPUPART__T_BOOL, ENV | FILE_ | DEV, "false",
                                 "partitions grow in place in one reserved address range (virtual memory)"},
    [GPUPART__OPT_PARTITIONS] = {"partitions", "GPUPART_PARTITIONS", GPUPART__T_PARTITIONS, ENV, NULL,
                                 "partitions created when a device opens: name:size[:guarantee],..."},
    [GPUPART__OPT_SHARED] = {"shared", "GPUPART_SHARED", GPUPART__T_BOOL, ENV | FILE_, "0",
                             "account devices in a ledger shared with this user's other processes"},
    [GPUPART__OPT_LEDGER_DIR] = {"ledger_dir", "GPUPART_LEDGER_DIR", GPUPART__T_DIR, ENV | FILE_, "/dev/shm",
                                 "folder of the shared ledgers"},
    [GPUPART__OPT_DRA_METADATA_DIR] = {"dra_metadata_dir", "GPUPART_DRA_METADATA_DIR", GPUPART__T_DIR, ENV,
                                       "/var/run/kubernetes.io/dra-device-attributes",
                                       "folder of the Kubernetes DRA device metadata files (KEP-5304)"},
    [GPUPART__OPT_RESPONDER] = {"responder", "GPUPART_RESPONDER", GPUPART__T_BOOL, ENV | FILE_, "1",
                                "shared ledgers: a thread answers other processes' give-back requests at once "
                                "(0: at this process's next allocation that grows)"},
    [GPUPART__OPT_SIM_TOTAL] = {"sim_total", "GPUPART_SIM_TOTAL", GPUPART__T_SIZE, ENV | FILE_, "16GiB",
                                "size of a simulated device whose descriptor leaves it 0"},
    [GPUPART__OPT_VERBOSE] = {"verbose", "GPUPART_VERBOSE", GPUPART__T_BOOL, ENV | FILE_, "0",
                              "print the effective configuration at device open"},
    [GPUPART__OPT_TRACE] = {"trace", "GPUPART_TRACE", GPUPART__T_PATH, ENV | FILE_, NULL,
                            "record every allocation as an .ops trace in this file (%p = the process id)"},
    [GPUPART__OPT_CUDA_LIBRARY] = {"cuda_library", "GPUPART_CUDA_LIBRARY", GPUPART__T_PATH, ENV | FILE_, NULL,
                                   "another path for libcuda.so.1"},
    [GPUPART__OPT_OPENCL_LIBRARY] = {"opencl_library", "GPUPART_OPENCL_LIBRARY", GPUPART__T_PATH, ENV | FILE_, NULL,
                                     "another path for libOpenCL.so.1"},
    [GPUPART__OPT_VULKAN_LIBRARY] = {"vulkan_library", "GPUPART_VULKAN_LIBRARY", GPUPART__T_PATH, ENV | FILE_, NULL,
                                     "another path for libvulkan.so.1"},
};

int gpupart__option_by_key(const char *key) {
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (strcasecmp(gpupart__options[o].key, key) == 0) return o;
  return -1;
}

int gpupart__option_by_env(const char *env) {
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (strcmp(gpupart__options[o].env, env) == 0) return o;
  return -1;
}

/* ---- text helpers --------------------------------------------------------------- */

/* Appends byte c to buf[*at], escaped when it is a control character. */
static void echo_byte(unsigned char c, char *buf, size_t n, size_t *at) {
  if (*at + 5 >= n) return;
  if (c < 0x20 || c == 0x7f) *at += (size_t)snprintf(buf + *at, n - *at, "\\x%02x", c);
  else buf[(*at)++] = (char)c;
}

const char *gpupart__echo(const char *s, char *buf, size_t n) {
  size_t len = strlen(s), at = 0;
  for (size_t i = 0; i < len; i++) {
    if (len > 64 && i == 40) {
      if (at + 4 < n) {
        memcpy(buf + at, "...", 3);
        at += 3;
      }
      i = len - 20;
    }
    echo_byte((unsigned char)s[i], buf, n, &at);
  }
  buf[at < n ? at : n - 1] = 0;
  return buf;
}

/* Copies s[0, len) without surrounding blanks into out; -1 when it does not fit. */
static int trimmed(const char *s, size_t len, char *out, size_t cap) {
  while (len && isspace((unsigned char)*s)) {
    s++;
    len--;
  }
  while (len && isspace((unsigned char)s[len - 1])) len--;
  if (len >= cap) return -1;
  memcpy(out, s, len);
  out[len] = 0;
  return 0;
}

/* The next piece of [*p, end) up to sep; advances *p past sep. */
static void next_piece(const char **p, const char *end, char sep, const char **piece, size_t *len) {
  const char *s = *p, *e = memchr(s, sep, (size_t)(end - s));
  if (!e) e = end;
  *piece = s;
  *len = (size_t)(e - s);
  *p = e < end ? e + 1 : end;
}

/* ---- numbers and amounts -------------------------------------------------------- */

/* whole + frac / scale, as written: digits, optionally '.' and digits. */
typedef struct decimal {
  uint64_t whole, frac, scale;
  int dot;
} decimal;

static int parse_whole(const char **s, uint64_t *v) {
  *v = 0;
  for (; isdigit((unsigned char)**s); (*s)++)
    if (__builtin_mul_overflow(*v, 10, v) || __builtin_add_overflow(*v, (uint64_t)(**s - '0'), v)) return -1;
  return 0;
}

/* Digits past 18 decimals are below any precision that matters and are ignored. */
static void parse_frac(const char **s, decimal *d) {
  d->frac = 0;
  d->scale = 1;
  for (; isdigit((unsigned char)**s); (*s)++)
    if (d->scale < 1000000000000000000ull) {
      d->frac = d->frac * 10 + (uint64_t)(**s - '0');
      d->scale *= 10;
    }
}

/* Digits with an optional decimal point; ".50" (as JAX's variables are often written)
 * is 0.50, "5." is refused. */
static int parse_decimal(const char **s, const char *text, decimal *d, char *err, size_t n) {
  if (**s == '-') return gpupart__say(err, n, "'%s' is negative", GPUPART__ECHO(text));
  int lead = **s == '.' && isdigit((unsigned char)(*s)[1]);
  if (!lead && !isdigit((unsigned char)**s)) return gpupart__say(err, n, "'%s' is not a number", GPUPART__ECHO(text));
  if (parse_whole(s, &d->whole)) return gpupart__say(err, n, "'%s' is too large", GPUPART__ECHO(text));
  d->dot = **s == '.';
  d->frac = 0;
  d->scale = 1;
  if (!d->dot) return 0;
  (*s)++;
  if (!isdigit((unsigned char)**s))
    return gpupart__say(err, n, "'%s' has no digits after the decimal point", GPUPART__ECHO(text));
  parse_frac(s, d);
  return 0;
}

typedef struct unit {
  const char *name;
  uint64_t mult;
} unit;

static const unit units[] = {
    {"B", 1},
    {"KB", 1000ull},
    {"MB", 1000000ull},
    {"GB", 1000000000ull},
    {"TB", 1000000000000ull},
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
};

static const unit *find_unit(const char *s) {
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(units[i].name, s) == 0) return &units[i];
  return NULL;
}

/* d * mult, rounded down to whole bytes; -1 on overflow. */
static int scale_bytes(const decimal *d, uint64_t mult, uint64_t *out) {
  uint64_t v;
  if (__builtin_mul_overflow(d->whole, mult, &v)) return -1;
  uint64_t part = (uint64_t)((long double)d->frac * (long double)mult / (long double)d->scale);
  return __builtin_add_overflow(v, part, out) ? -1 : 0;
}

static int to_share(const decimal *d, double divisor, const char *text, double *out, char *err, size_t n) {
  long double v = ((long double)d->whole + (long double)d->frac / (long double)d->scale) / divisor;
  if (v > 1.0L)
    return gpupart__say(err, n, "'%s' is above %s", GPUPART__ECHO(text),
                        divisor > 1 ? "100%" : "1 (a share is at most 1.0 or 100%)");
  *out = (double)v;
  return 0;
}

static int amount_bytes(const decimal *d, const char *unit_text, const char *text, unsigned accept,
                        gpupart__amount *out, char *err, size_t n) {
  const unit *u = *unit_text ? find_unit(unit_text) : &units[0];
  if (!u)
    return gpupart__say(err, n, "'%s' has an unknown unit '%s' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)",
                        GPUPART__ECHO(text), unit_text);
  if (!(accept & GPUPART__ACCEPT_BYTES))
    return gpupart__say(err, n, "'%s' is bytes, but a share is expected (0.6 or 60%%)", GPUPART__ECHO(text));
  if (scale_bytes(d, u->mult, &out->bytes))
    return gpupart__say(err, n, "'%s' overflows 64 bits of bytes", GPUPART__ECHO(text));
  out->is_share = 0;
  return 0;
}

static int amount_share(const decimal *d, double divisor, const char *text, unsigned accept, gpupart__amount *out,
                        char *err, size_t n) {
  if (!(accept & GPUPART__ACCEPT_SHARE))
    return gpupart__say(err, n, "'%s' is a share, but bytes are expected (e.g. 512MiB)", GPUPART__ECHO(text));
  out->is_share = 1;
  return to_share(d, divisor, text, &out->share, err, n);
}

int gpupart__parse_amount(const char *s, unsigned accept, gpupart__amount *out, char *err, size_t n) {
  char text[64];
  if (trimmed(s, strlen(s), text, sizeof text)) return gpupart__say(err, n, "'%s' is too long", GPUPART__ECHO(s));
  if (!*text) return gpupart__say(err, n, "the value is empty");
  const char *p = text;
  decimal d;
  if (parse_decimal(&p, text, &d, err, n)) return -1;
  if (*p == ',' && isdigit((unsigned char)p[1]))
    return gpupart__say(err, n, "'%s' has a decimal comma: write a decimal point (%llu.%s)", GPUPART__ECHO(text),
                        (unsigned long long)d.whole, p + 1);
  while (*p == ' ') p++;
  *out = (gpupart__amount){0};
  if (strcmp(p, "%") == 0) return amount_share(&d, 100.0, text, accept, out, err, n);
  if (*p) return amount_bytes(&d, p, text, accept, out, err, n);
  if (d.dot || accept == GPUPART__ACCEPT_SHARE) return amount_share(&d, 1.0, text, accept, out, err, n);
  return amount_bytes(&d, "", text, accept, out, err, n);
}

/* ---- booleans, indexes, backends, selectors ------------------------------------ */

static int parse_bool(const char *s, uint64_t *out, char *err, size_t n) {
  static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return gpupart__say(err, n, "'%s' is not a boolean (true/false, 1/0, yes/no, on/off)", GPUPART__ECHO(s));
}

static int parse_index(const char *s, uint32_t *out, char *err, size_t n) {
  uint64_t v;
  const char *p = s;
  if (*p == '-') return gpupart__say(err, n, "device index '%s' is negative", GPUPART__ECHO(s));
  if (!isdigit((unsigned char)*p) || parse_whole(&p, &v) || *p || v > UINT32_MAX)
    return gpupart__say(err, n, "'%s' is not a device index (0, 1, ...)", GPUPART__ECHO(s));
  *out = (uint32_t)v;
  return 0;
}

static int backend_item(const char *s, int *b, char *err, size_t n) {
  *b = gpupart__backend_from_name(s);
  if (*b >= 0) return 0;
  if (strcasecmp(s, "auto") == 0) return gpupart__say(err, n, "'auto' cannot be part of a list");
  if (!*s) return gpupart__say(err, n, "the backend list has an empty entry");
  char names[96];
  gpupart__backend_names(names, sizeof names);
  return gpupart__say(err, n, "unknown backend '%s' (use auto, %s)", GPUPART__ECHO(s), names);
}

static int add_backend(gpupart__value *v, int b, const char *s, char *err, size_t n) {
  for (uint32_t i = 0; i < v->nbackends; i++)
    if (v->backends[i] == b) return gpupart__say(err, n, "backend '%s' is listed twice", GPUPART__ECHO(s));
  v->backends[v->nbackends++] = (uint8_t)b;
  return 0;
}

static int parse_backends(const char *s, gpupart__value *v, char *err, size_t n) {
  v->nbackends = 0;
  if (strcasecmp(s, "auto") == 0) return 0;
  const char *p = s, *end = s + strlen(s), *piece;
  size_t len;
  do {
    char item[16];
    int b;
    next_piece(&p, end, ',', &piece, &len);
    if (trimmed(piece, len, item, sizeof item))
      return gpupart__say(err, n, "unknown backend in '%s'", GPUPART__ECHO(s));
    if (backend_item(item, &b, err, n) || add_backend(v, b, item, err, n)) return -1;
  } while (piece + len < end);
  return 0;
}

int gpupart__parse_selector(const char *s, gpupart__selector *out, char *err, size_t n) {
  const char *colon = strchr(s, ':');
  *out = (gpupart__selector){.set = 1};
  if (!colon) return parse_index(s, &out->index, err, n);
  char name[16];
  if (trimmed(s, (size_t)(colon - s), name, sizeof name) || gpupart__backend_from_name(name) < 0)
    return gpupart__say(err, n, "'%s' is not a device (use backend:index, e.g. cuda:0, or an index)", GPUPART__ECHO(s));
  out->backend = (gpupart_backend)gpupart__backend_from_name(name);
  char idx[16];
  if (trimmed(colon + 1, strlen(colon + 1), idx, sizeof idx))
    return gpupart__say(err, n, "'%s' is not a device index", GPUPART__ECHO(colon + 1));
  return parse_index(idx, &out->index, err, n);
}

void gpupart__selector_format(const gpupart__selector *sel, char *buf, size_t n) {
  if (sel->backend == GPUPART_BACKEND_AUTO) snprintf(buf, n, "%u", sel->index);
  else snprintf(buf, n, "%s:%u", gpupart_backend_name(sel->backend), sel->index);
}

int gpupart__selector_matches(const gpupart__selector *sel, gpupart_backend b, uint32_t index) {
  return sel->set && sel->index == index && (sel->backend == GPUPART_BACKEND_AUTO || sel->backend == b);
}

int gpupart__selector_rank(const gpupart__selector *sel) {
  return !sel->set ? 0 : sel->backend == GPUPART_BACKEND_AUTO ? 1 : 2;
}

/* ---- option values -------------------------------------------------------------- */

static int parse_path(const gpupart__option *o, const char *s, char *err, size_t n) {
  if (!*s) return gpupart__say(err, n, "the path is empty");
  if (strlen(s) >= GPUPART__PATH_MAX)
    return gpupart__say(err, n, "the path is longer than %d bytes", GPUPART__PATH_MAX - 1);
  if (o->type == GPUPART__T_DIR && *s != '/')
    return gpupart__say(err, n, "'%s' is not an absolute path", GPUPART__ECHO(s));
  return 0;
}

/* "1" or "2,0,3": program index i opens physical index visible[i]; each at most once, so
 * two program indexes never reach one device. */
static int parse_visible(const char *s, gpupart__value *v, char *err, size_t n) {
  const char *p = s, *end = s + strlen(s), *piece;
  size_t len;
  do {
    char item[16];
    uint32_t idx;
    next_piece(&p, end, ',', &piece, &len);
    if (trimmed(piece, len, item, sizeof item))
      return gpupart__say(err, n, "'%s' is not a list of device indexes (0, 1, ... or 1,0)", GPUPART__ECHO(s));
    if (!*item) return gpupart__say(err, n, "the device list '%s' has an empty entry", GPUPART__ECHO(s));
    if (parse_index(item, &idx, err, n)) return -1;
    for (uint32_t i = 0; i < v->nvisible; i++)
      if (v->visible[i] == idx) return gpupart__say(err, n, "device %u is listed twice in '%s'", idx, GPUPART__ECHO(s));
    if (v->nvisible == GPUPART__MAX_VISIBLE)
      return gpupart__say(err, n, "more than %d devices listed", GPUPART__MAX_VISIBLE);
    v->visible[v->nvisible++] = idx;
  } while (piece + len < end);
  v->u = v->visible[0];
  return 0;
}

static int parse_bytes(gpupart__type t, const char *s, uint64_t *out, char *err, size_t n) {
  gpupart__amount a;
  if (t == GPUPART__T_LIMIT && strcasecmp(s, "none") == 0) {
    *out = 0;
    return 0;
  }
  if (gpupart__parse_amount(s, GPUPART__ACCEPT_BYTES, &a, err, n)) return -1;
  if (t != GPUPART__T_BYTES && a.bytes == 0) return gpupart__say(err, n, "'%s' must be above 0", GPUPART__ECHO(s));
  if (t == GPUPART__T_POW2 && (a.bytes & (a.bytes - 1)))
    return gpupart__say(err, n, "'%s' (%llu bytes) is not a power of two", GPUPART__ECHO(s),
                        (unsigned long long)a.bytes);
  *out = a.bytes;
  return 0;
}

static int parse_share(const char *s, double *out, char *err, size_t n) {
  gpupart__amount a;
  if (gpupart__parse_amount(s, GPUPART__ACCEPT_SHARE, &a, err, n)) return -1;
  if (!(a.share > 0)) return gpupart__say(err, n, "'%s' must be above 0", GPUPART__ECHO(s));
  *out = a.share;
  return 0;
}

/* A growth factor: a plain decimal number, at least 1 (below it blocks would shrink). */
static int parse_factor(const char *s, double *out, char *err, size_t n) {
  const char *p = s;
  decimal d;
  if (parse_decimal(&p, s, &d, err, n)) return -1;
  if (*p) return gpupart__say(err, n, "'%s' is not a number (a growth factor: 1.5, 2 or 4)", GPUPART__ECHO(s));
  long double v = (long double)d.whole + (long double)d.frac / (long double)d.scale;
  if (v < 1.0L)
    return gpupart__say(err, n, "'%s' is below 1: each block would be smaller than the last", GPUPART__ECHO(s));
  *out = (double)v;
  return 0;
}

int gpupart__option_parse(gpupart__opt o, const char *text, gpupart__value *out, char *err, size_t n) {
  const gpupart__option *opt = &gpupart__options[o];
  char s[GPUPART__PATH_MAX];
  if (trimmed(text, strlen(text), s, sizeof s))
    return gpupart__say(err, n, "the value is longer than %d bytes", GPUPART__PATH_MAX - 1);
  *out = (gpupart__value){.set = 1};
  switch (opt->type) {
  case GPUPART__T_PATH:
  case GPUPART__T_DIR: return parse_path(opt, s, err, n);
  case GPUPART__T_BACKENDS: return parse_backends(s, out, err, n);
  case GPUPART__T_VISIBLE: return parse_visible(s, out, err, n);
  case GPUPART__T_BOOL: return parse_bool(s, &out->u, err, n);
  case GPUPART__T_SHARE: return parse_share(s, &out->share, err, n);
  case GPUPART__T_FACTOR: return parse_factor(s, &out->factor, err, n);
  case GPUPART__T_PARTITIONS: return gpupart__say(err, n, "partitions are parsed by gpupart__parse_partitions");
  default: return parse_bytes(opt->type, s, &out->u, err, n);
  }
}

static void format_backends(const gpupart__value *v, char *buf, size_t n) {
  size_t used = 0;
  if (!v->nbackends) snprintf(buf, n, "auto");
  for (uint32_t i = 0; i < v->nbackends && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "",
                             gpupart_backend_name((gpupart_backend)v->backends[i]));
}

static void format_visible(const gpupart__value *v, char *buf, size_t n) {
  size_t used = 0;
  if (!v->nvisible) snprintf(buf, n, "all");
  for (uint32_t i = 0; i < v->nvisible && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%u", i ? "," : "", v->visible[i]);
}

void gpupart__option_format(gpupart__opt o, const gpupart__value *v, char *buf, size_t n) {
  gpupart__type t = gpupart__options[o].type;
  if (t == GPUPART__T_PATH || t == GPUPART__T_DIR) snprintf(buf, n, "%s", v->str ? v->str : "none");
  else if (t == GPUPART__T_BACKENDS) format_backends(v, buf, n);
  else if (t == GPUPART__T_VISIBLE) format_visible(v, buf, n);
  else if (t == GPUPART__T_BOOL) snprintf(buf, n, "%s", v->u ? "true" : "false");
  else if (t == GPUPART__T_SHARE) snprintf(buf, n, "%g", v->share);
  else if (t == GPUPART__T_FACTOR) snprintf(buf, n, "%g", v->factor);
  else if (t == GPUPART__T_LIMIT && !v->u) snprintf(buf, n, "none");
  else snprintf(buf, n, "%llu", (unsigned long long)v->u);
}

/* ---- partition specs ------------------------------------------------------------ */

int gpupart__check_name(const char *name, char *err, size_t n) {
  size_t len = strlen(name);
  if (!len) return gpupart__say(err, n, "a partition name is empty");
  if (len >= GPUPART__NAME_MAX)
    return gpupart__say(err, n, "partition name '%s' is longer than %d characters", GPUPART__ECHO(name),
                        GPUPART__NAME_MAX - 1);
  for (const char *p = name; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("_.-", *p))
      return gpupart__say(err, n, "partition name '%s' may hold only letters, digits, '_', '.' and '-'",
                          GPUPART__ECHO(name));
  return 0;
}

int gpupart__check_pspec(const gpupart__pspec *p, char *err, size_t n) {
  const gpupart__amount *s = &p->size, *g = &p->guarantee;
  if (s->is_share ? !(s->share > 0) : !s->bytes)
    return gpupart__say(err, n, "partition '%s': the size must be above 0", p->name);
  if (s->is_share != g->is_share) return 0; /* compared once the budget is known */
  if (s->is_share ? g->share > s->share : g->bytes > s->bytes)
    return gpupart__say(err, n, "partition '%s': the guarantee is above the size", p->name);
  return 0;
}

static int parse_item_amount(const char *s, size_t len, const gpupart__pspec *p, gpupart__amount *a, const char *what,
                             char *err, size_t n) {
  char text[64], why[GPUPART__ERR_MAX];
  if (trimmed(s, len, text, sizeof text))
    return gpupart__say(err, n, "partition '%s': the %s is too long", p->name, what);
  if (gpupart__parse_amount(text, GPUPART__ACCEPT_BYTES | GPUPART__ACCEPT_SHARE, a, why, sizeof why) == 0) return 0;
  return gpupart__say(err, n, "partition '%s': %s: %s", p->name, what, why);
}

/* name:size[:guarantee] */
static int parse_item(const char *s, size_t len, gpupart__pspec *p, char *err, size_t n) {
  const char *end = s + len, *piece;
  size_t plen;
  next_piece(&s, end, ':', &piece, &plen);
  if (trimmed(piece, plen, p->name, sizeof p->name))
    return gpupart__say(err, n, "a partition name is longer than %d characters", GPUPART__NAME_MAX - 1);
  if (gpupart__check_name(p->name, err, n)) return -1;
  if (piece + plen == end) return gpupart__say(err, n, "partition '%s' has no size (name:size[:guarantee])", p->name);
  next_piece(&s, end, ':', &piece, &plen);
  if (parse_item_amount(piece, plen, p, &p->size, "size", err, n)) return -1;
  p->has_size = 1;
  if (piece + plen < end) {
    next_piece(&s, end, ':', &piece, &plen);
    if (piece + plen < end) return gpupart__say(err, n, "partition '%s' has more than name:size:guarantee", p->name);
    if (parse_item_amount(piece, plen, p, &p->guarantee, "guarantee", err, n)) return -1;
  }
  return gpupart__check_pspec(p, err, n);
}

static int same_device(const gpupart__selector *a, const gpupart__selector *b) {
  return a->set == b->set && a->backend == b->backend && a->index == b->index;
}

static int append_spec(const gpupart__pspec *p, gpupart__pspec *out, uint32_t cap, uint32_t *count, char *err,
                       size_t n) {
  for (uint32_t i = 0; i < *count; i++)
    if (strcmp(out[i].name, p->name) == 0 && same_device(&out[i].dev, &p->dev))
      return gpupart__say(err, n, "partition '%s' is declared twice for the same device", p->name);
  if (*count >= cap) return gpupart__say(err, n, "more than %u partitions", cap);
  out[(*count)++] = *p;
  return 0;
}

/* [selector=]item,item,... */
static int parse_group(const char *s, size_t len, gpupart__pspec *out, uint32_t cap, uint32_t *count, char *err,
                       size_t n) {
  const char *end = s + len, *eq = memchr(s, '=', len), *piece;
  gpupart__selector sel = {0};
  if (eq) {
    char text[32];
    if (trimmed(s, (size_t)(eq - s), text, sizeof text)) return gpupart__say(err, n, "a device prefix is too long");
    if (gpupart__parse_selector(text, &sel, err, n)) return -1;
    s = eq + 1;
  }
  size_t plen;
  do {
    next_piece(&s, end, ',', &piece, &plen);
    gpupart__pspec p = {.dev = sel};
    if (parse_item(piece, plen, &p, err, n) || append_spec(&p, out, cap, count, err, n)) return -1;
  } while (piece + plen < end);
  return 0;
}

int gpupart__parse_partitions(const char *s, gpupart__pspec *out, uint32_t cap, uint32_t *count, char *err, size_t n) {
  uint32_t start = *count;
  const char *end = s + strlen(s), *piece;
  size_t len;
  do {
    next_piece(&s, end, ';', &piece, &len);
    if (parse_group(piece, len, out, cap, count, err, n)) {
      *count = start;
      return -1;
    }
  } while (piece + len < end);
  return 0;
}
