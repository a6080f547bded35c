#!/usr/bin/env bash
# Builds an outside meson project (tests/packaging/meson_consumer) that gets gpupart as a
# subproject through a wrap file, with no network: the wrap's source_url is a file:// tarball
# of this source tree (its tracked and unignored files), checked by its sha256. Runs the
# consumer's test, which opens a sim device through the subproject's library.
#   tests/packaging/subproject.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c \
  'import json, sys; print(json.load(sys.stdin)["version"])')
name="gpupart-$version"
echo "-- a tarball of the tree: $name.tar.gz"
mkdir -p "$tmp/dist"
"$here/copy-tree.py" "$src" "$tmp/dist/$name.tar.gz" "$name"

project="$tmp/consumer"
cp -r "$here/meson_consumer" "$project"
cp "$here/consumer.c" "$project/"
mkdir -p "$project/subprojects"
cat > "$project/subprojects/gpupart.wrap" <<WRAP
[wrap-file]
directory = $name
source_url = file://$tmp/dist/$name.tar.gz
source_filename = $name.tar.gz
source_hash = $(sha256sum "$tmp/dist/$name.tar.gz" | cut -d' ' -f1)

[provide]
dependency_names = gpupart
WRAP

echo "-- meson setup (gpupart forced from the wrap, whatever is installed), compile, test"
if ! meson setup "$project/build" "$project" --force-fallback-for=gpupart > "$tmp/setup.log" 2>&1; then
  cat "$tmp/setup.log" >&2
  exit 1
fi
grep -E "Subproject gpupart|Dependency gpupart" "$tmp/setup.log" || true
meson compile -C "$project/build" > "$tmp/compile.log" 2>&1 || { cat "$tmp/compile.log" >&2; exit 1; }
meson test -C "$project/build" --print-errorlogs
echo "subproject.sh: the meson consumer built gpupart as a subproject and ran"
