/* The one table of gpupart's options (INI key, environment variable, type, default,
 * documentation) and the parsers of the value syntax that docs/configuration.md defines: amounts
 * (bytes with units, shares as fractions or percentages), booleans, device selectors,
 * backend preference lists and the partition spec. Parsers never allocate; they write
 * what is wrong into a caller's buffer, so every caller can prefix the source and key. */
#ifndef GPUPART_CORE_OPTIONS_H
#define GPUPART_CORE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "gpupart.h"
#include "registry.h"

#define GPUPART__MAX_BACKENDS 4
#define GPUPART__NAME_MAX 64    /* a partition name, with its NUL */
#define GPUPART__PATH_MAX 1024  /* a path value, with its NUL */
#define GPUPART__MAX_PARTS 64   /* partitions declared by one source layer */
#define GPUPART__ERR_MAX 256    /* what a parser says is wrong */
#define GPUPART__MAX_VISIBLE 16 /* entries of a visible-device list (GPUPART_DEVICE) */
#define GPUPART__ECHO_MAX 288   /* a shortened, escaped echo of user text (gpupart__echo) */

typedef enum gpupart__opt {
  GPUPART__OPT_CONFIG,
  GPUPART__OPT_BACKEND,
  GPUPART__OPT_DEVICE,
  GPUPART__OPT_ALLOW_GROWTH,
  GPUPART__OPT_MEMORY_FRACTION,
  GPUPART__OPT_MEMORY_LIMIT,
  GPUPART__OPT_MEMORY_FRACTION_MAX,
  GPUPART__OPT_MEMORY_LIMIT_MAX,
  GPUPART__OPT_HEADROOM,
  GPUPART__OPT_GRANULARITY,
  GPUPART__OPT_RELEASE_THRESHOLD,
  GPUPART__OPT_PREALLOC_BLOCK,
  GPUPART__OPT_INITIAL_BLOCK,
  GPUPART__OPT_MAX_BLOCK,
  GPUPART__OPT_GROWTH_FACTOR,
  GPUPART__OPT_EXPANDABLE,
  GPUPART__OPT_PARTITIONS,
  GPUPART__OPT_SHARED,
  GPUPART__OPT_LEDGER_DIR,
  GPUPART__OPT_DRA_METADATA_DIR,
  GPUPART__OPT_RESPONDER,
  GPUPART__OPT_SIM_TOTAL,
  GPUPART__OPT_VERBOSE,
  GPUPART__OPT_TRACE,
  GPUPART__OPT_CUDA_LIBRARY,
  GPUPART__OPT_OPENCL_LIBRARY,
  GPUPART__OPT_VULKAN_LIBRARY,
  GPUPART__OPT_COUNT
} gpupart__opt;

typedef enum gpupart__type {
  GPUPART__T_PATH,      /* a non-empty path */
  GPUPART__T_DIR,       /* an absolute path */
  GPUPART__T_BACKENDS,  /* auto, or a preference list: cuda,vulkan */
  GPUPART__T_VISIBLE,   /* the visible devices: a list of distinct device indexes, 1,0,3 */
  GPUPART__T_BOOL,      /* true/false, 1/0, yes/no, on/off */
  GPUPART__T_SHARE,     /* a share of the device's total, (0, 1]: 0.6, 60%, 1 */
  GPUPART__T_BYTES,     /* bytes with a unit, 0 allowed */
  GPUPART__T_SIZE,      /* bytes with a unit, above 0 */
  GPUPART__T_LIMIT,     /* bytes above 0, or none (stored as 0) */
  GPUPART__T_POW2,      /* bytes, a power of two */
  GPUPART__T_FACTOR,    /* a number, at least 1: 1.5, 2, 4 */
  GPUPART__T_PARTITIONS /* the partition spec (parsed by gpupart__parse_partitions) */
} gpupart__type;

/* Where an option may be set. */
#define GPUPART__IN_ENV 0x1u    /* its GPUPART_* variable */
#define GPUPART__IN_FILE 0x2u   /* the [gpupart] section */
#define GPUPART__IN_DEVICE 0x4u /* [device B:I] sections and the per-device form B:I=value */

typedef struct gpupart__option {
  const char *key; /* INI key */
  const char *env; /* environment variable */
  gpupart__type type;
  unsigned where;  /* GPUPART__IN_* */
  const char *def; /* default, in the value syntax; NULL = none */
  const char *doc;
} gpupart__option;

extern const gpupart__option gpupart__options[GPUPART__OPT_COUNT];

/* The option whose INI key (case-insensitive) or variable is name; -1 if none. */
int gpupart__option_by_key(const char *key);
int gpupart__option_by_env(const char *env);

