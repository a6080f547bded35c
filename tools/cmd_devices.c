/* gpupart devices: every device of every backend present (or of one named backend), as a
 * table or as JSON, so a person or a deployment script can see what gpupart would open. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "identity.h"
#include "options.h"

static const char help[] =
    "usage: gpupart devices [--json] [--backend NAME]\n"
    "\n"
    "Lists every device of every backend present: backend, index, name, vendor, total\n"
    "and free memory, the largest single allocation the driver allows, and the UUID that\n"
    "identifies the physical GPU (- where the backend has none).\n"
    "\n"
    "  --backend NAME  only this backend: cuda, vulkan, opencl or sim (sim is listed only\n"
    "                  when named); default: every backend present\n"
    "  --json          one JSON object: {\"devices\": [{\"backend\", \"index\", \"name\",\n"
    "                  \"vendor\", \"total\", \"free\", \"max_block\", \"uuid\"}]}, sizes in\n"
    "                  bytes, free and uuid null where the driver cannot tell\n"
    "\n"
    "exit status: 0 devices found, 1 none found or the backend is missing, 2 bad usage\n";

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
    printf(", \"max_block\": %llu, \"uuid\": ", (unsigned long long)d[i].max_block_bytes);
    char uuid[GPUPART__UUID_STRING];
    gpupart__uuid_format(d[i].uuid, uuid);
    if (gpupart__uuid_is_zero(d[i].uuid)) printf("null}");
    else printf("\"%s\"}", uuid);
  }
  printf("%s]}\n", n ? "\n" : "");
}

static void print_table(const gpupart_device_info *d, uint32_t n) {
  printf("%-8s %-5s %-36s %-16s %10s %10s %10s  %s\n", "BACKEND", "INDEX", "NAME", "VENDOR", "TOTAL", "FREE",
         "MAX BLOCK", "UUID");
  for (uint32_t i = 0; i < n; i++) {
    char total[32], free_[32], max[32], uuid[GPUPART__UUID_STRING] = "-";
    if (!gpupart__uuid_is_zero(d[i].uuid)) gpupart__uuid_format(d[i].uuid, uuid);
    human_bytes(d[i].total_bytes, total, sizeof total);
    human_bytes(d[i].max_block_bytes, max, sizeof max);
    if (d[i].free_bytes == UINT64_MAX) snprintf(free_, sizeof free_, "?");
    else human_bytes(d[i].free_bytes, free_, sizeof free_);
    printf("%-8s %-5u %-36.36s %-16.16s %10s %10s %10s  %s\n", gpupart_backend_name(d[i].backend), d[i].index,
           d[i].name, d[i].vendor, total, free_, max, uuid);
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

static int parse_args(int argc, char **argv, int *json, gpupart_backend *b) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--json", 0, &v)) > 0) *json = 1;
    else if (!r && (r = cli_option(argc, argv, &i, "--backend", 1, &v)) > 0) {
      int id = gpupart__backend_from_name(v);
      if (id < 0 && strcmp(v, "auto") != 0)
        return cli_usage_error("devices", "unknown backend '%s' (use cuda, vulkan, opencl or sim)", v);
      *b = id < 0 ? GPUPART_BACKEND_AUTO : (gpupart_backend)id;
    }
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("devices", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

int cmd_devices(int argc, char **argv) {
  int json = 0;
  gpupart_backend b = GPUPART_BACKEND_AUTO;
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &json, &b);
  if (rc) return rc;
  gpupart_context *ctx;
  gpupart_result r = cli_context(&ctx);
  if (r) return cli_failure("configuration", r);
  gpupart_device_info *infos;
  uint32_t n;
  r = list(ctx, b, &infos, &n);
  gpupart_context_destroy(ctx);
  if (r) return free(infos), cli_failure("devices", r);
  if (json) print_json(infos, n);
  else if (n) print_table(infos, n);
  free(infos);
  if (!n) fprintf(stderr, "gpupart: no device found%s\n", b ? "" : " (the sim backend is listed with --backend sim)");
  return n ? EXIT_OK : EXIT_CHECKED;
}
