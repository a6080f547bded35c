/* The fields of the shared ledger's file that version 5 added (core/ledger/shm_format.h),
 * scribbled with hostile values while members are live: each partition's limit and
 * guarantee fractions and granule (NaN, infinities, negative, denormal, above 1; a granule
 * of 0, not a power of two, huge), its labels (unterminated, control bytes), and the
 * give-back request slots (huge needs and priorities, expiries past, far and overflowing,
 * attachments live, dead and out of range, tickets 0 and colliding, the ticket counter
 * wrapped). Whatever the bytes, the outside reader (gpupart top's snapshot) reads a
 * bounded copy, a budget change from outside (gpupart resize --budget) is applied or
 * refused with a message naming the partition, and the members' calls neither crash nor
 * hang nor leave the accounting inconsistent. Also: a file grown under its members, a
 * file holding only the magic, and a folder of many ledgers. Each test has its own
 * scratch ledger folder. */
#include <criterion/criterion.h>
#include <math.h>
#include <sys/mman.h>

#include "common.h"
#include "resize.h"
#include "shm_test.h"

TestSuite(ledger_hostile, .init = setup, .fini = teardown, .timeout = 120);

/* The test's ledger file mapped as a hostile process would map it. */
typedef struct mapped {
  int fd;
  shm_header *h;
} mapped;

static mapped map_ledger(void) {
  char path[256];
  ledger_path(path, sizeof path);
  mapped m = {open(path, O_RDWR), NULL};
  cr_assert_geq(m.fd, 0);
  m.h = mmap(NULL, sizeof *m.h, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  cr_assert_neq(m.h, MAP_FAILED);
  return m;
}

static void unmap_ledger(mapped *m) {
  munmap(m->h, sizeof *m->h);
  close(m->fd);
}

static int part_named(const shm_header *h, const char *name) {
  int i = gpupart__shm_find_part(h, name);
  cr_assert_geq(i, 0, "partition '%s' is in the file", name);
  return i;
}

static gpupart_partition *fraction_partition(gpupart_device *dev, const char *name, double f, double g) {
  gpupart_partition_desc d = {.name = name, .fraction = f, .guarantee_fraction = g};
  gpupart_partition *p = NULL;
  cr_assert_eq(gpupart_partition_create(dev, &d, &p), GPUPART_OK, "%s", gpupart_last_error());
  return p;
}

static int budget_change(uint64_t budget) {
  char path[256];
  ledger_path(path, sizeof path);
  gpupart__ledger_change c = {.limit = budget, .guarantee = GPUPART__LEDGER_KEEP};
  return gpupart__ledger_change_file(path, &c);
}

/* The snapshot reads, consistent, and every fraction it shows is one. */
static void reader_reads(const char *what) {
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_OK, "%s: %s", what, s->why);
  cr_expect(s->consistent, "%s: %s", what, s->why);
  for (uint32_t i = 0; i < s->entries; i++) {
    double f = s->entry[i].limit_fraction, g = s->entry[i].guarantee_fraction;
    cr_expect((f == 0 || (f > 0 && f <= 1)) && (g == 0 || (g > 0 && g <= 1)), "%s: %g %g", what, f, g);
  }
  cr_expect_leq(s->requests, SHM_REQUESTS);
  for (uint32_t i = 0; i < s->requests; i++) cr_expect_leq(s->request[i].ms_left, SHM_REQUEST_MAX_MS, "%s", what);
  free(s);
}

/* ---- fractions and granules ---- */

