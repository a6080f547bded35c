/* The INI configuration file, parsed by inih. inih calls back once per key with its
 * section; our reader feeds it one line at a time, which is how we know the line number
 * of every key (inih itself only reports the first error's line), and how we notice what
 * inih passes over in silence: lines it cannot parse, lines too long for its buffer,
 * section names it truncates, and sections that hold no key at all. Every error reads
 * "name:line: what", and parsing goes on so that check-config can list them all. */
#include <ctype.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config.h"

enum section_kind { SEC_NONE, SEC_GLOBAL, SEC_DEVICE, SEC_PARTITION, SEC_BAD };

/* Keys of a [partition NAME] section, as bits to catch one set twice. */
static const char *const part_keys[] = {"size", "guarantee", "device", "allow_growth", "release_threshold"};
enum { PK_SIZE, PK_GUARANTEE, PK_DEVICE, PK_GROWTH, PK_THRESHOLD, PK_COUNT };

typedef struct ini_state {
  gpupart__layer *layer;
  const char *name; /* for messages and sources */
  gpupart__errors *e;
  int errors, first_error_line; /* this parse's */
  /* the reader: the line read last */
  const char *text;
  size_t pos;
  int line, header_line, header_keys;
  char header[128]; /* the section name of the last header line (inih itself is given "[s]") */
  int header_bad;   /* the last header line has no ']' (reported) */
  int in_key;       /* a key came after the last header: indented lines now continue it */
  int continuation, expect, handled;
  /* the handler: the section being filled */
  int section_line;
  char section[128];
  enum section_kind kind;
  gpupart__selector sel;
  gpupart__pspec *part;
  unsigned part_seen;  /* PK_* bits */
  uint32_t first_part; /* the first partition this parse declared or replaced */
} ini_state;

static void error_at(ini_state *st, int line, const char *fmt, ...) GPUPART__PRINTF(3, 4);

