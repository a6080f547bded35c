#!/usr/bin/env bash
# Run as a test in the default setup (tests/meson.build), with variables of a machine in
# its environment (a Kubernetes pod under HAMi, a Slurm job, a user's GPUPART_*): checks
# that tests/run-pinned removed them, kept the tests' own GPUPART_TEST_*, and pointed
# GPUPART_DRA_METADATA_DIR at an empty folder, never the real one.
set -u
fail=0
for name in GPUPART_MEMORY_FRACTION GPUPART_SHARED GPUPART_LEDGER_DIR CUDA_DEVICE_MEMORY_LIMIT \
  CUDA_DEVICE_MEMORY_LIMIT_0 HIP_DEVICE_MEMORY_LIMIT CUDA_MPS_PINNED_DEVICE_MEM_LIMIT SLURM_SHARD_MEM_PER_GPU \
  GPU_PORTION KUBERNETES_SERVICE_HOST CUDA_VISIBLE_DEVICES; do
  if [ -n "${!name+set}" ]; then
    echo "check-pinned-env: $name reached the test (${!name})" >&2
    fail=1
  fi
done
if [ "${GPUPART_TEST_KEPT:-}" != kept ]; then
  echo "check-pinned-env: the tests' own GPUPART_TEST_KEPT was removed" >&2
  fail=1
fi
dra=${GPUPART_DRA_METADATA_DIR:-}
if [ -z "$dra" ] || [ "$dra" = /var/run/kubernetes.io/dra-device-attributes ] || [ ! -d "$dra" ] ||
  [ -n "$(ls -A "$dra")" ]; then
  echo "check-pinned-env: GPUPART_DRA_METADATA_DIR is '$dra', not an empty folder of the test's own" >&2
  fail=1
fi
exit $fail
