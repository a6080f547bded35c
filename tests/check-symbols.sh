#!/usr/bin/env bash
# Compares the dynamic symbols that a library exports with the checked-in lists, so that
# nothing internal leaks and nothing public disappears unnoticed. Each name carries its
# symbol version where the library has them (libgpupart: name@@GPUPART_0.1 for the
# default version, name@GPUPART_0.1 for an older one kept for old programs, and the
# version nodes themselves, GPUPART_0.1, ...; core/libgpupart.map), so a symbol that
# moves to another version, or an old version that disappears, fails too.
set -euo pipefail
lib=$1
shift
expected=$(mktemp)
trap 'rm -f "$expected"' EXIT
cat "$@" | sort > "$expected"
actual=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '$2 ~ /^[TDBRA]$/ {print $3}' | sort)
if ! diff -u "$expected" <(echo "$actual"); then
  echo "exported symbols differ from the lists $* (lines with + are exported but not listed)" >&2
  exit 1
fi
echo "exported symbols: $(echo "$actual" | wc -l) match the list"
