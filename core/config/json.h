/* A small bounded JSON reader (json.c) for text gpupart does not write: the DRA device
 * metadata files (dra.c). It parses one value of a concatenated stream into a caller's
 * array of nodes, never allocating, never recursing deeper than GPUPART__JSON_DEPTH, and
 * refusing what RFC 8259 refuses (control characters in strings, bad escapes, leading
 * zeros, trailing commas); anything else about the value is the caller's to judge. */
#ifndef GPUPART_CORE_JSON_H
#define GPUPART_CORE_JSON_H

#include <stddef.h>
#include <stdint.h>

#define GPUPART__JSON_DEPTH 32u /* arrays and objects nested in one another, at most */

typedef enum gpupart__json_type {
  GPUPART__JSON_NULL,
  GPUPART__JSON_FALSE,
  GPUPART__JSON_TRUE,
  GPUPART__JSON_NUMBER,
  GPUPART__JSON_STRING,
  GPUPART__JSON_ARRAY,
  GPUPART__JSON_OBJECT
} gpupart__json_type;

/* One value. Spans are offsets into the parsed text: a string's between its quotes (still
 * escaped), a number's whole text. An object's children are its members' values, each
 * with the span of its key. Indexes of 0 mean none (node 0 is the root, nobody's child). */
typedef struct gpupart__json {
  gpupart__json_type type;
  uint32_t start, len;         /* the value's span */
  uint32_t key_start, key_len; /* a member's key span (objects' children) */
  uint32_t child, next;        /* first child; next sibling */
} gpupart__json;

/* Parses the value that starts at text[*pos] (after white space) into nodes[0..cap),
 * setting *count and moving *pos past it. Returns 0, or -1 with why filled (and *pos
 * untouched). *pos == len after white space only is the end of a stream: returns 1. */
int gpupart__json_parse(const char *text, size_t len, size_t *pos, gpupart__json *nodes, uint32_t cap, uint32_t *count,
                        char *why, size_t n);

/* The member named key of object obj, or NULL (also when obj is not an object). */
const gpupart__json *gpupart__json_get(const char *text, const gpupart__json *nodes, const gpupart__json *obj,
                                       const char *key);
/* A string value decoded (escapes, \u as UTF-8) into out: 0, or -1 (out left "") when v
 * is not a string, holds \u0000 or does not fit in n bytes. */
int gpupart__json_string(const char *text, const gpupart__json *v, char *out, size_t n);
/* A member's key decoded the same way. */
int gpupart__json_key(const char *text, const gpupart__json *v, char *out, size_t n);
/* A non-negative integer without fraction or exponent, below 2^64: 0, or -1. */
int gpupart__json_uint(const char *text, const gpupart__json *v, uint64_t *out);

#endif
