/* The ledger interface (core/ledger/ledger.h) through its in-process implementation: accounts
 * with limits and guarantees, reservations against the limit and against the budget less
 * other partitions' unused guarantees, set_figures' codes and clamping, figures and
 * peaks, the invariant check, many threads reserving at once; names (unique, found by
 * lookup), members (their entries listed, returned when they leave); and the device
 * identity that keys a ledger (core/base/identity.h). Budgets are in MiB. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "ledger.h"

static gpupart__ledger *L;
static gpupart__ledger_member M; /* the member every account belongs to, unless a test says */
static int accounts;             /* names the next account "e<N>" */

static void setup(void) {
  gpupart__identity id = {.key = "test:0"};
  L = gpupart__ledger_local_create(gpupart__hostmem_default(), &id, 100 * MiB);
  cr_assert_not_null(L);
  cr_assert_eq(L->ops->join(L, &M), GPUPART_OK);
  accounts = 0;
}

static void teardown(void) {
  char why[128] = "";
  cr_expect_eq(L->ops->check(L, why, sizeof why), 0, "%s", why);
  L->ops->destroy(L);
}

TestSuite(ledger, .init = setup, .fini = teardown);

/* add under the next account name. */
static int add(uint64_t limit, uint64_t guarantee, gpupart__ledger_entry **e) {
  char name[16];
  snprintf(name, sizeof name, "e%d", accounts++);
  return L->ops->add(L, M, name, &(gpupart__ledger_size){.limit = limit, .guarantee = guarantee}, e);
}

static gpupart__ledger_entry *account(uint64_t limit, uint64_t guarantee) {
  gpupart__ledger_entry *e = NULL;
  cr_assert_eq(add(limit * MiB, guarantee * MiB, &e), GPUPART_OK);
  cr_assert_not_null(e);
  return e;
}

static gpupart__refusal reserve(gpupart__ledger_entry *e, uint64_t mib) { return L->ops->reserve(L, e, mib * MiB); }

static gpupart__ledger_figures figures(const gpupart__ledger_entry *e) {
  gpupart__ledger_figures f;
  L->ops->get(L, e, &f);
  return f;
}

static gpupart__ledger_figures totals(void) {
  gpupart__ledger_figures f;
  L->ops->totals(L, &f);
  return f;
}

static uint64_t grantable(gpupart__ledger_entry *e, gpupart__refusal *bound) {
  return L->ops->grantable(L, e, bound) / MiB;
}

static void release_all(gpupart__ledger_entry *e) { L->ops->release(L, e, figures(e).reserved); }

Test(ledger, a_reservation_within_the_limit_is_granted) {
  gpupart__ledger_entry *e = account(60, 0);
  cr_expect_eq(reserve(e, 50), GPUPART__GRANTED);
  cr_expect_eq(reserve(e, 10), GPUPART__GRANTED, "up to the limit exactly");
  cr_expect_eq(reserve(e, 1), GPUPART__REFUSED_LIMIT);
  cr_expect_eq(figures(e).reserved, 60 * MiB, "a refusal reserves nothing");
  L->ops->release(L, e, 20 * MiB);
  cr_expect_eq(figures(e).reserved, 40 * MiB);
  cr_expect_eq(totals().reserved, 40 * MiB);
  release_all(e);
  L->ops->remove(L, e);
}

Test(ledger, the_budget_refuses_what_limits_would_allow) {
  gpupart__ledger_entry *a = account(80, 0), *b = account(80, 0);
  cr_expect_eq(reserve(a, 70), GPUPART__GRANTED);
  cr_expect_eq(reserve(b, 31), GPUPART__REFUSED_BUDGET);
  cr_expect_eq(reserve(b, 30), GPUPART__GRANTED);
  cr_expect_eq(totals().reserved, 100 * MiB);
  release_all(a);
  release_all(b);
}

Test(ledger, add_refuses_a_limit_above_the_budget_and_guarantees_past_it) {
  gpupart__ledger_entry *e = (gpupart__ledger_entry *)&e;
  cr_expect_eq(add(101 * MiB, 0, &e), GPUPART_ELIMIT);
  cr_expect_null(e);
  account(100, 60);
  cr_expect_eq(add(100 * MiB, 41 * MiB, &e), GPUPART_ELIMIT);
  account(50, 40);
  cr_expect_eq(totals().guarantee, 100 * MiB, "guarantees may sum to the budget exactly");
  cr_expect_eq(add(10 * MiB, 1, &e), GPUPART_ELIMIT, "not one byte past it");
  account(100, 0);
}

