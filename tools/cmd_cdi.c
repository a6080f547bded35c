/* gpupart cdi: prints the Container Device Interface edits that put a container under a
 * gpupart partition, so that a Kubernetes DRA driver's NodePrepareResources (or any
 * runtime that reads CDI specs) can give a claim's limit and floor to the programs in the
 * container: the GPUPART_* variables of the partition, the mount of the shared ledger
 * folder, and, for programs never written for gpupart, the layers' files and the
 * variables that enable them. It only prints: nothing is mounted or written, and every
 * value it puts in the output was checked first (the amounts by the library's own
 * parser, the paths and names by the CDI specification's rules). */
#include <ctype.h>
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "observe.h"
#include "options.h"

static const char help[] = "usage: gpupart cdi --partition NAME --memory AMOUNT [--guarantee AMOUNT]\n"
                           "                   [--device UUID|PCI] [--ledger-dir DIR] [--ledger-mount DIR]\n"
                           "                   [--no-ledger] [--layers LIST] [--layer-dir DIR] [--library FILE]\n"
                           "                   [--vulkan-manifest FILE] [--kind VENDOR/CLASS] [--name NAME] [--edits]\n"
                           "\n"
                           "Prints a CDI spec (JSON) whose device puts a container under one gpupart partition:\n"
                           "what a DRA driver's NodePrepareResources emits for a claim. Nothing is changed.\n"
                           "\n"
                           "  --partition NAME      the partition (1 to 63 of A-Z a-z 0-9 _ . -)\n"
                           "  --memory AMOUNT       its limit: the claim's limit (8GiB, 8589934592, 50%)\n"
                           "  --guarantee AMOUNT    its floor: the claim's request (default 0)\n"
                           "  --device UUID|PCI     the claimed GPU (GPU-<uuid> or 0000:3b:00.0), recorded as\n"
                           "                        the device annotation gpupart.io/device\n"
                           "  --ledger-dir DIR      the node's shared ledger folder, mounted in the container\n"
                           "                        (default: GPUPART_LEDGER_DIR, else the configuration's\n"
                           "                        ledger_dir; never /dev/shm)\n"
                           "  --ledger-mount DIR    where the container sees it (default /run/gpupart)\n"
                           "  --no-ledger           no shared ledger: the partition is the process's alone\n"
                           "  --layers LIST         for unmodified programs: vulkan, opencl, cuda, all or none\n"
                           "                        (default none), comma-separated\n"
                           "  --layer-dir DIR       where the layers are (default " GPUPART_CDI_LAYER_DIR ")\n"
                           "  --library FILE        libgpupart.so.0 (default " GPUPART_CDI_LIBRARY ")\n"
                           "  --vulkan-manifest FILE  the Vulkan layer's manifest (default\n"
                           "                        " GPUPART_CDI_VK_MANIFEST ")\n"
                           "  --kind VENDOR/CLASS   the spec's kind (default gpupart.io/partition)\n"
                           "  --name NAME           the device's name (default the partition's)\n"
                           "  --edits               print only the containerEdits object\n"
                           "\n"
                           "Files are mounted read-only at their own paths, the Vulkan manifest at\n"
                           "/etc/vulkan/implicit_layer.d/. See docs/cli.md and docs/deploy.md.\n"
                           "\n"
                           "exit status: 0 printed, 1 a file or folder it names is missing or wrong, 2 bad usage\n";

#define MAX_ENV 8
#define MAX_MOUNTS 8
#define PATH_CAP 4096
#define VK_MANIFEST_IN_CONTAINER "/etc/vulkan/implicit_layer.d/VkLayer_gpupart_partition.json"
enum { LAYER_VULKAN = 1, LAYER_OPENCL = 2, LAYER_CUDA = 4 };

typedef struct cdi_args {
  const char *partition, *memory, *guarantee, *device, *ledger_dir, *ledger_mount;
  const char *layer_dir, *library, *vk_manifest, *kind, *name;
  int no_ledger, edits;
  unsigned layers;
} cdi_args;

typedef struct cdi_mount {
  char host[PATH_CAP], container[PATH_CAP];
  int rw;
} cdi_mount;

