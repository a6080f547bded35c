/* The interposers' mirror accounting (interpose/common/account.c), in this process: which
 * real devices get one mirror partition. Two keys that name one GPU (the same UUID, else
 * the same bus id) share it, as gpupart names devices; the partition is the program's. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "account.h"

#define GIB (1024ull * 1024ull * 1024ull)

static const uint8_t gpu_a[16] = {0xa1, [15] = 0x01}, gpu_b[16] = {0xb2, [15] = 0x02};

static void clean_env(void) {
  unsetenv("GPUPART_SHARED"), unsetenv("GPUPART_PARTITION"), unsetenv("GPUPART_PARTITIONS");
  unsetenv("GPUPART_MEMORY_LIMIT"), unsetenv("GPUPART_DEVICE"), unsetenv("GPUPART_CONFIG");
  unsetenv("GPUPART_FAIL_OPEN");
}

TestSuite(ip_account, .init = clean_env);

Test(ip_account, keys_with_one_uuid_share_a_partition_whatever_their_bus_ids) {
  gpupart_partition *a = gpupart__ip_partition_of(
      &(gpupart__ip_device){.key = 1, .total = 1 * GIB, .uuid = gpu_a, .pci_bus_id = "0000:01:00.0"});
  gpupart_partition *again = gpupart__ip_partition_for(2, 1 * GIB, gpu_a);
  gpupart_partition *other = gpupart__ip_partition_for(3, 1 * GIB, gpu_b);
  cr_assert_not_null(a);
  cr_expect_eq(again, a, "a second platform's view of one GPU is the same partition");
  cr_expect_not_null(other);
  cr_expect_neq(other, a);
  cr_expect_str_eq(gpupart_partition_name(again), program_invocation_short_name, "no NAME.PID fallback");
}

Test(ip_account, without_a_uuid_one_bus_id_is_one_gpu) {
  gpupart_partition *a =
      gpupart__ip_partition_of(&(gpupart__ip_device){.key = 4, .total = 1 * GIB, .pci_bus_id = "0000:02:00.0"});
  gpupart_partition *again =
      gpupart__ip_partition_of(&(gpupart__ip_device){.key = 5, .total = 1 * GIB, .pci_bus_id = "0000:02:00.0"});
  gpupart_partition *plain = gpupart__ip_partition(6, 1 * GIB);
  cr_assert_not_null(a);
  cr_expect_eq(again, a);
  cr_expect_neq(plain, a, "a mirror with neither is its own device");
  cr_expect_eq(gpupart__ip_partition(6, 1 * GIB), plain, "and is cached by key and total");
}

Test(ip_account, a_partition_follows_what_is_accounted_on_it) {
  gpupart_partition *p = gpupart__ip_partition_for(7, 1 * GIB, gpu_b);
  gpupart_charge *x = NULL;
  cr_assert_not_null(p);
  cr_expect_eq(gpupart__ip_account(p, 3 << 20, &x), 0);
  cr_expect_eq(gpupart__ip_in_use(p), 3 << 20);
  cr_expect_eq(gpupart__ip_limit(p), 1 * GIB, "the whole budget: no limit configured");
  gpupart__ip_unaccount(x);
  cr_expect_eq(gpupart__ip_in_use(p), 0);
}

/* What a layer or the preload reports as free (cuMemGetInfo, heapBudget) is what gpupart
 * would grant: another configured partition's floor is not the program's to take. */
Test(ip_account, available_leaves_out_the_unused_guarantee_of_another_partition) {
  setenv("GPUPART_PARTITIONS", "other:256MiB:256MiB", 1);
  gpupart_partition *p = gpupart__ip_partition(0, 1 * GIB); /* GPUPART_PARTITIONS names device 0's */
  gpupart_charge *x = NULL;
  cr_assert_not_null(p);
  cr_expect_eq(gpupart__ip_available(p), 768ull << 20, "1 GiB less other's 256 MiB floor");
  cr_assert_eq(gpupart__ip_account(p, 100ull << 20, &x), 0);
  cr_expect_eq(gpupart__ip_available(p), 668ull << 20);
  gpupart__ip_unaccount(x);
  cr_expect_eq(gpupart__ip_available(p), 768ull << 20);
}

/* More devices than any fixed table held (64): each gets its own mirror partition, and
 * the first is still found. */
Test(ip_account, a_hundred_devices_each_have_their_mirror) {
  gpupart_partition *p[100];
  for (uint32_t i = 0; i < 100; i++) {
    p[i] = gpupart__ip_partition(100 + i, 1 * GIB);
    cr_assert(p[i] && !gpupart__ip_closed(p[i]), "device %u", i);
    for (uint32_t j = 0; j < i; j++) cr_assert_neq(p[i], p[j]);
  }
  cr_expect_eq(gpupart__ip_partition(100, 1 * GIB), p[0]);
  cr_expect_eq(gpupart__ip_partition(199, 1 * GIB), p[99]);
}

/* A configuration error fails closed: every allocation refused, the figures none. */
Test(ip_account, a_misspelt_variable_fails_closed) {
  setenv("GPUPART_MEMORY_LIMT", "64MiB", 1);
  gpupart_partition *p = gpupart__ip_partition(0, 1 * GIB);
  gpupart_charge *x = NULL;
  unsetenv("GPUPART_MEMORY_LIMT");
  cr_assert(gpupart__ip_closed(p));
  cr_expect_eq(gpupart__ip_account(p, 1 << 20, &x), -1);
  cr_expect_null(x);
  cr_expect_eq(gpupart__ip_limit(p), 0);
  cr_expect_eq(gpupart__ip_available(p), 0);
  cr_expect_eq(gpupart__ip_in_use(p), 0);
  cr_expect(gpupart__ip_closed(gpupart__ip_partition(1, 1 * GIB)), "every device of the process");
}

/* GPUPART_FAIL_OPEN=1: the operator's choice to let such a program run unaccounted. */
Test(ip_account, fail_open_lets_a_misconfigured_program_through_unaccounted) {
  setenv("GPUPART_MEMORY_LIMIT", "lots", 1);
  setenv("GPUPART_FAIL_OPEN", "1", 1);
  cr_expect_null(gpupart__ip_partition(0, 1 * GIB));
  unsetenv("GPUPART_MEMORY_LIMIT");
}

Test(ip_account, a_bad_fail_open_value_fails_closed) {
  setenv("GPUPART_MEMORY_LIMIT", "lots", 1);
  setenv("GPUPART_FAIL_OPEN", "maybe", 1);
  cr_expect(gpupart__ip_closed(gpupart__ip_partition(0, 1 * GIB)));
  unsetenv("GPUPART_MEMORY_LIMIT");
}
