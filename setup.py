"""Build script: pyproject.toml holds the metadata; this file only adds the compiled engine.

`pip install .` compiles the simulator's event loop (the modules in COMPILED) to C with mypyc, the
compiler that ships with mypy: the same source and the same results (tests/test_compiled.py
checks them record for record), runs about three times faster. Where that cannot be done (no C
compiler, mypyc missing, a type error) the package installs as plain Python, with a warning, and
works the same, only slower. An editable install (`pip install -e .`) is never compiled, so an
edit takes effect without rebuilding; `CAPSIM_PURE_PYTHON=1 pip install .` skips compiling too.

A built package records what happened in `capsim/_build.json` (compiled, or why not, and whether
that was a failure: mypyc and a C compiler were there and the compile still did not work), so a
silently uncompiled install is visible afterwards: tests/test_compiled.py fails on a failure.
`CAPSIM_REQUIRE_COMPILED=1` turns any install without the compiled engine into an install error
(CI sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# The engine: every module of these packages, the code each simulated step runs through. They must
# type-check under mypy: mypyc trusts the annotations and checks them at run time (a float passed
# where `int` is declared raises).
COMPILED_PACKAGES = ("core", "cost", "sim")
# ...except sim/clock.py, which extends SimPy's Python classes (a compiled class cannot).
PLAIN = ("simulator/capsim/sim/clock.py",)
COMPILED = sorted(
    path.as_posix() for package in COMPILED_PACKAGES for path in Path("simulator/capsim", package).glob("*.py")
    if path.name != "__init__.py" and path.as_posix() not in PLAIN
)
# After changing the compiled set, delete build/: setuptools ships the compiled modules it finds there.
# numpy, SimPy and pydantic are not in the build environment: mypyc treats their values as
# untyped objects. Other capsim modules are read for their types but not compiled.
MYPY_FLAGS = ["--ignore-missing-imports", "--follow-imports=silent"]


# What the build decided or found, written into the built package (capsim/_build.json).
_OUTCOME = {"compiled": False, "why": "not built", "failed": False}


def _not_compiled(why: str, failed: bool) -> None:
    """Record why the engine is not compiled; an error when CAPSIM_REQUIRE_COMPILED=1."""
    _OUTCOME.update(compiled=False, why=why, failed=failed)
    if os.environ.get("CAPSIM_REQUIRE_COMPILED") == "1":
        raise SystemExit(f"capsim: CAPSIM_REQUIRE_COMPILED=1 but the engine was not compiled: {why}")
    print(f"capsim: installing the plain-Python engine ({why}); runs are about three times slower.", file=sys.stderr)


def _write_outcome(build_lib: str) -> None:
    folder = os.path.join(build_lib, "capsim")
    if os.path.isdir(folder):
        with open(os.path.join(folder, "_build.json"), "w") as fh:
            json.dump(_OUTCOME, fh)


def _has_c_compiler() -> bool:
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


class RecordingBuildPy(build_py):
    """Copies the package as usual, then records the build's outcome so far (build_ext, which
    runs next when there is anything to compile, updates it)."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):  # an editable install runs the source tree
            _write_outcome(self.build_lib)


class OptionalBuildExt(build_ext):
    """Build the compiled modules, or none of them: a partial set would not import."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler, a compile error: fall back to the .py files
            for path in self.get_outputs():
                if os.path.exists(path):
                    os.remove(path)
            self.extensions = []
            compiler = _has_c_compiler()
            _not_compiled(f"compiling failed: {exc}" if compiler else "no C compiler found", failed=compiler)
        else:
            _OUTCOME.update(compiled=bool(self.extensions), why="", failed=False)
        _write_outcome(self.build_lib)


def _extensions() -> list:
    if os.environ.get("CAPSIM_PURE_PYTHON") == "1":
        _OUTCOME.update(why="CAPSIM_PURE_PYTHON=1 at install")
        if os.environ.get("CAPSIM_REQUIRE_COMPILED") == "1":
            raise SystemExit("capsim: CAPSIM_PURE_PYTHON=1 and CAPSIM_REQUIRE_COMPILED=1 contradict each other.")
        return []
    if any(arg.startswith("editable") for arg in sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _not_compiled("mypyc is not installed", failed=False)
        return []
    try:
        return mypycify([*MYPY_FLAGS, *COMPILED], group_name="capsim")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - mypy reports type errors by exiting
        _not_compiled(f"mypyc could not translate the engine: {exc!r}", failed=True)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt, "build_py": RecordingBuildPy})
