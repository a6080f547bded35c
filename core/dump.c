/* gpupart_device_dump: one JSON document of a device handle, its partitions, their blocks
 * and, on request, every live allocation (schema: docs/dump.md). It runs in three steps so
 * that no lock is held while the host allocator (the application's code) runs:
 *   1. count, under the device's slow lock and each partition's lock in turn, what the
 *      snapshot will hold; allocate room for that and some slack with no lock held;
 *   2. copy every figure into that room under the same locks the statistics take (slow
 *      lock, then one partition lock at a time), so each partition's figures are one
 *      consistent moment, as gpupart_partition_get_stats is; a snapshot that outgrew its
 *      room (other threads allocated meanwhile) is counted again and retried;
 *   3. format the copy as JSON with no lock held. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "internal.h"
#include "peak.h"

#define DUMP_FLAGS GPUPART_DUMP_ALLOCATIONS
#define DUMP_TRIES 8

typedef struct snap_alloc {
  uint64_t size, offset, address, tag;
  uint32_t block;
} snap_alloc;

typedef struct snap_block {
  uint64_t size, in_use, largest_free, allocations;
  int prealloc;
} snap_block;

typedef struct snap_part {
  size_t name; /* offset in the snapshot's names */
  gpupart__ledger_figures f;
  gpupart__counters c;
  uint64_t reserved, peak_reserved, largest_free;
  int prealloc;
  uint32_t first_block, nblocks;
  size_t first_alloc, nallocs;
} snap_part;

/* What step 1 counts and step 2 copies; caps are the room, n the use. */
typedef struct snapshot {
  snap_part *parts;
  snap_block *blocks;
  snap_alloc *allocs;
  char *names;
  uint32_t nparts, cap_parts, nblocks, cap_blocks;
  size_t nallocs, cap_allocs, nnames, cap_names;
  gpupart__ledger_figures totals;
  uint64_t peak_in_use;
  int with_allocs, overflow;
} snapshot;

/* ---- step 1: counting ---- */

static uint32_t count_blocks(const gpupart_partition *p) {
  uint32_t n = 0;
  for (const gpupart__block *b = p->arena.blocks; b; b = b->next) n++;
  return n;
}

/* Slow lock taken here, each partition lock in turn: what a snapshot needs now. */
static void count_needs(gpupart_device *dev, snapshot *need) {
  *need = (snapshot){0};
  pthread_mutex_lock(&dev->slow);
  need->nparts = dev->nparts;
  for (uint32_t i = 0; i < dev->nparts; i++) {
    gpupart_partition *p = dev->parts[i];
    need->nnames += strlen(p->name) + 1;
    gpupart__lock_acquire(&p->lock);
    need->nblocks += count_blocks(p);
    need->nallocs += p->c.live_allocations;
    gpupart__lock_release(&p->lock);
  }
  pthread_mutex_unlock(&dev->slow);
}

static void snapshot_free(const gpupart__hostmem *m, snapshot *s) {
  gpupart__host_free(m, s->parts);
  gpupart__host_free(m, s->blocks);
  gpupart__host_free(m, s->allocs);
  gpupart__host_free(m, s->names);
  *s = (snapshot){0};
}

/* Room for need plus slack (a quarter and 16 more, doubled by each retry); no lock held. */
static int snapshot_alloc(const gpupart__hostmem *m, const snapshot *need, unsigned try, snapshot *s) {
  size_t k = (size_t)1 << try;
  *s = (snapshot){0};
  s->cap_parts = (uint32_t)((need->nparts + need->nparts / 4 + 4) * k);
  s->cap_blocks = (uint32_t)((need->nblocks + need->nblocks / 4 + 16) * k);
  s->cap_names = (need->nnames + need->nnames / 4 + 256) * k;
  s->parts = gpupart__host_calloc(m, s->cap_parts, sizeof *s->parts);
  s->blocks = gpupart__host_calloc(m, s->cap_blocks, sizeof *s->blocks);
  s->names = gpupart__host_calloc(m, s->cap_names, 1);
  if (need->with_allocs) {
    s->cap_allocs = (need->nallocs + need->nallocs / 4 + 64) * k;
    s->allocs = gpupart__host_calloc(m, s->cap_allocs, sizeof *s->allocs);
  }
  s->with_allocs = need->with_allocs;
  if (s->parts && s->blocks && s->names && (s->allocs || !s->with_allocs)) return GPUPART_OK;
  snapshot_free(m, s);
  return gpupart__fail(GPUPART_ENOMEM, "device_dump: out of host memory");
}

/* ---- step 2: copying (locks held) ---- */

