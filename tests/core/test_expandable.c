
/* A driver refusal in the middle of a preallocation leaves nothing mapped and nothing
 * charged (all or nothing, as for blocks); a refusal during growth is EDEVMEM with the
 * partition as it was. */
Test(expandable, a_refused_mapping_leaves_nothing_behind) {
  gpupart_sim_desc sim = {.total_bytes = 256 * MiB, .fail_block_alloc_at = 3};
  env = open_env(&sim, NULL);
  gpupart_partition_desc d = {.name = "pre",
                              .limit = 64 * MiB,
                              .growth = GPUPART_GROWTH_OFF,
                              .max_block = 16 * MiB,
                              .flags = GPUPART_PARTITION_EXPANDABLE};
  gpupart_partition *p = NULL;
  cr_expect_eq(gpupart_partition_create(env.dev, &d, &p), GPUPART_EDEVMEM, "%s", gpupart_last_error());
  cr_expect_null(p);
  gpupart_device_info info;
  cr_assert_eq(gpupart_device_get_info(env.dev, &info), GPUPART_OK);
  cr_expect_eq(info.free_bytes, info.total_bytes, "nothing left mapped");
  cr_expect_eq(dev_stats(env.dev).reserved, 0);
  p = expandable(64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 1 * MiB), *b = NULL; /* the 4th driver call */
  gpupart_stats before = test_stats(p);
  cr_expect_eq(gpupart_alloc(p, 8 * MiB, 0, &b), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_free(b);
  cr_expect_geq(test_stats(p).reserved, before.reserved);
  gpupart_free(a);
  gpupart_partition_destroy(p);
}
