/* The options table and the value parsers of core/config/options.c: the amount syntax (units,
 * decimals, shares, every kind of malformed value), booleans, device selectors, backend
 * lists and the partition spec, each checked for the value it yields or the error it
 * names. */
#include <string.h>

#include "common.h"
#include "options.h"

#define BOTH (GPUPART__ACCEPT_BYTES | GPUPART__ACCEPT_SHARE)

static char err[GPUPART__ERR_MAX];

static gpupart__amount amount_ok(const char *s, unsigned accept) {
  gpupart__amount a;
  cr_assert_eq(gpupart__parse_amount(s, accept, &a, err, sizeof err), 0, "'%s': %s", s, err);
  return a;
}

static void amount_fails(const char *s, unsigned accept, const char *why) {
  gpupart__amount a;
  cr_assert_eq(gpupart__parse_amount(s, accept, &a, err, sizeof err), -1, "'%s' was accepted", s);
  cr_expect(strstr(err, why) != NULL, "'%s': message '%s' lacks '%s'", s, err, why);
}

static uint64_t bytes_of(const char *s) {
  gpupart__amount a = amount_ok(s, BOTH);
  cr_assert(!a.is_share, "'%s' parsed as a share", s);
  return a.bytes;
}

static double share_of(const char *s) {
  gpupart__amount a = amount_ok(s, BOTH);
  cr_assert(a.is_share, "'%s' parsed as bytes", s);
  return a.share;
}

Test(options, units_are_powers_of_1000_and_1024) {
  cr_expect_eq(bytes_of("4096"), 4096);
  cr_expect_eq(bytes_of("4096B"), 4096);
  cr_expect_eq(bytes_of("1KB"), 1000);
  cr_expect_eq(bytes_of("1MB"), 1000000);
  cr_expect_eq(bytes_of("1GB"), 1000000000);
  cr_expect_eq(bytes_of("2TB"), 2000000000000ull);
  cr_expect_eq(bytes_of("1KiB"), 1024);
  cr_expect_eq(bytes_of("512MiB"), 512 * MiB);
  cr_expect_eq(bytes_of("4GiB"), 4 * GiB);
  cr_expect_eq(bytes_of("3TiB"), 3ull << 40);
}

Test(options, decimals_spaces_and_case) {
  cr_expect_eq(bytes_of("1.5GiB"), 3 * GiB / 2);
  cr_expect_eq(bytes_of("0.25 MiB"), MiB / 4);
  cr_expect_eq(bytes_of("  2 mib "), 2 * MiB);
  cr_expect_eq(bytes_of("1.0005KB"), 1000, "fractions of a byte round down");
  cr_expect_eq(bytes_of("0"), 0);
}

Test(options, shares_are_fractions_or_percentages) {
  cr_expect_float_eq(share_of("0.6"), 0.6, 1e-12);
  cr_expect_float_eq(share_of("60%"), 0.6, 1e-12);
  cr_expect_float_eq(share_of("12.5%"), 0.125, 1e-12);
  cr_expect_float_eq(share_of("100%"), 1.0, 0);
  cr_expect_float_eq(share_of("1.0"), 1.0, 0);
  cr_expect_float_eq(share_of("0.333333333333333333333"), 1.0 / 3, 1e-12);
}

Test(options, a_plain_integer_is_bytes_unless_only_a_share_fits) {
  cr_expect_eq(bytes_of("1"), 1);
  gpupart__amount a = amount_ok("1", GPUPART__ACCEPT_SHARE);
  cr_expect(a.is_share);
  cr_expect_float_eq(a.share, 1.0, 0);
}

Test(options, malformed_values_say_what_is_wrong) {
  amount_fails("", BOTH, "empty");
  amount_fails("   ", BOTH, "empty");
  amount_fails("-1GiB", BOTH, "negative");
  amount_fails("GiB", BOTH, "not a number");
  amount_fails("+5", BOTH, "not a number");
  amount_fails(".", BOTH, "not a number");
  amount_fails("-.5", BOTH, "negative");
  amount_fails("5.", BOTH, "no digits after");
  amount_fails("1e9", BOTH, "unknown unit 'e9'");
  amount_fails("4 GiBs", BOTH, "unknown unit");
  amount_fails("0x10", BOTH, "unknown unit");
  amount_fails("inf", BOTH, "not a number");
  amount_fails("1.5", BOTH, "above 1");
  amount_fails("150%", BOTH, "above 100%");
  amount_fails("20000000TiB", BOTH, "overflows");
  amount_fails("99999999999999999999", BOTH, "too large");
  amount_fails("18446744073709551616", BOTH, "too large");
  amount_fails("60%", GPUPART__ACCEPT_BYTES, "bytes are expected");
  amount_fails("0.5", GPUPART__ACCEPT_BYTES, "bytes are expected");
  amount_fails("512MiB", GPUPART__ACCEPT_SHARE, "a share is expected");
}

