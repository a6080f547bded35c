/* An application of the public API, compiled twice against headers that are not the
 * library's own, and run against the current shared library (the ABI rule of
 * docs/api.md, "Extending structs"):
 *  - against tests/abi/0.2/gpupart.h, the frozen 0.2 header: a program built for 0.2
 *    keeps working, with its descriptors, stats, infos and enumerate stride intact;
 *  - with GPUPART_ABI_NEXT, against a copy of gpupart.h with future_field appended to
 *    gpupart_device_desc, gpupart_partition_desc, gpupart_device_info and gpupart_stats
 *    (grow_header.py): a newer program runs on this library while the new field is
 *    zero, is refused with EINVAL when it is not, and gets the output fields it asks for
 *    zeroed (and enumerate's entries at its own, larger stride).
 * Both also check that a struct smaller than the 0.2 layout is EINVAL. With
 * GPUPART_ABI_UNVERSIONED the 0.2 client is linked as 0.2 programs were, against a
 * libgpupart.so.0 without symbol versions (tests/abi/stub): its plain names taken by
 * address then bind to their 0.1 versions, and dlsym's to the 0.2 ones (docs/api.md,
 * "ABI policy"). Exits 0 when every check passed, 1 otherwise, printing each failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gpupart.h"

static int failures;

#define CHECK(cond)                                                                                                   \
  do {                                                                                                                \
    if (!(cond)) {                                                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, gpupart_last_error()); \
      failures++;                                                                                                     \
    }                                                                                                                 \
  } while (0)

#define MiB (1ull << 20)

static gpupart_device *open_sim(gpupart_context *ctx, const gpupart_sim_desc *sim) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = sim, .backend_desc_size = sizeof *sim};
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open(ctx, &d, &dev) == GPUPART_OK);
  return dev;
}

/* Enumerating into an array whose stride is this header's sizeof: each entry lands at
 * its own index, and entries past the count are left alone. */
static void enumerate_stride(gpupart_context *ctx) {
  gpupart_device_info infos[3];
  memset(infos, 0xab, sizeof infos);
  uint32_t count = 2;
  CHECK(gpupart_enumerate(ctx, GPUPART_BACKEND_SIM, infos, &count) == GPUPART_OK);
  CHECK(count == 1);
  CHECK(infos[0].backend == GPUPART_BACKEND_SIM && infos[0].index == 0);
  CHECK(strcmp(infos[0].name, "gpupart simulated device") == 0);
  CHECK(infos[0].total_bytes == 16ull << 30 && infos[0].min_alignment == 256);
  CHECK(infos[1].index == 0xabababab && infos[1].total_bytes == 0xababababababababull);
#ifdef GPUPART_ABI_NEXT
  CHECK(infos[0].future_field == 0 && infos[1].future_field == 0xababababababababull);
#endif
}

static void device_and_stats(gpupart_context *ctx) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .min_alignment = 4096};
  gpupart_device *dev = open_sim(ctx, &sim);
  if (!dev) return;
  gpupart_device_info info;
  CHECK(gpupart_device_get_info(dev, &info) == GPUPART_OK);
  CHECK(info.backend == GPUPART_BACKEND_SIM && info.total_bytes == 256 * MiB && info.min_alignment == 4096);
#ifdef GPUPART_ABI_NEXT
  memset(&info, 0xee, sizeof info);
  CHECK(gpupart_device_get_info(dev, &info) == GPUPART_OK && info.future_field == 0 && info.total_bytes == 256 * MiB);
#endif
  gpupart_partition_desc pd = {.name = "abi", .limit = 64 * MiB, .guarantee = 32 * MiB};
  gpupart_partition *p = NULL;
  CHECK(gpupart_partition_create(dev, &pd, &p) == GPUPART_OK);
  gpupart_alloc_desc ad = {.size = 1000, .alignment = 8192, .tag = 7};
  gpupart_allocation *a = NULL;
  CHECK(p && gpupart_alloc_ex(p, &ad, &a) == GPUPART_OK);
  gpupart_allocation_info ai;
  CHECK(a && gpupart_allocation_get_info(a, &ai) == GPUPART_OK);
  CHECK(ai.partition == p && ai.size == 1000 && ai.device_address % 8192 == 0);
  CHECK(gpupart_free(a) == GPUPART_OK);
  CHECK(gpupart_free(a) == GPUPART_EINVAL);
  gpupart_stats st;
  memset(&st, 0xcd, sizeof st);
  CHECK(gpupart_partition_get_stats(p, &st) == GPUPART_OK);
  CHECK(st.limit == 64 * MiB && st.guarantee == 32 * MiB && st.total_allocations == 1 && st.total_frees == 1);
  CHECK(st.live_allocations == 0 && st.in_use == 0 && st.peak_in_use == 1000 && st.double_frees == 1);
#ifdef GPUPART_ABI_NEXT
  CHECK(st.future_field == 0); /* a field this library does not know reads as zero */
#endif
  memset(&st, 0xcd, sizeof st);
  CHECK(gpupart_device_get_stats(dev, &st) == GPUPART_OK);
  CHECK(st.limit == 256 * MiB && st.guarantee == 32 * MiB && st.double_frees == 1 && st.driver_allocs == 1);