Test(ledger, other_partitions_unused_guarantees_are_held_back) {
  gpupart__ledger_entry *g = account(100, 40), *o = account(100, 0);
  gpupart__refusal bound;
  cr_expect_eq(grantable(o, &bound), 60);
  cr_expect_eq(bound, GPUPART__REFUSED_BUDGET);
  cr_expect_eq(reserve(o, 61), GPUPART__REFUSED_BUDGET);
  cr_expect_eq(reserve(g, 30), GPUPART__GRANTED);
  cr_expect_eq(grantable(o, &bound), 60, "g's reserved bytes come out of its guarantee");
  cr_expect_eq(reserve(g, 20), GPUPART__GRANTED);
  cr_expect_eq(grantable(o, &bound), 50, "beyond its guarantee g borrows like anyone");
  cr_expect_eq(reserve(o, 50), GPUPART__GRANTED);
  L->ops->release(L, g, 50 * MiB);
  cr_expect_eq(grantable(o, &bound), 10, "g's guarantee is held back again once it lets go");
  cr_expect_eq(grantable(g, &bound), 50, "and g can have its floor back");
  release_all(o);
}

Test(ledger, a_partitions_own_guarantee_never_limits_it) {
  gpupart__ledger_entry *g = account(100, 70);
  account(100, 30);
  gpupart__refusal bound;
  cr_expect_eq(grantable(g, &bound), 70);
  cr_expect_eq(reserve(g, 70), GPUPART__GRANTED);
  cr_expect_eq(reserve(g, 1), GPUPART__REFUSED_BUDGET, "the other guarantee is not g's to take");
  release_all(g);
}

Test(ledger, grantable_names_the_rule_that_binds) {
  gpupart__ledger_entry *a = account(30, 0), *b = account(100, 0);
  gpupart__refusal bound;
  cr_expect_eq(grantable(a, &bound), 30);
  cr_expect_eq(bound, GPUPART__REFUSED_LIMIT);
  cr_expect_eq(reserve(b, 80), GPUPART__GRANTED);
  cr_expect_eq(grantable(a, &bound), 20);
  cr_expect_eq(bound, GPUPART__REFUSED_BUDGET);
  cr_expect_eq(reserve(a, 21), GPUPART__REFUSED_BUDGET);
  cr_expect_eq(reserve(a, 20), GPUPART__GRANTED);
  cr_expect_eq(grantable(a, &bound), 0);
  release_all(a);
  release_all(b);
}

Test(ledger, set_figures_grows_within_the_budget) {
  gpupart__ledger_entry *e = account(40, 20);
  cr_expect_eq(L->ops->set_figures(L, e, 100 * MiB, GPUPART__LEDGER_KEEP), GPUPART_OK);
  cr_expect_eq(figures(e).limit, 100 * MiB);
  cr_expect_eq(L->ops->set_figures(L, e, 101 * MiB, GPUPART__LEDGER_KEEP), GPUPART_ELIMIT);
  gpupart__ledger_figures f = figures(e);
  cr_expect_eq(f.limit, 100 * MiB, "nothing changed");
  cr_expect_eq(f.guarantee, 20 * MiB);
}

Test(ledger, set_figures_below_what_is_reserved_is_busy) {
  gpupart__ledger_entry *e = account(100, 50);
  cr_expect_eq(reserve(e, 30), GPUPART__GRANTED);
  cr_expect_eq(L->ops->set_figures(L, e, 20 * MiB, GPUPART__LEDGER_KEEP), GPUPART_EBUSY);
  gpupart__ledger_figures f = figures(e);
  cr_expect_eq(f.limit, 100 * MiB);
  cr_expect_eq(f.guarantee, 50 * MiB);
  cr_expect_eq(L->ops->set_figures(L, e, 30 * MiB, GPUPART__LEDGER_KEEP), GPUPART_OK, "exactly what is reserved");
  release_all(e);
}

