#!/usr/bin/env python3
"""Compiles the two API clients of tests/api against include/gpupart.h with every C and C++
compiler installed, warnings fatal, and runs what this build can run against its shared
libgpupart:
  literals.c  compound-literal descriptors in every struct-taking call (gcc, clang;
              -std=c11 -Wall -Wextra -Wpedantic -Werror)
  named.cpp   the same calls with named variables (g++, clang++; -std=c++11, same flags)
In a sanitizer build the library needs its compiler's sanitizer runtime in the program, so
only the compilers of the build's own family (gcc/g++ or clang/clang++) link and run
there, with -fsanitize; the others still compile (-c), so the warning check holds for all.
A compiler that is not installed is reported and skipped; at least one C and one C++
compiler must be present.
Usage: run_clients.py SOURCE_ROOT BUILD_DIR SANITIZE CC_ID"""
import os
import shutil
import subprocess
import sys
import tempfile

FLAGS = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"]
COMPILERS = [("literals.c", "gcc", "gcc", ["-std=c11"]), ("literals.c", "clang", "clang", ["-std=c11"]),
             ("named.cpp", "g++", "gcc", ["-std=c++11"]), ("named.cpp", "clang++", "clang", ["-std=c++11"])]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def main(root, build, sanitize, cc_id):
    failures, ran = [], set()
    san = [f"-fsanitize={sanitize}"] if sanitize not in ("", "none") else []
    env = {k: v for k, v in os.environ.items() if k == "GPUPART_DRA_METADATA_DIR" or not k.startswith("GPUPART_")}
    env["LD_LIBRARY_PATH"] = build
    with tempfile.TemporaryDirectory() as d:
        for src, compiler, family, std in COMPILERS:
            path = shutil.which(compiler)
            if not path:
                print(f"{compiler}: not installed, skipped")
                continue
            runs = not san or family == cc_id
            exe = os.path.join(d, compiler.replace("+", "p"))
            cmd = [path, *std, *FLAGS, "-I" + os.path.join(root, "include"), os.path.join(root, "tests", "api", src)]
            cmd += [*san, "-o", exe, "-L" + build, "-lgpupart"] if runs else ["-c", "-o", exe + ".o"]
            p = run(cmd)
            if p.returncode:
                failures.append(f"{' '.join(cmd)}\n{p.stdout}{p.stderr}")
                continue
            if not runs:
                print(f"{compiler}: {src} compiles (not run: the library is built with {cc_id}'s sanitizers)")
                continue
            p = run([exe], env=env)
            print(f"{compiler}: {src}: {p.stdout.strip()}")
            if p.returncode:
                failures.append(f"{compiler}: {src} failed when run\n{p.stdout}{p.stderr}")
            ran.add(src)
    for src in ("literals.c", "named.cpp"):
        if src not in ran:
            failures.append(f"no compiler ran {src}")
    for f in failures:
        print("FAILED: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
