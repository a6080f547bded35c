#!/usr/bin/env bash
# Compares the dynamic symbols that libgpupart exports with the checked-in list, so that
# nothing internal leaks and nothing public disappears unnoticed.
set -euo pipefail
lib=$1
shift
expected=$(mktemp)
trap 'rm -f "$expected"' EXIT
cat "$@" | sort > "$expected"
actual=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort)
if ! diff -u "$expected" <(echo "$actual"); then
  echo "exported symbols differ from the lists $* (lines with + are exported but not listed)" >&2
  exit 1
fi
echo "exported symbols: $(echo "$actual" | wc -l) match the list"
