/* The bounded JSON reader (core/config/json.c): what RFC 8259 allows is read, what it
 * refuses is refused with a reason, and no input (deep, long, cut short) costs more than
 * the caller's node array and GPUPART__JSON_DEPTH levels of recursion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "json.h"

#define NODES 64

static gpupart__json nodes[NODES];
static char why[160];

/* Parses the whole of text as one value: 0, -1 or 1 (only white space). */
static int parse(const char *text, uint32_t *count) {
  size_t pos = 0;
  uint32_t n = 0;
  int rc = gpupart__json_parse(text, strlen(text), &pos, nodes, NODES, count ? count : &n, why, sizeof why);
  return rc;
}

Test(json, reads_an_object_with_every_kind_of_value) {
  const char *t = "{\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"d\"}, \"e\": \"\"}";
  uint32_t count;
  cr_assert_eq(parse(t, &count), 0, "%s", why);
  cr_expect_eq(count, 10);
  const gpupart__json *a = gpupart__json_get(t, nodes, &nodes[0], "a");
  cr_assert_not_null(a);
  cr_expect_eq(a->type, GPUPART__JSON_ARRAY);
  cr_expect_eq(nodes[nodes[a->child].next].type, GPUPART__JSON_NUMBER);
  const gpupart__json *b = gpupart__json_get(t, nodes, &nodes[0], "b");
  char out[8];
  cr_expect_eq(gpupart__json_string(t, gpupart__json_get(t, nodes, b, "c"), out, sizeof out), 0);
  cr_expect_str_eq(out, "d");
  cr_expect_null(gpupart__json_get(t, nodes, &nodes[0], "z"));
  cr_expect_null(gpupart__json_get(t, nodes, a, "a")); /* not an object */
}

Test(json, decodes_escapes_and_surrogate_pairs) {
  const char *t = "\"a\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\\ud800x\"";
  char out[32];
  cr_assert_eq(parse(t, NULL), 0, "%s", why);
  cr_assert_eq(gpupart__json_string(t, &nodes[0], out, sizeof out), 0);
  cr_expect_str_eq(out, "a\"\\/\n\xc3\xa9\xf0\x9f\x98\x80\xef\xbf\xbdx");
  cr_expect_eq(gpupart__json_string(t, &nodes[0], out, 4), -1, "does not fit");
}

Test(json, a_nul_escape_is_refused_when_decoded) {
  const char *t = "\"a\\u0000b\"";
  char out[8];
  cr_assert_eq(parse(t, NULL), 0, "%s", why);
  cr_expect_eq(gpupart__json_string(t, &nodes[0], out, sizeof out), -1);
}