static void error_at(ini_state *st, int line, const char *fmt, ...) {
  char msg[GPUPART__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  gpupart__errors_add(st->e, line, "%s:%d: %s", GPUPART__ECHO(st->name), line, msg);
  if (line > 0 && (!st->first_error_line || line < st->first_error_line)) st->first_error_line = line;
  st->errors++;
}

/* ---- sections ------------------------------------------------------------------- */

/* Splits "keyword rest" into the keyword's kind and rest. */
static enum section_kind classify(const char *section, const char **rest) {
  static const struct {
    const char *word;
    enum section_kind kind;
  } words[] = {{"gpupart", SEC_GLOBAL}, {"device", SEC_DEVICE}, {"partition", SEC_PARTITION}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t n = strlen(words[i].word);
    const char *r = section + n;
    if (strncasecmp(section, words[i].word, n) != 0) continue;
    if (words[i].kind == SEC_GLOBAL ? *r != 0 : !isspace((unsigned char)*r)) continue;
    while (isspace((unsigned char)*r)) r++;
    *rest = r;
    return words[i].kind;
  }
  return SEC_BAD;
}

static void trim_copy(const char *s, size_t len, char *out, size_t cap) {
  while (len && isspace((unsigned char)*s)) {
    s++;
    len--;
  }
  while (len && isspace((unsigned char)s[len - 1])) len--;
  snprintf(out, cap, "%.*s", (int)len, s);
}

/* The partition a [partition NAME] section fills; an earlier source's is replaced. */
static gpupart__pspec *partition_slot(ini_state *st, const char *name) {
  gpupart__layer *l = st->layer;
  for (uint32_t i = 0; i < l->nparts; i++) {
    gpupart__pspec *p = &l->parts[i];
    if (strcmp(p->name, name) != 0) continue;
    if (strcmp(p->src.name, st->name) == 0) {
      error_at(st, st->header_line, "[partition %s] is declared twice (first at line %d)", name, p->src.line);
      return NULL;
    }
    if (i < st->first_part) st->first_part = i;
    return p;
  }
  if (l->nparts < GPUPART__MAX_PARTS) return &l->parts[l->nparts++];
  error_at(st, st->header_line, "more than %d partitions", GPUPART__MAX_PARTS);
  return NULL;
}

static enum section_kind begin_partition(ini_state *st, const char *name) {
  char err[GPUPART__ERR_MAX];
  if (gpupart__check_name(name, err, sizeof err)) {
    error_at(st, st->header_line, "%s", err);
    return SEC_BAD;
  }
  gpupart__pspec *p = partition_slot(st, name);
  if (!p) return SEC_BAD;
  *p = (gpupart__pspec){.src = {st->name, st->header_line}};
  snprintf(p->name, sizeof p->name, "%s", name);
  st->part = p;
  st->part_seen = 0;
  return SEC_PARTITION;
}

static void unknown_section(ini_state *st, const char *section) {
  error_at(st, st->header_line, "unknown section [%s] (use [gpupart], [device B:I] or [partition NAME])", section);
}

/* The section of the last header line. inih is handed "[s]" for every header (its own
 * buffer would cut names past 49 characters), so the name is the one the reader kept. */
static enum section_kind begin_section(ini_state *st) {
  const char *rest = "";
  char err[GPUPART__ERR_MAX];
  trim_copy(st->header, strlen(st->header), st->section, sizeof st->section);
  if (!st->header_line) return SEC_NONE;
  if (st->header_bad) return SEC_BAD;
  enum section_kind k = classify(st->section, &rest);
  if (k == SEC_BAD) {
    unknown_section(st, st->section);
    return SEC_BAD;
  }
  if (k == SEC_DEVICE && gpupart__parse_selector(rest, &st->sel, err, sizeof err)) {
    error_at(st, st->header_line, "[%s]: %s", st->section, err);
    return SEC_BAD;
  }
  return k == SEC_PARTITION ? begin_partition(st, rest) : k;
}

/* ---- keys ----------------------------------------------------------------------- */

static int set_option(ini_state *st, const char *key, const char *value, unsigned where, const gpupart__selector *sel) {
  int o = gpupart__option_by_key(key);
  char err[GPUPART__ERR_MAX];
  if (o == GPUPART__OPT_PARTITIONS) {
    error_at(st, st->line, "unknown key '%s' in [%s] (declare partitions as [partition NAME] sections)", key,
             st->section);
    return 0;
  }
  if (o < 0 || !(gpupart__options[o].where & where)) {
    error_at(st, st->line, "unknown key '%s' in [%s]", key, st->section);
    return 0;
  }
  gpupart__source src = {st->name, st->line};
  if (gpupart__layer_set(st->layer, (gpupart__opt)o, sel, value, src, err, sizeof err) == 0) return 1;
  error_at(st, st->line, "%s: %s", gpupart__options[o].key, err);
  return 0;
}

/* One key of a [partition NAME] section; err is filled when the value is wrong. */
static int set_part_value(gpupart__pspec *p, int k, const char *value, char *err, size_t n) {
  const unsigned both = GPUPART__ACCEPT_BYTES | GPUPART__ACCEPT_SHARE;
  gpupart__value v;
  switch (k) {
  case PK_SIZE: /* a bad size was reported here: -1 keeps check_partitions quiet about it */
    p->has_size = gpupart__parse_amount(value, both, &p->size, err, n) ? -1 : 1;
    return p->has_size < 0 ? -1 : 0;
  case PK_GUARANTEE: return gpupart__parse_amount(value, both, &p->guarantee, err, n);
  case PK_DEVICE: return gpupart__parse_selector(value, &p->dev, err, n);
  case PK_GROWTH:
    if (gpupart__option_parse(GPUPART__OPT_ALLOW_GROWTH, value, &v, err, n)) return -1;
    p->growth = v.u ? GPUPART_GROWTH_ON : GPUPART_GROWTH_OFF;
    return 0;
  default:
    if (gpupart__option_parse(GPUPART__OPT_RELEASE_THRESHOLD, value, &v, err, n)) return -1;
    p->release_threshold = v.u;
    return 0;
  }
}

static int set_partition_key(ini_state *st, const char *key, const char *value) {
  char err[GPUPART__ERR_MAX];
  int k = 0;
  while (k < PK_COUNT && strcasecmp(key, part_keys[k]) != 0) k++;
  if (k == PK_COUNT) {
    error_at(st, st->line, "unknown key '%s' in [%s] (use size, guarantee, device, allow_growth or release_threshold)",
             key, st->section);
    return 0;
  }
  if (st->part_seen & (1u << k)) {
    error_at(st, st->line, "%s: set twice in [%s]", part_keys[k], st->section);
    return 0;
  }
  st->part_seen |= 1u << k;
  if (set_part_value(st->part, k, value, err, sizeof err) == 0) return 1;
  error_at(st, st->line, "%s: %s", part_keys[k], err);
  return 0;
}

static int set_key(ini_state *st, const char *key, const char *value) {
  switch (st->kind) {
  case SEC_GLOBAL: return set_option(st, key, value, GPUPART__IN_FILE, NULL);
  case SEC_DEVICE: return set_option(st, key, value, GPUPART__IN_DEVICE, &st->sel);
  case SEC_PARTITION: return set_partition_key(st, key, value);
  case SEC_NONE: error_at(st, st->line, "key '%s' is outside a section (start with [gpupart])", key); return 0;
  default: return 0; /* the section's error was reported at its header */
  }
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
  ini_state *st = user;
  (void)section; /* always "s": see begin_section */
  st->handled = 1;
  st->header_keys++;
  if (st->continuation) {
    error_at(st, st->line, "%s: continuation lines are not supported; write the value on one line", key);
    return 0;
  }
  st->in_key = 1;
  if (st->section_line != st->header_line || st->kind == SEC_NONE) {
    st->section_line = st->header_line;
    st->kind = begin_section(st);
  }
  return set_key(st, key, value);
}

/* ---- the reader ----------------------------------------------------------------- */

/* A header with no key under it: inih never calls back for it, but an empty
 * [partition NAME], a misspelt section or a bad device must not pass unnoticed. */
static void check_empty_header(ini_state *st) {
  char section[128], err[GPUPART__ERR_MAX];
  const char *rest;
  if (!st->header_line || st->header_keys || st->header_bad) return;
  trim_copy(st->header, strlen(st->header), section, sizeof section);
  gpupart__selector sel;
  switch (classify(section, &rest)) {
  case SEC_PARTITION: error_at(st, st->header_line, "[%s] has no size", section); break;
  case SEC_BAD: unknown_section(st, section); break;
  case SEC_DEVICE:
    if (gpupart__parse_selector(rest, &sel, err, sizeof err)) error_at(st, st->header_line, "[%s]: %s", section, err);
    break;
  default: break;
  }
}

/* What follows a header's ']': only blanks or a comment, else a key written on the
 * header's line would be dropped in silence. */
static int header_tail_bad(ini_state *st, const char *tail) {
  tail += strspn(tail, " \t");
  if (!*tail || *tail == '\n' || *tail == ';' || *tail == '#') return 0;
  char text[GPUPART__PATH_MAX];
  snprintf(text, sizeof text, "%.*s", (int)strcspn(tail, "\n"), tail);
  error_at(st, st->line, "text after ']' on a section line: '%s' (write each key on its own line)",
           GPUPART__ECHO(text));
  return 1;
}

/* A header line, as inih reads it: the name runs to ']' (or to an inline comment). */
static void begin_header(ini_state *st, const char *p) {
  check_empty_header(st);
  st->header_line = st->line;
  st->header_keys = 0;
  st->in_key = 0;
  size_t len = strcspn(p + 1, "]\n");
  const char *comment = strstr(p + 1, " ;");
  if (comment && (size_t)(comment - p - 1) < len) len = (size_t)(comment - p - 1);
  snprintf(st->header, sizeof st->header, "%.*s", (int)len, p + 1);
  st->header_bad = p[1 + len] != ']';
  if (st->header_bad) error_at(st, st->line, "the section header has no ']'");
  else if (len >= sizeof st->header) {
    st->header_bad = 1;
    error_at(st, st->line, "the section name '%s' is longer than %zu characters", GPUPART__ECHO(st->header),
             sizeof st->header - 1);
  } else st->header_bad = header_tail_bad(st, p + 2 + len);
}

/* Classifies the line just read as inih will treat it. */
static void classify_line(ini_state *st, char *line) {
  if (st->line == 1 && strncmp(line, "\xEF\xBB\xBF", 3) == 0) line += 3;
  char *p = line;
  while (*p == ' ' || *p == '\t') p++;
  int blank = !*p || *p == '\n' || *p == ';' || *p == '#';
  st->continuation = !blank && p > line && st->in_key;
  st->expect = !blank && (st->continuation || *p != '[');
  st->handled = 0;
  if (st->expect || blank) return;
  begin_header(st, p);
  strcpy(line, "[s]\n"); /* the line buffer holds at least a header's 3 characters and more */
}

static char *read_line(char *buf, int size, void *stream) {
  ini_state *st = stream;
  if (st->line && st->expect && !st->handled)
    error_at(st, st->line, "expected 'key = value', '[section]' or a comment");
  st->expect = 0;
  if (!st->text[st->pos]) return NULL;
  /* A line ends at LF, CR LF or a lone CR (old Mac files); inih is handed it ending in LF. */
  const char *s = st->text + st->pos;
  size_t len = strcspn(s, "\r\n");
  st->pos += len + (s[len] == '\r' && s[len + 1] == '\n' ? 2 : s[len] ? 1 : 0);
  st->line++;
  if (len + 2 > (size_t)size) {
    error_at(st, st->line, "the line is longer than %d characters", size - 3);
    snprintf(buf, (size_t)size, "\n");
  } else {
    memcpy(buf, s, len);
    memcpy(buf + len, "\n", 2);
  }
  classify_line(st, buf);
  return buf;
}

/* ---- after the last line -------------------------------------------------------- */

static void check_partitions(ini_state *st) {
  char err[GPUPART__ERR_MAX];
  for (uint32_t i = st->first_part; i < st->layer->nparts; i++) {
    const gpupart__pspec *p = &st->layer->parts[i];
    if (p->src.name != st->name || p->has_size < 0) continue;
    if (!p->has_size) error_at(st, p->src.line, "[partition %s] has no size", p->name);
    else if (gpupart__check_pspec(p, err, sizeof err)) error_at(st, p->src.line, "%s", err);
  }
}

int gpupart__ini_parse(gpupart__layer *l, const char *text, const char *name, gpupart__errors *e) {
  ini_state st = {.layer = l, .name = name, .e = e, .text = text, .first_part = l->nparts};
  int first = ini_parse_stream(read_line, &st, on_key, &st);
  check_empty_header(&st);
  check_partitions(&st);
  if (first > 0 && (!st.first_error_line || first < st.first_error_line))
    error_at(&st, first, "inih cannot parse this line");
  return st.errors;
}
