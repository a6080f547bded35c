/* The built-in workloads: deterministic (seeded) operation streams that stand for what
 * GPU programs do with device memory, so the suite runs with no trace files at all.
 *   transformer    a training step of a transformer: weights and optimizer state live
 *                  throughout, activations are allocated layer by layer in the forward pass
 *                  and freed in reverse in the backward pass, with gradient temporaries;
 *   inference      an inference server: requests of varying batch and sequence length,
 *                  KV caches that grow by doubling, per-token temporaries;
 *   rmm_random     RMM's random_allocations: 73% allocations, sizes uniform in 1 B..1 MiB,
 *                  usage capped at 16000 MiB, random frees;
 *   vma_algorithms VMA's BenchmarkAlgorithms pattern: a half-emptied prefill, then rounds
 *                  of 3333 small (32 B..1 KiB) allocations freed in random order;
 *   adversarial    one huge free range split and re-merged by every request, and frees
 *                  whose neighbours on both sides are already free.
 * Each generator stops at about TARGET_OPS operations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TARGET_OPS 150000u

/* ---- builder ---- */

/* ---- streams and names ---- */

uint32_t bench_stream_of(bench_workload *w, uint32_t name, uint32_t process, uint32_t lane) {
  for (uint32_t i = 0; i < w->nstreams; i++) {
    const bench_stream *s = &w->streams[i];
    if (s->name == name && s->process == process && s->lane == lane) return i;
  }
  w->streams = bench_xrealloc(w->streams, (w->nstreams + 1) * sizeof *w->streams);
  w->streams[w->nstreams] = (bench_stream){.name = name, .process = process, .lane = lane};
  if (process >= w->processes) w->processes = process + 1;
  return w->nstreams++;
}

uint32_t bench_name_of(bench_workload *w, const char *name) {
  for (uint32_t i = 0; i < w->nnames; i++)
    if (!strcmp(w->names[i], name)) return i;
  w->names = bench_xrealloc(w->names, (w->nnames + 1) * sizeof *w->names);
  w->names[w->nnames] = strdup(name);
  if (!w->names[w->nnames]) bench_die("out of host memory");
  return w->nnames++;
}

/* w's names and streams, copied into out (which has none yet). */
static void copy_tables(const bench_workload *w, bench_workload *out) {
  out->names = NULL;
  out->nnames = 0;
  out->streams = NULL;
  out->nstreams = 0;
  out->processes = 0;
  for (uint32_t i = 0; i < w->nnames; i++) bench_name_of(out, w->names[i]);
  for (uint32_t i = 0; i < w->nstreams; i++)
    bench_stream_of(out, w->streams[i].name, w->streams[i].process, w->streams[i].lane);
  if (w->processes > out->processes) out->processes = w->processes;
}

/* ---- builder ---- */

void bench_builder_init(bench_builder *b, bench_workload *w, const char *name) {
  *w = (bench_workload){.scale = 1.0};
  snprintf(w->name, sizeof w->name, "%s", name);
  *b = (bench_builder){.w = w};
  for (uint32_t lane = 0; lane < BENCH_PARTS; lane++) bench_stream_of(w, BENCH_NO_NAME, 0, lane);
}

void bench_builder_finish(bench_builder *b) {
  free(b->free_slots);
  b->free_slots = NULL;
}

static void push_op(bench_workload *w, bench_op op) {
  if (w->n == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 4096;
    w->ops = bench_xrealloc(w->ops, w->cap * sizeof *w->ops);
  }
  w->ops[w->n++] = op;
}

uint32_t bench_emit_alloc_to(bench_builder *b, uint64_t size, uint32_t stream) {
  bench_workload *w = b->w;
  uint32_t slot = b->nfree ? b->free_slots[--b->nfree] : w->slots++;
  if (!size) size = 1;
  if (size > w->max_size) w->max_size = size;
  push_op(w, (bench_op){.size = size, .slot = slot, .part = stream});
  b->allocs++;
  return slot;
}