typedef struct cdi_edits {
  char env[MAX_ENV][PATH_CAP + 64]; /* NAME=VALUE, VALUE below PATH_CAP */
  uint32_t nenv;
  cdi_mount mounts[MAX_MOUNTS];
  uint32_t nmounts;
} cdi_edits;

/* ---- what the flags may hold --------------------------------------------------------- */

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; }

/* A partition name: 1 to 63 of A-Z a-z 0-9 _ . - (docs/configuration.md). */
static int valid_partition(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++)
    if (!is_name_char(s[i])) return 0;
  return n >= 1 && n <= 63;
}

/* A CDI name: name characters, beginning and ending with a letter or digit. */
static int valid_cdi_name(const char *s, size_t max) {
  size_t n = strlen(s);
  return n >= 1 && n <= max && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n &&
         isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]);
}

/* A CDI kind: a DNS subdomain, '/', and a name of at most 63 characters. */
static int valid_kind(const char *s) {
  const char *slash = strchr(s, '/');
  if (!slash || slash == s || slash - s > 253 || !valid_cdi_name(slash + 1, 63)) return 0;
  for (const char *p = s; p < slash; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.') return 0;
  return isalnum((unsigned char)s[0]) && isalnum((unsigned char)slash[-1]);
}

/* An amount as gpupart writes it, with nothing that would cut a GPUPART_PARTITIONS entry. */
static int valid_amount_text(const char *s) {
  size_t n = strlen(s);
  return n >= 1 && n <= 40 && strspn(s, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.%") == n;
}

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, or a PCI address dddd:bb:dd.f. */
static int valid_device(const char *s) {
  static const char uuid[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", pci[] = "xxxx:xx:xx.x";
  const char *form = strlen(s) == sizeof uuid - 1 ? uuid : strlen(s) == sizeof pci - 1 ? pci : NULL;
  for (size_t i = 0; form && form[i]; i++)
    if (form[i] == 'x' ? !isxdigit((unsigned char)s[i]) : form[i] != s[i]) return 0;
  return form != NULL;
}

/* An absolute path of printable UTF-8 with no "." or ".." component. */
static int valid_path(const char *s) {
  size_t n = strlen(s);
  if (s[0] != '/' || n >= PATH_CAP || strstr(s, "/../") || strstr(s, "/./")) return 0;
  if ((n >= 3 && !strcmp(s + n - 3, "/..")) || (n >= 2 && !strcmp(s + n - 2, "/."))) return 0;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t k = *p >= 0x80 ? cli_utf8_len(p) : *p >= 0x20 && *p != 0x7f;
    if (!k) return 0;
    p += k;
  }
  return 1;
}

/* ---- the arguments ------------------------------------------------------------------- */

static int parse_layers(const char *v, unsigned *out) {
  char buf[64];
  *out = 0;
  if (strlen(v) >= sizeof buf) return -1;
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "vulkan")) *out |= LAYER_VULKAN;
    else if (!strcmp(t, "opencl")) *out |= LAYER_OPENCL;
    else if (!strcmp(t, "cuda")) *out |= LAYER_CUDA;
    else if (!strcmp(t, "all")) *out |= LAYER_VULKAN | LAYER_OPENCL | LAYER_CUDA;
    else if (strcmp(t, "none")) return -1;
  }
  return 0;
}

/* The option at argv[*i] into a, if it is one of the options taking a value. */
static int value_option(int argc, char **argv, int *i, cdi_args *a) {
  static const struct {
    const char *name;
    size_t offset;
  } opts[] = {{"--partition", offsetof(cdi_args, partition)},
              {"--memory", offsetof(cdi_args, memory)},
              {"--guarantee", offsetof(cdi_args, guarantee)},
              {"--device", offsetof(cdi_args, device)},
              {"--ledger-dir", offsetof(cdi_args, ledger_dir)},
              {"--ledger-mount", offsetof(cdi_args, ledger_mount)},
              {"--layer-dir", offsetof(cdi_args, layer_dir)},
              {"--library", offsetof(cdi_args, library)},
              {"--vulkan-manifest", offsetof(cdi_args, vk_manifest)},
              {"--kind", offsetof(cdi_args, kind)},
              {"--name", offsetof(cdi_args, name)}};
  for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
    const char *v;
    int r = cli_option(argc, argv, i, opts[k].name, 1, &v);
    if (r > 0) *(const char **)((char *)a + opts[k].offset) = v;
    if (r) return r;
  }
  return 0;
}

