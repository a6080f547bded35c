"""Records, in the installed package, where this repository's libgpupart build lives.

Everything else is in pyproject.toml. gpupart is pure Python (ctypes), so installing needs
no compiler; the library itself is built by meson (./scripts/run or ./scripts/build build).
The path written here is only a hint: $GPUPART_LIBRARY and the system library path are
searched as well (see gpupart/_lib.py).
"""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# $GPUPART_PYTHON_BUILD_DIR at install time names another build folder (scripts/test-python).
BUILD_DIR = Path(os.environ.get("GPUPART_PYTHON_BUILD_DIR") or Path(__file__).resolve().parent.parent / "build").resolve()


class BuildPyWithPaths(build_py):
    """build_py that also writes gpupart/_paths.py naming the repository's build folder."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "gpupart" / "_paths.py"
        target.write_text(f'"""Written at install time by setup.py."""\nBUILD_DIR = {str(BUILD_DIR)!r}\n')


setup(cmdclass={"build_py": BuildPyWithPaths})