/* The first BENCH_PARTS streams are the round-robin ones (bench_builder_init). */
uint32_t bench_emit_alloc(bench_builder *b, uint64_t size) {
  return bench_emit_alloc_to(b, size, (uint32_t)(b->allocs % BENCH_PARTS));
}

void bench_emit_free(bench_builder *b, uint32_t slot) {
  push_op(b->w, (bench_op){.size = 0, .slot = slot});
  if (b->nfree == b->cap_free) {
    b->cap_free = b->cap_free ? b->cap_free * 2 : 1024;
    b->free_slots = bench_xrealloc(b->free_slots, b->cap_free * sizeof *b->free_slots);
  }
  b->free_slots[b->nfree++] = slot;
}

void bench_workload_free(bench_workload *w) {
  for (uint32_t i = 0; i < w->nnames; i++) free(w->names[i]);
  free(w->names);
  free(w->streams);
  free(w->ops);
  *w = (bench_workload){0};
}

uint64_t bench_workload_peak(const bench_workload *w, size_t n, uint64_t align) {
  uint64_t *live = bench_xcalloc(w->slots ? w->slots : 1, sizeof *live);
  uint64_t sum = 0, peak = 0;
  for (size_t i = 0; i < n && i < w->n; i++) {
    const bench_op *o = &w->ops[i];
    if (o->size) live[o->slot] = bench_round_up(o->size, align), sum += live[o->slot];
    else sum -= live[o->slot], live[o->slot] = 0;
    if (sum > peak) peak = sum;
  }
  free(live);
  return peak;
}

void bench_workload_scaled(const bench_workload *w, double factor, bench_workload *out) {
  *out = *w;
  out->ops = bench_xmalloc(w->n * sizeof *w->ops);
  out->cap = w->n;
  out->max_size = 0;
  out->scale = w->scale * factor;
  copy_tables(w, out);
  for (size_t i = 0; i < w->n; i++) {
    out->ops[i] = w->ops[i];
    if (!w->ops[i].size) continue;
    uint64_t s = (uint64_t)((double)w->ops[i].size * factor);
    out->ops[i].size = s ? s : 1;
    if (out->ops[i].size > out->max_size) out->max_size = out->ops[i].size;
  }
}

void bench_workload_only(const bench_workload *w, uint32_t name, bench_workload *out) {
  *out = *w;
  out->ops = bench_xmalloc((w->n ? w->n : 1) * sizeof *w->ops);
  out->n = 0;
  out->max_size = 0;
  copy_tables(w, out);
  char *mine = bench_xcalloc(w->slots ? w->slots : 1, 1); /* slots now holding one of name's */
  for (size_t i = 0; i < w->n; i++) {
    const bench_op *o = &w->ops[i];
    if (o->size && w->streams[o->part].name != name) continue;
    if (!o->size && !mine[o->slot]) continue;
    mine[o->slot] = o->size != 0;
    out->ops[out->n++] = *o;
    if (o->size > out->max_size) out->max_size = o->size;
  }
  out->cap = out->n;
  out->ops = bench_xrealloc(out->ops, (out->n ? out->n : 1) * sizeof *out->ops); /* kept per name: only its own */
  free(mine);
}

/* ---- a live set that frees by index in O(1) (swap with the last) ---- */

typedef struct live_set {
  uint32_t *slots;
  uint64_t *sizes;
  size_t n, cap;
  uint64_t bytes;
} live_set;

static void live_add(live_set *s, uint32_t slot, uint64_t size) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1024;
    s->slots = bench_xrealloc(s->slots, s->cap * sizeof *s->slots);
    s->sizes = bench_xrealloc(s->sizes, s->cap * sizeof *s->sizes);
  }
  s->slots[s->n] = slot, s->sizes[s->n++] = size;
  s->bytes += size;
}

static void live_free_at(bench_builder *b, live_set *s, size_t i) {
  bench_emit_free(b, s->slots[i]);
  s->bytes -= s->sizes[i];
  s->slots[i] = s->slots[--s->n];
  s->sizes[i] = s->sizes[s->n];
}

