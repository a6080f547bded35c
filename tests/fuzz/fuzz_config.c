/* libFuzzer target for the configuration parsers. The first byte chooses what the rest of
 * the input is fed to: INI text (through gpupart_context_create and a device open, so
 * partitions declared by the text are created too), the amount parser, the partition
 * spec parser, one GPUPART_* variable (the second byte picks which), or the readers of the
 * orchestrators' values (HAMi's variables, MPS's and Slurm's lists, KAI's portion), or the
 * bytes of a Kubernetes DRA device metadata file (and the JSON reader under it). Any crash, sanitizer
 * report or leak is a finding; parse errors are expected and ignored. A text that turns
 * shared ledgers on gets them in a scratch folder of the run (the contexts' descriptor
 * names it, which no variable or file can override), removed at exit: never /dev/shm. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpupart.h"
#include "config.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char scratch[] = "/tmp/gpupart-fuzz-XXXXXX";      /* the run's ledger folder */
static char dra_root[] = "/tmp/gpupart-fuzz-dra-XXXXXX"; /* the run's DRA metadata folder */
static char dra_file[sizeof dra_root + 64];
static const char *const dra_dirs[] = {"/resourceclaims", "/resourceclaims/c", "/resourceclaims/c/r"};

static void remove_dra(void) {
  char dir[sizeof dra_root + 64];
  unlink(dra_file);
  for (int i = 2; i >= 0; i--) {
    snprintf(dir, sizeof dir, "%s%s", dra_root, dra_dirs[i]);
    rmdir(dir);
  }
  rmdir(dra_root);
}

static void make_dra(void) {
  char dir[sizeof dra_root + 64];
  if (!mkdtemp(dra_root)) abort();
  for (int i = 0; i < 3; i++) {
    snprintf(dir, sizeof dir, "%s%s", dra_root, dra_dirs[i]);
    if (mkdir(dir, 0700)) abort();
  }
  snprintf(dra_file, sizeof dra_file, "%s/resourceclaims/c/r/d-metadata.json", dra_root);
  atexit(remove_dra);
}

static void remove_scratch(void) {
  DIR *d = opendir(scratch);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[sizeof scratch + 256];
    snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(path);
  }
  if (d) closedir(d);
  rmdir(scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (!mkdtemp(scratch)) abort();
  atexit(remove_scratch);
  make_dra();
  return 0;
}

/* Opening a device runs the settings and creates the partitions the text declares. The
 * descriptor fixes the device's size and growth, so a configured 16 EiB device with
 * preallocation cannot turn into billions of simulated blocks. */
static void open_device(gpupart_context *ctx) {
  gpupart_sim_desc sim = {.total_bytes = 64ull << 30};
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .growth = GPUPART_GROWTH_ON};
  gpupart_device *dev;
  if (gpupart_device_open(ctx, &d, &dev) != GPUPART_OK) return;
  if (gpupart_device_check(dev) != GPUPART_OK) abort();
  if (gpupart_device_close(dev) != GPUPART_OK) abort();
}

static void fuzz_ini(const char *text) {
  /* the trace option is parsed and checked, but no file named by the input is created */
  gpupart_context_desc cd = {
      .flags = GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE, .config_text = text, .ledger_dir = scratch};
  gpupart_context *ctx;
  if (gpupart_context_create(&cd, &ctx) != GPUPART_OK) return;
  open_device(ctx);
  if (gpupart_context_destroy(ctx) != GPUPART_OK) abort();
}

static void fuzz_amount(const char *text) {
  char err[GPUPART__ERR_MAX];
  gpupart__amount a;
  gpupart__value v;
  gpupart__selector sel;
  for (unsigned accept = 1; accept <= 3; accept++)
    if (gpupart__parse_amount(text, accept, &a, err, sizeof err) == 0 && a.is_share && !(a.share >= 0 && a.share <= 1))
      abort();
  for (int o = 0; o < GPUPART__OPT_COUNT; o++)
    if (gpupart__options[o].type != GPUPART__T_PARTITIONS)
      gpupart__option_parse((gpupart__opt)o, text, &v, err, sizeof err);
  gpupart__parse_selector(text, &sel, err, sizeof err);
}

static void fuzz_partitions(const char *text) {
  static gpupart__pspec specs[GPUPART__MAX_PARTS];
  char err[GPUPART__ERR_MAX];
  uint32_t n = 0;
  if (gpupart__parse_partitions(text, specs, GPUPART__MAX_PARTS, &n, err, sizeof err) != 0 && n != 0) abort();
}

