/* The configuration a context loads when it is created: the GPUPART_* variables and the
 * INI file (plus the descriptor's config_text), each kept as a layer of values with the
 * source of every one, so a device can later ask for "the effective value of this option
 * for cuda:1" and say where it came from. Loading validates everything, so a bad value
 * fails gpupart_context_create and nothing is half-applied; device open only reads. */
#ifndef GPUPART_CORE_CONFIG_H
#define GPUPART_CORE_CONFIG_H

#include "dra.h"
#include "error.h"
#include "hostmem.h"
#include "options.h"

#define GPUPART__MAX_DEVICE_VALUES 64 /* per-device values one layer may hold */
#define GPUPART__POOL_SIZE 8192       /* bytes of strings (paths) one layer may hold */
#define GPUPART__MSG_MAX 512          /* one error line: source, key, what is wrong */
#define GPUPART__FILE_MAX (1u << 20)  /* the largest configuration file read */

/* One value that applies to one device (a [device B:I] section, or B:I=value). */
typedef struct gpupart__device_value {
  gpupart__selector sel;
  gpupart__opt opt;
  gpupart__value v;
} gpupart__device_value;

/* What one kind of source declares: the environment, or the file followed by the
 * descriptor's config_text (which replaces the file's values key by key). */
typedef struct gpupart__layer {
  gpupart__value global[GPUPART__OPT_COUNT];
  gpupart__device_value dev[GPUPART__MAX_DEVICE_VALUES];
  uint32_t ndev;
  gpupart__pspec parts[GPUPART__MAX_PARTS]; /* in declaration order */
  uint32_t nparts;
  char pool[GPUPART__POOL_SIZE]; /* the strings that values point to */
  size_t pool_used;
} gpupart__layer;

/* A variable of another framework seen in the environment (TF_FORCE_GPU_ALLOW_GROWTH,
 * XLA_PYTHON_CLIENT_*, PYTORCH_CUDA_ALLOC_CONF): reported with its gpupart equivalent,
 * never applied. name and value are shortened and escaped for display. */
typedef struct gpupart__foreign {
  char name[GPUPART__ECHO_MAX], value[GPUPART__ECHO_MAX];
  char hint[192];
} gpupart__foreign;
#define GPUPART__MAX_FOREIGN 8

/* A memory share an orchestrator assigned, read from its files, its own variables or the
 * cgroup: a Kubernetes DRA driver's device metadata (KEP-5304), HAMi's
 * CUDA_DEVICE_MEMORY_LIMIT[_<i>] and (for AMD) HIP_DEVICE_MEMORY_LIMIT[_<i>], NVIDIA MPS's
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, Slurm's SLURM_SHARD_MEM_PER_GPU, KAI's GPU_PORTION,
 * the cgroup v2 dmem.max. Kept in the order they are read, which is the order of
 * precedence among them (docs/configuration.md). */
typedef enum gpupart__share_kind {
  GPUPART__SHARE_DRA,         /* a DRA metadata file: the device of a UUID or PCI bus id */
  GPUPART__SHARE_HAMI_DEVICE, /* CUDA_DEVICE_MEMORY_LIMIT_<i>: device index i */
  GPUPART__SHARE_HAMI,        /* CUDA_DEVICE_MEMORY_LIMIT: every device */
  GPUPART__SHARE_HIP_DEVICE,  /* HIP_DEVICE_MEMORY_LIMIT_<i>: device index i */
  GPUPART__SHARE_HIP,         /* HIP_DEVICE_MEMORY_LIMIT: every device */
  GPUPART__SHARE_MPS,         /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: an ordinal or a GPU UUID */
  GPUPART__SHARE_SLURM,       /* SLURM_SHARD_MEM_PER_GPU: a PCI address, or every device */
  GPUPART__SHARE_KAI,         /* GPU_PORTION: a portion of every device's total */
  GPUPART__SHARE_DMEM         /* dmem.max: a region whose name holds the PCI address */
} gpupart__share_kind;

typedef struct gpupart__share {
  gpupart__share_kind kind;
  int all;      /* names every device */
  int by_index; /* names device index `index` (HAMI_DEVICE, HIP_DEVICE, an MPS ordinal) */
  uint32_t index;
  char key[128];    /* SLURM: the PCI address; MPS: the UUID ("GPU-..."); DMEM: the region;
                     * DRA: the UUID or PCI bus id */
  uint64_t bytes;   /* 0 = no limit (HAMi's 0m): the next share in the order applies */
  double portion;   /* KAI: the share is this part of the device's total (bytes is 0) */
  uint32_t dra;     /* DRA: 1 + the device's index in the configuration's dra[] */
  char source[160]; /* the variable, or "dmem.max of cgroup /path" */
} gpupart__share;
#define GPUPART__MAX_SHARES 32
#define GPUPART__MAX_SHARE_WARNINGS 8