static void live_alloc(bench_builder *b, live_set *s, uint64_t size) { live_add(s, bench_emit_alloc(b, size), size); }

static void live_release(live_set *s) {
  free(s->slots);
  free(s->sizes);
  *s = (live_set){0};
}

/* ---- transformer training step ---- */

enum { TF_LAYERS = 12, TF_D = 1024, TF_HEADS = 16, TF_VOCAB = 50257, TF_BATCH = 8 };
#define TF_WEIGHTS_PER_LAYER 12
#define TF_SAVED_PER_LAYER 13

static void tf_layer_weights(uint64_t *w) {
  const uint64_t d = TF_D, h = 2; /* fp16 */
  const uint64_t sizes[TF_WEIGHTS_PER_LAYER] = {3 * d * d * h, 3 * d * h, d * d * h,     d * h,
                                                d * h,         d * h,     d * h,         d * h,
                                                4 * d * d * h, 4 * d * h, 4 * d * d * h, d * h};
  memcpy(w, sizes, sizeof sizes);
}

/* Activations one layer saves for backward, at seq tokens per sequence. */
static void tf_saved(uint64_t seq, uint64_t *a) {
  const uint64_t t = TF_BATCH * seq, d = TF_D, h = 2, att = (uint64_t)TF_BATCH * TF_HEADS * seq * seq;
  const uint64_t sizes[TF_SAVED_PER_LAYER] = {t * d * h,     3 * t * d * h, att * h, att * h,   att,
                                              t * d * h,     t * d * h,     t * d,   t * d * h, 4 * t * d * h,
                                              4 * t * d * h, t * d * h,     t * d};
  memcpy(a, sizes, sizeof sizes);
}

typedef struct tf_state {
  uint32_t weights[TF_LAYERS][TF_WEIGHTS_PER_LAYER], grads[TF_LAYERS][TF_WEIGHTS_PER_LAYER];
  uint32_t saved[TF_LAYERS][TF_SAVED_PER_LAYER];
  uint64_t wsize[TF_WEIGHTS_PER_LAYER];
} tf_state;

static void tf_forward(bench_builder *b, tf_state *s, uint64_t seq) {
  uint64_t a[TF_SAVED_PER_LAYER], t = TF_BATCH * seq;
  tf_saved(seq, a);
  for (int l = 0; l < TF_LAYERS; l++) {
    for (int k = 0; k < TF_SAVED_PER_LAYER; k++) {
      s->saved[l][k] = bench_emit_alloc(b, a[k]);
      if (k == 2 || k == 9) bench_emit_free(b, bench_emit_alloc(b, t * TF_D * 2)); /* workspace */
    }
  }
}

static void tf_backward(bench_builder *b, tf_state *s, uint64_t seq) {
  uint64_t a[TF_SAVED_PER_LAYER], t = TF_BATCH * seq;
  tf_saved(seq, a);
  uint32_t grad = bench_emit_alloc(b, t * TF_D * 2);
  for (int l = TF_LAYERS - 1; l >= 0; l--) {
    for (int k = 0; k < TF_WEIGHTS_PER_LAYER; k++) s->grads[l][k] = bench_emit_alloc(b, s->wsize[k]);
    for (int k = TF_SAVED_PER_LAYER - 1; k >= 0; k--) {
      uint32_t tmp = bench_emit_alloc(b, a[k]); /* gradient of that activation */
      bench_emit_free(b, s->saved[l][k]);
      bench_emit_free(b, tmp);
    }
    uint32_t next = bench_emit_alloc(b, t * TF_D * 2);
    bench_emit_free(b, grad);
    grad = next;
  }
  bench_emit_free(b, grad);
}

