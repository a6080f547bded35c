/* The settings of a device open as one pure function (core/config/settings.h): configuration,
 * descriptors and the device's info in, every option with its source, the granularity
 * and the budget out, with no context, device or backend anywhere. Each test builds a
 * configuration from INI text (the environment ignored) and calls the function the way
 * a device open does. */
#include <string.h>

#include "common.h"
#include "settings.h"

TestSuite(settings);

/* A configuration loaded from text alone, as a context with config_text and
 * GPUPART_CONTEXT_IGNORE_ENV loads it. */
static gpupart__config *config_of(const char *text) {
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = text};
  gpupart__config *c = NULL;
  cr_assert_eq(gpupart__config_load(gpupart__hostmem_default(), &d, &c), GPUPART_OK, "%s", gpupart_last_error());
  return c;
}

/* A sim device of total bytes whose driver takes blocks of block bytes. */
static gpupart_device_info device(uint64_t total, uint64_t block) {
  return (gpupart_device_info){.backend = GPUPART_BACKEND_SIM,
                               .total_bytes = total,
                               .min_alignment = 256,
                               .block_granularity = block,
                               .max_block_bytes = total};
}

static gpupart__settings_in open_of(const gpupart_device_desc *d, const gpupart_device_info *info) {
  return (gpupart__settings_in){.desc = d, .backend = GPUPART_BACKEND_SIM, .info = info, .ignore_env = 1};
}

static const char *source(const gpupart__settings *s, gpupart__opt o) {
  static char buf[GPUPART__PATH_MAX + 16];
  gpupart__source_format(s->v[o].src, buf, sizeof buf);
  return buf;
}