/* The largest power of two that divides v, at most 1 GiB (v == 0 is 1 GiB). */
static uint64_t alignment_of(uint64_t v) {
  uint64_t cap = 1ull << 30;
  return v && (v & (0 - v)) < cap ? v & (0 - v) : cap;
}

static void copy_alloc(snapshot *s, const gpupart__block *b, const gpupart__range *r, uint32_t block) {
  if (s->nallocs == s->cap_allocs) {
    s->overflow = 1;
    return;
  }
  uint64_t address = b->drv.device_address ? b->drv.device_address + r->offset : 0;
  s->allocs[s->nallocs++] = (snap_alloc){
      .size = gpupart__range_user_size(r), .offset = r->offset, .address = address, .tag = r->user_tag, .block = block};
}

/* Partition lock held: one block's ranges, walked by offset; an expandable partition's
 * unmapped tail (a USED range no allocation has) is left out. */
static void copy_block(snapshot *s, const gpupart__block *b, uint32_t index, const gpupart__range *tail) {
  if (s->nblocks == s->cap_blocks) {
    s->overflow = 1;
    return;
  }
  snap_block *sb = &s->blocks[s->nblocks++];
  *sb = (snap_block){.size = b->size, .prealloc = b->prealloc};
  for (const gpupart__range *r = gpupart__tlsf_block_first(b->home); r; r = r->next_phys) {
    if (r->state == GPUPART__RANGE_FREE && r->size > sb->largest_free) sb->largest_free = r->size;
    if (r->state != GPUPART__RANGE_USED || r == tail) continue;
    sb->in_use += gpupart__range_user_size(r);
    sb->allocations++;
    if (s->with_allocs) copy_alloc(s, b, r, index);
  }
}

/* Partition lock held: the figures gpupart_partition_get_stats reports, and the blocks. */
static void copy_partition_locked(gpupart_partition *p, snapshot *s, snap_part *sp) {
  p->dev->ledger->ops->get(p->dev->ledger, p->account, &sp->f);
  sp->c = p->c;
  sp->reserved = p->arena.reserved + p->arena.charged;
  sp->peak_reserved = p->arena.peak_reserved;
  if (p->dev->ledger->shared) {
    sp->reserved = sp->f.reserved;
    sp->peak_reserved = sp->f.peak_reserved;
  }
  sp->largest_free = gpupart__tlsf_largest_free(p->arena.tlsf);
  sp->prealloc = p->growth.prealloc;
  sp->first_block = s->nblocks;
  sp->first_alloc = s->nallocs;
  uint32_t index = 0;
  for (const gpupart__block *b = p->arena.blocks; b && !s->overflow; b = b->next)
    copy_block(s, b, index++, p->arena.tail);
  sp->nblocks = s->nblocks - sp->first_block;
  sp->nallocs = s->nallocs - sp->first_alloc;
}

/* Slow lock held. */
static void copy_partition(gpupart_partition *p, snapshot *s) {
  size_t len = strlen(p->name) + 1;
  if (s->nparts == s->cap_parts || s->nnames + len > s->cap_names) {
    s->overflow = 1;
    return;
  }
  snap_part *sp = &s->parts[s->nparts++];
  sp->name = s->nnames;
  memcpy(s->names + s->nnames, p->name, len);
  s->nnames += len;
  gpupart__lock_acquire(&p->lock);
  copy_partition_locked(p, s, sp);
  gpupart__lock_release(&p->lock);
}

/* 0, or -1 when the snapshot outgrew its room. */
static int copy_device(gpupart_device *dev, snapshot *s) {
  pthread_mutex_lock(&dev->slow);
  for (uint32_t i = 0; i < dev->nparts && !s->overflow; i++) copy_partition(dev->parts[i], s);
  dev->ledger->ops->totals(dev->ledger, &s->totals);
  s->peak_in_use = gpupart__peak_in_use(dev); /* under the slow lock: a lone partition's peak is read */
  pthread_mutex_unlock(&dev->slow);
  return s->overflow ? -1 : 0;
}

static int take_snapshot(gpupart_device *dev, int with_allocs, snapshot *s) {
  for (unsigned try = 0; try < DUMP_TRIES; try++) {
    snapshot need;
    count_needs(dev, &need);
    need.with_allocs = with_allocs;
    int rc = snapshot_alloc(&dev->ctx->mem, &need, try, s);
    if (rc) return rc;
    if (copy_device(dev, s) == 0) return GPUPART_OK;
    snapshot_free(&dev->ctx->mem, s);
  }
  return gpupart__fail(GPUPART_EBUSY, "device_dump: the device changed faster than %d snapshots could be taken",
                       DUMP_TRIES);
}

