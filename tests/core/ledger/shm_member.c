/* shm_member: a separate program (exec'd, not forked) that the shared-ledger tests run as
 * a member of a shared device, so that the tests cover real processes with their own
 * address space and library state. It opens a 1 GiB sim device with GPUPART_DEVICE_SHARED
 * in the ledger folder given first (after "--backend vulkan": gpupart's own device on the
 * first Vulkan device instead, its budget set by SHM_MEMBER_CONFIG), then runs its script,
 * one word per step:
 *   part NAME LIMIT_MIB GUARANTEE_MIB  create (0 0: join the partition of that name)
 *   cpart NAME LIMIT_MIB GUARANTEE_MIB the same, keeping its empty blocks cached
 *   rpart NAME LIMIT_MIB GUARANTEE_MIB the same, with a reclaim callback that frees what
 *                                      is kept (from whichever thread calls it)
 *   fpart NAME PERCENT                 create with a limit of PERCENT % of the budget
 *                                      (a fraction, resolved against the ledger's budget)
 *   find NAME                          the partition of that name (joins another's)
 *   alloc MIB / refuse MIB             allocate and keep / expect ELIMIT
 *   reserved MIB                       the partition's reserved (partition-wide) is MIB
 *   hammer N SEED                      N random allocations and frees, checking after each
 *                                      that the partition's reserved is within its limit
 *   ready / wait                       write "ready" to stdout / read a line from stdin
 *   freeall / check                    free what is kept / gpupart_device_check
 * SHM_MEMBER_CONFIG, when set, is the context's config_text (responder = 0, ...).
 * Exit 0 when every step did what it says; else a message on stderr and the step's number
 * plus 10. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupart.h"

#define MiB (1024ull * 1024ull)
#define KEEP 64

static gpupart_partition *part;
static gpupart_allocation *kept[KEEP];
static int nkept;

static int fail(int step, const char *what) {
  fprintf(stderr, "shm_member step %d (%s): %s\n", step, what, gpupart_last_error());
  return 10 + step;
}

static gpupart_result keep(uint64_t bytes) {
  gpupart_allocation *a = NULL;
  gpupart_result rc = gpupart_alloc(part, bytes, 0, &a);
  if (rc == GPUPART_OK && nkept < KEEP) kept[nkept++] = a;
  else if (rc == GPUPART_OK) gpupart_free(a);
  return rc;
}

static void free_all(void) {
  while (nkept) gpupart_free(kept[--nkept]);
}

static uint64_t part_reserved(uint64_t *limit) {
  gpupart_stats s = {0};
  gpupart_partition_get_stats(part, &s);
  *limit = s.limit;
  return s.reserved;
}

/* Random allocations and frees; 0, or 1 when the partition went past its limit. */
static int hammer(unsigned n, unsigned seed) {
  srand(seed);
  for (unsigned i = 0; i < n; i++) {
    if (nkept && (rand() % 2 || nkept == KEEP)) {
      int k = rand() % nkept;
      gpupart_free(kept[k]);
      kept[k] = kept[--nkept];
      continue;
    }
    gpupart_result rc = keep((uint64_t)(rand() % 32 + 1) * 2 * MiB);
    uint64_t limit, reserved = part_reserved(&limit);
    if ((rc != GPUPART_OK && rc != GPUPART_ELIMIT) || reserved > limit) return 1;
  }
  return 0;
}

/* Frees kept allocations until wanted bytes went (the program's other thread waits on
 * its stdin meanwhile). */
static int give_back(gpupart_partition *p, uint64_t wanted, void *user) {
  (void)p, (void)user;
  uint64_t freed = 0;
  while (nkept && freed < wanted) {
    gpupart_allocation_info info = {0};
    gpupart_allocation_get_info(kept[nkept - 1], &info);
    freed += info.size;
    gpupart_free(kept[--nkept]);
  }
  return 0;
}