Test(options, the_largest_amount_fits_and_one_more_overflows) {
  cr_expect_eq(bytes_of("18446744073709551615"), UINT64_MAX);
  cr_expect_eq(bytes_of("16777215TiB"), 16777215ull << 40);
  amount_fails("16777216TiB", BOTH, "overflows");
}

static gpupart__value value_ok(gpupart__opt o, const char *s) {
  gpupart__value v;
  cr_assert_eq(gpupart__option_parse(o, s, &v, err, sizeof err), 0, "%s='%s': %s", gpupart__options[o].key, s, err);
  return v;
}

static void value_fails(gpupart__opt o, const char *s, const char *why) {
  gpupart__value v;
  cr_assert_eq(gpupart__option_parse(o, s, &v, err, sizeof err), -1, "%s='%s' was accepted", gpupart__options[o].key,
               s);
  cr_expect(strstr(err, why) != NULL, "%s='%s': message '%s' lacks '%s'", gpupart__options[o].key, s, err, why);
}

Test(options, booleans) {
  const char *yes[] = {"true", "TRUE", "1", "yes", "on"}, *no[] = {"false", "0", "No", "off"};
  for (size_t i = 0; i < 5; i++) cr_expect_eq(value_ok(GPUPART__OPT_ALLOW_GROWTH, yes[i]).u, 1, "%s", yes[i]);
  for (size_t i = 0; i < 4; i++) cr_expect_eq(value_ok(GPUPART__OPT_ALLOW_GROWTH, no[i]).u, 0, "%s", no[i]);
  value_fails(GPUPART__OPT_ALLOW_GROWTH, "maybe", "not a boolean");
  value_fails(GPUPART__OPT_VERBOSE, "2", "not a boolean");
}

Test(options, share_options_are_within_zero_and_one) {
  cr_expect_float_eq(value_ok(GPUPART__OPT_MEMORY_FRACTION, "90%").share, 0.9, 1e-12);
  cr_expect_float_eq(value_ok(GPUPART__OPT_MEMORY_FRACTION, "1").share, 1.0, 0);
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "0", "above 0");
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "0%", "above 0");
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "2", "above 1");
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "101%", "above 100%");
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "8GiB", "a share is expected");
}

Test(options, byte_options_and_their_ranges) {
  cr_expect_eq(value_ok(GPUPART__OPT_MEMORY_LIMIT, "4GiB").u, 4 * GiB);
  cr_expect_eq(value_ok(GPUPART__OPT_MEMORY_LIMIT, "none").u, 0);
  value_fails(GPUPART__OPT_MEMORY_LIMIT, "0", "above 0");
  cr_expect_eq(value_ok(GPUPART__OPT_HEADROOM, "0").u, 0);
  cr_expect_eq(value_ok(GPUPART__OPT_HEADROOM, "512MiB").u, 512 * MiB);
  value_fails(GPUPART__OPT_HEADROOM, "none", "not a number");
  cr_expect_eq(value_ok(GPUPART__OPT_GRANULARITY, "64MiB").u, 64 * MiB);
  value_fails(GPUPART__OPT_GRANULARITY, "3MiB", "not a power of two");
  value_fails(GPUPART__OPT_GRANULARITY, "0", "above 0");
  cr_expect_eq(value_ok(GPUPART__OPT_RELEASE_THRESHOLD, "1").u, 1);
  cr_expect_eq(value_ok(GPUPART__OPT_RELEASE_THRESHOLD, "none").u, 0);
  value_fails(GPUPART__OPT_SIM_TOTAL, "0", "above 0");
  value_fails(GPUPART__OPT_HEADROOM, "10%", "bytes are expected");
}

