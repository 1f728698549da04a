#!/usr/bin/env bash
# Calibrate capsim on the device machine (one H200): the whole grid under a deadline, raw points and a
# fitted profile written under $OUT. Needs only the repo and the machine's python3 (torch + triton);
# no install. `--tiny` runs the same code path on a CPU-only machine in seconds (Triton interpreter).
#
#   OUT=/tmp/out bash scripts/h200_calibrate.sh            # on the GPU machine
#   OUT=/tmp/out bash scripts/h200_calibrate.sh --tiny     # smoke test, anywhere
#
# Other options (see simulator/capsim/harness/gpu_script.py): --deadline-s N, --quick, --backend B.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export OUT="${OUT:-/tmp/capsim-calibration}"
export PYTHONPATH="$repo/simulator${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
"$PY" - "$@" <<'PYCODE'
import pathlib
import sys
import types

# The GPU machine's image has torch and triton but not capsim's pydantic/simpy, and nothing can be
# installed there. The harness's measuring path needs neither, so when the full package cannot be
# imported, capsim is registered as a bare package and only capsim.harness (and capsim.errors) load.
repo = pathlib.Path.cwd()
try:
    import capsim
except ImportError:
    capsim = types.ModuleType("capsim")
    capsim.__path__ = [str(repo / "simulator" / "capsim")]
    sys.modules["capsim"] = capsim
# In the source tree hardware_profiles/ sits at the repo root (installs map it to
# capsim.hardware_profiles); make the same import work here.
capsim.__path__.append(str(repo))
from capsim.harness.gpu_script import main

sys.exit(main(sys.argv[1:]))
PYCODE