Test(ledger, set_figures_clamps_the_guarantee_and_frees_what_it_held_back) {
  gpupart__ledger_entry *g = account(100, 60), *o = account(100, 0);
  gpupart__refusal bound;
  cr_expect_eq(grantable(o, &bound), 40);
  cr_expect_eq(L->ops->set_figures(L, g, 20 * MiB, GPUPART__LEDGER_KEEP), GPUPART_OK);
  gpupart__ledger_figures f = figures(g);
  cr_expect_eq(f.limit, 20 * MiB);
  cr_expect_eq(f.guarantee, 20 * MiB);
  cr_expect_eq(totals().guarantee, 20 * MiB);
  cr_expect_eq(grantable(o, &bound), 80);
  cr_expect_eq(L->ops->set_figures(L, g, 100 * MiB, GPUPART__LEDGER_KEEP), GPUPART_OK);
  cr_expect_eq(figures(g).guarantee, 20 * MiB, "a clamped guarantee stays clamped");
}

Test(ledger, removing_an_account_returns_its_guarantee) {
  gpupart__ledger_entry *g = account(100, 70), *o = account(100, 0);
  gpupart__refusal bound;
  cr_expect_eq(grantable(o, &bound), 30);
  L->ops->remove(L, g);
  cr_expect_eq(grantable(o, &bound), 100);
  cr_expect_eq(totals().guarantee, 0);
  account(100, 100);
}

Test(ledger, peaks_follow_reservations_and_reset_per_account) {
  gpupart__ledger_entry *a = account(100, 0), *b = account(100, 0);
  reserve(a, 40);
  reserve(b, 30);
  L->ops->release(L, a, 40 * MiB);
  reserve(b, 20);
  gpupart__ledger_figures fa = figures(a), fb = figures(b), t = totals();
  cr_expect_eq(fa.peak_reserved, 40 * MiB);
  cr_expect_eq(fb.peak_reserved, 50 * MiB);
  cr_expect_eq(t.peak_reserved, 70 * MiB, "the device's peak is the highest sum");
  cr_expect_eq(t.reserved, 50 * MiB);
  cr_expect_eq(t.limit, 100 * MiB, "totals report the budget as the limit");
  L->ops->reset_peak(L, a);
  cr_expect_eq(figures(a).peak_reserved, 0);
  cr_expect_eq(figures(b).peak_reserved, 50 * MiB, "only that account's peak");
  cr_expect_eq(totals().peak_reserved, 70 * MiB);
  release_all(b);
}

Test(ledger, check_reports_a_broken_account) {
  gpupart__ledger_entry *e = account(10, 0);
  reserve(e, 5);
  char why[128] = "";
  cr_expect_eq(L->ops->check(L, why, sizeof why), 0, "%s", why);
  L->ops->release(L, e, 6 * MiB); /* a release of more than was reserved wraps the account */
  cr_expect_eq(L->ops->check(L, why, sizeof why), -1);
  cr_expect_neq(strstr(why, "above its limit"), NULL, "%s", why);
  L->ops->release(L, e, (uint64_t)0 - 1 * MiB); /* put it back: 5 - 6 + 1 = 0 */
  cr_expect_eq(figures(e).reserved, 0);
}

/* Each thread reserves and releases random amounts on its own account. */
typedef struct worker {
  gpupart__ledger_entry *e;
  uint64_t seed, held, refusals;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 20000; i++) {
    w->seed = w->seed * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t amount = ((w->seed >> 33) % 8 + 1) * MiB;
    if ((w->seed >> 20) & 1) {
      if (L->ops->reserve(L, w->e, amount) == GPUPART__GRANTED) w->held += amount;
      else w->refusals++;
    } else if (w->held >= amount) {
      L->ops->release(L, w->e, amount);
      w->held -= amount;
    }
  }
  return NULL;
}

