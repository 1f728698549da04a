"""Whether the engine runs compiled, and the switch that runs it as plain Python.

`pip install .` compiles the modules every simulated step runs through with mypyc (setup.py); their
.py files are installed beside the compiled ones. With CAPSIM_PURE_PYTHON=1 in the environment,
capsim imports those .py files instead: the same results, slower, with Python tracebacks and a
debugger that can step through the engine. tests/test_compiled.py runs workloads both ways and
compares every record.
"""

from __future__ import annotations

import os
import sys

PURE_PYTHON_VARIABLE = "CAPSIM_PURE_PYTHON"


def build_record() -> dict | None:
    """What the build said about compiling the engine ({"compiled", "why", "failed"}: failed is
    True when mypyc and a C compiler were there and compiling still did not work), written by
    setup.py into a built package; None when capsim runs from its source tree (an editable install)."""
    import json

    path = os.path.join(os.path.dirname(__file__), "_build.json")
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def is_compiled() -> bool:
    """True when capsim.sim.engine was loaded from a compiled module."""
    import capsim.sim.engine

    return not (capsim.sim.engine.__file__ or "").endswith(".py")


class _PreferSource:
    """A meta path finder (importlib.abc.MetaPathFinder's protocol; that module is slow to import):
    finds capsim's modules as usual, but loads a module's .py file where a compiled one sits beside it."""

    def find_spec(self, name, path, target=None):
        if not name.startswith("capsim."):
            return None  # before importing anything here: importing calls this finder too
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            return spec
        source = os.path.join(os.path.dirname(origin), name.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(name, source) if os.path.exists(source) else spec


def prefer_source_if_asked() -> None:
    """Install the finder when CAPSIM_PURE_PYTHON=1 (capsim/__init__.py calls this first thing)."""
    if os.environ.get(PURE_PYTHON_VARIABLE) == "1" and not any(isinstance(f, _PreferSource) for f in sys.meta_path):
        sys.meta_path.insert(0, _PreferSource())
