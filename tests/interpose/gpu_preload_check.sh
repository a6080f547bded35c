#!/usr/bin/env bash
# The CUDA preload library on a real NVIDIA GPU (a step of scripts/gpu-check):
#   tests/interpose/gpu_preload_check.sh BUILD_DIR [LIMIT]
# 1. tests/interpose/cu_bench.c, built here against the machine's libcuda.so.1 (linked
#    through the toolkit's stub, loaded from the driver at run time), times cuMemAlloc_v2 /
#    cuMemFree_v2 pairs without and with LD_PRELOAD=libgpupart_preload.so in one run, then
#    again in arena mode (GPUPART_PRELOAD_ARENA=1);
# 2. tests/interpose/torch_limit.py, an unmodified PyTorch script, runs under the preload
#    with GPUPART_MEMORY_LIMIT=LIMIT (default 2GiB): the device's total is the limit,
#    past it is torch.cuda.OutOfMemoryError (skipped, not failed, without PyTorch).
# Exit 77 (skip) without a GPU, a driver or the built preload library; 0 when what ran
# passed. The last line says what was measured.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${1:?usage: gpu_preload_check.sh BUILD_DIR [LIMIT]}
limit=${2:-2GiB}
preload="$(cd "$build" 2>/dev/null && pwd)/interpose/libgpupart_preload.so"
skip() { echo "SKIP: $*"; exit 77; }
[ -f "$preload" ] || skip "$preload is not built (cuda.h not found?)"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || skip "no NVIDIA GPU (nvidia-smi -L failed)"
python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null || skip "libcuda.so.1 cannot be loaded"

cuda_root=${CUDA_HOME:-/usr/local/cuda}
bench="$build/gpu-check/cu_bench_driver"
mkdir -p "$build/gpu-check"
if ! cc -O2 -std=c11 -I"$cuda_root/include" tests/interpose/cu_bench.c -o "$bench" \
  -L"$cuda_root/lib64/stubs" -L"$cuda_root/targets/x86_64-linux/lib/stubs" -lcuda; then
  echo "FAIL: cu_bench does not build against $cuda_root"
  exit 1
fi
rc=0
measured=$(GPUPART_MEMORY_LIMIT=$limit "$bench" "$preload" 20000 5) || { echo "FAIL: cu_bench"; rc=1; }
echo "$measured"
arena=$(GPUPART_PRELOAD_ARENA=1 GPUPART_MEMORY_LIMIT=$limit "$bench" "$preload" 20000 5) ||
  { echo "FAIL: cu_bench in arena mode"; rc=1; }
echo "arena mode: $arena"

limit_bytes=$(python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?B)?", sys.argv[1].strip())
print(int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m[2]])' "$limit")
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  LD_PRELOAD=$preload GPUPART_MEMORY_LIMIT=$limit python3 tests/interpose/torch_limit.py "$limit_bytes" || rc=1
else
  echo "torch under the preload: SKIP (PyTorch with CUDA is not installed)"
fi
echo "preload: ${measured:-no measurement}; arena mode: ${arena:-no measurement}"
exit $rc