Test(options, growth_knobs) {
  cr_expect_eq(value_ok(GPUPART__OPT_INITIAL_BLOCK, "4MiB").u, 4 * MiB);
  cr_expect_eq(value_ok(GPUPART__OPT_MAX_BLOCK, "256MiB").u, 256 * MiB);
  value_fails(GPUPART__OPT_INITIAL_BLOCK, "0", "above 0");
  value_fails(GPUPART__OPT_MAX_BLOCK, "10%", "bytes are expected");
  cr_expect_float_eq(value_ok(GPUPART__OPT_GROWTH_FACTOR, "1.5").factor, 1.5, 0);
  cr_expect_float_eq(value_ok(GPUPART__OPT_GROWTH_FACTOR, " 2 ").factor, 2.0, 0);
  cr_expect_float_eq(value_ok(GPUPART__OPT_GROWTH_FACTOR, "1").factor, 1.0, 0);
  value_fails(GPUPART__OPT_GROWTH_FACTOR, "0.99", "is below 1");
  value_fails(GPUPART__OPT_GROWTH_FACTOR, "-2", "negative");
  value_fails(GPUPART__OPT_GROWTH_FACTOR, "2x", "not a number");
  value_fails(GPUPART__OPT_GROWTH_FACTOR, "150%", "not a number");
  value_fails(GPUPART__OPT_GROWTH_FACTOR, "", "not a number");
  char buf[32];
  gpupart__value v = value_ok(GPUPART__OPT_GROWTH_FACTOR, "1.25");
  gpupart__option_format(GPUPART__OPT_GROWTH_FACTOR, &v, buf, sizeof buf);
  cr_expect_str_eq(buf, "1.25");
}

Test(options, the_visible_device_list) {
  gpupart__value v = value_ok(GPUPART__OPT_DEVICE, "3");
  cr_expect_eq(v.u, 3);
  cr_expect_eq(v.nvisible, 1);
  v = value_ok(GPUPART__OPT_DEVICE, "2, 0,5");
  cr_expect_eq(v.nvisible, 3);
  cr_expect_eq(v.visible[0], 2);
  cr_expect_eq(v.visible[2], 5);
  value_fails(GPUPART__OPT_DEVICE, "1,1", "listed twice");
  value_fails(GPUPART__OPT_DEVICE, "1,", "empty entry");
  value_fails(GPUPART__OPT_DEVICE, "-1", "negative");
  value_fails(GPUPART__OPT_DEVICE, "one", "not a device index");
  value_fails(GPUPART__OPT_DEVICE, "4294967296", "not a device index");
  value_fails(GPUPART__OPT_DEVICE, "1.5", "not a device index");
}

Test(options, backend_lists) {
  gpupart__value v = value_ok(GPUPART__OPT_BACKEND, "auto");
  cr_expect_eq(v.nbackends, 0);
  v = value_ok(GPUPART__OPT_BACKEND, "vulkan, opencl");
  cr_assert_eq(v.nbackends, 2);
  cr_expect_eq(v.backends[0], GPUPART_BACKEND_VULKAN);
  cr_expect_eq(v.backends[1], GPUPART_BACKEND_OPENCL);
  v = value_ok(GPUPART__OPT_BACKEND, "CUDA,vulkan,opencl,sim");
  cr_expect_eq(v.nbackends, 4);
  value_fails(GPUPART__OPT_BACKEND, "cdua", "unknown backend 'cdua'");
  value_fails(GPUPART__OPT_BACKEND, "cuda,auto", "'auto' cannot be part of a list");
  value_fails(GPUPART__OPT_BACKEND, "cuda,cuda", "listed twice");
  value_fails(GPUPART__OPT_BACKEND, "cuda,", "empty entry");
  value_fails(GPUPART__OPT_BACKEND, ",cuda", "empty entry");
}

Test(options, paths) {
  value_ok(GPUPART__OPT_LEDGER_DIR, "/run/gpupart");
  value_fails(GPUPART__OPT_LEDGER_DIR, "shm", "not an absolute path");
  value_ok(GPUPART__OPT_OPENCL_LIBRARY, "libOpenCL.so.1");
  char long_path[GPUPART__PATH_MAX + 10];
  memset(long_path, 'a', sizeof long_path - 1);
  long_path[sizeof long_path - 1] = 0;
  value_fails(GPUPART__OPT_CONFIG, long_path, "longer than");
}