Test(ledger_hostile, hostile_fractions_and_granules_are_read_as_bytes_and_budget_changes_stay_sound) {
  static const double fractions[] = {NAN, INFINITY, -INFINITY, -0.5, 0x1p-1074, 1.0000001, 2, 1e308, -0.0, 1};
  static const uint64_t granules[] = {0, 3, UINT64_MAX, 1ull << 63, (1ull << 30) + 1, 1};
  shared_env e = open_shared_env();
  gpupart_partition *p = fraction_partition(e.dev, "frac", 0.5, 0.25);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  mapped m = map_ledger();
  int i = part_named(m.h, "frac");
  const shm_part was = m.h->part[i];
  for (size_t f = 0; f < sizeof fractions / sizeof *fractions; f++)
    for (size_t g = 0; g < sizeof granules / sizeof *granules; g++) {
      m.h->part[i].limit_fraction = fractions[f];
      m.h->part[i].guarantee_fraction = fractions[(f + 3) % (sizeof fractions / sizeof *fractions)];
      m.h->part[i].granule = granules[g];
      reader_reads("scribbled fractions");
      int rc = budget_change(768 * MiB + 4096 * g + 1); /* a budget that no granule divides */
      cr_expect(rc == GPUPART_OK || strstr(gpupart_last_error(), "'frac'"), "fraction %g granule %llu: %s",
                fractions[f], (unsigned long long)granules[g], gpupart_last_error());
      const shm_part *pt = &m.h->part[i];
      cr_expect(pt->limit && pt->guarantee <= pt->limit && pt->limit <= m.h->budget, "%llu %llu %llu",
                (unsigned long long)pt->guarantee, (unsigned long long)pt->limit, (unsigned long long)m.h->budget);
      test_check(e.dev);
      gpupart_allocation *b = NULL;
      if (gpupart_alloc(p, 8 * MiB, 0, &b) == GPUPART_OK) gpupart_free(b);
      m.h->part[i].limit_fraction = was.limit_fraction; /* as its maker wrote them: the budget back */
      m.h->part[i].guarantee_fraction = was.guarantee_fraction;
      m.h->part[i].granule = was.granule;
      cr_expect_eq(budget_change(1 * GiB), GPUPART_OK, "%s", gpupart_last_error());
      reader_reads("after the budget changes");
    }
  unmap_ledger(&m);
  gpupart_free(a);
  close_shared_env(&e);
}

/* ---- labels ---- */

Test(ledger_hostile, hostile_labels_are_left_out_by_the_reader_and_kept_out_of_the_members_way) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "lab", 64 * MiB, 0);
  mapped m = map_ledger();
  shm_part *pt = &m.h->part[part_named(m.h, "lab")];
  memset(&pt->labels, 'x', sizeof pt->labels); /* no NUL anywhere */
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->entries == 1 && s->entry[0].labels_refused && !s->entry[0].labels.claim[0]);
  free(s);
  memset(&pt->labels, 0, sizeof pt->labels);
  memcpy(pt->labels.pod, "a\x1b[2Jb\n\"\\\xc3\xa9", 12); /* an escape, a newline, UTF-8 */
  s = scan_one();
  cr_expect(s->entry[0].labels_refused && !s->entry[0].labels.pod[0]);
  free(s);
  memset(&pt->labels, 0, sizeof pt->labels);
  memcpy(pt->labels.claim, "c\"l\\a{i}m", 9); /* printable: shown (escaped by each writer) */
  s = scan_one();
  cr_expect(!s->entry[0].labels_refused && strcmp(s->entry[0].labels.claim, "c\"l\\a{i}m") == 0);
  free(s);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  gpupart_free(a);
  unmap_ledger(&m);
  close_shared_env(&e);
}

/* ---- request slots ---- */

static gpupart__ledger *attach(void) {
  char path[256];
  ledger_path(path, sizeof path);
  gpupart__ledger *l = NULL;
  cr_assert_eq(gpupart__ledger_shm_attach_file(gpupart__hostmem_default(), path, &l), GPUPART_OK, "%s",
               gpupart_last_error());
  return l;
}

/* Fills every request slot with round's hostile pattern; mine is the attachment of this
 * process (+ 1), live the one of a live member. */
static void hostile_requests(shm_header *h, int round, uint32_t mine, uint32_t live) {
  uint64_t now = gpupart__shm_now_ms();
  static const uint64_t tickets[] = {0, 1, UINT64_MAX, 7};
  for (uint32_t i = 0; i < SHM_REQUESTS; i++) {
    const uint32_t attaches[] = {0, mine, live, SHM_ATTACHMENTS, SHM_ATTACHMENTS + 1, UINT32_MAX, 999};
    const uint64_t expiries[] = {0, now - 1, now, now + 1000, now + SHM_REQUEST_MAX_MS + 1, UINT64_MAX, now + 30000};
    shm_request *r = &h->request[i];
    r->ticket = tickets[(i + (uint32_t)round) % 4];
    r->need = round % 2 ? UINT64_MAX - i : (uint64_t)i << 20;
    r->priority = round % 3 ? UINT32_MAX - i % 2 : i;
    r->attach = attaches[(i + (uint32_t)round) % 7];
    r->expires_ms = expiries[(i * 3 + (uint32_t)round) % 7];
    r->pid = round % 2 ? -1 : (int64_t)i - 2;
    memset(r->command, round % 2 ? '\n' : 0xff, sizeof r->command);
  }
  h->last_ticket = round % 2 ? UINT64_MAX : 0;
}