Test(ledger, many_threads_never_reserve_past_the_budget_or_a_guarantee) {
  enum { N = 6 };
  worker w[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) w[i] = (worker){.e = account(60, i == 0 ? 30 : 0), .seed = (uint64_t)i + 1};
  for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, churn, &w[i]);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  uint64_t sum = 0, refusals = 0, others = 0;
  for (int i = 0; i < N; i++) {
    cr_expect_eq(figures(w[i].e).reserved, w[i].held);
    sum += w[i].held, refusals += w[i].refusals;
    if (i) others += w[i].held;
  }
  cr_expect_eq(totals().reserved, sum);
  cr_expect_leq(totals().peak_reserved, 100 * MiB);
  cr_expect_gt(refusals, 0, "the budget was contended");
  cr_expect_leq(others + (w[0].held > 30 * MiB ? w[0].held : 30 * MiB), 100 * MiB,
                "the others never took the guaranteed account's floor");
  for (int i = 0; i < N; i++) release_all(w[i].e);
}

/* ---- names, members, lookup and listing ---- */

Test(ledger, names_are_unique_and_found_whoever_added_them) {
  gpupart__ledger_member other;
  cr_assert_eq(L->ops->join(L, &other), GPUPART_OK);
  cr_expect_neq(other, M, "every member has its own id");
  gpupart__ledger_entry *e = NULL, *dup = (gpupart__ledger_entry *)&e;
  cr_assert_eq(L->ops->add(L, M, "train", &(gpupart__ledger_size){.limit = 10 * MiB, .guarantee = 0}, &e), GPUPART_OK);
  cr_expect_eq(L->ops->add(L, other, "train", &(gpupart__ledger_size){.limit = 10 * MiB, .guarantee = 0}, &dup),
               GPUPART_EEXIST);
  cr_expect_null(dup);
  cr_expect_eq(L->ops->find(L, "train"), e);
  cr_expect_null(L->ops->find(L, "eval"));
  cr_expect_eq(totals().limit, 100 * MiB, "a refused add changes nothing");
  L->ops->remove(L, e);
  cr_expect_null(L->ops->find(L, "train"), "a removed name is free again");
  L->ops->leave(L, other);
}

Test(ledger, only_a_member_may_add) {
  gpupart__ledger_entry *e = (gpupart__ledger_entry *)&e;
  cr_expect_eq(L->ops->add(L, M + 100, "x", &(gpupart__ledger_size){.limit = 10 * MiB, .guarantee = 0}, &e),
               GPUPART_EINVAL);
  cr_expect_null(e);
  cr_expect_eq(L->ops->list(L, 0, NULL, 0), 0);
}

Test(ledger, list_gives_each_members_entries_with_their_figures) {
  gpupart__ledger_member other;
  cr_assert_eq(L->ops->join(L, &other), GPUPART_OK);
  gpupart__ledger_entry *a, *b, *c;
  cr_assert_eq(L->ops->add(L, M, "a", &(gpupart__ledger_size){.limit = 10 * MiB, .guarantee = 4 * MiB}, &a),
               GPUPART_OK);
  cr_assert_eq(L->ops->add(L, other, "b", &(gpupart__ledger_size){.limit = 20 * MiB, .guarantee = 0}, &b), GPUPART_OK);
  cr_assert_eq(L->ops->add(L, other, "c", &(gpupart__ledger_size){.limit = 30 * MiB, .guarantee = 0}, &c), GPUPART_OK);
  reserve(b, 6);
  gpupart__ledger_entry_info info[4];
  cr_expect_eq(L->ops->list(L, 0, NULL, 0), 3, "a count without a buffer");
  cr_expect_eq(L->ops->list(L, other, info, 1), 2, "the count, though only one fits");
  cr_expect_eq(L->ops->list(L, M, info, 4), 1);
  cr_expect_str_eq(info[0].name, "a");
  cr_expect_eq(info[0].member, M);
  cr_expect_eq(info[0].figures.guarantee, 4 * MiB);
  uint32_t n = L->ops->list(L, other, info, 4);
  cr_assert_eq(n, 2);
  for (uint32_t i = 0; i < n; i++) {
    cr_expect_eq(info[i].member, other);
    if (strcmp(info[i].name, "b") == 0) cr_expect_eq(info[i].figures.reserved, 6 * MiB);
    else cr_expect_str_eq(info[i].name, "c");
  }
  release_all(b);
  L->ops->leave(L, other);
  L->ops->remove(L, a);
}