/* ---- step 3: JSON (no lock held) ---- */

/* The text lies after this header in one host allocation, so gpupart_dump_free finds the
 * allocator that made it even after the context is gone. */
typedef union dump_head {
  gpupart__hostmem mem;
  max_align_t align;
} dump_head;

typedef struct jbuf {
  const gpupart__hostmem *m;
  dump_head *head; /* the allocation; the text starts at head + 1 */
  size_t n, cap;
  int oom;
} jbuf;

static char *jb_text(const jbuf *b) { return (char *)(b->head + 1); }

static int jb_reserve(jbuf *b, size_t more) {
  if (b->oom) return -1;
  if (b->n + more + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->n + more + 1) cap *= 2;
  dump_head *h = gpupart__host_calloc(b->m, 1, sizeof *h + cap);
  if (!h) {
    b->oom = 1;
    return -1;
  }
  h->mem = *b->m;
  if (b->head) {
    memcpy(h + 1, jb_text(b), b->n);
    gpupart__host_free(b->m, b->head);
  }
  b->head = h;
  b->cap = cap;
  return 0;
}

static void jb_put(jbuf *b, const char *s, size_t len) {
  if (jb_reserve(b, len)) return;
  memcpy(jb_text(b) + b->n, s, len);
  b->n += len;
  jb_text(b)[b->n] = '\0';
}

#define JB_LIT(b, s) jb_put((b), (s), sizeof(s) - 1)

/* Closes a list: with items, on a line of its own. */
static void jb_close(jbuf *b, size_t items, const char *many, const char *none) {
  const char *s = items ? many : none;
  jb_put(b, s, strlen(s));
}

static void jb_printf(jbuf *b, const char *fmt, ...) GPUPART__PRINTF(2, 3);
static void jb_printf(jbuf *b, const char *fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int len = vsnprintf(NULL, 0, fmt, ap);
  if (len > 0 && jb_reserve(b, (size_t)len) == 0) {
    vsnprintf(jb_text(b) + b->n, (size_t)len + 1, fmt, again);
    b->n += (size_t)len;
  }
  va_end(again);
  va_end(ap);
}

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s) {
  unsigned c = s[0]; /* 0xc0, 0xc1 and 0xf5..0xff lead nothing */
  size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (len == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
      (len == 4 && s[0] == 0xf0 && s[1] < 0x90) || (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))
    return 0; /* overlong, surrogate or past U+10FFFF */
  return len;
}

/* s as a JSON string: quotes, backslashes and control characters escaped, bytes that are
 * not UTF-8 replaced by U+FFFD. */
static void jb_string(jbuf *b, const char *s) {
  JB_LIT(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t len = *p >= 0x80 ? utf8_len(p) : 1;
    if (*p == '"' || *p == '\\') jb_printf(b, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) jb_printf(b, "\\u%04x", *p);
    else if (len) jb_put(b, (const char *)p, len);
    else JB_LIT(b, "\\ufffd");
    p += len ? len : 1;
  }
  JB_LIT(b, "\"");
}

static void json_block(jbuf *b, const snap_block *k, int first) {
  jb_printf(b,
            "%s\n        {\"size\": %" PRIu64 ", \"in_use\": %" PRIu64 ", \"allocations\": %" PRIu64
            ", \"largest_free\": %" PRIu64 ", \"preallocated\": %s}",
            first ? "" : ",", k->size, k->in_use, k->allocations, k->largest_free, k->prealloc ? "true" : "false");
}

static void json_alloc(jbuf *b, const snap_alloc *a, int first) {
  jb_printf(b,
            "%s\n        {\"size\": %" PRIu64 ", \"alignment\": %" PRIu64 ", \"offset\": %" PRIu64
            ", \"block\": %u, \"device_address\": %" PRIu64 ", \"tag\": %" PRIu64 "}",
            first ? "" : ",", a->size, alignment_of(a->address ? a->address : a->offset), a->offset, a->block,
            a->address, a->tag);
}

static void json_figures(jbuf *b, const snap_part *p, int shared) {
  jb_printf(
      b,
      ", \"limit\": %" PRIu64 ", \"guarantee\": %" PRIu64 ", \"reserved\": %" PRIu64 ", \"own_reserved\": %" PRIu64
      ", \"in_use\": %" PRIu64 ", \"peak_reserved\": %" PRIu64 ", \"peak_in_use\": %" PRIu64,
      p->f.limit, p->f.guarantee, p->reserved, p->f.own_reserved, p->c.in_use, p->peak_reserved, p->c.peak_in_use);
  jb_printf(b, ", \"live_allocations\": %" PRIu64 ", \"largest_free\": %" PRIu64 ", \"growth\": \"%s\", \"shared\": %s",
            p->c.live_allocations, p->largest_free, p->prealloc ? "off" : "on", shared ? "true" : "false");
}