Test(ledger_hostile, hostile_request_slots_never_crash_hang_or_break_the_accounting) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "req", 0, 0);
  member other = spawn_member((const char *[]){"part", "o", "0", "0", "alloc", "1", "ready", "wait", NULL});
  await_ready(&other);
  gpupart__ledger *l = attach();
  mapped m = map_ledger();
  uint32_t mine = ((shm_ledger *)l)->attach + 1, live = mine == 1 ? 2 : 1;
  for (int round = 0; round < 12; round++) {
    hostile_requests(m.h, round, mine, live);
    reader_reads("scribbled requests");
    cr_expect_geq(l->ops->lack_all(l), 0, "round %d: %s", round, gpupart_last_error());
    uint64_t ticket = 0;
    gpupart_result rc = l->ops->post(l, 16 * MiB, GPUPART__PRIORITY_FLOOR, 100, &ticket);
    cr_expect(rc == GPUPART_OK || rc == GPUPART_EBUSY, "round %d: %d %s", round, rc, gpupart_last_error());
    if (rc == GPUPART_OK) {
      cr_expect_neq(ticket, 0);
      cr_expect_geq(l->ops->lack(l, ticket), 0);
      l->ops->withdraw(l, ticket);
    }
    gpupart_allocation *a = NULL;
    if (gpupart_alloc(p, 64 * MiB, 0, &a) == GPUPART_OK) gpupart_free(a);
    test_check(e.dev);
  }
  memset(m.h->request, 0, sizeof m.h->request);
  unmap_ledger(&m);
  l->ops->destroy(l);
  release_member(&other);
  cr_expect_eq(reap_member(&other), 0);
  close_shared_env(&e);
}

/* ---- the file itself ---- */

Test(ledger_hostile, a_ledger_grown_under_its_members_is_refused_by_readers_and_survived_by_members) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "grow", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  char path[256];
  ledger_path(path, sizeof path);
  size_t n = ledger_size_bytes(path);
  cr_assert_eq(truncate(path, (off_t)n + 4096), 0);
  let_members_look();
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_ECORRUPT, "%s", s->why);
  cr_expect(strstr(s->why, "bytes"), "%s", s->why);
  free(s);
  gpupart_allocation *b = NULL;
  gpupart_result rc = gpupart_alloc(p, 8 * MiB, 0, &b);
  cr_expect(rc == GPUPART_OK || rc == GPUPART_ECORRUPT, "%d %s", rc, gpupart_last_error());
  if (rc == GPUPART_OK) gpupart_free(b);
  cr_expect_neq(budget_change(1 * GiB), GPUPART_OK, "resize refuses a grown file");
  gpupart_free(a);
  gpupart_device_close(e.dev);
  gpupart_context_destroy(e.ctx);
}

Test(ledger_hostile, a_file_of_the_magic_only_is_refused_by_every_reader) {
  char path[256];
  ledger_path(path, sizeof path);
  uint64_t magic = SHM_MAGIC;
  write_file(path, 0600, &magic, sizeof magic);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_neq(s->status, GPUPART_OK);
  cr_expect(s->why[0], "a reason is given");
  free(s);
  cr_expect_neq(budget_change(1 * GiB), GPUPART_OK);
  cr_expect(gpupart_last_error()[0]);
  gpupart_context *ctx = shared_context();
  gpupart_device *dev = NULL;
  cr_expect_neq(open_shared(ctx, &dev), GPUPART_OK);
  cr_expect(strstr(gpupart_last_error(), dir), "%s", gpupart_last_error());
  gpupart_context_destroy(ctx);
}

Test(ledger_hostile, a_folder_of_many_ledgers_is_read_bounded) {
  char path[512];
  uint64_t magic = SHM_MAGIC;
  for (int i = 0; i < 300; i++) {
    snprintf(path, sizeof path, "%s/gpupart-%u-sim:%d:1.ledger", dir, (unsigned)geteuid(), i);
    write_file(path, 0600, &magic, sizeof magic);
  }
  gpupart__ledger_snapshot *s = NULL;
  uint32_t n = 0, unread = 0;
  cr_assert_eq(gpupart__ledger_shm_scan_all(dir, 50, &s, &n, &unread), GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(n, GPUPART__SNAPSHOT_FILES);
  cr_expect_eq(unread, 300 - GPUPART__SNAPSHOT_FILES, "the files left unread are counted, not hidden");
  for (uint32_t i = 0; i < n; i++) cr_expect(s[i].status != GPUPART_OK && s[i].why[0]);
  free(s);
}

/* ---- member ids ---- */

/* A member that joins while this process is a member, and checks the ledger. */
static void a_newcomer_joins_and_checks(const char *what) {
  member m = spawn_member((const char *[]){"part", "n", "0", "0", "alloc", "1", "check", "ready", "wait", NULL});
  await_ready(&m);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->consistent, "%s: %s", what, s->why);
  cr_expect_eq(s->members, 2, "%s", what);
  cr_expect(s->members == 2 && s->member[0].id && s->member[1].id && s->member[0].id != s->member[1].id,
            "%s: two members, two ids", what);
  cr_expect_eq(s->entries, 2, "%s: each partition has its member", what);
  free(s);
  release_member(&m);
  cr_expect_eq(reap_member(&m), 0, "%s", what);
}

