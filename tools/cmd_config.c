/* gpupart config: opens a device the way a program would (same configuration, same
 * precedence, same partitions) and prints what it was opened with: the budget, the
 * policy, each configured partition's limit and guarantee in bytes, and the source of
 * every value. It asks the core's introspect door (core/door/introspect.h) for the
 * device's settings, since the public API deliberately has no call that exposes sources. */
#include <string.h>

#include "cli.h"
#include "introspect.h"
#include "reach.h"

static const char help[] = "usage: gpupart config [--json] [--device BACKEND:INDEX]\n"
                           "\n"
                           "Opens a device as a program using gpupart would, and prints the effective policy:\n"
                           "the budget, growth, granularity and the other options, and each configured\n"
                           "partition's limit and guarantee in bytes, with the source of each value (a variable,\n"
                           "FILE:LINE, descriptor or default).\n"
                           "\n"
                           "  --device B:I  this physical device, e.g. cuda:0 or sim:0 (GPUPART_DEVICE's\n"
                           "                visible list is not applied); default: the device a program\n"
                           "                opening index 0 gets (GPUPART_BACKEND, GPUPART_DEVICE)\n"
                           "  --json        one JSON object with at least backend, index, budget and\n"
                           "                partitions [{name, limit, guarantee, allow_growth, reserved}],\n"
                           "                plus the options, a\n"
                           "                \"sources\" object naming where each option came from, and\n"
                           "                other_frameworks [{name, value, applied, equivalent}]: the\n"
                           "                TensorFlow, JAX and PyTorch memory variables seen (never applied),\n"
                           "                clipped {memory_limit|memory_fraction: {asked, source}} where\n"
                           "                an operator's ceiling lowered a value, and orchestrator\n"
                           "                {shares [{source, device, bytes, applied, claim}], ignored [...]}\n"
                           "                (claim: a DRA share's {name, namespace, pod_claim, request,\n"
                           "                generation, guarantee, file}),\n"
                           "                and never_applies [{source, what, device, why}]: [device]\n"
                           "                sections, per-device entries and partitions that name a device\n"
                           "                this machine does not have\n"
                           "\n"
                           "Warnings of the open (configuration that can never apply on this machine, an\n"
                           "initial_block above max_block, ...) are printed on standard error.\n"
                           "\n"
                           "exit status: 0 success, 1 bad configuration or no such device, 2 bad usage\n";

/* Every option but the partition spec (the partitions have their own table): in the
 * table's order, so an option added to core/config/options.c is shown without a change here. */
static int shown(int o) { return o != GPUPART__OPT_PARTITIONS; }

static void source_text(gpupart__source s, char *buf, size_t n) { gpupart__source_format(s, buf, n); }

/* An option's value as JSON: numbers for bytes and indexes, null for none. */
static void json_value(gpupart__opt o, const gpupart__value *v) {
  char text[GPUPART__PATH_MAX];
  gpupart__type t = gpupart__options[o].type;
  gpupart__option_format(o, v, text, sizeof text);
  if (t == GPUPART__T_BOOL || t == GPUPART__T_SHARE || t == GPUPART__T_FACTOR) printf("%s", text);
  else if ((t == GPUPART__T_LIMIT && !v->u) || ((t == GPUPART__T_PATH || t == GPUPART__T_DIR) && !v->str))
    printf("null");
  else if (t == GPUPART__T_PATH || t == GPUPART__T_DIR || t == GPUPART__T_BACKENDS) json_string(stdout, text);
  else printf("%llu", (unsigned long long)v->u);
}

/* The JSON name of an option: the chosen backend and index are top-level fields, so the
 * backend option (a preference list) is "backend_preference" and the device's source is
 * listed under "index". */
static const char *json_key(gpupart__opt o, int for_source) {
  if (o == GPUPART__OPT_BACKEND) return for_source ? "backend" : "backend_preference";
  if (o == GPUPART__OPT_DEVICE) return "index";
  return gpupart__options[o].key;
}

static void json_options(const gpupart__settings *s) {
  char src[GPUPART__PATH_MAX + 16];
  for (int o = 0; o < GPUPART__OPT_COUNT; o++) {
    if (!shown(o) || o == GPUPART__OPT_DEVICE) continue;
    printf(",\n  \"%s\": ", json_key((gpupart__opt)o, 0));
    json_value((gpupart__opt)o, &s->v[o]);
  }
  printf(",\n  \"sources\": {");
  for (int o = 0, first = 1; o < GPUPART__OPT_COUNT; o++) {
    if (!shown(o)) continue;
    source_text(s->v[o].src, src, sizeof src);
    printf("%s\"%s\": ", first ? "" : ", ", json_key((gpupart__opt)o, 1));
    json_string(stdout, src);
    first = 0;
  }
  printf("}");
}

