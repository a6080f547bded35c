#!/usr/bin/env bash
# Generates the API reference (Doxygen HTML from the comments of include/*.h, through
# docs/Doxyfile and docs/doxygen-filter.py) and fails on any Doxygen warning, or when an
# exported function of the headers has no entry in the HTML.
#   tests/packaging/apidocs.sh [OUT_DIR]   (the HTML is left in OUT_DIR/html when given)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${1:-$tmp/out}
mkdir -p "$out"
version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c \
  'import json, sys; print(json.load(sys.stdin)["version"])')

if ! GPUPART_SRC="$src" GPUPART_APIDOCS_OUT="$out" GPUPART_VERSION="$version" \
     doxygen "$src/docs/Doxyfile" > "$tmp/doxygen.log" 2>&1; then
  cat "$tmp/doxygen.log" >&2
  echo "apidocs.sh: Doxygen reported warnings (WARN_AS_ERROR=FAIL_ON_WARNINGS)" >&2
  exit 1
fi
if [ -s "$tmp/doxygen.log" ]; then
  cat "$tmp/doxygen.log" >&2
  echo "apidocs.sh: Doxygen printed something: a warning not caught as an error?" >&2
  exit 1
fi

# The plain-named twins declared as `gpupart_result (name)(...)` (gpupart.h, rule 7) are
# the macros' functions, documented with their `_sized` entries: they yield the return
# type here, which is no function, and are left out.
functions=$(grep -hv '^#' "$src"/include/*.h | tr '\n' ' ' | grep -o 'GPUPART_API[^(;]*(' |
  sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\($/\1/' | grep -vx 'gpupart_result' | sort -u)
missing=""
for f in $functions; do
  grep -Eq "(^|[^A-Za-z0-9_])$f\(\)" "$out/html/globals_func.html" || missing="$missing $f"
done
if [ -n "$missing" ]; then
  echo "apidocs.sh: functions missing from the reference:$missing" >&2
  exit 1
fi
echo "apidocs.sh: $(echo "$functions" | wc -w) functions documented, no Doxygen warning"