#ifdef GPUPART_ABI_NEXT
  CHECK(st.future_field == 0);
#endif
  CHECK(gpupart_partition_destroy(p) == GPUPART_OK);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}

/* A struct smaller than its 0.2 layout cannot be a gpupart struct: EINVAL, nothing made. */
static void below_0_2_is_refused(gpupart_context *ctx) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM};
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open_sized(ctx, &d, offsetof(gpupart_device_desc, flags), &dev) == GPUPART_EINVAL);
  CHECK(dev == NULL && strstr(gpupart_last_error(), "smallest layout"));
  gpupart_context *c2 = NULL;
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  CHECK(gpupart_context_create_sized(&cd, 4, &c2) == GPUPART_EINVAL && c2 == NULL);
  gpupart_device_info infos[2];
  uint32_t count = 2;
  CHECK(gpupart_enumerate_sized(ctx, GPUPART_BACKEND_SIM, infos, 16, &count) == GPUPART_EINVAL);
  CHECK(gpupart_device_open(ctx, &d, &dev) == GPUPART_OK);
  gpupart_stats st;
  CHECK(gpupart_device_get_stats_sized(dev, &st, offsetof(gpupart_stats, double_frees)) == GPUPART_EINVAL);
  gpupart_device_info info;
  CHECK(gpupart_device_get_info_sized(dev, &info, 8) == GPUPART_EINVAL);
  gpupart_partition_desc pd = {.name = "small"};
  gpupart_partition *p = NULL;
  CHECK(gpupart_partition_create_sized(dev, &pd, sizeof pd.name, &p) == GPUPART_EINVAL && p == NULL);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}

#ifdef GPUPART_ABI_NEXT
/* A field this library does not know: zero means "not used" and works, anything else is
 * refused, since the library cannot honour it. */
static void future_fields(gpupart_context *ctx) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .future_field = 0};
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open(ctx, &d, &dev) == GPUPART_OK);
  gpupart_partition_desc pd = {.name = "next", .future_field = 0};
  gpupart_partition *p = NULL;
  CHECK(dev && gpupart_partition_create(dev, &pd, &p) == GPUPART_OK);
  pd = (gpupart_partition_desc){.name = "refused", .future_field = 1};
  gpupart_partition *q = NULL;
  CHECK(dev && gpupart_partition_create(dev, &pd, &q) == GPUPART_EINVAL && q == NULL);
  CHECK(strstr(gpupart_last_error(), "is not zero: built against a newer gpupart?"));
  CHECK(gpupart_partition_find(dev, "refused") == NULL);
  CHECK(gpupart_partition_destroy(p) == GPUPART_OK);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
  d.future_field = 1;
  dev = NULL;
  CHECK(gpupart_device_open(ctx, &d, &dev) == GPUPART_EINVAL && dev == NULL);
  CHECK(strstr(gpupart_last_error(), "gpupart_device_desc has") && strstr(gpupart_last_error(), "is not zero"));
}
#endif

#ifdef GPUPART_ABI_UNVERSIONED
typedef gpupart_result (*device_stats_fn)(const gpupart_device *, gpupart_stats *);

/* A plain name called through its address in a 0.2 program: an unversioned reference,
 * bound to the oldest version, 0.1's: 0.2's double_frees is left as it was. dlsym finds
 * the default version, 0.2's, as the 0.2 header promised for it. */
static void plain_names_of_a_0_2_program(gpupart_context *ctx) {
  gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .memory_limit = 64 * MiB};
  gpupart_device *dev = NULL;
  CHECK(gpupart_device_open(ctx, &d, &dev) == GPUPART_OK);
  if (!dev) return;
  device_stats_fn by_address = &gpupart_device_get_stats, by_dlsym = NULL;
  void *sym = dlsym(RTLD_DEFAULT, "gpupart_device_get_stats");
  CHECK(sym != NULL);
  memcpy(&by_dlsym, &sym, sizeof sym);
  gpupart_stats st;
  memset(&st, 0xcd, sizeof st);
  CHECK(by_address(dev, &st) == GPUPART_OK && st.limit == 64 * MiB && st.double_frees == 0xcdcdcdcdcdcdcdcdull);
  memset(&st, 0xcd, sizeof st);
  CHECK(by_dlsym && by_dlsym(dev, &st) == GPUPART_OK && st.limit == 64 * MiB && st.double_frees == 0);
  CHECK(gpupart_device_close(dev) == GPUPART_OK);
}
#endif

int main(void) {
  gpupart_context_desc cd = {.flags = GPUPART_CONTEXT_IGNORE_ENV};
  gpupart_context *ctx = NULL;
  CHECK(gpupart_context_create(&cd, &ctx) == GPUPART_OK);
  if (!ctx) return 1;
  CHECK(gpupart_version() >= 200);
  enumerate_stride(ctx);
  device_and_stats(ctx);
  below_0_2_is_refused(ctx);
#ifdef GPUPART_ABI_NEXT
  future_fields(ctx);
#endif
#ifdef GPUPART_ABI_UNVERSIONED
  plain_names_of_a_0_2_program(ctx);
#endif
  CHECK(gpupart_context_destroy(ctx) == GPUPART_OK);
  printf("%s: %d failure(s)\n", GPUPART_ABI_NAME, failures);
  return failures != 0;
}
