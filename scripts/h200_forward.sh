#!/usr/bin/env bash
# Whole forward passes on the device machine (one H200): Llama-3.1-8B (all 32 layers) and 10 layers
# of the GQA Llama-3.1-70B at TP 1, decode, prefill and mixed steps under one measuring deadline, raw
# rows written under $OUT as they are measured (forward-<model>.jsonl, forward-summary.json).
# FlashInfer's paged attention is timed beside the harness's kernels where `import flashinfer` works.
# Needs only the repo and the machine's python3 (torch + triton); no install (scripts/device_entry.py).
# Where capsim's own dependencies import (not on the GPU image), the comparison with capsim's step
# times runs here too; otherwise run it back on a machine with capsim installed:
#   capsim calibrate --forward-check OUT/forward-llama-3.1-8b.jsonl --forward-check OUT/forward-llama-3.1-70b.jsonl \
#       --gpu h200 --gpu h200.calibrated
#
#   OUT=/tmp/out bash scripts/h200_forward.sh                                   # on the GPU machine (~5 min)
#   OUT=/tmp/out bash scripts/h200_forward.sh --tiny --models MODEL.yaml        # CPU smoke test, seconds
#
# Other options (see simulator/capsim/harness/forward_script.py): --deadline-s N (measuring budget,
# default 240), --quick, --models NAME[:LAYERS],..., --attention triton|sdpa|flashinfer, --no-flashinfer.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export OUT="${OUT:-/tmp/capsim-forward}"
PY="${PYTHON:-python3}"
"$PY" scripts/device_entry.py capsim.harness.forward_script "$@"

raw=()
for f in "$OUT"/forward-*.jsonl; do raw+=(--forward-check "$f"); done
gpu="$("$PY" -c 'import json, os; print(json.load(open(os.environ["OUT"] + "/forward-summary.json"))["gpu_profile"] or "h200")')"
gpus=(--gpu "$gpu")
if [ -f "hardware_profiles/$gpu.calibrated.yaml" ]; then gpus+=(--gpu "$gpu.calibrated"); fi
export PYTHONPATH="$repo/simulator${PYTHONPATH:+:$PYTHONPATH}"
if "$PY" -c "import capsim.validation.forward" 2>/dev/null; then
    "$PY" -m capsim calibrate "${raw[@]}" "${gpus[@]}" --out "$OUT"
else
    echo "comparison not run here (capsim's dependencies, e.g. pydantic, are missing); on a machine with capsim:"
    echo "  capsim calibrate ${raw[*]} ${gpus[*]}"
fi