static void json_partition(jbuf *b, const snapshot *s, const snap_part *p, int shared, int first) {
  jb_printf(b, "%s\n    {\"name\": ", first ? "" : ",");
  jb_string(b, s->names + p->name);
  json_figures(b, p, shared);
  JB_LIT(b, ", \"blocks\": [");
  for (uint32_t i = 0; i < p->nblocks; i++) json_block(b, &s->blocks[p->first_block + i], i == 0);
  jb_close(b, p->nblocks, "\n      ]", "]");
  if (s->with_allocs) {
    JB_LIT(b, ", \"allocations\": [");
    for (size_t i = 0; i < p->nallocs; i++) json_alloc(b, &s->allocs[p->first_alloc + i], i == 0);
    jb_close(b, p->nallocs, "\n      ]", "]");
  }
  JB_LIT(b, "}");
}

static void json_device(jbuf *b, const gpupart_device *dev, const snapshot *s) {
  const gpupart_device_info *i = &dev->info;
  char uuid[GPUPART__UUID_STRING];
  uint64_t in_use = 0;
  for (uint32_t k = 0; k < s->nparts; k++) in_use += s->parts[k].c.in_use;
  jb_printf(b, "{\"version\": 1, \"backend\": \"%s\", \"index\": %u, \"name\": ", gpupart_backend_name(i->backend),
            i->index);
  jb_string(b, i->name);
  if (gpupart__uuid_is_zero(i->uuid)) JB_LIT(b, ", \"uuid\": null");
  else {
    gpupart__uuid_format(i->uuid, uuid);
    jb_printf(b, ", \"uuid\": \"%s\"", uuid);
  }
  jb_printf(b,
            ", \"total\": %" PRIu64 ", \"budget\": %" PRIu64 ", \"guarantees\": %" PRIu64 ", \"reserved\": %" PRIu64
            ", \"in_use\": %" PRIu64 ", \"peak_reserved\": %" PRIu64 ", \"peak_in_use\": %" PRIu64
            ", \"granularity\": %" PRIu64 ", \"shared\": %s, \"partitions\": [",
            i->total_bytes, s->totals.limit, s->totals.guarantee, s->totals.reserved, in_use, s->totals.peak_reserved,
            s->peak_in_use, dev->granularity, dev->ledger->shared ? "true" : "false");
  for (uint32_t k = 0; k < s->nparts; k++) json_partition(b, s, &s->parts[k], dev->ledger->shared, k == 0);
  jb_close(b, s->nparts, "\n  ]}\n", "]}\n");
}

static gpupart_result dump_args(const gpupart_device *dev, uint32_t flags, char **json_out) {
  if (!json_out) return gpupart__fail(GPUPART_EINVAL, "device_dump: json_out is NULL");
  *json_out = NULL;
  if (!dev) return gpupart__fail(GPUPART_EINVAL, "device_dump: device is NULL");
  if (flags & ~DUMP_FLAGS) return gpupart__fail(GPUPART_EINVAL, "device_dump: unknown flags 0x%x", flags & ~DUMP_FLAGS);
  return GPUPART_OK;
}

gpupart_result gpupart_device_dump(gpupart_device *device, uint32_t flags, char **json_out, size_t *length_out) {
  if (length_out) *length_out = 0;
  gpupart_result rc = dump_args(device, flags, json_out);
  snapshot s;
  if (rc) return rc;
  rc = take_snapshot(device, (flags & GPUPART_DUMP_ALLOCATIONS) != 0, &s);
  gpupart__ledger_report(device->ledger); /* the dead members the snapshot reaped, no lock held */
  if (rc) return rc;
  jbuf b = {.m = &device->ctx->mem};
  json_device(&b, device, &s);
  snapshot_free(&device->ctx->mem, &s);
  if (b.oom) {
    if (b.head) gpupart__host_free(b.m, b.head);
    return gpupart__fail(GPUPART_ENOMEM, "device_dump: out of host memory");
  }
  if (length_out) *length_out = b.n;
  *json_out = jb_text(&b);
  return GPUPART_OK;
}

void gpupart_dump_free(char *json) {
  if (!json) return;
  dump_head *h = (dump_head *)(void *)json - 1;
  gpupart__hostmem mem = h->mem;
  mem.free(h, mem.user);
}
