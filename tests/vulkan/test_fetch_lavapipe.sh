#!/usr/bin/env bash
# scripts/fetch-lavapipe-sparse without the network: which apt source it takes the Debian
# mirror from (one-line and deb822 sources, options, disabled and commented entries, the
# security suite left alone), that it skips with 77 and a clear message where no mirror
# is named or the mirror cannot be reached (a closed loopback port) and leaves nothing
# that looks fetched, and that a completed folder is not fetched again.
#
#   bash tests/vulkan/test_fetch_lavapipe.sh scripts/fetch-lavapipe-sparse
set -uo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -z "$codename" ] || ! command -v apt-get >/dev/null || [ ! -f "$keyring" ]; then
  echo "skipped: not a Debian system with apt and the Debian archive keyring"
  exit 77
fi
touch "$tmp/own.gpg"

check() { # NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'FAIL %s\n  expected: %s\n  got:      %s\n' "$1" "$2" "$3"
  fi
}

etc() { # NAME: a fresh apt folder
  mkdir -p "$tmp/$1/sources.list.d"
  echo "$tmp/$1"
}

dry() { GPUPART_TEST_FETCH_DRY=1 GPUPART_TEST_APT_ETC="$1" "$script" "$tmp/dest-$2" 2>&1; }

# deb822, the suite among others, after a disabled entry and the security suite.
d=$(etc deb822)
cat >"$d/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: http://disabled.invalid/debian
Suites: $codename
Components: main
Enabled: no

# a comment
Types: deb
URIs: http://security.invalid/debian-security
Suites: $codename-security
Components: main

Types: deb deb-src
URIs: http://mirror.invalid/debian http://second.invalid/debian
Suites: $codename $codename-updates
Components: main contrib
Signed-By: $keyring
SRC
check deb822 "deb [signed-by=$keyring] http://mirror.invalid/debian $codename-backports main" "$(dry "$d" deb822)"

# One-line, with options, after a commented line and a suite without main.
d=$(etc oneline)
cat >"$d/sources.list" <<SRC
# deb http://commented.invalid/debian $codename main
deb http://contrib-only.invalid/debian $codename contrib
deb [arch=amd64 signed-by=$tmp/own.gpg] http://mirror.invalid/debian/ $codename main non-free
SRC
check one-line "deb [signed-by=$tmp/own.gpg] http://mirror.invalid/debian/ $codename-backports main" "$(dry "$d" oneline)"

# A .list under sources.list.d, no keyring named: the Debian archive keyring.
d=$(etc listd)
echo "deb http://mirror.invalid/debian $codename main" >"$d/sources.list.d/mirror.list"
echo "deb http://ignored.invalid/debian $codename main" >"$d/sources.list.d/mirror.list.disabled"
check list.d "deb [signed-by=$keyring] http://mirror.invalid/debian $codename-backports main" "$(dry "$d" listd)"

# No Debian mirror: skipped, saying so.
d=$(etc none)
echo "deb http://security.invalid/debian-security $codename-security main" >"$d/sources.list"
out=$(GPUPART_TEST_APT_ETC="$d" "$script" "$tmp/dest-none" 2>&1)
check "no mirror: exit 77" 77 "$?"
check "no mirror: message" 1 "$(grep -c 'no apt source of the Debian suite' <<<"$out")"

# An unreachable mirror (a closed loopback port): skipped, nothing left behind.
d=$(etc unreachable)
echo "deb [signed-by=$keyring] http://127.0.0.1:9/debian $codename main" >"$d/sources.list"
out=$(GPUPART_TEST_APT_ETC="$d" "$script" "$tmp/dest-unreachable" 2>&1)
check "unreachable: exit 77" 77 "$?"
check "unreachable: message" 1 "$(grep -c 'could not be reached' <<<"$out")"
check "unreachable: nothing left" "" "$(ls "$tmp" | grep dest-unreachable)"

# A completed folder: not fetched again (no mirror is needed for that).
mkdir -p "$tmp/dest-ready"
echo "mesa-vulkan-drivers 99" >"$tmp/dest-ready/ready"
echo "{}" >"$tmp/dest-ready/lvp_icd.json"
out=$(GPUPART_TEST_APT_ETC="$(etc empty)" "$script" "$tmp/dest-ready" 2>&1)
check "ready: exit 0" 0 "$?"
check "ready: message" 1 "$(grep -c 'already in' <<<"$out")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