static void tf_step(bench_builder *b, tf_state *s, bench_rng *r) {
  static const uint64_t seqs[] = {256, 384, 512};
  uint64_t seq = seqs[bench_uniform(r, 0, 2)], t = TF_BATCH * seq;
  tf_forward(b, s, seq);
  uint32_t logits = bench_emit_alloc(b, t * TF_VOCAB * 2);
  uint32_t dlogits = bench_emit_alloc(b, t * TF_VOCAB * 2);
  bench_emit_free(b, logits);
  tf_backward(b, s, seq);
  bench_emit_free(b, dlogits);
  for (int l = 0; l < TF_LAYERS; l++) /* optimizer: a fused temporary per tensor, then the grads go */
    for (int k = 0; k < TF_WEIGHTS_PER_LAYER; k++) {
      bench_emit_free(b, bench_emit_alloc(b, s->wsize[k] * 2));
      bench_emit_free(b, s->grads[l][k]);
    }
}

static void gen_transformer(bench_builder *b, bench_rng *r) {
  tf_state *s = bench_xcalloc(1, sizeof *s);
  tf_layer_weights(s->wsize);
  bench_emit_alloc(b, (uint64_t)TF_VOCAB * TF_D * 2); /* embedding */
  for (int l = 0; l < TF_LAYERS; l++)
    for (int k = 0; k < TF_WEIGHTS_PER_LAYER; k++) {
      s->weights[l][k] = bench_emit_alloc(b, s->wsize[k]);
      bench_emit_alloc(b, s->wsize[k] * 2); /* Adam m, fp32 */
      bench_emit_alloc(b, s->wsize[k] * 2); /* Adam v, fp32 */
    }
  while (b->w->n < TARGET_OPS) tf_step(b, s, r);
  free(s);
}

/* ---- inference server ---- */

enum { INF_SLOTS = 16, INF_GROUPS = 4, INF_D = 2048, INF_VOCAB = 32000 };
#define INF_KV_PER_TOKEN (2ull * 6 * INF_D * 2) /* K and V, 6 layers per group, fp16 */

typedef struct inf_request {
  uint64_t batch, len, cap, end;
  uint32_t kv[INF_GROUPS];
} inf_request;

static void inf_start(bench_builder *b, bench_rng *r, inf_request *q) {
  uint64_t prompt = bench_uniform(r, 16, 1024);
  *q = (inf_request){.batch = bench_uniform(r, 1, 4), .len = prompt};
  q->end = prompt + bench_uniform(r, 8, 256);
  q->cap = bench_round_up(prompt + 16, 64);
  uint32_t ids = bench_emit_alloc(b, q->batch * prompt * 4);
  uint32_t act = bench_emit_alloc(b, q->batch * prompt * INF_D * 2);
  for (int g = 0; g < INF_GROUPS; g++) q->kv[g] = bench_emit_alloc(b, q->batch * q->cap * INF_KV_PER_TOKEN);
  bench_emit_free(b, act);
  bench_emit_free(b, ids);
}

/* One decode step: temporaries, and KV caches that double when full (as a vector grows). */
static int inf_decode(bench_builder *b, inf_request *q) {
  uint32_t hidden = bench_emit_alloc(b, q->batch * INF_D * 2);
  uint32_t logits = bench_emit_alloc(b, q->batch * INF_VOCAB * 4);
  if (q->len == q->cap) {
    q->cap *= 2;
    for (int g = 0; g < INF_GROUPS; g++) {
      uint32_t grown = bench_emit_alloc(b, q->batch * q->cap * INF_KV_PER_TOKEN);
      bench_emit_free(b, q->kv[g]);
      q->kv[g] = grown;
    }
  }
  bench_emit_free(b, logits);
  bench_emit_free(b, hidden);
  if (++q->len < q->end) return 0;
  for (int g = 0; g < INF_GROUPS; g++) bench_emit_free(b, q->kv[g]);
  return 1;
}

static void gen_inference(bench_builder *b, bench_rng *r) {
  inf_request q[INF_SLOTS];
  for (int i = 0; i < INF_SLOTS; i++) inf_start(b, r, &q[i]);
  while (b->w->n < TARGET_OPS)
    for (int i = 0; i < INF_SLOTS; i++)
      if (inf_decode(b, &q[i])) inf_start(b, r, &q[i]);
}

/* ---- RMM random_allocations ---- */