Test(options, selectors) {
  gpupart__selector s;
  cr_assert_eq(gpupart__parse_selector("cuda:1", &s, err, sizeof err), 0, "%s", err);
  cr_expect(s.set && s.backend == GPUPART_BACKEND_CUDA && s.index == 1);
  cr_expect_eq(gpupart__selector_rank(&s), 2);
  cr_expect(gpupart__selector_matches(&s, GPUPART_BACKEND_CUDA, 1));
  cr_expect(!gpupart__selector_matches(&s, GPUPART_BACKEND_VULKAN, 1));
  cr_assert_eq(gpupart__parse_selector("2", &s, err, sizeof err), 0, "%s", err);
  cr_expect(s.backend == GPUPART_BACKEND_AUTO && s.index == 2 && gpupart__selector_rank(&s) == 1);
  cr_expect(gpupart__selector_matches(&s, GPUPART_BACKEND_SIM, 2));
  cr_expect_eq(gpupart__parse_selector("gpu:0", &s, err, sizeof err), -1);
  cr_expect_eq(gpupart__parse_selector("auto:0", &s, err, sizeof err), -1);
  cr_expect_eq(gpupart__parse_selector("cuda:", &s, err, sizeof err), -1);
  cr_expect_eq(gpupart__parse_selector("cuda:x", &s, err, sizeof err), -1);
}

static uint32_t parts_ok(const char *s, gpupart__pspec *out, uint32_t cap) {
  uint32_t n = 0;
  cr_assert_eq(gpupart__parse_partitions(s, out, cap, &n, err, sizeof err), 0, "'%s': %s", s, err);
  return n;
}

static void parts_fail(const char *s, const char *why) {
  gpupart__pspec out[4];
  uint32_t n = 0;
  cr_assert_eq(gpupart__parse_partitions(s, out, 4, &n, err, sizeof err), -1, "'%s' was accepted", s);
  cr_expect_eq(n, 0, "nothing is kept from a failed spec");
  cr_expect(strstr(err, why) != NULL, "'%s': message '%s' lacks '%s'", s, err, why);
}

Test(options, the_partition_spec_of_config_md) {
  gpupart__pspec p[8];
  cr_assert_eq(parts_ok("train:60%:40%,eval:30%,scratch:256MiB", p, 8), 3);
  cr_expect_str_eq(p[0].name, "train");
  cr_expect(p[0].size.is_share && p[0].guarantee.is_share && !p[0].dev.set);
  cr_expect_float_eq(p[0].size.share, 0.6, 1e-12);
  cr_expect_float_eq(p[0].guarantee.share, 0.4, 1e-12);
  cr_expect_str_eq(p[1].name, "eval");
  cr_expect(p[1].guarantee.is_share == 0 && p[1].guarantee.bytes == 0);
  cr_expect(!p[2].size.is_share && p[2].size.bytes == 256 * MiB);
  cr_assert_eq(parts_ok("cuda:0=train:60%:60%,eval:30%;cuda:1=serve:8GiB", p, 8), 3);
  cr_expect(p[0].dev.set && p[0].dev.backend == GPUPART_BACKEND_CUDA && p[0].dev.index == 0);
  cr_expect(p[1].dev.set && p[1].dev.index == 0);
  cr_expect_str_eq(p[2].name, "serve");
  cr_expect(p[2].dev.index == 1 && p[2].size.bytes == 8 * GiB);
}

Test(options, the_same_name_on_two_devices_is_two_partitions) {
  gpupart__pspec p[4];
  cr_expect_eq(parts_ok("sim:0=a:50%; sim:1=a:50%", p, 4), 2);
  cr_expect_eq(parts_ok(" a : 1GiB : 512MiB ", p, 4), 1);
  cr_expect_eq(p[0].guarantee.bytes, 512 * MiB);
}

Test(options, bad_partition_specs) {
  parts_fail("train", "has no size");
  parts_fail("train:", "empty");
  parts_fail("train:60%:40%:10%", "more than name:size:guarantee");
  parts_fail("tr ain:1GiB", "may hold only");
  parts_fail(":1GiB", "name is empty");
  parts_fail("a:1GiB,", "name is empty");
  parts_fail("a:1GiB,a:2GiB", "declared twice");
  parts_fail("a:40%:60%", "guarantee is above the size");
  parts_fail("a:1GiB:2GiB", "guarantee is above the size");
  parts_fail("a:0%", "above 0");
  parts_fail("a:0", "above 0");
  parts_fail("a:-1GiB", "partition 'a': size: '-1GiB' is negative");
  parts_fail("a:1GiB:150%", "partition 'a': guarantee: '150%' is above 100%");
  parts_fail("gpu:0=a:1GiB", "not a device");
  parts_fail("a:1,b:1,c:1,d:1,e:1", "more than 4 partitions");
}

