/* The gpupart command: shows the GPUs gpupart sees and the memory policy it would apply to
 * them, and checks configuration files, so a deployment can be verified before the
 * program that uses the library starts. This file holds main, the top-level help and the
 * helpers the commands share; each command is in its own cmd_*.c file. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "registry.h"

static const char usage[] = "usage: gpupart [--help] [--version] COMMAND [ARGS]\n"
                            "\n"
                            "Shows the GPUs gpupart sees and the memory policy it applies to them.\n"
                            "\n"
                            "commands:\n"
                            "  devices [--json] [--backend NAME] [-v]\n"
                            "                                      every device of every backend present\n"
                            "  config [--json] [--device B:I]      the effective policy for a device, and where\n"
                            "                                      each value came from\n"
                            "  check-config FILE                   validate a configuration file\n"
                            "  tune [--json] [--budget SIZE] TRACE...\n"
                            "                                      the configuration an application's own\n"
                            "                                      allocation trace asks for\n"
                            "  top [--once] [--json]               the shared devices' partitions and processes,\n"
                            "                                      live\n"
                            "  metrics [--output FILE]             the same as Prometheus text\n"
                            "  exporter [--listen ADDR:PORT]       the same over HTTP: /metrics and a status page\n"
                            "  resize PARTITION --limit AMOUNT     change a shared partition's limit (and\n"
                            "                                      guarantee), or --budget, from outside\n"
                            "  cdi --partition NAME --memory AMOUNT\n"
                            "                                      the CDI edits that put a container under a\n"
                            "                                      partition (for a DRA driver)\n"
                            "  ledger create | remove              the operator's shared ledger, made before any\n"
                            "                                      job with the configured budget and floors\n"
                            "\n"
                            "'gpupart COMMAND --help' describes one command. The policy comes from the GPUPART_*\n"
                            "environment variables and the INI file that GPUPART_CONFIG names (see gpupart(1) and\n"
                            "docs/configuration.md).\n"
                            "\n"
                            "exit status: 0 success, 1 a checked failure (bad configuration, no device),\n"
                            "             2 bad usage\n";

int cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  return 0;
}

int cli_option(int argc, char **argv, int *i, const char *name, int takes_value, const char **value) {
  size_t n = strlen(name);
  const char *a = argv[*i];
  *value = NULL;
  if (strncmp(a, name, n) != 0 || (a[n] != 0 && !(takes_value && a[n] == '='))) return 0;
  if (!takes_value) return 1;
  if (a[n] == '=') return *value = a + n + 1, 1;
  if (*i + 1 >= argc) return fprintf(stderr, "gpupart: %s needs a value\n", name), -1;
  *value = argv[++*i];
  return 1;
}

int cli_usage_error(const char *command, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpupart %s: ", command);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see 'gpupart %s --help')\n", command);
  return EXIT_USAGE;
}

const char *cli_last_error(char *out, size_t n) {
  cli_text(gpupart_last_error(), out, n);
  return out;
}

int cli_failure(const char *what, gpupart_result rc) {
  char why[1024];
  fprintf(stderr, "gpupart: %s: %s (%s)\n", what, cli_last_error(why, sizeof why), gpupart_result_name(rc));
  return EXIT_CHECKED;
}

/* The command only looks: its contexts read the whole configuration but never record a
 * trace, so `gpupart top` under an application's GPUPART_TRACE leaves the file alone. */
gpupart_result cli_context(gpupart_context **out) { return cli_context_warning(out, 0); }

/* The library's warnings (and errors) on stderr, each once as it comes. */
static void print_warning(gpupart_log_level level, const char *message, void *user) {
  (void)user;
  if (level <= GPUPART_LOG_WARN) fprintf(stderr, "gpupart: warning: %s\n", message);
}

gpupart_result cli_context_warning(gpupart_context **out, int warn) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_NO_TRACE, .log = warn ? print_warning : NULL};
  return gpupart_context_create(&d, out);
}

size_t cli_utf8_len(const unsigned char *p) {
  size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
  if (!n || p[0] > 0xf4) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) || (p[0] == 0xf0 && p[1] < 0x90) ||
      (p[0] == 0xf4 && p[1] > 0x8f))
    return 0;
  return n;
}

/* Escapes quotes, backslashes and control characters; a byte that is not part of valid
 * UTF-8 (a path's Latin-1 byte) becomes U+FFFD, so strict JSON parsers accept the output. */
void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    size_t n = *p >= 0x80 ? cli_utf8_len(p) : 1;
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
    else if (!n) fputs("\\ufffd", f);
    else fwrite(p, 1, n, f), p += n - 1;
  }
  fputc('"', f);
}

void cli_text(const char *s, char *out, size_t n) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 1 < n; p++) {
    size_t k = *p >= 0x80 ? cli_utf8_len(p) : *p >= 0x20 && *p != 0x7f;
    if (k && o + k >= n) break;
    if (!k) out[o++] = '?';
    else memcpy(out + o, p, k), o += k, p += k - 1;
  }
  out[o] = '\0';
}

size_t cli_width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
  return w;
}

void human_bytes(uint64_t bytes, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, u++;
  if (u == 0 || v == (double)(uint64_t)v) snprintf(buf, n, "%.0f %s", v, units[u]);
  else snprintf(buf, n, "%.1f %s", v, units[u]);
}

static int version(void) {
  printf("gpupart %s (library %s)\nbackends built:", GPUPART_TOOL_VERSION, gpupart_version_string());
  static const gpupart_backend every[] = {GPUPART__BACKEND_IDS};
  for (size_t b = 0; b < sizeof every / sizeof every[0]; b++)
    if (gpupart__backend_ops(every[b])) printf(" %s", gpupart_backend_name(every[b]));
  printf("\n");
  return EXIT_OK;
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
  } commands[] = {{"devices", cmd_devices}, {"config", cmd_config},   {"check-config", cmd_check_config},
                  {"top", cmd_top},         {"metrics", cmd_metrics}, {"exporter", cmd_exporter},
                  {"tune", cmd_tune},       {"cdi", cmd_cdi},         {"resize", cmd_resize},
                  {"ledger", cmd_ledger}};
  if (argc < 2) return fputs(usage, stderr), EXIT_USAGE;
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return fputs(usage, stdout), EXIT_OK;
  if (strcmp(argv[1], "--version") == 0) return version();
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "gpupart: unknown command '%s'\n\n%s", argv[1], usage);
  return EXIT_USAGE;
}