Test(ledger_hostile, a_scribbled_member_counter_never_gives_a_newcomer_id_0_or_a_live_members_id) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "mine", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  mapped m = map_ledger();
  uint64_t me = 0;
  for (uint32_t i = 0; i < SHM_MEMBERS; i++) me = m.h->member[i].id ? m.h->member[i].id : me;
  cr_assert_neq(me, 0);
  m.h->last_member = UINT64_MAX; /* the next id would wrap to 0: a free slot's */
  a_newcomer_joins_and_checks("wrapped");
  m.h->last_member = me - 1; /* the next id would be this process's */
  a_newcomer_joins_and_checks("colliding");
  test_check(e.dev);
  unmap_ledger(&m);
  gpupart_free(a);
  close_shared_env(&e);
}

/* ---- the file swapped under its members ---- */

/* Puts a file of bytes at the ledger's name by rename, as a hostile process swaps it. */
static void swap_in(const void *bytes, size_t n) {
  char path[256], tmp[300];
  ledger_path(path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/swap.tmp", dir);
  write_file(tmp, 0600, bytes, n);
  cr_assert_eq(rename(tmp, path), 0);
}

/* The member's calls after its file was swapped: each one done or failed, none crashes. */
static void member_calls_survive(gpupart_device *dev, gpupart_partition *p, const char *what) {
  let_members_look();
  gpupart_allocation *b = NULL;
  gpupart_result rc = gpupart_alloc(p, 8 * MiB, 0, &b);
  cr_expect(rc == GPUPART_OK || gpupart_last_error()[0], "%s: %d", what, rc);
  if (rc == GPUPART_OK) gpupart_free(b);
  rc = gpupart_device_check(dev);
  cr_expect(rc == GPUPART_OK || gpupart_last_error()[0], "%s: %d", what, rc);
}

Test(ledger_hostile, a_file_of_version_4_or_of_the_magic_only_swapped_under_members_is_survived) {
  char path[256];
  ledger_path(path, sizeof path);
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "swapped", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  size_t n = ledger_size_bytes(path);
  uint8_t *old = calloc(1, n);
  cr_assert_not_null(old);
  const uint64_t magic = SHM_MAGIC;
  const uint32_t four = 4;
  memcpy(old, &magic, sizeof magic), memcpy(old + 8, &four, sizeof four);
  swap_in(old, n - sizeof(shm_request) * SHM_REQUESTS - 16);
  member_calls_survive(e.dev, p, "version 4");
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect(s->status == GPUPART_ECONFIG && strstr(s->why, "version 4"), "%s", s->why);
  free(s);
  swap_in(&magic, sizeof magic);
  member_calls_survive(e.dev, p, "the magic only");
  s = scan_one();
  cr_expect_neq(s->status, GPUPART_OK);
  free(s);
  free(old);
  gpupart_free(a);
  gpupart_device_close(e.dev);
  cr_expect_eq(gpupart_context_destroy(e.ctx), GPUPART_OK);
}

Test(ledger_hostile, a_ledger_truncated_under_its_members_is_refused_by_a_change_from_outside) {
  shared_env e = open_shared_env();
  gpupart_partition *p = test_partition(e.dev, "cut", 0, 0);
  gpupart_allocation *a = alloc_ok(p, 4 * MiB);
  char path[256];
  ledger_path(path, sizeof path);
  cr_assert_eq(truncate(path, (off_t)gpupart__ledger_shm_field("request")), 0); /* the request slots gone */
  cr_expect_neq(budget_change(1 * GiB), GPUPART_OK, "resize refuses a truncated file");
  cr_expect(strstr(gpupart_last_error(), path), "%s", gpupart_last_error());
  gpupart__ledger_change c = {.partition = "cut", .limit = 256 * MiB, .guarantee = GPUPART__LEDGER_KEEP};
  cr_expect_neq(gpupart__ledger_change_file(path, &c), GPUPART_OK);
  gpupart__ledger_snapshot *s = scan_one();
  cr_expect_eq(s->status, GPUPART_ECORRUPT, "%s", s->why);
  free(s);
  gpupart_free(a);
  gpupart_device_close(e.dev);
  gpupart_context_destroy(e.ctx);
}