/* how: 'p' releases empty blocks at once, 'c' keeps them cached, 'r' has give_back. */
static int create(char how, const char *name, uint64_t limit, uint64_t guarantee, gpupart_device *dev) {
  gpupart_partition_desc d = {.name = name, .limit = limit * MiB, .guarantee = guarantee * MiB};
  if (how == 'p') d.release_threshold = 1;
  if (how == 'r') d.reclaim = give_back;
  return gpupart_partition_create(dev, &d, &part) != GPUPART_OK;
}

static int fcreate(const char *name, double fraction, gpupart_device *dev) {
  gpupart_partition_desc d = {.name = name, .fraction = fraction};
  return gpupart_partition_create(dev, &d, &part) != GPUPART_OK;
}

static int line_io(int out) {
  char line[16];
  if (out) return printf("ready\n") < 0 || fflush(stdout) != 0;
  return fgets(line, sizeof line, stdin) == NULL;
}

/* One step at argv[*i]; 0 when it did what it says. */
static int step(gpupart_device *dev, char **argv, int *i) {
  const char *w = argv[(*i)++];
  if (!strcmp(w, "part") || !strcmp(w, "cpart") || !strcmp(w, "rpart"))
    return *i += 3, create(w[0], argv[*i - 3], strtoull(argv[*i - 2], 0, 10), strtoull(argv[*i - 1], 0, 10), dev);
  if (!strcmp(w, "fpart")) return *i += 2, fcreate(argv[*i - 2], strtod(argv[*i - 1], 0) / 100, dev);
  if (!strcmp(w, "find")) return !(part = gpupart_partition_find(dev, argv[(*i)++]));
  if (!strcmp(w, "alloc")) return keep(strtoull(argv[(*i)++], 0, 10) * MiB) != GPUPART_OK;
  if (!strcmp(w, "refuse")) return keep(strtoull(argv[(*i)++], 0, 10) * MiB) != GPUPART_ELIMIT;
  if (!strcmp(w, "reserved")) {
    uint64_t limit;
    return part_reserved(&limit) != strtoull(argv[(*i)++], 0, 10) * MiB;
  }
  if (!strcmp(w, "hammer")) return *i += 2, hammer((unsigned)atoi(argv[*i - 2]), (unsigned)atoi(argv[*i - 1]));
  if (!strcmp(w, "ready") || !strcmp(w, "wait")) return line_io(!strcmp(w, "ready"));
  if (!strcmp(w, "freeall")) return free_all(), 0;
  if (!strcmp(w, "check")) return gpupart_device_check(dev) != GPUPART_OK;
  return fprintf(stderr, "shm_member: unknown step '%s'\n", w), 1;
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: shm_member LEDGER_DIR [--backend sim|vulkan] STEP...\n"), 2;
  int first = 2, vulkan = 0;
  if (argc > 3 && !strcmp(argv[2], "--backend")) {
    vulkan = !strcmp(argv[3], "vulkan");
    if (!vulkan && strcmp(argv[3], "sim")) return fprintf(stderr, "shm_member: unknown backend '%s'\n", argv[3]), 2;
    first = 4;
  }
  gpupart_context_desc cd = {
      .flags = GPUPART_CONTEXT_IGNORE_ENV, .ledger_dir = argv[1], .config_text = getenv("SHM_MEMBER_CONFIG")};
  gpupart_sim_desc sim = {.total_bytes = 1024 * MiB};
  gpupart_device_desc dd = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim, .flags = GPUPART_DEVICE_SHARED};
  if (vulkan) dd = (gpupart_device_desc){.backend = GPUPART_BACKEND_VULKAN, .flags = GPUPART_DEVICE_SHARED};
  gpupart_context *ctx = NULL;
  gpupart_device *dev = NULL;
  if (gpupart_context_create(&cd, &ctx) || gpupart_device_open(ctx, &dd, &dev)) return fail(0, "open");
  int rc = 0;
  for (int i = first, n = 1; i < argc && !rc; n++) {
    const char *w = argv[i];
    if (step(dev, argv, &i)) rc = fail(n, w);
  }
  free_all(); /* also after a failed step, so that the leak checker does not change the code */
  if (gpupart_device_close(dev) || gpupart_context_destroy(ctx)) return rc ? rc : fail(0, "close");
  return rc;
}