Test(ledger, a_member_that_leaves_returns_its_entries_bytes_and_guarantees) {
  gpupart__ledger_member other;
  cr_assert_eq(L->ops->join(L, &other), GPUPART_OK);
  gpupart__ledger_entry *g, *mine = account(100, 0);
  cr_assert_eq(L->ops->add(L, other, "held", &(gpupart__ledger_size){.limit = 100 * MiB, .guarantee = 50 * MiB}, &g),
               GPUPART_OK);
  cr_expect_eq(reserve(g, 70), GPUPART__GRANTED);
  gpupart__refusal bound;
  cr_expect_eq(grantable(mine, &bound), 30);
  L->ops->leave(L, other);
  cr_expect_eq(grantable(mine, &bound), 100, "its 70 MiB and its floor came back");
  cr_expect_eq(totals().reserved, 0);
  cr_expect_eq(totals().guarantee, 0);
  cr_expect_null(L->ops->find(L, "held"));
  cr_expect_eq(L->ops->list(L, other, NULL, 0), 0);
  gpupart__ledger_entry *e = (gpupart__ledger_entry *)&e;
  cr_expect_eq(L->ops->add(L, other, "late", &(gpupart__ledger_size){.limit = 1 * MiB, .guarantee = 0}, &e),
               GPUPART_EINVAL, "it is no member any more");
}

Test(ledger, guarantees_of_all_members_sum_against_one_budget) {
  gpupart__ledger_member other;
  cr_assert_eq(L->ops->join(L, &other), GPUPART_OK);
  gpupart__ledger_entry *a, *b = (gpupart__ledger_entry *)&a;
  cr_assert_eq(L->ops->add(L, M, "a", &(gpupart__ledger_size){.limit = 100 * MiB, .guarantee = 60 * MiB}, &a),
               GPUPART_OK);
  cr_expect_eq(L->ops->add(L, other, "b", &(gpupart__ledger_size){.limit = 100 * MiB, .guarantee = 41 * MiB}, &b),
               GPUPART_ELIMIT);
  cr_assert_eq(L->ops->add(L, other, "b", &(gpupart__ledger_size){.limit = 100 * MiB, .guarantee = 40 * MiB}, &b),
               GPUPART_OK);
  cr_expect_eq(reserve(b, 41), GPUPART__REFUSED_BUDGET, "a's unused floor is held back from the other member");
  L->ops->leave(L, other);
  L->ops->remove(L, a);
}

Test(ledger, the_ledger_carries_its_device_identity) { cr_expect_str_eq(L->id.key, "test:0"); }

/* ---- device identity ---- */

static gpupart_device_info info_for(gpupart_backend b, uint32_t index) {
  gpupart_device_info i;
  memset(&i, 0, sizeof i);
  i.backend = b;
  i.index = index;
  i.total_bytes = 8 * GiB;
  return i;
}

static const char *key_of(const gpupart_device_info *i) {
  static gpupart__identity id;
  gpupart__identity_of(i, &id);
  return id.key;
}

Test(identity, a_uuid_names_the_device_whatever_backend_reaches_it) {
  gpupart_device_info vk = info_for(GPUPART_BACKEND_VULKAN, 1), cl = info_for(GPUPART_BACKEND_OPENCL, 0);
  for (int i = 0; i < 16; i++) vk.uuid[i] = cl.uuid[i] = (uint8_t)(0x10 * i + i);
  cl.total_bytes = 7 * GiB; /* backends report memory differently */
  cr_expect_str_eq(key_of(&vk), "uuid:00112233-4455-6677-8899-aabbccddeeff");
  cr_expect_str_eq(key_of(&cl), "uuid:00112233-4455-6677-8899-aabbccddeeff");
  snprintf(vk.pci_bus_id, sizeof vk.pci_bus_id, "0000:65:00.0");
  cr_expect_str_eq(key_of(&vk), "uuid:00112233-4455-6677-8899-aabbccddeeff", "the UUID comes first");
}

