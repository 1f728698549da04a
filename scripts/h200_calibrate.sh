#!/usr/bin/env bash
# Calibrate capsim on the device machine (one H200): the whole grid under a deadline, raw points and a
# fitted profile written under $OUT. Needs only the repo and the machine's python3 (torch + triton);
# no install (scripts/device_entry.py). `--tiny` runs the same code path on a CPU-only machine in
# seconds (Triton interpreter).
#
#   OUT=/tmp/out bash scripts/h200_calibrate.sh            # on the GPU machine
#   OUT=/tmp/out bash scripts/h200_calibrate.sh --tiny     # smoke test, anywhere
#
# Other options (see simulator/capsim/harness/gpu_script.py): --deadline-s N, --quick, --backend B.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export OUT="${OUT:-/tmp/capsim-calibration}"
"${PYTHON:-python3}" scripts/device_entry.py capsim.harness.gpu_script "$@"
