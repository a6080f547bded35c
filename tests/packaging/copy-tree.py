#!/usr/bin/env python3
"""Copies gpupart's source tree as a release would hold it (the files git tracks plus the
untracked ones it does not ignore; no build folders) for the packaging tests:
  copy-tree.py SRC DEST_DIR            a plain copy into DEST_DIR
  copy-tree.py SRC OUT.tar.gz PREFIX   a tarball whose paths start with PREFIX/"""
import os
import shutil
import subprocess
import sys
import tarfile


def tree_files(src):
    out = subprocess.run(["git", "-C", src, "ls-files", "-co", "--exclude-standard", "-z"],
                         check=True, capture_output=True).stdout
    # Names are bytes (os.fsdecode keeps any of them); a tracked file deleted in the work
    # tree is listed but absent: skip it.
    names = (os.fsdecode(f) for f in out.split(b"\0") if f)
    return sorted(f for f in names if os.path.isfile(os.path.join(src, f)))


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    src, dest = argv[1], argv[2]
    files = tree_files(src)
    if len(argv) == 4:
        with tarfile.open(dest, "w:gz") as tar:
            for f in files:
                tar.add(os.path.join(src, f), arcname=f"{argv[3]}/{f}")
        return
    for f in files:
        os.makedirs(os.path.join(dest, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(os.path.join(src, f), os.path.join(dest, f))


if __name__ == "__main__":
    main(sys.argv)