Test(settings, with_nothing_configured_the_budget_is_the_whole_device_from_the_defaults) {
  gpupart__config *c = config_of(NULL);
  gpupart_device_desc d = {0};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 1 * GiB);
  cr_expect_eq(s.granularity, 2 * MiB, "the default granularity is raised to the driver's block");
  cr_expect_str_eq(source(&s, GPUPART__OPT_MEMORY_FRACTION), "default");
  cr_expect_eq(s.backend, GPUPART_BACKEND_SIM);
  cr_expect_eq(s.nparts, 0);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, the_descriptor_wins_over_the_file_and_says_so) {
  gpupart__config *c = config_of("[gpupart]\nmemory_fraction = 50%\nheadroom = 64MiB\n");
  gpupart_device_desc d = {.memory_fraction = 0.25};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 256 * MiB - 64 * MiB);
  cr_expect_str_eq(source(&s, GPUPART__OPT_MEMORY_FRACTION), "descriptor");
  cr_expect_str_eq(source(&s, GPUPART__OPT_HEADROOM), "config_text:3");
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, an_operators_ceiling_lowers_what_the_descriptor_asked_and_keeps_what_it_asked) {
  gpupart__config *c = config_of("[gpupart]\nmemory_limit_max = 100MiB\n");
  gpupart_device_desc d = {.memory_limit = 200 * MiB};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  char note[2 * GPUPART__PATH_MAX];
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 100 * MiB);
  cr_expect(s.clipped[GPUPART__CLIP_LIMIT]);
  cr_expect_eq(s.asked[GPUPART__CLIP_LIMIT].u, 200 * MiB);
  cr_expect_str_eq(source(&s, GPUPART__OPT_MEMORY_LIMIT), "config_text:2");
  gpupart__settings_clip_note(&s, GPUPART__OPT_MEMORY_LIMIT, note, sizeof note);
  cr_expect_str_eq(note, "clipped by the ceiling: descriptor asked 209715200");
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, an_orchestrators_share_is_the_limit_nothing_else_set) {
  gpupart__config *c = config_of(NULL);
  c->shares[0] =
      (gpupart__share){.kind = GPUPART__SHARE_HAMI, .all = 1, .bytes = 300 * MiB, .source = "CUDA_DEVICE_MEMORY_LIMIT"};
  c->nshares = 1;
  gpupart_device_desc d = {0};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 300 * MiB);
  cr_expect_eq(s.share, &c->shares[0]);
  cr_expect_str_eq(source(&s, GPUPART__OPT_MEMORY_LIMIT), "CUDA_DEVICE_MEMORY_LIMIT");
  d.memory_limit = 500 * MiB; /* a descriptor's limit: the share does not apply */
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 500 * MiB);
  cr_expect_null(s.share);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, a_budget_below_the_granularity_blames_its_input_by_source) {
  gpupart__config *c = config_of("[gpupart]\nheadroom = 1GiB\n");
  gpupart_device_desc d = {0};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  cr_expect_eq(gpupart__settings_compute(c, &in, &s), GPUPART_ECONFIG, "the file's headroom");
  cr_expect(strstr(gpupart_last_error(), "config_text:2"), "%s", gpupart_last_error());
  gpupart__config_free(gpupart__hostmem_default(), c);
  c = config_of(NULL);
  d.headroom = 2 * GiB;
  cr_expect_eq(gpupart__settings_compute(c, &in, &s), GPUPART_EINVAL, "the descriptor's headroom");
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, a_program_index_is_mapped_through_the_visible_list) {
  gpupart__config *c = config_of("[gpupart]\ndevice = 1,0\n");
  gpupart_device_desc d = {.index = 1};
  gpupart_device_info info = device(1 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings s;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.index, 0, "program index 1 is the second visible device, physical 0");
  in.exact = 1;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.index, 1, "an exact index is physical");
  in.exact = 0;
  d.index = 2;
  cr_expect_eq(gpupart__settings_compute(c, &in, &s), GPUPART_ENODEV);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, before_the_device_is_known_the_options_resolve_and_no_budget_is_made) {
  gpupart__config *c = config_of("[gpupart]\nledger_dir = /tmp/ledgers\n[partition a]\nsize = 50%\n");
  gpupart_device_desc d = {0};
  gpupart__settings_in in = open_of(&d, NULL);
  gpupart__settings s;
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(s.budget, 0);
  cr_expect_eq(s.nparts, 1);
  cr_expect_str_eq(gpupart__settings_ledger_dir(&s), "/tmp/ledgers");
  in.ledger_dir = ""; /* a context descriptor's empty folder means the option's default */
  cr_assert_eq(gpupart__settings_compute(c, &in, &s), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_str_eq(gpupart__settings_ledger_dir(&s), gpupart__options[GPUPART__OPT_LEDGER_DIR].def);
  gpupart__config_free(gpupart__hostmem_default(), c);
}

Test(settings, the_same_inputs_give_the_same_settings_and_leave_the_configuration_alone) {
  gpupart__config *c = config_of("[gpupart]\nmemory_fraction = 90%\ngranularity = 4MiB\n");
  gpupart__config *before = malloc(sizeof *before);
  cr_assert_not_null(before);
  memcpy(before, c, sizeof *c);
  gpupart_device_desc d = {.headroom = 8 * MiB};
  gpupart_device_info info = device(3 * GiB, 2 * MiB);
  gpupart__settings_in in = open_of(&d, &info);
  gpupart__settings a, b;
  memset(&a, 0x5a, sizeof a);
  memset(&b, 0xa5, sizeof b);
  cr_assert_eq(gpupart__settings_compute(c, &in, &a), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(gpupart__settings_compute(c, &in, &b), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(a.budget, b.budget);
  cr_expect_eq(a.granularity, 4 * MiB);
  cr_expect_eq(a.budget % (4 * MiB), 0);
  for (int o = 0; o < GPUPART__OPT_COUNT; o++) {
    char x[GPUPART__PATH_MAX], y[GPUPART__PATH_MAX];
    gpupart__option_format((gpupart__opt)o, &a.v[o], x, sizeof x);
    gpupart__option_format((gpupart__opt)o, &b.v[o], y, sizeof y);
    cr_expect_str_eq(x, y, "option %s", gpupart__options[o].key);
  }
  cr_expect_eq(memcmp(before, c, sizeof *c), 0, "the configuration is read, never written");
  free(before);
  gpupart__config_free(gpupart__hostmem_default(), c);
}