Test(identity, without_a_uuid_the_pci_bus_id_then_backend_and_index) {
  gpupart_device_info a = info_for(GPUPART_BACKEND_OPENCL, 2);
  cr_expect_str_eq(key_of(&a), "opencl:2");
  snprintf(a.pci_bus_id, sizeof a.pci_bus_id, "0000:65:00.0");
  cr_expect_str_eq(key_of(&a), "pci:0000:65:00.0");
  memset(a.pci_bus_id, 'x', sizeof a.pci_bus_id); /* no NUL: read within the field only */
  cr_expect_eq(strlen(key_of(&a)), 4 + sizeof a.pci_bus_id);
}

Test(identity, distinct_sim_devices_differ) {
  gpupart_device_info a = info_for(GPUPART_BACKEND_SIM, 0), b = info_for(GPUPART_BACKEND_SIM, 0);
  gpupart_device_info c = info_for(GPUPART_BACKEND_SIM, 256);
  a.uuid[0] = c.uuid[0] = 0, a.uuid[15] = b.uuid[15] = c.uuid[15] = 0x5a; /* what sim reports */
  b.total_bytes = 4 * GiB;
  gpupart__identity ia, ib, ic, again;
  gpupart__identity_of(&a, &ia);
  gpupart__identity_of(&b, &ib);
  gpupart__identity_of(&c, &ic);
  gpupart__identity_of(&a, &again);
  cr_expect(gpupart__identity_equal(&ia, &again));
  cr_expect_not(gpupart__identity_equal(&ia, &ib), "same index, another size: %s, %s", ia.key, ib.key);
  cr_expect_not(gpupart__identity_equal(&ia, &ic), "index 256 is not index 0: %s, %s", ia.key, ic.key);
  cr_expect_str_eq(ia.key, "sim:0:8589934592");
}

Test(identity, a_sim_device_given_a_uuid_or_bus_id_is_named_as_a_real_device) {
  gpupart_device_info a = info_for(GPUPART_BACKEND_SIM, 3);
  for (int i = 0; i < 16; i++) a.uuid[i] = (uint8_t)(0x10 * i + i);
  cr_expect_str_eq(key_of(&a), "uuid:00112233-4455-6677-8899-aabbccddeeff", "the real device's key");
  memset(a.uuid, 0, sizeof a.uuid);
  snprintf(a.pci_bus_id, sizeof a.pci_bus_id, "0000:65:00.0");
  cr_expect_str_eq(key_of(&a), "pci:0000:65:00.0");
  gpupart_device_info own = info_for(GPUPART_BACKEND_SIM, 3);
  gpupart__sim_uuid(3, own.uuid);
  cr_expect_str_eq(key_of(&own), "sim:3:8589934592", "its own UUID: named by index and size");
}

Test(identity, uuids_format_as_8_4_4_4_12_hex) {
  uint8_t u[16] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb};
  char s[GPUPART__UUID_STRING];
  gpupart__uuid_format(u, s);
  cr_expect_str_eq(s, "deadbeef-0001-0203-0405-060708090a0b");
  cr_expect_not(gpupart__uuid_is_zero(u));
  uint8_t z[16] = {0};
  cr_expect(gpupart__uuid_is_zero(z));
}

/* A floor changed at run time (gpupart resize --guarantee, a DRA claim's new
 * gpupart.io/guarantee): within the budget less the others' floors, never above the limit. */
Test(ledger, set_figures_changes_the_floor_within_the_budget) {
  gpupart__ledger_entry *g = account(100, 10), *o = account(100, 30);
  cr_expect_eq(L->ops->set_figures(L, g, 100 * MiB, 70 * MiB), GPUPART_OK);
  cr_expect_eq(figures(g).guarantee, 70 * MiB);
  cr_expect_eq(totals().guarantee, 100 * MiB);
  cr_expect_eq(L->ops->set_figures(L, g, 100 * MiB, 71 * MiB), GPUPART_ELIMIT, "past the budget with o's 30");
  cr_expect_eq(L->ops->set_figures(L, g, 50 * MiB, 60 * MiB), GPUPART_EINVAL, "a floor above the limit");
  gpupart__ledger_figures f = figures(g);
  cr_expect(f.limit == 100 * MiB && f.guarantee == 70 * MiB, "nothing changed");
  cr_expect_eq(L->ops->set_figures(L, g, 100 * MiB, 0), GPUPART_OK);
  cr_expect_eq(totals().guarantee, 30 * MiB);
  (void)o;
}