static int scan(int argc, char **argv, cdi_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r = value_option(argc, argv, &i, a);
    if (!r && (r = cli_option(argc, argv, &i, "--no-ledger", 0, &v)) > 0) a->no_ledger = 1;
    if (!r && (r = cli_option(argc, argv, &i, "--edits", 0, &v)) > 0) a->edits = 1;
    if (!r && (r = cli_option(argc, argv, &i, "--layers", 1, &v)) > 0 && parse_layers(v, &a->layers))
      return cli_usage_error("cdi", "--layers '%s': want vulkan, opencl, cuda, all or none, comma-separated", v);
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("cdi", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

/* The library's own parser judges the amounts, as a program's configuration would be. */
static int check_amounts(const cdi_args *a) {
  char text[256];
  snprintf(text, sizeof text, "[partition %s]\nsize = %s\nguarantee = %s\n", a->partition, a->memory,
           a->guarantee ? a->guarantee : "0");
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE, .config_text = text};
  gpupart_context *ctx = NULL;
  gpupart_result rc = gpupart_context_create(&d, &ctx);
  gpupart_context_destroy(ctx);
  if (rc) return cli_usage_error("cdi", "--memory/--guarantee: %s", gpupart_last_error());
  return EXIT_OK;
}

static int check_forms(const cdi_args *a) {
  if (!a->partition || !a->memory) return cli_usage_error("cdi", "--partition and --memory are required");
  if (!valid_partition(a->partition))
    return cli_usage_error("cdi", "--partition '%s': want 1 to 63 of A-Z a-z 0-9 _ . -", a->partition);
  if (!valid_amount_text(a->memory) || (a->guarantee && !valid_amount_text(a->guarantee)))
    return cli_usage_error("cdi", "--memory/--guarantee: want an amount such as 8GiB, 8589934592 or 50%%");
  if (a->device && !valid_device(a->device))
    return cli_usage_error("cdi", "--device '%s': want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx or 0000:3b:00.0",
                           a->device);
  if (!valid_kind(a->kind))
    return cli_usage_error("cdi", "--kind '%s': want VENDOR/CLASS (gpupart.io/partition)", a->kind);
  if (!valid_cdi_name(a->name, 255))
    return cli_usage_error("cdi", "--name '%s': a CDI device name begins and ends with a letter or digit", a->name);
  const char *paths[] = {a->ledger_dir, a->ledger_mount, a->layer_dir, a->library, a->vk_manifest};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    if (paths[i] && !valid_path(paths[i]))
      return cli_usage_error("cdi", "'%s' is not an absolute path of printable characters without . or ..", paths[i]);
  return check_amounts(a);
}

/* ---- the edits ----------------------------------------------------------------------- */

/* Each value was checked to fit (paths below PATH_CAP): a cut one would be a wrong one. */
static void add_env(cdi_edits *e, const char *name, const char *value) {
  if (snprintf(e->env[e->nenv], sizeof e->env[0], "%s=%s", name, value) < (int)sizeof e->env[0]) e->nenv++;
}

static void add_mount(cdi_edits *e, const char *host, const char *container, int rw) {
  cdi_mount *m = &e->mounts[e->nmounts];
  if (snprintf(m->host, sizeof m->host, "%s", host) >= (int)sizeof m->host ||
      snprintf(m->container, sizeof m->container, "%s", container) >= (int)sizeof m->container)
    return;
  m->rw = rw;
  e->nmounts++;
}

/* dir/file into out (PATH_CAP bytes); -1, said, when it does not fit. */
static int join(char *out, const char *dir, const char *file) {
  if (snprintf(out, PATH_CAP, "%s/%s", dir, file) < PATH_CAP) return 0;
  fprintf(stderr, "gpupart cdi: %s/%s: the path is too long\n", dir, file);
  return -1;
}

/* A regular file to mount at its own path; 0, or EXIT_CHECKED naming it and what to do. */
static int add_file(cdi_edits *e, const char *path, const char *hint) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "gpupart cdi: %s is not a file: %s\n", path, hint);
    return EXIT_CHECKED;
  }
  add_mount(e, path, path, 0);
  return EXIT_OK;
}