Test(json, reads_unsigned_integers_only) {
  static const struct {
    const char *text;
    int rc;
    uint64_t v;
  } cases[] = {{"0", 0, 0},
               {"18446744073709551615", 0, UINT64_MAX},
               {"18446744073709551616", -1, 0},
               {"-1", -1, 0},
               {"1.5", -1, 0},
               {"1e3", -1, 0},
               {"\"12\"", -1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t v = 7;
    cr_assert_eq(parse(cases[i].text, NULL), 0, "%s: %s", cases[i].text, why);
    cr_expect_eq(gpupart__json_uint(cases[i].text, &nodes[0], &v), cases[i].rc, "%s", cases[i].text);
    if (cases[i].rc == 0) cr_expect_eq(v, cases[i].v, "%s", cases[i].text);
  }
}

Test(json, refuses_what_the_grammar_refuses) {
  static const char *const bad[] = {
      "{\"a\":1,}", "[1,]", "[01]",    "\"a\tb\"", "\"\\x\"", "\"\\u12g4\"", "{a:1}",  "{\"a\" 1}",
      "[1 2]",      "tru",  "nul",     "-",        "1.",      "1e",          "+1",     "\"abc",
      "[",          "{",    "{\"a\":", "",         "]",       "\"\\",        "[1,,2]", "{\"a\":1 \"b\":2}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_expect_neq(parse(bad[i], NULL), 0, "'%s' was read", bad[i]);
}

Test(json, a_value_nested_too_deep_is_refused) {
  char deep[2 * GPUPART__JSON_DEPTH + 8], ok[2 * GPUPART__JSON_DEPTH + 8];
  memset(deep, '[', GPUPART__JSON_DEPTH + 2);
  memset(deep + GPUPART__JSON_DEPTH + 2, ']', GPUPART__JSON_DEPTH + 2);
  deep[2 * GPUPART__JSON_DEPTH + 4] = 0;
  cr_expect_eq(parse(deep, NULL), -1);
  cr_expect(strstr(why, "nested too deep"), "%s", why);
  memset(ok, '[', GPUPART__JSON_DEPTH + 1);
  memset(ok + GPUPART__JSON_DEPTH + 1, ']', GPUPART__JSON_DEPTH + 1);
  ok[2 * GPUPART__JSON_DEPTH + 2] = 0;
  cr_expect_eq(parse(ok, NULL), 0, "%s", why);
}

Test(json, a_million_levels_cost_no_more_than_the_bound) {
  size_t n = 1000000;
  char *t = malloc(n + 1);
  cr_assert_not_null(t);
  memset(t, '[', n);
  t[n] = 0;
  cr_expect_eq(parse(t, NULL), -1);
  free(t);
}

Test(json, more_values_than_nodes_are_refused) {
  char t[4 * NODES + 8] = "[";
  for (int i = 0; i < NODES; i++) strcat(t, i ? ",1" : "1");
  strcat(t, "]");
  cr_expect_eq(parse(t, NULL), -1);
  cr_expect(strstr(why, "too many values"), "%s", why);
}

Test(json, reads_a_stream_value_by_value) {
  const char *t = " {\"v\": 1}\n{\"v\": 2}\n  ";
  size_t pos = 0, len = strlen(t);
  uint32_t count;
  uint64_t v;
  cr_assert_eq(gpupart__json_parse(t, len, &pos, nodes, NODES, &count, why, sizeof why), 0, "%s", why);
  cr_expect_eq(gpupart__json_uint(t, gpupart__json_get(t, nodes, &nodes[0], "v"), &v), 0);
  cr_expect_eq(v, 1);
  cr_assert_eq(gpupart__json_parse(t, len, &pos, nodes, NODES, &count, why, sizeof why), 0, "%s", why);
  cr_expect_eq(gpupart__json_uint(t, gpupart__json_get(t, nodes, &nodes[0], "v"), &v), 0);
  cr_expect_eq(v, 2);
  cr_expect_eq(gpupart__json_parse(t, len, &pos, nodes, NODES, &count, why, sizeof why), 1, "the end");
}

Test(json, a_failed_parse_leaves_the_position) {
  const char *t = "{\"v\": 1} {\"v\":";
  size_t pos = 0;
  uint32_t count;
  cr_assert_eq(gpupart__json_parse(t, strlen(t), &pos, nodes, NODES, &count, why, sizeof why), 0);
  size_t at = pos;
  cr_expect_eq(gpupart__json_parse(t, strlen(t), &pos, nodes, NODES, &count, why, sizeof why), -1);
  cr_expect_eq(pos, at);
}

Test(json, bytes_past_the_length_are_never_read) {
  const char t[] = "[1, 2]garbage";
  size_t pos = 0;
  uint32_t count;
  cr_expect_eq(gpupart__json_parse(t, 4, &pos, nodes, NODES, &count, why, sizeof why), -1, "cut at '[1, '");
  cr_expect_eq(gpupart__json_parse(t, 6, &pos, nodes, NODES, &count, why, sizeof why), 0, "%s", why);
}

Test(json, a_string_that_does_not_fit_leaves_the_output_empty) {
  const char *t = "\"abcdefgh\"";
  char out[4] = "xyz";
  cr_assert_eq(parse(t, NULL), 0, "%s", why);
  cr_expect_eq(gpupart__json_string(t, &nodes[0], out, sizeof out), -1);
  cr_expect_str_eq(out, "");
  cr_assert_eq(parse("7", NULL), 0, "%s", why);
  strcpy(out, "xyz");
  cr_expect_eq(gpupart__json_string("7", &nodes[0], out, sizeof out), -1, "not a string");
  cr_expect_str_eq(out, "");
}
