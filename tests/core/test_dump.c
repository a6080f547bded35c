/* gpupart_device_dump: the document parses as strict JSON (a small parser below, which
 * refuses anything RFC 8259 does not allow), its figures are those of
 * gpupart_partition_get_stats and gpupart_allocation_get_info, tags and escaped names
 * come back as given, a thousand allocations are all listed, argument errors are EINVAL,
 * the host allocator balances, and dumps taken while other threads allocate stay valid. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- a strict JSON parser into a small tree ---- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
  jtype t;
  uint64_t num;       /* J_NUM (non-negative integers: all the dump writes) and J_BOOL */
  char *str;          /* J_STR, decoded */
  struct jval *items; /* J_ARR, J_OBJ (values) */
  char **keys;        /* J_OBJ */
  size_t n;
} jval;

typedef struct jp {
  const char *s;
  int bad;
} jp;

static void ws(jp *p) {
  while (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r') p->s++;
}

static int hex4(const char *s, unsigned *out) {
  *out = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 99u;
    if (d == 99u) return -1;
    *out = *out * 16 + d;
  }
  return 0;
}

static void put_utf8(char *o, size_t *n, unsigned c) {
  if (c < 0x80) o[(*n)++] = (char)c;
  else if (c < 0x800) o[(*n)++] = (char)(0xc0 | c >> 6), o[(*n)++] = (char)(0x80 | (c & 63));
  else
    o[(*n)++] = (char)(0xe0 | c >> 12), o[(*n)++] = (char)(0x80 | ((c >> 6) & 63)), o[(*n)++] = (char)(0x80 | (c & 63));
}

static char *parse_string(jp *p) {
  if (*p->s != '"') return p->bad = 1, NULL;
  p->s++;
  char *o = malloc(strlen(p->s) * 3 + 1);
  size_t n = 0;
  for (;;) {
    unsigned char c = (unsigned char)*p->s;
    if (c == '"') break;
    if (c < 0x20) return free(o), p->bad = 1, NULL; /* raw control characters are not JSON */
    if (c != '\\') {
      o[n++] = (char)c, p->s++;
      continue;
    }
    char e = p->s[1];
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      o[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"], p -> s += 2;
      continue;
    }
    unsigned u;
    if (e != 'u' || hex4(p->s + 2, &u)) return free(o), p->bad = 1, NULL;
    put_utf8(o, &n, u), p->s += 6;
  }
  p->s++;
  o[n] = '\0';
  return o;
}

static jval parse_value(jp *p);

static void add_item(jval *v, jval item, char *key) {
  v->items = realloc(v->items, (v->n + 1) * sizeof *v->items);
  v->keys = realloc(v->keys, (v->n + 1) * sizeof *v->keys);
  v->items[v->n] = item, v->keys[v->n] = key, v->n++;
}

static jval parse_list(jp *p, int object) {
  jval v = {.t = object ? J_OBJ : J_ARR};
  p->s++;
  ws(p);
  if (*p->s == (object ? '}' : ']')) return p->s++, v;
  for (;;) {
    ws(p);
    char *key = NULL;
    if (object) {
      key = parse_string(p);
      ws(p);
      if (p->bad || *p->s != ':') return p->bad = 1, free(key), v;
      p->s++;
    }
    add_item(&v, parse_value(p), key);
    ws(p);
    if (p->bad) return v;
    if (*p->s == ',') {
      p->s++;
      continue;
    }
    if (*p->s != (object ? '}' : ']')) return p->bad = 1, v;
    p->s++;
    return v;
  }
}

static jval parse_value(jp *p) {
  ws(p);
  jval v = {0};
  if (*p->s == '{' || *p->s == '[') return parse_list(p, *p->s == '{');
  if (*p->s == '"') return v.t = J_STR, v.str = parse_string(p), v;
  if (!strncmp(p->s, "null", 4)) return p->s += 4, v;
  if (!strncmp(p->s, "true", 4)) return p->s += 4, v.t = J_BOOL, v.num = 1, v;
  if (!strncmp(p->s, "false", 5)) return p->s += 5, v.t = J_BOOL, v;
  if (*p->s < '0' || *p->s > '9' || (p->s[0] == '0' && p->s[1] >= '0' && p->s[1] <= '9')) return p->bad = 1, v;
  v.t = J_NUM;
  for (; *p->s >= '0' && *p->s <= '9'; p->s++) v.num = v.num * 10 + (uint64_t)(*p->s - '0');
  return v;
}