/* Whether dir is the ledger folder's default, the node's shared memory (with or without a
 * final slash). */
static int is_shared_memory(const char *dir) {
  const char *shm = gpupart__options[GPUPART__OPT_LEDGER_DIR].def;
  size_t n = strlen(shm);
  return !strncmp(dir, shm, n) && (!dir[n] || !strcmp(dir + n, "/"));
}

static int add_ledger(cdi_edits *e, const cdi_args *a) {
  const char *dir = observe_ledger_dir(a->ledger_dir);
  struct stat st;
  if (is_shared_memory(dir)) {
    fprintf(stderr,
            "gpupart cdi: the ledger folder %s is the node's shared memory, which no container should "
            "get: give the node a folder of its own (--ledger-dir /run/gpupart), or --no-ledger\n",
            dir);
    return EXIT_CHECKED;
  }
  if (!valid_path(dir) || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "gpupart cdi: the ledger folder '%s' is not a folder of this node\n", dir);
    return EXIT_CHECKED;
  }
  add_env(e, "GPUPART_SHARED", "1");
  add_env(e, "GPUPART_LEDGER_DIR", a->ledger_mount);
  add_mount(e, dir, a->ledger_mount, 1);
  return EXIT_OK;
}

/* The shared library the layers link (libinih.so.1 where it links that), as this command,
 * which links the same library, has it loaded. */
static int find_inih(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  const char *base = strrchr(info->dlpi_name, '/');
  if (!base || strncmp(base + 1, "libinih.so", 10) != 0) return 0;
  snprintf(out, PATH_CAP, "%s", info->dlpi_name);
  return 1;
}

/* The path the Vulkan manifest names as "library_path", or "" (an escaped one included). */
static void manifest_library(const char *manifest, char *out, size_t n) {
  char text[65536];
  FILE *f = fopen(manifest, "r");
  size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[len] = 0;
  out[0] = 0;
  const char *p = strstr(text, "\"library_path\"");
  if (!p || !(p = strchr(p + 14, ':')) || !(p = strchr(p, '"'))) return;
  size_t k = strcspn(p + 1, "\"\\");
  if (p[1 + k] == '"' && k < n) snprintf(out, n, "%.*s", (int)k, p + 1);
}

static int add_vulkan(cdi_edits *e, const cdi_args *a) {
  char module[PATH_CAP], named[PATH_CAP];
  if (join(module, a->layer_dir, "libVkLayer_gpupart_partition.so")) return EXIT_CHECKED;
  int rc = add_file(e, module, "give the layers' folder with --layer-dir");
  if (rc || (rc = add_file(e, a->vk_manifest, "give the manifest with --vulkan-manifest"))) return rc;
  memcpy(e->mounts[e->nmounts - 1].container, VK_MANIFEST_IN_CONTAINER, sizeof VK_MANIFEST_IN_CONTAINER);
  manifest_library(a->vk_manifest, named, sizeof named);
  if (strcmp(named, module)) {
    fprintf(stderr, "gpupart cdi: %s names the layer '%s', not %s (--layer-dir)\n", a->vk_manifest, named, module);
    return EXIT_CHECKED;
  }
  add_env(e, "ENABLE_GPUPART_LAYER", "1");
  return EXIT_OK;
}

/* One of the modules a variable names: OPENCL_LAYERS or LD_PRELOAD. */
static int add_module(cdi_edits *e, const cdi_args *a, const char *file, const char *variable) {
  char module[PATH_CAP];
  if (join(module, a->layer_dir, file)) return EXIT_CHECKED;
  int rc = add_file(e, module, "give the layers' folder with --layer-dir");
  if (!rc) add_env(e, variable, module);
  return rc;
}

