"""Build script: pyproject.toml holds the metadata; this file only adds the compiled engine.

`pip install .` compiles the simulator's event loop (the modules in COMPILED) to C with mypyc, the
compiler that ships with mypy: the same source and the same results (tests/test_compiled.py
checks them record for record), runs about three times faster. Where that cannot be done (no C
compiler, mypyc missing, a type error) the package installs as plain Python, with a warning, and
works the same, only slower. An editable install (`pip install -e .`) is never compiled, so an
edit takes effect without rebuilding; `CAPSIM_PURE_PYTHON=1 pip install .` skips compiling too.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The modules every simulated step runs through. They must type-check under mypy: mypyc trusts
# the annotations and checks them at run time (a float passed where `int` is declared raises).
# capsim.metrics is left out: compiled, its chunked summary of a large run kept chunks alive
# (1M requests peaked at 1.6 GiB instead of 0.8). The records it reads are written by
# capsim.request_log, which is compiled: interpreted, those writes were about 12% of Engine.run's
# instructions, and compiling them took 5% off the run (benchmarks/instructions.py).
# After changing this list, delete build/: setuptools ships the compiled modules it finds there.
COMPILED = [
    "simulator/capsim/arrivals.py",
    "simulator/capsim/cost_model.py",
    "simulator/capsim/engine.py",
    "simulator/capsim/kv_cache.py",
    "simulator/capsim/outcomes.py",
    "simulator/capsim/plan.py",
    "simulator/capsim/rates.py",
    "simulator/capsim/replica.py",
    "simulator/capsim/request.py",
    "simulator/capsim/request_log.py",
    "simulator/capsim/running.py",
    "simulator/capsim/schedulers.py",
    "simulator/capsim/speculative.py",
    "simulator/capsim/step_log.py",
]
# numpy, SimPy and pydantic are not in the build environment: mypyc treats their values as
# untyped objects. Other capsim modules are read for their types but not compiled.
MYPY_FLAGS = ["--ignore-missing-imports", "--follow-imports=silent"]


def _warn(why: str) -> None:
    print(f"capsim: installing the plain-Python engine ({why}); runs are about three times slower.", file=sys.stderr)


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
            _warn(f"compiling failed: {exc}")


def _extensions() -> list:
    if os.environ.get("CAPSIM_PURE_PYTHON") == "1":
        return []
    if any(arg.startswith("editable") for arg in sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed")
        return []
    try:
        return mypycify([*MYPY_FLAGS, *COMPILED], group_name="capsim")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - mypy reports type errors by exiting
        _warn(f"mypyc could not translate the engine: {exc!r}")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