static void fuzz_variable(uint8_t which, const char *text) {
  const gpupart__option *o = &gpupart__options[which % GPUPART__OPT_COUNT];
  if (o->type == GPUPART__T_PATH && which % GPUPART__OPT_COUNT == GPUPART__OPT_CONFIG) return; /* no file reads */
  setenv(o->env, text, 1);
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_NO_TRACE, /* GPUPART_TRACE parsed, no file made */
                             .ledger_dir = scratch};
  gpupart_context *ctx;
  if (gpupart_context_create(&cd, &ctx) == GPUPART_OK) {
    open_device(ctx);
    gpupart_context_destroy(ctx);
  }
  unsetenv(o->env);
}

/* The orchestrators' values (HAMi's, its AMD hook's, MPS's, Slurm's, KAI's) are hostile
 * text: each either parses or is a warning, and a share that applies has a limit (a
 * portion's never more than the device's total). */
static void fuzz_shares(const char *text) {
  static gpupart__config c;
  static const uint8_t uuid[16] = {0x7c, 0xe2, 0x3c, 0xd8};
  const uint64_t total = 16ull << 30;
  char name[96];
  memset(&c, 0, sizeof c);
  snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%s", text);
  gpupart__share_hami(&c, name, "1g");
  snprintf(name, sizeof name, "HIP_DEVICE_MEMORY_LIMIT_%s", text);
  gpupart__share_hami(&c, name, "1g");
  gpupart__share_hami(&c, "CUDA_DEVICE_MEMORY_LIMIT", text);
  gpupart__share_hami(&c, "HIP_DEVICE_MEMORY_LIMIT", text);
  gpupart__share_mps(&c, text);
  gpupart__share_slurm(&c, text);
  gpupart__share_kai(&c, text);
  if (c.nshares > GPUPART__MAX_SHARES || c.nshare_warnings > GPUPART__MAX_SHARE_WARNINGS) abort();
  const gpupart__share *s = gpupart__config_share(&c, 0, "0000:3b:00.0");
  if (s && !s->bytes) abort();
  s = gpupart__config_share_for(&c, 1, "", uuid, total);
  if (s && (!gpupart__share_bytes(s, total) || (s->portion > 0 && gpupart__share_bytes(s, total) > total))) abort();
}

/* A DRA metadata file of these bytes (NULs included): read as the configuration reads it,
 * and its JSON value by value. Every share it gives names the device it was read for. */
static void fuzz_dra(const uint8_t *bytes, size_t n) {
  static gpupart__config c;
  static gpupart__json nodes[256];
  static const uint8_t uuid[16] = {0x7c, 0xe2, 0x3c, 0xd8};
  FILE *f = fopen(dra_file, "wb");
  if (!f) abort();
  if (n && fwrite(bytes, 1, n, f) != n) abort();
  fclose(f);
  memset(&c, 0, sizeof c);
  gpupart__share_dra(&c, gpupart__hostmem_default(), dra_root, NULL, NULL);
  if (c.ndra > GPUPART__MAX_DRA || c.nshares != c.ndra) abort();
  for (uint32_t i = 0; i < c.ndra; i++)
    if (c.shares[i].dra != i + 1 || !c.dra[i].generation || !c.dra[i].key[0]) abort();
  const gpupart__share *s = gpupart__config_share_for(&c, 0, "0000:3b:00.0", uuid, 16ull << 30);
  if (s && !s->bytes) abort();
  char why[160];
  uint32_t count;
  for (size_t pos = 0; gpupart__json_parse((const char *)bytes, n, &pos, nodes, 256, &count, why, sizeof why) == 0;)
    if (count == 0 || count > 256) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  char *text = malloc(size - 1);
  if (!text) return 0;
  memcpy(text, data + 2, size - 2);
  text[size - 2] = 0;
  if (data[0] % 6 == 5) {
    fuzz_dra(data + 2, size - 2);
    free(text);
    return 0;
  }
  switch (data[0] % 6) {
  case 0: fuzz_ini(text); break;
  case 1: fuzz_amount(text); break;
  case 2: fuzz_partitions(text); break;
  case 4: fuzz_shares(text); break;
  default: fuzz_variable(data[1], text); break;
  }
  free(text);
  return 0;
}