static int add_layers(cdi_edits *e, const cdi_args *a) {
  static char inih[PATH_CAP];
  int rc = EXIT_OK;
  if (!a->layers) return EXIT_OK;
  rc = add_file(e, a->library, "give libgpupart.so.0 with --library");
  if (!rc && !inih[0]) dl_iterate_phdr(find_inih, inih);
  if (!rc && inih[0]) rc = add_file(e, inih, "the INI parser this command links");
  if (!rc && (a->layers & LAYER_VULKAN)) rc = add_vulkan(e, a);
  if (!rc && (a->layers & LAYER_OPENCL)) rc = add_module(e, a, "libgpupart_cl_layer.so", "OPENCL_LAYERS");
  if (!rc && (a->layers & LAYER_CUDA)) rc = add_module(e, a, "libgpupart_preload.so", "LD_PRELOAD");
  return rc;
}

static int build_edits(cdi_edits *e, const cdi_args *a) {
  char part[160];
  snprintf(part, sizeof part, "%s:%s%s%s", a->partition, a->memory, a->guarantee ? ":" : "",
           a->guarantee ? a->guarantee : "");
  add_env(e, "GPUPART_PARTITIONS", part);
  add_env(e, "GPUPART_PARTITION", a->partition);
  int rc = a->no_ledger ? EXIT_OK : add_ledger(e, a);
  return rc ? rc : add_layers(e, a);
}

/* ---- the output ---------------------------------------------------------------------- */

static void print_edits(const cdi_edits *e, const char *indent) {
  printf("{\n%s  \"env\": [", indent);
  for (uint32_t i = 0; i < e->nenv; i++) {
    printf("%s\n%s    ", i ? "," : "", indent);
    json_string(stdout, e->env[i]);
  }
  printf("\n%s  ]", indent);
  if (e->nmounts) printf(",\n%s  \"mounts\": [", indent);
  for (uint32_t i = 0; i < e->nmounts; i++) {
    printf("%s\n%s    {\"hostPath\": ", i ? "," : "", indent);
    json_string(stdout, e->mounts[i].host);
    printf(", \"containerPath\": ");
    json_string(stdout, e->mounts[i].container);
    printf(", \"options\": [\"bind\", \"%s\", \"nosuid\", \"nodev\"%s]}", e->mounts[i].rw ? "rw" : "ro",
           e->mounts[i].rw ? ", \"noexec\"" : "");
  }
  if (e->nmounts) printf("\n%s  ]", indent);
  printf("\n%s}", indent);
}

/* The oldest CDI version that has every feature used: a device annotation needs 0.6.0,
 * a name that begins with a digit 0.5.0; the rest is in 0.3.0. */
static const char *cdi_version(const cdi_args *a) {
  const char *cls = strchr(a->kind, '/') + 1;
  if (a->device || strchr(cls, '.')) return "0.6.0";
  return isdigit((unsigned char)a->name[0]) ? "0.5.0" : "0.3.0";
}

static void print_spec(const cdi_edits *e, const cdi_args *a) {
  printf("{\n  \"cdiVersion\": \"%s\",\n  \"kind\": ", cdi_version(a));
  json_string(stdout, a->kind);
  printf(",\n  \"devices\": [\n    {\n      \"name\": ");
  json_string(stdout, a->name);
  if (a->device) printf(",\n      \"annotations\": {\"gpupart.io/device\": \"%s\"}", a->device);
  printf(",\n      \"containerEdits\": ");
  print_edits(e, "      ");
  printf("\n    }\n  ]\n}\n");
}

int cmd_cdi(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  cdi_args a = {.ledger_mount = "/run/gpupart",
                .layer_dir = GPUPART_CDI_LAYER_DIR,
                .library = GPUPART_CDI_LIBRARY,
                .vk_manifest = GPUPART_CDI_VK_MANIFEST,
                .kind = "gpupart.io/partition"};
  int rc = scan(argc, argv, &a);
  if (rc) return rc;
  if (!a.name) a.name = a.partition ? a.partition : "";
  if ((rc = check_forms(&a))) return rc;
  cdi_edits *e = calloc(1, sizeof *e);
  if (!e) return fprintf(stderr, "gpupart cdi: out of memory\n"), EXIT_CHECKED;
  if (!(rc = build_edits(e, &a))) {
    if (a.edits) print_edits(e, "");
    if (a.edits) printf("\n");
    else print_spec(e, &a);
  }
  free(e);
  return rc;
}
