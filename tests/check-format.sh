#!/bin/sh
# The tree stays laid out by clang-format: every C source and header (git's list, else
# those under the source folders) must be what clang-format 14 makes of it with the
# checked-in .clang-format (clang-format --dry-run -Werror). Another major version lays
# some lines out differently, so it is not asked: the test is skipped (77), saying so, as
# it is where clang-format is missing (scripts/deps test installs it).
#   usage: check-format.sh SOURCE_ROOT
set -eu
root=$1
cf=$(command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "check-format: clang-format is not installed (scripts/deps test): skipped"
  exit 77
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [ "$major" != 14 ]; then
  echo "check-format: $("$cf" --version) is not clang-format 14, which lays the tree out: skipped"
  exit 77
fi
cd "$root"
list=$(mktemp)
trap 'rm -f "$list"' EXIT
if ! git ls-files -- '*.c' '*.h' > "$list" 2>/dev/null || [ ! -s "$list" ]; then
  find core backends tools bench interpose python tests examples include -name '*.[ch]' > "$list"
fi
if xargs "$cf" --dry-run -Werror < "$list"; then
  echo "check-format: $(wc -l < "$list") files laid out as .clang-format says"
else
  echo "check-format: the files above are not laid out as .clang-format says: run clang-format -i on them" >&2
  exit 1
fi