static void json_partition(gpupart_device *dev, uint32_t i) {
  gpupart__introspect_partition c = {0};
  gpupart_stats st = {0};
  char src[GPUPART__PATH_MAX + 16];
  gpupart__introspect_configured(dev, i, &c);
  gpupart_partition_get_stats(c.handle, &st);
  if (!gpupart__introspect_ledger_source(dev, gpupart_partition_name(c.handle), src, sizeof src))
    source_text(c.spec->src, src, sizeof src);
  printf("%s\n    {\"name\": ", i ? "," : "");
  json_string(stdout, gpupart_partition_name(c.handle));
  printf(", \"limit\": %llu, \"guarantee\": %llu, \"allow_growth\": %s, \"reserved\": %llu, \"source\": ",
         (unsigned long long)st.limit, (unsigned long long)st.guarantee, c.preallocated ? "false" : "true",
         (unsigned long long)st.reserved);
  json_string(stdout, src);
  printf("}");
}

/* Other frameworks' variables seen in the environment: noted, never applied. */
static void json_foreign(const gpupart__config *c) {
  printf(",\n  \"other_frameworks\": [");
  for (uint32_t i = 0; i < c->nforeign; i++) {
    printf("%s\n    {\"name\": ", i ? "," : "");
    json_string(stdout, c->foreign[i].name);
    printf(", \"value\": ");
    json_string(stdout, c->foreign[i].value);
    printf(", \"applied\": false, \"equivalent\": ");
    json_string(stdout, c->foreign[i].hint);
    printf("}");
  }
  printf("%s]", c->nforeign ? "\n  " : "");
}

/* Where a ceiling lowered memory_fraction or memory_limit: what was asked, by whom. */
static void json_clipped(const gpupart__settings *s) {
  static const gpupart__opt opts[2] = {GPUPART__OPT_MEMORY_FRACTION, GPUPART__OPT_MEMORY_LIMIT};
  char src[GPUPART__PATH_MAX + 16];
  int first = 1;
  printf(",\n  \"clipped\": {");
  for (int i = 0; i < 2; i++) {
    if (!s->clipped[i]) continue;
    source_text(s->asked[i].src, src, sizeof src);
    printf("%s\"%s\": {\"asked\": ", first ? "" : ", ", gpupart__options[opts[i]].key);
    json_value(opts[i], &s->asked[i]);
    printf(", \"source\": ");
    json_string(stdout, src);
    printf("}");
    first = 0;
  }
  printf("}");
}

/* The device's total bytes, what a portion share (KAI's GPU_PORTION) is a part of. */
static uint64_t device_total(const gpupart_device *dev) {
  gpupart_device_info info = {0};
  return gpupart_device_get_info(dev, &info) == GPUPART_OK ? info.total_bytes : 0;
}

/* What a share names: "index 1", "every device", or its UUID, PCI address or dmem region. */
static void share_device(const gpupart__share *sh, char *buf, size_t n) {
  if (sh->all) snprintf(buf, n, "every device");
  else if (sh->by_index) snprintf(buf, n, "index %u", sh->index);
  else snprintf(buf, n, "%s", sh->key);
}

/* A DRA share's claim: its names, the generation read and the floor it asks for. */
static void json_claim(const gpupart__dra_device *d) {
  printf(", \"claim\": {\"name\": ");
  json_string(stdout, d->claim);
  printf(", \"namespace\": ");
  json_string(stdout, d->namespace);
  printf(", \"pod_claim\": ");
  json_string(stdout, d->pod_claim);
  printf(", \"request\": ");
  json_string(stdout, d->request);
  printf(", \"generation\": %llu, \"guarantee\": %llu, \"file\": ", (unsigned long long)d->generation,
         (unsigned long long)d->guarantee);
  json_string(stdout, d->path);
  printf("}");
}

static void json_shares(gpupart_context *ctx, gpupart_device *dev) {
  const gpupart__config *c = gpupart__introspect_config(ctx);
  const gpupart__settings *s = gpupart__introspect_settings(dev);
  uint64_t total = device_total(dev);
  char what[160];
  printf(",\n  \"orchestrator\": {\"shares\": [");
  for (uint32_t i = 0; i < c->nshares; i++) {
    share_device(&c->shares[i], what, sizeof what);
    printf("%s\n    {\"source\": ", i ? "," : "");
    json_string(stdout, c->shares[i].source);
    printf(", \"device\": ");
    json_string(stdout, what);
    printf(", \"bytes\": %llu, \"applied\": %s", (unsigned long long)gpupart__share_bytes(&c->shares[i], total),
           s->share == &c->shares[i] ? "true" : "false");
    if (c->shares[i].dra) json_claim(&c->dra[c->shares[i].dra - 1]);
    printf("}");
  }
  printf("%s], \"ignored\": [", c->nshares ? "\n  " : "");
  for (uint32_t i = 0; i < c->nshare_warnings; i++) {
    printf("%s", i ? ", " : "");
    json_string(stdout, c->share_warnings[i]);
  }
  printf("]}");
}

