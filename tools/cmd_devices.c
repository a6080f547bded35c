/* gpupart devices: every device of every backend present (or of one named backend), as a
 * table or as JSON, so a person or a deployment script can see what gpupart would open. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "identity.h"
#include "introspect.h" /* gpupart__introspect_backend_named */
#include "registry.h"

static const char help[] = "usage: gpupart devices [--json] [--backend NAME] [-v]\n"
                           "\n"
                           "Lists every device of every backend present: backend, index, name, vendor, total\n"
                           "and free memory, the largest single allocation the driver allows, and the device's\n"
                           "identity: its UUID and PCI bus id where the backend can tell (else -).\n"
                           "\n"
                           "  --backend NAME  only this backend: cuda, vulkan, opencl or sim (sim is listed only\n"
                           "                  when named); default: every backend present\n"
                           "  --json          one JSON object: {\"devices\": [{\"backend\", \"index\", \"name\",\n"
                           "                  \"vendor\", \"total\", \"free\", \"max_block\", \"block_granularity\",\n"
                           "                  \"uuid\", \"pci_bus_id\"}]}, sizes in bytes; free, uuid and\n"
                           "                  pci_bus_id null where the driver cannot tell\n"
                           "\n"
                           "  -v, --verbose   also name on standard error each backend passed over, and why\n"
                           "\n"
                           "Without --backend, a backend passed over (driver missing, a GPUPART_*_LIBRARY that\n"
                           "cannot be opened, ...) is named on standard error with the reason, one line each,\n"
                           "when the configuration names it (GPUPART_BACKEND, its GPUPART_*_LIBRARY), when no\n"
                           "device was found at all, or with -v; a machine without an NVIDIA driver is not\n"
                           "told so at every run.\n"
                           "\n"
                           "exit status: 0 devices found, 1 none found or the backend is missing, 2 bad usage\n";

/* The UUID as 8-4-4-4-12 hex digits; "" when it is all zero (the backend has none). */
static void format_uuid(const uint8_t u[16], char out[GPUPART__UUID_STRING]) {
  out[0] = '\0';
  if (!gpupart__uuid_is_zero(u)) gpupart__uuid_format(u, out);
}

static void json_string_or_null(const char *s) {
  if (*s) json_string(stdout, s);
  else printf("null");
}

static void print_json(const gpupart_device_info *d, uint32_t n) {
  printf("{\"devices\": [");
  for (uint32_t i = 0; i < n; i++) {
    printf("%s\n  {\"backend\": \"%s\", \"index\": %u, \"name\": ", i ? "," : "", gpupart_backend_name(d[i].backend),
           d[i].index);
    json_string(stdout, d[i].name);
    printf(", \"vendor\": ");
    json_string(stdout, d[i].vendor);
    printf(", \"total\": %llu, \"free\": ", (unsigned long long)d[i].total_bytes);
    if (d[i].free_bytes == UINT64_MAX) printf("null");
    else printf("%llu", (unsigned long long)d[i].free_bytes);
    printf(", \"max_block\": %llu, \"block_granularity\": %llu, \"uuid\": ", (unsigned long long)d[i].max_block_bytes,
           (unsigned long long)d[i].block_granularity);
    char uuid[GPUPART__UUID_STRING];
    format_uuid(d[i].uuid, uuid);
    json_string_or_null(uuid);
    printf(", \"pci_bus_id\": ");
    json_string_or_null(d[i].pci_bus_id);
    printf("}");
  }
  printf("%s]}\n", n ? "\n" : "");
}

static void print_table(const gpupart_device_info *d, uint32_t n) {
  printf("%-8s %-5s %-36s %-16s %10s %10s %10s  %-36s %s\n", "BACKEND", "INDEX", "NAME", "VENDOR", "TOTAL", "FREE",
         "MAX BLOCK", "UUID", "PCI");
  for (uint32_t i = 0; i < n; i++) {
    char total[32], free_[32], max[32], uuid[GPUPART__UUID_STRING];
    format_uuid(d[i].uuid, uuid);
    human_bytes(d[i].total_bytes, total, sizeof total);
    human_bytes(d[i].max_block_bytes, max, sizeof max);
    if (d[i].free_bytes == UINT64_MAX) snprintf(free_, sizeof free_, "?");
    else human_bytes(d[i].free_bytes, free_, sizeof free_);
    printf("%-8s %-5u %-36.36s %-16.16s %10s %10s %10s  %-36s %s\n", gpupart_backend_name(d[i].backend), d[i].index,
           d[i].name, d[i].vendor, total, free_, max, *uuid ? uuid : "-", d[i].pci_bus_id[0] ? d[i].pci_bus_id : "-");
  }
}

