/* The bounded JSON reader (json.h): a recursive-descent parser whose recursion is bounded
 * by GPUPART__JSON_DEPTH and whose output is bounded by the caller's node array, so that a
 * file of any size or shape costs at most that stack and that array. Nothing is decoded
 * while parsing: strings and numbers are checked and kept as spans, and decoded only when
 * the caller asks for one (gpupart__json_string, gpupart__json_uint). */
#include "json.h"

#include <stdio.h>
#include <string.h>

typedef struct parser {
  const char *s;
  size_t len, pos;
  gpupart__json *nodes;
  uint32_t cap, count;
  char *why;
  size_t n;
} parser;

static int fail(parser *p, const char *what) {
  snprintf(p->why, p->n, "%s at byte %zu", what, p->pos);
  return -1;
}

static void skip_space(parser *p) {
  for (char c; p->pos < p->len && ((c = p->s[p->pos]) == ' ' || c == '\t' || c == '\r' || c == '\n');) p->pos++;
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static int is_hex(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* The body of a string (p->pos after its opening quote): its span, p->pos after it. */
static int string_span(parser *p, uint32_t *start, uint32_t *len) {
  size_t from = p->pos;
  for (;;) {
    int c = peek(p);
    if (c < 0) return fail(p, "a string is not closed");
    if (c < 0x20) return fail(p, "a control character in a string");
    p->pos++;
    if (c == '"') break;
    if (c != '\\') continue;
    c = peek(p);
    if (c <= 0 || !strchr("\"\\/bfnrtu", c)) return fail(p, "a bad escape in a string");
    p->pos++;
    for (int i = 0; c == 'u' && i < 4; i++, p->pos++)
      if (!is_hex(peek(p))) return fail(p, "a bad \\u escape in a string");
  }
  *start = (uint32_t)from;
  *len = (uint32_t)(p->pos - 1 - from);
  return 0;
}

static int digits(parser *p) {
  size_t from = p->pos;
  while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
  return p->pos > from ? 0 : fail(p, "a number without digits");
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number(parser *p) {
  if (peek(p) == '-') p->pos++;
  if (peek(p) == '0') p->pos++;
  else if (digits(p)) return -1;
  if (peek(p) >= '0' && peek(p) <= '9') return fail(p, "a number with a leading zero");
  if (peek(p) == '.') {
    p->pos++;
    if (digits(p)) return -1;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-') p->pos++;
    if (digits(p)) return -1;
  }
  return 0;
}

static int literal(parser *p, const char *word, gpupart__json_type t, gpupart__json *v) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return fail(p, "not a JSON value");
  p->pos += n;
  v->type = t;
  return 0;
}

static int value(parser *p, uint32_t depth, uint32_t *out);

/* The elements of an array or the members of an object (p->pos after its bracket),
 * linked as children of node self. */
static int members(parser *p, uint32_t self, uint32_t depth, int object) {
  const char close = object ? '}' : ']';
  uint32_t last = 0;
  skip_space(p);
  if (peek(p) == close) {
    p->pos++;
    return 0;
  }
  for (;;) {
    uint32_t ks = 0, kl = 0, v;
    if (object) {
      skip_space(p);
      if (peek(p) != '"') return fail(p, "an object key is not a string");
      p->pos++;
      if (string_span(p, &ks, &kl)) return -1;
      skip_space(p);
      if (peek(p) != ':') return fail(p, "no ':' after an object key");
      p->pos++;
    }
    if (value(p, depth + 1, &v)) return -1;
    p->nodes[v].key_start = ks;
    p->nodes[v].key_len = kl;
    if (last) p->nodes[last].next = v;
    else p->nodes[self].child = v;
    last = v;
    skip_space(p);
    int c = peek(p);
    p->pos++;
    if (c == close) return 0;
    if (c != ',') return fail(p, object ? "no ',' or '}' in an object" : "no ',' or ']' in an array");
  }
}

static int value(parser *p, uint32_t depth, uint32_t *out) {
  if (depth > GPUPART__JSON_DEPTH) return fail(p, "nested too deep");
  if (p->count == p->cap) return fail(p, "too many values");
  uint32_t self = p->count++;
  gpupart__json *v = &p->nodes[self];
  *v = (gpupart__json){0};
  *out = self;
  skip_space(p);
  size_t from = p->pos;
  int c = peek(p), rc;
  if (c == '{' || c == '[') {
    p->pos++;
    p->nodes[self].type = c == '{' ? GPUPART__JSON_OBJECT : GPUPART__JSON_ARRAY;
    rc = members(p, self, depth, c == '{');
  } else if (c == '"') {
    p->pos++;
    v->type = GPUPART__JSON_STRING;
    return string_span(p, &v->start, &v->len);
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    v->type = GPUPART__JSON_NUMBER;
    rc = number(p);
  } else if (c == 't') rc = literal(p, "true", GPUPART__JSON_TRUE, v);
  else if (c == 'f') rc = literal(p, "false", GPUPART__JSON_FALSE, v);
  else if (c == 'n') rc = literal(p, "null", GPUPART__JSON_NULL, v);
  else rc = fail(p, c < 0 ? "the text ends before a value" : "not a JSON value");
  p->nodes[self].start = (uint32_t)from;
  p->nodes[self].len = (uint32_t)(p->pos - from);
  return rc;
}

int gpupart__json_parse(const char *text, size_t len, size_t *pos, gpupart__json *nodes, uint32_t cap, uint32_t *count,
                        char *why, size_t n) {
  parser p = {text, len, *pos, nodes, cap, 0, why, n};
  if (len > UINT32_MAX) return fail(&p, "the text is too long");
  skip_space(&p);
  if (p.pos == len) return 1;
  uint32_t root;
  if (value(&p, 0, &root)) return -1;
  *pos = p.pos;
  *count = p.count;
  return 0;
}

/* ---- reading values ----------------------------------------------------------------- */

static unsigned hex4(const char *s) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)(s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
  return v;
}

/* Appends code point u as UTF-8; -1 when it does not fit. */
static int put_utf8(char *out, size_t n, size_t *o, unsigned u) {
  unsigned char b[4];
  size_t k = u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
  static const unsigned char lead[] = {0, 0, 0xc0, 0xe0, 0xf0};
  for (size_t i = k - 1; i > 0; i--) {
    b[i] = (unsigned char)(0x80 | (u & 0x3f));
    u >>= 6;
  }
  b[0] = (unsigned char)(lead[k] | u);
  if (*o + k >= n) return -1;
  memcpy(out + *o, b, k);
  *o += k;
  return 0;
}

/* A \u escape at s (after the 'u'), a surrogate pair joined: the code point, and the
 * characters it took. A lone surrogate becomes U+FFFD. */
static unsigned unicode(const char *s, const char *end, size_t *used) {
  unsigned u = hex4(s);
  *used = 4;
  if (u < 0xd800 || u > 0xdfff) return u;
  if (u > 0xdbff || end - s < 10 || s[4] != '\\' || s[5] != 'u') return 0xfffd;
  unsigned lo = hex4(s + 6);
  if (lo < 0xdc00 || lo > 0xdfff) return 0xfffd;
  *used = 10;
  return 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
}

static int decode(const char *s, size_t len, char *out, size_t n) {
  size_t o = 0;
  const char *end = s + len;
  while (s < end) {
    char c = *s++;
    if (c == '\\') {
      c = *s++;
      if (c == 'u') {
        size_t used;
        unsigned u = unicode(s, end, &used);
        s += used;
        if (!u || put_utf8(out, n, &o, u)) return -1;
        continue;
      }
      c = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
    }
    if (o + 1 >= n) return -1;
    out[o++] = c;
  }
  out[o] = 0;
  return 0;
}

/* decode, leaving out empty when it fails (never a string cut short or unterminated). */
static int decode_whole(const char *s, size_t len, char *out, size_t n) {
  if (decode(s, len, out, n) == 0) return 0;
  out[0] = 0;
  return -1;
}

int gpupart__json_string(const char *text, const gpupart__json *v, char *out, size_t n) {
  if (!n) return -1;
  out[0] = 0;
  if (!v || v->type != GPUPART__JSON_STRING) return -1;
  return decode_whole(text + v->start, v->len, out, n);
}

int gpupart__json_key(const char *text, const gpupart__json *v, char *out, size_t n) {
  return v && n ? decode_whole(text + v->key_start, v->key_len, out, n) : -1;
}

const gpupart__json *gpupart__json_get(const char *text, const gpupart__json *nodes, const gpupart__json *obj,
                                       const char *key) {
  char k[256];
  if (!obj || obj->type != GPUPART__JSON_OBJECT) return NULL;
  for (uint32_t i = obj->child; i; i = nodes[i].next)
    if (!gpupart__json_key(text, &nodes[i], k, sizeof k) && !strcmp(k, key)) return &nodes[i];
  return NULL;
}

int gpupart__json_uint(const char *text, const gpupart__json *v, uint64_t *out) {
  if (!v || v->type != GPUPART__JSON_NUMBER || !v->len || text[v->start] == '-') return -1;
  uint64_t r = 0;
  for (uint32_t i = 0; i < v->len; i++) {
    char c = text[v->start + i];
    if (c < '0' || c > '9') return -1; /* a fraction or an exponent */
    if (__builtin_mul_overflow(r, 10, &r) || __builtin_add_overflow(r, (uint64_t)(c - '0'), &r)) return -1;
  }
  *out = r;
  return 0;
}