/* Where the cgroup v2 files are read: the process's cgroup line ("0::/path") from
 * proc_cgroup, and dmem.max under root + path. Tests point them at a fake tree. */
typedef struct gpupart__cgroup_paths {
  const char *proc_cgroup; /* "/proc/self/cgroup" */
  const char *root;        /* "/sys/fs/cgroup" */
} gpupart__cgroup_paths;
extern gpupart__cgroup_paths gpupart__cgroup;

typedef struct gpupart__config {
  gpupart__layer env, file;
  char file_name[GPUPART__PATH_MAX];     /* the file read; file sources point here */
  int env_read;                          /* the variables were read (no IGNORE_ENV) */
  uint64_t env_hash[GPUPART__OPT_COUNT]; /* each known variable as read: 0 unset, else a hash */
  gpupart__foreign foreign[GPUPART__MAX_FOREIGN];
  uint32_t nforeign;
  gpupart__share shares[GPUPART__MAX_SHARES]; /* orchestrator shares, in precedence order */
  uint32_t nshares;
  char share_warnings[GPUPART__MAX_SHARE_WARNINGS][GPUPART__MSG_MAX]; /* values ignored, and why */
  uint32_t nshare_warnings;
  gpupart__dra_device dra[GPUPART__MAX_DRA]; /* DRA metadata's devices (shares point here) */
  uint32_t ndra;
  /* With DRA devices: the pod's name ($POD_NAME, the downward API's metadata.name: the
   * metadata names no pod) for the metrics' pod label, and the claim's partition
   * ($GPUPART_PARTITION, which `gpupart cdi` injects); "" when unset or not a name. */
  char dra_pod[GPUPART__DRA_NAME_MAX];
  char dra_partition[GPUPART__DRA_NAME_MAX];
} gpupart__config;

/* Receives each error line of a check, e.g. "a.ini:3: unknown key 'memroy_fraction'". */
typedef void (*gpupart__report_fn)(const char *message, void *user);

/* Collects the errors of one load: the first is kept for gpupart_last_error. */
typedef struct gpupart__errors {
  gpupart__report_fn report; /* NULL = keep the first only */
  void *user;
  int count;
  int first_line; /* line of the earliest file error, 0 = none */
  char first[GPUPART__MSG_MAX];
} gpupart__errors;

/* Adds an error at line (0: none) and returns -1, so a parser's failure reads
 * `return gpupart__errors_add(e, ...)`. */
int gpupart__errors_add(gpupart__errors *e, int line, const char *fmt, ...) GPUPART__PRINTF(3, 4);

/* Loads the environment, the file (desc->config_path, else $GPUPART_CONFIG), then
 * desc->config_text; with GPUPART_CONTEXT_IGNORE_ENV only config_text. ECONFIG naming the source, the key and what is
 * wrong (the first error found); ENOMEM. *out is set only on success. */
int gpupart__config_load(const gpupart__hostmem *m, const gpupart_context_desc *d, gpupart__config **out);
void gpupart__config_free(const gpupart__hostmem *m, gpupart__config *c);

/* The known GPUPART_* variables whose value now differs from the one the context read
 * when it was created, as "GPUPART_A, GPUPART_B" in buf; returns how many. */
int gpupart__config_env_changed(const gpupart__config *c, char *buf, size_t n);

/* Checks one INI file on its own, reporting every error; returns how many there were.
 * Beyond what loading checks, it judges the file as a whole: sections and partitions
 * for a backend its own backend list excludes, and, per device (a partition without a
 * device, `device = 0` and `device = sim:0` can all land on sim:0), guarantees or
 * preallocated sizes given as shares that add up to more than the budget. */
int gpupart__config_check_file(const char *path, gpupart__report_fn report, void *user);

/* Reads the file at path into c's file layer, naming it what in messages (a regular
 * file of at most GPUPART__FILE_MAX bytes, no NUL byte; never blocks on a FIFO). 0, or
 * -1 with the errors in e. */
int gpupart__config_read_file(const gpupart__hostmem *m, gpupart__config *c, const char *what, const char *path,
                              gpupart__errors *e);