static void jfree(jval *v) {
  for (size_t i = 0; i < v->n; i++) jfree(&v->items[i]), free(v->keys[i]);
  free(v->items), free(v->keys), free(v->str);
}

/* The document text parses completely, or the test fails. */
static jval parse_doc(const char *text) {
  jp p = {text, 0};
  jval v = parse_value(&p);
  ws(&p);
  cr_assert(!p.bad && *p.s == '\0', "not strict JSON near offset %zu: %.60s", (size_t)(p.s - text), p.s);
  cr_assert_eq(v.t, J_OBJ);
  return v;
}

static const jval *get(const jval *o, const char *key) {
  for (size_t i = 0; o->t == J_OBJ && i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return &o->items[i];
  cr_assert_fail("no key '%s'", key);
  return NULL;
}

static uint64_t num(const jval *o, const char *key) {
  const jval *v = get(o, key);
  cr_assert_eq(v->t, J_NUM, "'%s' is not a number", key);
  return v->num;
}

/* The partition object named name. */
static const jval *part_named(const jval *doc, const char *name) {
  const jval *parts = get(doc, "partitions");
  for (size_t i = 0; i < parts->n; i++)
    if (!strcmp(get(&parts->items[i], "name")->str, name)) return &parts->items[i];
  cr_assert_fail("no partition '%s'", name);
  return NULL;
}

/* ---- fixtures ---- */

static gpupart_context *ctx;
static gpupart_device *dev;

static void setup(void) {
  ctx = test_context();
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  dev = test_sim_device(ctx, &sim, NULL);
}

static void teardown(void) {
  cr_expect_eq(gpupart_device_close(dev), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

TestSuite(dump, .init = setup, .fini = teardown);

static jval dump_doc(uint32_t flags) {
  char *json = NULL;
  size_t len = 0;
  cr_assert_eq(gpupart_device_dump(dev, flags, &json, &len), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(len, strlen(json));
  jval doc = parse_doc(json);
  gpupart_dump_free(json);
  return doc;
}

static void expect_partition(const jval *j, const gpupart_partition *p) {
  gpupart_stats s = test_stats(p);
  cr_expect_eq(num(j, "limit"), s.limit);
  cr_expect_eq(num(j, "guarantee"), s.guarantee);
  cr_expect_eq(num(j, "reserved"), s.reserved);
  cr_expect_eq(num(j, "in_use"), s.in_use);
  cr_expect_eq(num(j, "peak_in_use"), s.peak_in_use);
  cr_expect_eq(num(j, "peak_reserved"), s.peak_reserved);
  cr_expect_eq(num(j, "live_allocations"), s.live_allocations);
  cr_expect_eq(num(j, "largest_free"), s.largest_free);
  const jval *blocks = get(j, "blocks");
  uint64_t size = 0, in_use = 0;
  for (size_t i = 0; i < blocks->n; i++)
    size += num(&blocks->items[i], "size"), in_use += num(&blocks->items[i], "in_use");
  cr_expect_eq(size, s.reserved, "the blocks add up to reserved");
  cr_expect_eq(in_use, s.in_use, "the blocks' in_use adds up to the partition's");
}

Test(dump, figures_are_those_of_the_statistics) {
  gpupart_partition *a = test_partition(dev, "train", 256 * MiB, 64 * MiB);
  gpupart_partition *b = test_partition(dev, "serve", 128 * MiB, 0);
  gpupart_allocation *x, *y, *z;
  cr_assert_eq(gpupart_alloc(a, 1000, 0, &x), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(a, 5 * MiB, 0, &y), GPUPART_OK);
  cr_assert_eq(gpupart_alloc(b, 300, 0, &z), GPUPART_OK);
  gpupart_free(y);
  jval doc = dump_doc(0);
  gpupart_stats d;
  cr_assert_eq(gpupart_device_get_stats(dev, &d), GPUPART_OK);
  cr_expect_str_eq(get(&doc, "backend")->str, "sim");
  cr_expect_eq(num(&doc, "index"), 0);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(dev, &info), GPUPART_OK);
  char uuid[40];
  snprintf(uuid, sizeof uuid, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", info.uuid[0],
           info.uuid[1], info.uuid[2], info.uuid[3], info.uuid[4], info.uuid[5], info.uuid[6], info.uuid[7],
           info.uuid[8], info.uuid[9], info.uuid[10], info.uuid[11], info.uuid[12], info.uuid[13], info.uuid[14],
           info.uuid[15]);
  cr_expect_str_eq(get(&doc, "uuid")->str, uuid);
  cr_expect_str_eq(get(&doc, "name")->str, info.name);
  cr_expect_eq(num(&doc, "total"), 1 * GiB);
  cr_expect_eq(num(&doc, "budget"), d.limit);
  cr_expect_eq(num(&doc, "guarantees"), d.guarantee);
  cr_expect_eq(num(&doc, "reserved"), d.reserved);
  cr_expect_eq(num(&doc, "in_use"), d.in_use);
  cr_expect_eq(num(&doc, "peak_reserved"), d.peak_reserved);
  cr_expect_eq(num(&doc, "peak_in_use"), d.peak_in_use);
  cr_expect_eq(get(&doc, "shared")->num, 0);
  cr_expect_eq(get(&doc, "partitions")->n, 2);
  expect_partition(part_named(&doc, "train"), a);
  expect_partition(part_named(&doc, "serve"), b);
  jfree(&doc);
  gpupart_free(x), gpupart_free(z);
}

Test(dump, allocations_are_listed_only_when_asked) {
  gpupart_partition *a = test_partition(dev, "a", 64 * MiB, 0);
  gpupart_allocation *x;
  cr_assert_eq(gpupart_alloc(a, 4096, 0, &x), GPUPART_OK);
  jval doc = dump_doc(0);
  const jval *pa = part_named(&doc, "a");
  for (size_t i = 0; i < pa->n; i++) cr_expect_neq(strcmp(pa->keys[i], "allocations"), 0, "listed without the flag");
  jfree(&doc);
  gpupart_free(x);
}

Test(dump, each_allocation_has_its_size_offset_block_and_tag) {
  gpupart_partition *a = test_partition(dev, "a", 256 * MiB, 0);
  gpupart_allocation *h[3];
  gpupart_allocation_info info[3];
  const uint64_t sizes[3] = {100, 64 * 1024, 9 * MiB}, tags[3] = {7, UINT64_MAX, 0};
  for (int i = 0; i < 3; i++) {
    gpupart_alloc_desc d = {.size = sizes[i], .alignment = i == 1 ? 65536 : 0, .tag = tags[i]};
    cr_assert_eq(gpupart_alloc_info(a, &d, &h[i], &info[i]), GPUPART_OK, "%s", gpupart_last_error());
  }
  jval doc = dump_doc(GPUPART_DUMP_ALLOCATIONS);
  const jval *list = get(part_named(&doc, "a"), "allocations"), *blocks = get(part_named(&doc, "a"), "blocks");
  cr_assert_eq(list->n, 3);
  for (int i = 0; i < 3; i++) {
    const jval *e = NULL;
    for (size_t k = 0; k < list->n; k++)
      if (num(&list->items[k], "tag") == tags[i]) e = &list->items[k];
    cr_assert(e, "allocation with tag %llu missing", (unsigned long long)tags[i]);
    cr_expect_eq(num(e, "size"), sizes[i]);
    cr_expect_eq(num(e, "offset"), info[i].offset);
    cr_expect_eq(num(e, "device_address"), info[i].device_address);
    uint64_t align = num(e, "alignment");
    cr_expect(align && (info[i].device_address & (align - 1)) == 0 && align >= (i == 1 ? 65536u : 256u));
    uint64_t blk = num(e, "block");
    cr_assert_lt(blk, blocks->n);
    cr_expect_eq(num(&blocks->items[blk], "size"), info[i].block_size);
  }
  jfree(&doc);
  for (int i = 0; i < 3; i++) gpupart_free(h[i]);
}

Test(dump, names_with_quotes_backslashes_and_control_characters_are_escaped) {
  const char *names[] = {"say \"hi\"",
                         "back\\slash",
                         "tab\there\nnewline",
                         "bell\x01\x1f\x7f",
                         "caf\xc3\xa9",
                         ("bad\xff"
                          "byte")};
  const char *decoded[] = {"say \"hi\"",
                           "back\\slash",
                           "tab\there\nnewline",
                           "bell\x01\x1f\x7f",
                           "caf\xc3\xa9",
                           ("bad\xef\xbf\xbd"
                            "byte")};
  for (int i = 0; i < 6; i++) test_partition(dev, names[i], 16 * MiB, 0);
  char *json;
  cr_assert_eq(gpupart_device_dump(dev, 0, &json, NULL), GPUPART_OK);
  for (const char *c = json; *c; c++) cr_expect((unsigned char)*c >= 0x20 || *c == '\n', "a raw control byte");
  jval doc = parse_doc(json);
  for (int i = 0; i < 6; i++) part_named(&doc, decoded[i]);
  jfree(&doc);
  gpupart_dump_free(json);
}

/* Well-formed UTF-8 (The Unicode Standard, table 3-7), written apart from the dump's own
 * check: the length of the sequence at s, 0 when it is not well-formed. */
static size_t well_formed(const unsigned char *s) {
  unsigned c = s[0];
  size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  if (len > 1 && (s[1] < lo || s[1] > hi)) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

Test(dump, names_with_every_byte_value_give_well_formed_utf8) {
  static const char *tails[] = {"\x80\x80\x80", "\xbf\xbf\xbf", "\x8f\xa0\x80", ""};
  char name[8];
  for (int t = 0; t < 4; t++)
    for (int c = 1; c < 256; c++) {
      snprintf(name, sizeof name, "%c%s%d", c, tails[t], t);
      test_partition(dev, name, 2 * MiB, 0);
    }
  char *json;
  size_t len;
  cr_assert_eq(gpupart_device_dump(dev, 0, &json, &len), GPUPART_OK, "%s", gpupart_last_error());
  for (const unsigned char *c = (const unsigned char *)json; *c;) {
    size_t n = well_formed(c);
    cr_assert(n, "not UTF-8 at offset %zu: byte 0x%02x", (size_t)(c - (const unsigned char *)json), *c);
    c += n;
  }
  jval doc = parse_doc(json);
  cr_expect_eq(get(&doc, "partitions")->n, 4 * 255);
  jfree(&doc);
  gpupart_dump_free(json);
}

Test(dump, a_thousand_allocations_are_all_listed) {
  gpupart_partition *a = test_partition(dev, "many", 512 * MiB, 0);
  static gpupart_allocation *h[1000];
  for (int i = 0; i < 1000; i++) {
    gpupart_alloc_desc d = {.size = 256u + (uint64_t)i * 512u, .tag = 1000u + (uint64_t)i};
    cr_assert_eq(gpupart_alloc_ex(a, &d, &h[i]), GPUPART_OK);
  }
  jval doc = dump_doc(GPUPART_DUMP_ALLOCATIONS);
  const jval *list = get(part_named(&doc, "many"), "allocations");
  cr_assert_eq(list->n, 1000);
  static char seen[1000];
  for (size_t k = 0; k < list->n; k++) {
    uint64_t tag = num(&list->items[k], "tag");
    cr_assert(tag >= 1000 && tag < 2000 && !seen[tag - 1000], "tag %llu", (unsigned long long)tag);
    seen[tag - 1000] = 1;
    cr_expect_eq(num(&list->items[k], "size"), 256u + (tag - 1000) * 512u);
  }
  expect_partition(part_named(&doc, "many"), a);
  jfree(&doc);
  for (int i = 0; i < 1000; i++) gpupart_free(h[i]);
}

Test(dump, bad_arguments_are_einval_with_a_message) {
  char *json = (char *)1;
  size_t len = 99;
  cr_expect_eq(gpupart_device_dump(NULL, 0, &json, &len), GPUPART_EINVAL);
  cr_expect_null(json);
  cr_expect_eq(len, 0);
  cr_expect(strstr(gpupart_last_error(), "device is NULL"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_dump(dev, 0, NULL, &len), GPUPART_EINVAL);
  cr_expect(strstr(gpupart_last_error(), "json_out is NULL"), "%s", gpupart_last_error());
  cr_expect_eq(gpupart_device_dump(dev, 0x2, &json, &len), GPUPART_EINVAL);
  cr_expect(strstr(gpupart_last_error(), "unknown flags 0x2"), "%s", gpupart_last_error());
  cr_expect_null(json);
  gpupart_dump_free(NULL);
}

/* ---- the host allocator ---- */

Test(dump_host, the_text_and_the_snapshot_use_the_host_allocator_and_balance) {
  test_counting n = {0};
  gpupart_context_desc cd = test_counting_desc(&n);
  gpupart_context *c;
  cr_assert_eq(gpupart_context_create(&cd, &c), GPUPART_OK);
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  gpupart_device *d = test_sim_device(c, &sim, NULL);
  gpupart_partition *p = test_partition(d, "p", 64 * MiB, 0);
  gpupart_allocation *x;
  cr_assert_eq(gpupart_alloc(p, 100, 0, &x), GPUPART_OK);
  long before = atomic_load(&n.live), calls_before = atomic_load(&n.calls);
  char *json;
  cr_assert_eq(gpupart_device_dump(d, GPUPART_DUMP_ALLOCATIONS, &json, NULL), GPUPART_OK);
  cr_expect_gt(atomic_load(&n.calls), calls_before, "the dump allocates through the host allocator");
  cr_expect_eq(atomic_load(&n.live), before + 1, "only the text is left");
  gpupart_free(x);
  cr_assert_eq(gpupart_device_close(d), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(c), GPUPART_OK);
  cr_expect_eq(atomic_load(&n.live), 1, "the text outlives its context");
  gpupart_dump_free(json);
  cr_expect_eq(atomic_load(&n.live), 0);
}

/* ---- threads ---- */

static atomic_int stop;

static void *churn(void *arg) {
  gpupart_partition *p = arg;
  gpupart_allocation *h[64] = {0};
  for (unsigned i = 0; !atomic_load(&stop); i++) {
    unsigned k = (i * 2654435761u) % 64;
    if (h[k]) gpupart_free(h[k]), h[k] = NULL;
    else gpupart_alloc(p, 256u + (i % 97) * 4096u, 0, &h[k]);
    if (i % 512 == 0) gpupart_partition_trim(p); /* blocks come and go too */
  }
  for (int k = 0; k < 64; k++) gpupart_free(h[k]);
  return NULL;
}

Test(dump, dumps_stay_valid_while_threads_allocate_and_free) {
  gpupart_partition *p[3] = {test_partition(dev, "t0", 128 * MiB, 0), test_partition(dev, "t1", 128 * MiB, 0),
                             test_partition(dev, "t2", 128 * MiB, 0)};
  pthread_t th[3];
  atomic_store(&stop, 0);
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, churn, p[i]);
  for (int k = 0; k < 200; k++) {
    jval doc = dump_doc(k % 2 ? GPUPART_DUMP_ALLOCATIONS : 0);
    const jval *parts = get(&doc, "partitions");
    cr_assert_eq(parts->n, 3);
    for (size_t i = 0; i < parts->n; i++) {
      const jval *e = &parts->items[i], *blocks = get(e, "blocks");
      uint64_t size = 0, in_use = 0;
      for (size_t b = 0; b < blocks->n; b++)
        size += num(&blocks->items[b], "size"), in_use += num(&blocks->items[b], "in_use");
      cr_assert_eq(size, num(e, "reserved"), "one partition's blocks are one moment");
      cr_assert_eq(in_use, num(e, "in_use"));
      if (k % 2) cr_assert_eq(get(e, "allocations")->n, num(e, "live_allocations"));
    }
    jfree(&doc);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  test_check(dev);
}
