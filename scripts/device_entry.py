"""Run one of capsim's device-machine entry points (`python3 scripts/device_entry.py MODULE ARGS...`,
e.g. capsim.harness.gpu_script) from the source tree, without installing capsim.

The GPU machine's image has torch and triton but not capsim's pydantic/simpy, and nothing can be
installed there. The harness's measuring path needs neither, so when the full package cannot be
imported, capsim is registered as a bare package and only what the entry point imports loads.
"""

import importlib
import pathlib
import sys
import types

repo = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(repo / "simulator"))
try:
    import capsim
except ImportError:
    capsim = types.ModuleType("capsim")
    capsim.__path__ = [str(repo / "simulator" / "capsim")]
    sys.modules["capsim"] = capsim
# In the source tree hardware_profiles/ sits at the repo root (installs map it to
# capsim.hardware_profiles); make the same import work here.
capsim.__path__.append(str(repo))
entry = importlib.import_module(sys.argv[1])
sys.exit(entry.main(sys.argv[2:]))