/* Lists into a freshly allocated array; *n is its length. */
static gpupart_result list(gpupart_context *ctx, gpupart_backend b, gpupart_device_info **out, uint32_t *n) {
  *out = NULL;
  *n = 0;
  gpupart_result rc = gpupart_enumerate(ctx, b, NULL, n);
  if (rc || !*n) return rc;
  uint32_t cap = *n;
  *out = calloc(cap, sizeof **out);
  if (!*out) return GPUPART_ENOMEM;
  rc = gpupart_enumerate(ctx, b, *out, n);
  if (*n > cap) *n = cap; /* a device appeared between the two calls: list what fits */
  return rc;
}

/* "sim, opencl, vulkan or cuda": every backend of the registry, for messages. */
static const char *names(void) {
  static const char list[] =
#define GPUPART__LISTED(ID, name, rank) #name ", "
      GPUPART__BACKENDS(GPUPART__LISTED) "or auto";
#undef GPUPART__LISTED
  return list;
}

/* The reason without the backend's name in front ("cuda: cannot load ..." is
 * "cannot load ..."; "GPUPART_VULKAN_LIBRARY=/x: vulkan: cannot ..." loses the inner
 * "vulkan: "; "backend 'cuda' is not built ..." is "not built ..."), so that the line
 * "skipped cuda: ..." names the backend once. Newlines become spaces: one line each. */
static void reason(const char *name, const char *why, char *out, size_t n) {
  char own[40], built[48];
  snprintf(own, sizeof own, "%s: ", name);
  snprintf(built, sizeof built, "backend '%s' is ", name);
  const char *inner = strstr(why, own);
  size_t cut = 0, skip = 0;
  if (!strncmp(why, built, strlen(built))) {
    skip = strlen(built);
  } else if (inner && (inner == why || (inner - why >= 2 && inner[-2] == ':' && inner[-1] == ' '))) {
    cut = (size_t)(inner - why);
    skip = strlen(own);
  }
  snprintf(out, n, "%.*s%s", (int)cut, why, why + cut + skip);
  for (char *c = out; *c; c++)
    if (*c == '\n' || *c == '\r') *c = ' ';
}

/* With every backend listed, one line per backend passed over and why (driver missing,
 * a GPUPART_*_LIBRARY that cannot be opened, ...), where the configuration names it, no
 * device was found, or -v asks: a machine without an NVIDIA driver is not told so at
 * every run. sim is never listed without being named, so it is never "skipped". */
static void say_skipped(gpupart_context *ctx, int all) {
  static const gpupart_backend every[] = {GPUPART__BACKEND_IDS};
  for (size_t i = 0; i < sizeof every / sizeof every[0]; i++) {
    uint32_t n = 0;
    char why[GPUPART__MSG_MAX];
    if (every[i] == GPUPART_BACKEND_SIM || (!all && !gpupart__introspect_backend_named(ctx, every[i]))) continue;
    if (gpupart_enumerate(ctx, every[i], NULL, &n) == GPUPART_OK) continue;
    reason(gpupart_backend_name(every[i]), gpupart_last_error(), why, sizeof why);
    fprintf(stderr, "gpupart: skipped %s: %s\n", gpupart_backend_name(every[i]), why);
  }
}

static int parse_args(int argc, char **argv, int *json, int *verbose, gpupart_backend *b) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--json", 0, &v)) > 0) *json = 1;
    else if (!r && ((r = cli_option(argc, argv, &i, "-v", 0, &v)) > 0 ||
                    (r = cli_option(argc, argv, &i, "--verbose", 0, &v)) > 0))
      *verbose = 1;
    else if (!r && (r = cli_option(argc, argv, &i, "--backend", 1, &v)) > 0) {
      int id = gpupart__backend_from_name(v);
      if (id < 0 && strcmp(v, "auto") != 0)
        return cli_usage_error("devices", "unknown backend '%s' (use %s)", v, names());
      *b = id < 0 ? GPUPART_BACKEND_AUTO : (gpupart_backend)id;
    }
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("devices", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

int cmd_devices(int argc, char **argv) {
  int json = 0, verbose = 0;
  gpupart_backend b = GPUPART_BACKEND_AUTO;
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &json, &verbose, &b);
  if (rc) return rc;
  gpupart_context *ctx;
  gpupart_result r = cli_context(&ctx);
  if (r) return cli_failure("configuration", r);
  gpupart_device_info *infos;
  uint32_t n;
  r = list(ctx, b, &infos, &n);
  if (!r && b == GPUPART_BACKEND_AUTO) say_skipped(ctx, verbose || !n);
  gpupart_context_destroy(ctx);
  if (r) return free(infos), cli_failure("devices", r);
  if (json) print_json(infos, n);
  else if (n) print_table(infos, n);
  free(infos);
  if (!n) fprintf(stderr, "gpupart: no device found%s\n", b ? "" : " (the sim backend is listed with --backend sim)");
  return n ? EXIT_OK : EXIT_CHECKED;
}