static void gen_rmm_random(bench_builder *b, bench_rng *r) {
  const uint64_t max_size = BENCH_MIB, max_usage = 16000 * BENCH_MIB, allocations = TARGET_OPS / 2;
  live_set s = {0};
  uint64_t count = 0;
  for (uint64_t i = 0; i < 2 * allocations; i++) {
    uint64_t size = bench_uniform(r, 1, max_size);
    int alloc = !s.n || (bench_chance(r, 73) && count < allocations && s.bytes + size < max_usage);
    if (alloc) live_alloc(b, &s, size), count++;
    else live_free_at(b, &s, bench_uniform(r, 0, s.n - 1));
  }
  live_release(&s);
}

/* ---- VMA BenchmarkAlgorithms ---- */

static void gen_vma_algorithms(bench_builder *b, bench_rng *r) {
  const uint64_t size_min = 32, size_max = 1024, capacity = 10000;
  live_set base = {0}, round = {0};
  while (base.bytes < size_max * capacity / 3) live_alloc(b, &base, bench_uniform(r, size_min, size_max - 1));
  for (size_t k = base.n / 2; k; k--) live_free_at(b, &base, bench_uniform(r, 0, base.n - 1));
  while (b->w->n < TARGET_OPS) {
    for (uint64_t i = 0; i < capacity / 3; i++) live_alloc(b, &round, bench_uniform(r, size_min, size_max - 1));
    while (round.n) live_free_at(b, &round, bench_uniform(r, 0, round.n - 1));
  }
  live_release(&base);
  live_release(&round);
}

/* ---- adversarial ---- */

/* Requests carved from, and given back to, one huge free range. */
static void adv_huge_range(bench_builder *b, bench_rng *r) {
  for (int i = 0; i < 1000; i++) bench_emit_free(b, bench_emit_alloc(b, bench_log_uniform(r, 256, 64 * BENCH_MIB)));
}

/* A run of neighbours; the odd ones go first, so every even one then has free
 * neighbours on both sides. Every 64th survives the round, to scatter holes. */
static void adv_both_free(bench_builder *b, bench_rng *r, live_set *fences) {
  enum { RUN = 2048 };
  uint32_t run[RUN];
  for (int i = 0; i < RUN; i++) run[i] = bench_emit_alloc(b, bench_log_uniform(r, 256, 64 * 1024));
  for (int i = 1; i < RUN; i += 2) bench_emit_free(b, run[i]);
  for (int i = 0; i < RUN; i += 2) {
    if (i % 64 == 0) live_add(fences, run[i], 0);
    else bench_emit_free(b, run[i]);
  }
  while (fences->n > 2000) live_free_at(b, fences, 0);
}

static void gen_adversarial(bench_builder *b, bench_rng *r) {
  live_set fences = {0};
  while (b->w->n < TARGET_OPS) {
    adv_huge_range(b, r);
    adv_both_free(b, r, &fences);
  }
  live_release(&fences);
}

/* ---- registry ---- */

typedef struct builtin {
  const char *name;
  void (*gen)(bench_builder *b, bench_rng *r);
} builtin;

static const builtin builtins[] = {
    {"transformer", gen_transformer},       {"inference", gen_inference},     {"rmm_random", gen_rmm_random},
    {"vma_algorithms", gen_vma_algorithms}, {"adversarial", gen_adversarial},
};
#define BUILTIN_COUNT (sizeof builtins / sizeof builtins[0])

const char *const *bench_builtin_names(void) {
  static const char *const names[] = {"transformer", "inference", "rmm_random", "vma_algorithms", "adversarial", NULL};
  return names;
}

int bench_builtin(const char *name, bench_workload *out) {
  for (size_t i = 0; i < BUILTIN_COUNT; i++) {
    if (strcmp(builtins[i].name, name)) continue;
    bench_builder b;
    bench_rng r = {0x6770757061727431ull + i}; /* fixed seed: every run replays the same ops */
    bench_builder_init(&b, out, name);
    builtins[i].gen(&b, &r);
    bench_builder_finish(&b);
    return 0;
  }
  return -1;
}
