#!/usr/bin/env bash
# Installs ncnn (PyPI, its own wheel only: no dependency is imported by what the test
# runs) into BUILD/ncnn-py with pip --target, for the Vulkan layer's test of a real
# program that sizes itself by VK_EXT_memory_budget (tests/interpose/ncnn_budget.py).
# Never fatal: where pip or PyPI cannot provide it, that test skips.
#   tests/interpose/install-ncnn.sh BUILD
set -uo pipefail
dir=${1:?usage: install-ncnn.sh BUILD}/ncnn-py
if python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import ncnn' "$dir" 2>/dev/null; then
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade --target "$dir" ncnn ||
  echo "install-ncnn.sh: ncnn could not be installed into $dir; the vk_layer test that runs it skips" >&2
exit 0