Test(options, a_mixed_guarantee_is_checked_once_the_budget_is_known) {
  gpupart__pspec p[1];
  cr_expect_eq(parts_ok("a:1GiB:90%", p, 1), 1);
}

/* Every default goes through the same parser as user text, and the table is coherent. */
Test(options, the_table_is_coherent) {
  for (int o = 0; o < GPUPART__OPT_COUNT; o++) {
    const gpupart__option *opt = &gpupart__options[o];
    cr_assert(opt->key && opt->env && opt->doc, "option %d is incomplete", o);
    char env[64] = "GPUPART_";
    for (size_t i = 0; opt->key[i]; i++)
      env[8 + i] = (char)(opt->key[i] >= 'a' && opt->key[i] <= 'z' ? opt->key[i] - 32 : opt->key[i]);
    cr_expect_str_eq(opt->env, env);
    cr_expect_eq(gpupart__option_by_key(opt->key), o);
    cr_expect_eq(gpupart__option_by_env(opt->env), o);
    gpupart__value v;
    if (opt->def && opt->type != GPUPART__T_PARTITIONS)
      cr_expect_eq(gpupart__option_parse((gpupart__opt)o, opt->def, &v, err, sizeof err), 0, "%s: %s", opt->key, err);
  }
  cr_expect_eq(gpupart__option_by_key("memroy_fraction"), -1);
}

Test(options, formatting_round_trips) {
  char buf[64];
  gpupart__value v = value_ok(GPUPART__OPT_BACKEND, "cuda, vulkan");
  gpupart__option_format(GPUPART__OPT_BACKEND, &v, buf, sizeof buf);
  cr_expect_str_eq(buf, "cuda,vulkan");
  v = value_ok(GPUPART__OPT_MEMORY_LIMIT, "none");
  gpupart__option_format(GPUPART__OPT_MEMORY_LIMIT, &v, buf, sizeof buf);
  cr_expect_str_eq(buf, "none");
  v = value_ok(GPUPART__OPT_GRANULARITY, "2MiB");
  gpupart__option_format(GPUPART__OPT_GRANULARITY, &v, buf, sizeof buf);
  cr_expect_str_eq(buf, "2097152");
  v = value_ok(GPUPART__OPT_MEMORY_FRACTION, "50%");
  gpupart__option_format(GPUPART__OPT_MEMORY_FRACTION, &v, buf, sizeof buf);
  cr_expect_str_eq(buf, "0.5");
}

Test(options, a_leading_decimal_point_is_a_share_as_jax_writes_it) {
  cr_expect_float_eq(share_of(".50"), 0.5, 1e-12);
  cr_expect_float_eq(share_of(".5"), 0.5, 1e-12);
  cr_expect_float_eq(share_of(".5%"), 0.005, 1e-12);
  cr_expect_float_eq(value_ok(GPUPART__OPT_MEMORY_FRACTION, ".50").share, 0.5, 1e-12);
  cr_expect_eq(bytes_of(".5KiB"), 512);
}

Test(options, a_decimal_comma_says_to_write_a_point) {
  amount_fails("0,5", BOTH, "decimal comma: write a decimal point (0.5)");
  value_fails(GPUPART__OPT_MEMORY_FRACTION, "0,5", "decimal comma");
}

Test(options, messages_shorten_long_values_and_escape_control_characters) {
  char longv[600];
  memset(longv, 'x', sizeof longv - 1);
  longv[sizeof longv - 1] = 0;
  value_fails(GPUPART__OPT_VERBOSE, longv, "is not a boolean");
  value_fails(GPUPART__OPT_VERBOSE, "tr\033[31mue", "'tr\\x1b[31mue' is not a boolean");
  cr_expect_null(strchr(err, '\033'));
  char buf[GPUPART__ECHO_MAX];
  cr_expect_lt(strlen(gpupart__echo(longv, buf, sizeof buf)), 70);
  cr_expect(strstr(buf, "...") != NULL);
}