static void print_shares(gpupart_context *ctx, gpupart_device *dev) {
  const gpupart__config *c = gpupart__introspect_config(ctx);
  const gpupart__settings *s = gpupart__introspect_settings(dev);
  uint64_t total = device_total(dev);
  char what[160];
  if (!c->nshares && !c->nshare_warnings) return;
  printf("\norchestrator shares (applied to memory_limit when nothing else sets it):\n");
  for (uint32_t i = 0; i < c->nshares; i++) {
    share_device(&c->shares[i], what, sizeof what);
    printf("%-40s %-24s %20llu  %s\n", c->shares[i].source, what,
           (unsigned long long)gpupart__share_bytes(&c->shares[i], total),
           s->share == &c->shares[i] ? "applied" : "not applied");
  }
  for (uint32_t i = 0; i < c->nshare_warnings; i++) printf("%s\n", c->share_warnings[i]);
}

static void print_foreign(const gpupart__config *c) {
  if (!c->nforeign) return;
  printf("\nother frameworks' variables (not applied by gpupart):\n");
  for (uint32_t i = 0; i < c->nforeign; i++)
    printf("%s=%s  ->  %s\n", c->foreign[i].name, c->foreign[i].value, c->foreign[i].hint);
}

/* On stderr, each device of the configuration this machine lacks (the open itself says
 * nothing of it: the command looks with every backend loaded, which an open does not). */
static void warn_unreachable_one(const gpupart__unreachable *u, void *user) {
  char src[GPUPART__PATH_MAX + 16];
  (void)user;
  source_text(u->src, src, sizeof src);
  fprintf(stderr, "gpupart: warning: %s (%s) can never apply on this machine: %s\n", u->what, src, u->why);
}

static void json_unreachable_one(const gpupart__unreachable *u, void *user) {
  int *n = user;
  char src[GPUPART__PATH_MAX + 16], dev[48];
  source_text(u->src, src, sizeof src);
  gpupart__selector_format(&u->sel, dev, sizeof dev);
  printf("%s\n    {\"source\": ", (*n)++ ? "," : "");
  json_string(stdout, src);
  printf(", \"what\": ");
  json_string(stdout, u->what);
  printf(", \"device\": ");
  json_string(stdout, dev);
  printf(", \"why\": ");
  json_string(stdout, u->why);
  printf("}");
}

/* Configuration that can never apply on this machine (also a warning on stderr). */
static void json_unreachable(gpupart_context *ctx) {
  int n = 0;
  printf(",\n  \"never_applies\": [");
  gpupart__config_unreachable(ctx, 0, json_unreachable_one, &n);
  printf("%s]", n ? "\n  " : "");
}

/* Whether expandable partitions can be had here, and why not. */
static void print_vm(gpupart_device *dev, int json) {
  char why[1024] = "";
  uint64_t granule = 0;
  int vm = gpupart__introspect_vm(dev, &granule, why, sizeof why);
  if (json) {
    printf(",\n  \"virtual_memory\": {\"supported\": %s, \"granule\": %llu, \"why\": ", vm ? "true" : "false",
           (unsigned long long)granule);
    json_string(stdout, vm ? "" : why);
    printf("}");
  } else if (vm) {
    printf("\nvirtual memory: yes, granule %llu bytes (expandable partitions grow in place)\n",
           (unsigned long long)granule);
  } else {
    printf("\nvirtual memory: no (%s): expandable partitions keep growth blocks\n", why);
  }
}

static void print_json(gpupart_context *ctx, gpupart_device *dev) {
  const gpupart__settings *s = gpupart__introspect_settings(dev);
  gpupart_device_info info = {0};
  gpupart_device_get_info(dev, &info);
  printf("{\n  \"backend\": \"%s\",\n  \"index\": %u,\n  \"name\": ", gpupart_backend_name(info.backend), info.index);
  json_string(stdout, info.name);
  printf(",\n  \"total\": %llu,\n  \"budget\": %llu", (unsigned long long)info.total_bytes,
         (unsigned long long)gpupart_device_budget(dev));
  char src[GPUPART__PATH_MAX + 16];
  if (gpupart__introspect_ledger_source(dev, NULL, src, sizeof src)) {
    printf(",\n  \"budget_source\": ");
    json_string(stdout, src);
  }
  json_options(s);
  print_vm(dev, 1);
  printf(",\n  \"partitions\": [");
  for (uint32_t i = 0; i < s->nparts; i++) json_partition(dev, i);
  printf("%s]", s->nparts ? "\n  " : "");
  json_foreign(gpupart__introspect_config(ctx));
  json_clipped(s);
  json_shares(ctx, dev);
  json_unreachable(ctx);
  printf("\n}\n");
}

