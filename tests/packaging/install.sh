#!/usr/bin/env bash
# Installs a gpupart build into a staging folder (meson install --destdir), then builds and
# runs tests/packaging/consumer.c outside the tree against that install, three ways: the
# CMake package (gpupart::gpupart and gpupart::gpupart_static), the installed pkg-config
# file, and the build folder's uninstalled pkg-config file.
#   tests/packaging/install.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GPUPART_BACKEND=sim

echo "-- meson install --destdir into a staging folder"
meson install -C "$build" --no-rebuild --destdir "$tmp/stage" --quiet
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
root="$tmp/stage$prefix"
config=$(find "$root" -name gpupartConfig.cmake)
[ -n "$config" ] && [ -f "$(dirname "$config")/gpupartConfigVersion.cmake" ] || {
  echo "install.sh: gpupartConfig.cmake and gpupartConfigVersion.cmake are not both installed" >&2
  exit 1
}
echo "   $(realpath --relative-to="$tmp/stage" "$config")"

echo "-- the commands, their man pages and the benchmark's traces"
for f in bin/gpupart bin/gpupart-bench share/man/man1/gpupart.1 share/man/man1/gpupart-bench.1 \
         share/gpupart/traces/kineto_resnet50_v100.ops.gz share/gpupart/traces/android_systemui.ops.gz \
         share/gpupart/traces/README.md; do
  [ -e "$root/$f" ] || { echo "install.sh: meson install did not install $f" >&2; exit 1; }
done

echo "-- CMake: find_package(gpupart CONFIG), gpupart::gpupart and gpupart::gpupart_static"
cmake -S "$here/cmake_consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$root" \
  -DCONSUMER_SOURCE="$here/consumer.c" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; exit 1; }
cmake --build "$tmp/cmake-build" > "$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log" >&2; exit 1; }
"$tmp/cmake-build/consumer"
# Outputs are captured before grep reads them: under pipefail, grep -q ending a pipe early
# would make the writer die of SIGPIPE and the pipe fail at random.
linked=$(ldd "$tmp/cmake-build/consumer")
grep -qF "$root" <<<"$linked" ||
  { echo "install.sh: the CMake consumer does not load the staged libgpupart; ldd says:" >&2
    echo "$linked" >&2; exit 1; }
"$tmp/cmake-build/consumer_static"
if grep -q libgpupart <<<"$(ldd "$tmp/cmake-build/consumer_static")"; then
  echo "install.sh: the static CMake consumer loads libgpupart.so" >&2
  exit 1
fi

echo "-- CMake: a version that does not fit is refused"
mkdir -p "$tmp/v"
cat > "$tmp/v/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(v NONE)
find_package(gpupart 99 CONFIG QUIET)
if(gpupart_FOUND)
  message(FATAL_ERROR "find_package(gpupart 99) accepted version ${gpupart_VERSION}")
endif()
CM
cmake -S "$tmp/v" -B "$tmp/v/build" -DCMAKE_PREFIX_PATH="$root" > "$tmp/v.log" 2>&1 ||
  { cat "$tmp/v.log" >&2; exit 1; }

echo "-- pkg-config: the installed gpupart.pc"
[ -n "$(find "$root" -name gpupart.pc)" ] || { echo "install.sh: gpupart.pc is not installed" >&2; exit 1; }
pc_dir=$(dirname "$(find "$root" -name gpupart.pc)")
# The sysroot is prepended to the -I and -L paths, as for any staged install.
flags=$(PKG_CONFIG_PATH="$pc_dir" PKG_CONFIG_SYSROOT_DIR="$tmp/stage" pkg-config --cflags --libs gpupart)
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$tmp/pc-consumer" "$here/consumer.c" $flags
LD_LIBRARY_PATH="$pc_dir/.." "$tmp/pc-consumer"

echo "-- pkg-config: the build folder's gpupart-uninstalled.pc"
flags=$(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --cflags --libs gpupart-uninstalled)
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -o "$tmp/unpc-consumer" "$here/consumer.c" $flags
LD_LIBRARY_PATH="$build" "$tmp/unpc-consumer"
echo "install.sh: every consumer built and ran"