/* Where a value came from: a variable, a file (line > 0), "config_text", "descriptor"
 * or "default". name is static or owned by the configuration. */
typedef struct gpupart__source {
  const char *name;
  int line;
} gpupart__source;

/* An amount: bytes, or a share of something the key names. */
typedef struct gpupart__amount {
  uint64_t bytes;
  double share;
  int is_share;
} gpupart__amount;

#define GPUPART__ACCEPT_BYTES 0x1u
#define GPUPART__ACCEPT_SHARE 0x2u

/* Parses an amount. A number with a unit (B, KB, MB, GB, TB as powers of 1000, KiB, MiB,
 * GiB, TiB as powers of 1024) or a plain integer is bytes; a percentage or a number with a
 * decimal point is a share, in [0, 1]. When only shares are accepted a plain integer is a
 * share too (so "1" means all). Returns 0, or -1 with err filled. */
int gpupart__parse_amount(const char *s, unsigned accept, gpupart__amount *out, char *err, size_t n);

/* A device: backend:index, or an index alone (any backend). backend AUTO = any. */
typedef struct gpupart__selector {
  int set;
  gpupart_backend backend;
  uint32_t index;
} gpupart__selector;

int gpupart__parse_selector(const char *s, gpupart__selector *out, char *err, size_t n);
/* sel as it is written: "cuda:0", or "1" for an index alone. */
void gpupart__selector_format(const gpupart__selector *sel, char *buf, size_t n);
/* Whether sel names device (b, index). */
int gpupart__selector_matches(const gpupart__selector *sel, gpupart_backend b, uint32_t index);
/* 2 for backend:index, 1 for an index alone, 0 for none: the more specific wins. */
int gpupart__selector_rank(const gpupart__selector *sel);

/* A parsed option value. Which field holds it follows the option's type. */
typedef struct gpupart__value {
  int set;
  gpupart__source src;
  uint64_t u;    /* BOOL, BYTES, SIZE, LIMIT (0 = none), POW2; VISIBLE: its first entry (0 if none) */
  double share;  /* SHARE */
  double factor; /* FACTOR */
  uint8_t backends[GPUPART__MAX_BACKENDS];
  uint32_t nbackends;                     /* BACKENDS; 0 = auto */
  const char *str;                        /* PATH, DIR: set by the caller, which owns the string */
  uint32_t visible[GPUPART__MAX_VISIBLE]; /* VISIBLE: physical index of program index i */
  uint32_t nvisible;                      /* VISIBLE; 0 = every device, unmapped */
} gpupart__value;

/* s for a message: control characters (below 0x20, and 0x7f) as \xNN, and text longer than 64
 * characters shortened to its first 40 and last 20 around "...", so that what is wrong
 * (after the echo) always fits in the message. Returns buf (n >= GPUPART__ECHO_MAX). */
const char *gpupart__echo(const char *s, char *buf, size_t n);
#define GPUPART__ECHO(s) gpupart__echo((s), (char[GPUPART__ECHO_MAX]){0}, GPUPART__ECHO_MAX)

/* Parses text as a value of option o (not PARTITIONS). Paths are only checked. */
int gpupart__option_parse(gpupart__opt o, const char *text, gpupart__value *out, char *err, size_t n);
/* The value as text in the option's syntax (bytes as plain numbers). */
void gpupart__option_format(gpupart__opt o, const gpupart__value *v, char *buf, size_t n);

/* One partition declared by configuration. */
typedef struct gpupart__pspec {
  char name[GPUPART__NAME_MAX];
  gpupart__selector dev;      /* unset = the default device */
  gpupart__amount size;       /* share of the budget, or bytes */
  gpupart__amount guarantee;  /* the same; 0 = none */
  int has_size;               /* 1; 0 while a file section has none; -1 after a bad one */
  int growth;                 /* GPUPART_GROWTH_*; DEFAULT = the device's */
  uint64_t release_threshold; /* 0 = the device's */
  gpupart__source src;
} gpupart__pspec;

/* Checks a partition name: 1 to 63 of [A-Za-z0-9_.-]. */
int gpupart__check_name(const char *name, char *err, size_t n);
/* Checks that a declared partition's guarantee fits its size where both are the same kind. */
int gpupart__check_pspec(const gpupart__pspec *p, char *err, size_t n);
/* Parses "name:size[:guarantee],..." groups separated by ';', each optionally prefixed by
 * "backend:index=". Appends to out (capacity cap, *count in and out); names must be unique
 * per device selector. Returns 0, or -1 with err filled and *count unchanged. */
int gpupart__parse_partitions(const char *s, gpupart__pspec *out, uint32_t cap, uint32_t *count, char *err, size_t n);

#endif
