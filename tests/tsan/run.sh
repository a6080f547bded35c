#!/bin/sh
# Runs one ThreadSanitizer program. Older TSan runtimes (clang 14's) cannot start on a
# kernel whose vm.mmap_rnd_bits is above 28: they stop at once with "unexpected memory
# mapping" before the program's first line. Only then is the program run again with the
# address space's randomisation off for it alone (setarch -R); any other outcome, a race
# report above all, is the program's own result.
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$@" 2>"$out"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "unexpected memory mapping" "$out"; then
  echo "tsan: this kernel's address randomisation is too wide for this TSan runtime; again under setarch -R" >&2
  setarch "$(uname -m)" -R "$@"
  exit $?
fi
cat "$out" >&2
exit "$rc"