/* layer.c. Sets option o in layer l from text (dev NULL = the layer-wide value). A value the same
 * source set before is an error; one from an earlier source is replaced. 0 or -1 + err. */
int gpupart__layer_set(gpupart__layer *l, gpupart__opt o, const gpupart__selector *dev, const char *text,
                       gpupart__source src, char *err, size_t n);
/* Copies s into the layer's pool; NULL when it is full. */
const char *gpupart__layer_strdup(gpupart__layer *l, const char *s);

/* Parses INI text into layer l, naming it name in messages. Returns the number of errors
 * added to e. */
int gpupart__ini_parse(gpupart__layer *l, const char *text, const char *name, gpupart__errors *e);

/* The value option o has in layer l for device (b, index) (b AUTO: the layer-wide one),
 * or NULL when the layer sets none. */
const gpupart__value *gpupart__layer_get(const gpupart__layer *l, gpupart__opt o, gpupart_backend b, uint32_t index);
/* The effective value of option o for device (b, index): environment (that device, then
 * its index, then every device) > file (likewise) > default. b AUTO = layer-wide only. */
void gpupart__config_get(const gpupart__config *c, gpupart__opt o, gpupart_backend b, uint32_t index,
                         gpupart__value *out);
/* The partitions declared for device (b, index), from the highest layer that declares any:
 * those naming the device, and those naming none when index is the default device's (the
 * first visible one, GPUPART_DEVICE) and b a backend the configured list allows. Returns
 * how many were written. */
uint32_t gpupart__config_partitions(const gpupart__config *c, gpupart_backend b, uint32_t index,
                                    const gpupart__pspec **out, uint32_t cap);

/* shares.c: records the share of HAMi's variable name = value (CUDA_DEVICE_MEMORY_LIMIT or
 * HIP_DEVICE_MEMORY_LIMIT, with or without _<i>), of CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, of
 * SLURM_SHARD_MEM_PER_GPU, of GPU_PORTION, and of the cgroup's dmem.max files; what does
 * not parse is a warning in c->share_warnings, and ignored. */
void gpupart__share_hami(gpupart__config *c, const char *name, const char *value);
void gpupart__share_mps(gpupart__config *c, const char *value);
void gpupart__share_slurm(gpupart__config *c, const char *value);
void gpupart__share_kai(gpupart__config *c, const char *value);
void gpupart__share_dmem(gpupart__config *c);
/* Keeps a warning about an ignored value (the first GPUPART__MAX_SHARE_WARNINGS). */
void gpupart__share_warn(gpupart__config *c, const char *fmt, ...) GPUPART__PRINTF(2, 3);
/* A new share of that kind and source (a variable, a file); NULL, with a warning, when
 * the configuration holds GPUPART__MAX_SHARES already. */
gpupart__share *gpupart__share_add(gpupart__config *c, gpupart__share_kind kind, const char *source);
/* dra.c: records a share for each device of the DRA metadata files under root
 * (resourceclaims/<claim>/<request>/<driver>-metadata.json and resourceclaimtemplates/
 * <podClaimName>/<request>/<driver>-metadata.json); what cannot be read is a warning. */
void gpupart__share_dra(gpupart__config *c, const gpupart__hostmem *m, const char *root, const char *pod,
                        const char *partition);

/* The orchestrator share that applies to device index with PCI address pci ("" when
 * unknown), UUID uuid (16 bytes; NULL, or all zero, when it has none) and total bytes
 * (what a portion is of): the first kind in the order that names it with a limit, the
 * smallest within a kind; NULL when none does. gpupart__config_share is the same for a
 * device with no UUID and no total (a portion gives it nothing). */
const gpupart__share *gpupart__config_share_for(const gpupart__config *c, uint32_t index, const char *pci,
                                                const uint8_t *uuid, uint64_t total);
const gpupart__share *gpupart__config_share(const gpupart__config *c, uint32_t index, const char *pci);
/* The bytes share s gives a device of total bytes: its bytes, or its portion of total. */
uint64_t gpupart__share_bytes(const gpupart__share *s, uint64_t total);

/* Whether v was set by a variable or the file (not by a descriptor, nor left at its
 * default): a value the operator or the user wrote. */
int gpupart__value_from_user(const gpupart__value *v);

/* "name:line", or "name" when the source has no line. */
void gpupart__source_format(gpupart__source s, char *buf, size_t n);

#endif
