#!/usr/bin/env bash
# The README's private-prefix install, run as written after ./scripts/run: in a copy of
# the tree whose build/ is configured as ./scripts/run leaves it (default prefix; the
# suites and the benchmark left out here only to save time), the README block that starts
# with `meson configure build --prefix=$HOME/.local` runs line by line with a scratch HOME,
# with the README's C program as my_app.c. Its last line runs the program and the
# installed command; the program must then find libgpupart in the prefix by itself (ldd
# says where it was found; no LD_LIBRARY_PATH is set).
#   tests/packaging/readme-prefix.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "-- a copy of the tree, and build/ as ./scripts/run configures it"
"$here/copy-tree.py" "$src" "$tmp/src"
(cd "$tmp/src" && ./scripts/build build -Dtests=disabled -Dbench=disabled > "$tmp/build.log" 2>&1) ||
  { tail -n 40 "$tmp/build.log" >&2; echo "readme-prefix.sh: the build failed" >&2; exit 1; }

echo "-- the README's C program as my_app.c, and its private-prefix block"
python3 - "$src/README.md" "$tmp/src/my_app.c" "$tmp/block.sh" <<'PY'
import re, sys
readme = open(sys.argv[1]).read()
program = next(b for b in re.findall(r"^```c\n(.*?)^```", readme, re.S | re.M) if "int main" in b)
open(sys.argv[2], "w").write(program)
block = [b for b in re.findall(r"^```sh\n(.*?)^```", readme, re.S | re.M)
         if b.startswith("meson configure build --prefix=$HOME/.local")]
if len(block) != 1:
    sys.exit("readme-prefix.sh: README has no sh block starting with meson configure build --prefix=$HOME/.local")
open(sys.argv[3], "w").write(block[0])
PY
cat "$tmp/block.sh"

echo "-- the block, line by line, with HOME=$tmp/home"
mkdir -p "$tmp/home"
env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH HOME="$tmp/home" GPUPART_BACKEND=sim \
  bash -euo pipefail -c "cd '$tmp/src' && source '$tmp/block.sh'" > "$tmp/run.log" 2>&1 ||
  { cat "$tmp/run.log" >&2; echo "readme-prefix.sh: a line of the README block failed" >&2; exit 1; }
cat "$tmp/run.log"
grep -q "256 MiB allocated in partition 'train'" "$tmp/run.log" ||
  { echo "readme-prefix.sh: ./my_app did not run" >&2; exit 1; }
grep -q "^gpupart $(meson introspect --projectinfo "$src/meson.build" | python3 -c \
  'import json, sys; print(json.load(sys.stdin)["version"])') " "$tmp/run.log" ||
  { echo "readme-prefix.sh: the installed gpupart command did not run from PATH" >&2; exit 1; }
linked=$(env -u LD_LIBRARY_PATH ldd "$tmp/src/my_app")
grep -qF "$tmp/home/.local/lib/libgpupart.so.0" <<<"$linked" ||
  { echo "readme-prefix.sh: my_app does not load libgpupart from the prefix; ldd says:" >&2
    echo "$linked" >&2; exit 1; }
echo "readme-prefix.sh: the README's private-prefix install works as written"