static void print_options(const gpupart__settings *s) {
  char value[GPUPART__PATH_MAX], src[GPUPART__PATH_MAX + 16], note[GPUPART__PATH_MAX + 128];
  printf("\n%-19s %-20s %s\n", "OPTION", "VALUE", "SOURCE");
  for (int o = 0; o < GPUPART__OPT_COUNT; o++) {
    if (!shown(o)) continue;
    gpupart__option_format((gpupart__opt)o, &s->v[o], value, sizeof value);
    source_text(s->v[o].src, src, sizeof src);
    gpupart__settings_clip_note(s, (gpupart__opt)o, note, sizeof note);
    printf("%-19s %-20s %s%s%s%s\n", gpupart__options[o].key, value, src, *note ? " (" : "", note, *note ? ")" : "");
  }
}

static void print_partitions(gpupart_device *dev) {
  const gpupart__settings *s = gpupart__introspect_settings(dev);
  char src[GPUPART__PATH_MAX + 16];
  if (!s->nparts) {
    static const char prealloc[] =
        " (allow_growth = false: each partition the program creates takes its limit then; nothing is taken before)";
    printf("\npartitions: none configured%s\n", s->v[GPUPART__OPT_ALLOW_GROWTH].u ? "" : prealloc);
    return;
  }
  printf("\n%-20s %16s %16s %-7s %s\n", "PARTITION", "LIMIT", "GUARANTEE", "GROWTH", "SOURCE");
  for (uint32_t i = 0; i < s->nparts; i++) {
    gpupart__introspect_partition c = {0};
    gpupart_stats st = {0};
    gpupart__introspect_configured(dev, i, &c);
    gpupart_partition_get_stats(c.handle, &st);
    if (!gpupart__introspect_ledger_source(dev, gpupart_partition_name(c.handle), src, sizeof src))
      source_text(c.spec->src, src, sizeof src);
    printf("%-20s %16llu %16llu %-7s %s\n", gpupart_partition_name(c.handle), (unsigned long long)st.limit,
           (unsigned long long)st.guarantee, c.preallocated ? "off" : "on", src);
  }
}

static void print_text(gpupart_context *ctx, gpupart_device *dev) {
  char total[32], budget[32];
  gpupart_device_info info = {0};
  gpupart_device_get_info(dev, &info);
  human_bytes(info.total_bytes, total, sizeof total);
  human_bytes(gpupart_device_budget(dev), budget, sizeof budget);
  printf("device   %s:%u  %s\n", gpupart_backend_name(info.backend), info.index, info.name);
  printf("total    %llu bytes (%s)\n", (unsigned long long)info.total_bytes, total);
  char src[GPUPART__PATH_MAX + 16];
  int ledger = gpupart__introspect_ledger_source(dev, NULL, src, sizeof src);
  printf("budget   %llu bytes (%s)%s%s\n", (unsigned long long)gpupart_device_budget(dev), budget,
         ledger ? "  source " : "", ledger ? src : "");
  print_options(gpupart__introspect_settings(dev));
  print_vm(dev, 0);
  print_partitions(dev);
  print_shares(ctx, dev);
  print_foreign(gpupart__introspect_config(ctx));
}

static int parse_args(int argc, char **argv, int *json, gpupart_device_desc *d, int *exact) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--json", 0, &v)) > 0) *json = 1;
    else if (!r && (r = cli_option(argc, argv, &i, "--device", 1, &v)) > 0) {
      gpupart__selector sel;
      char err[GPUPART__ERR_MAX];
      if (gpupart__parse_selector(v, &sel, err, sizeof err)) return cli_usage_error("config", "--device: %s", err);
      d->backend = sel.backend;
      d->index = sel.index;
      *exact = 1;
    }
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("config", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

int cmd_config(int argc, char **argv) {
  int json = 0, exact = 0;
  gpupart_device_desc desc = {0};
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &json, &desc, &exact);
  if (rc) return rc;
  gpupart_context *ctx;
  gpupart_device *dev;
  gpupart_result r = cli_context_warning(&ctx, 1);
  if (r) return cli_failure("configuration", r);
  r = gpupart__introspect_open(ctx, &desc, exact, &dev); /* configuration that can never apply: said below */
  if (r) return rc = cli_failure("device", r), gpupart_context_destroy(ctx), rc;
  gpupart__config_unreachable(ctx, 0, warn_unreachable_one, NULL);
  if (json) print_json(ctx, dev);
  else print_text(ctx, dev);
  gpupart_device_close(dev);
  gpupart_context_destroy(ctx);
  return EXIT_OK;
}
