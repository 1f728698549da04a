"""Shared helpers of the calibration-harness tests (tests/harness/).

Run as a script (`python tests/harness_helpers.py triton-cases`) it checks the Triton paged-decode
kernel under Triton's interpreter and prints one JSON line per case: the interpreter must be
switched on before triton is first imported, so those checks live in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO

# (name, context lengths, q_heads, kv_heads, head_dim, block_size, q dtype, kv dtype, partition tokens)
TRITON_CASES = [
    ("fp32 gqa4 multi-split", [1, 37, 100, 16], 8, 2, 16, 16, "fp32", "fp32", 32),
    ("fp32 mha, blocks of 8 (tile spans blocks)", [9, 70, 24], 2, 2, 16, 8, "fp32", "fp32", 32),
    ("fp32 group 3 (padded rows)", [5, 50], 6, 2, 32, 16, "fp32", "fp32", 64),
    ("fp16", [3, 66, 31], 4, 1, 16, 16, "fp16", "fp16", 32),
    ("fp8 kv, fp16 query", [40, 17, 2], 8, 2, 16, 16, "fp16", "fp8", 32),
    ("fp8 kv, fp32 query", [40, 17, 2], 8, 2, 16, 16, "fp32", "fp8", 32),
]

# A sitecustomize that hides pydantic and simpy (as on the GPU machine's image) and makes the first
# `import capsim` fail, so the device script's bare-package bootstrap is exercised.
DEVICE_IMAGE_SITECUSTOMIZE = '''
import sys
class _Block:
    first = True
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pydantic", "pydantic_core", "simpy"):
            raise ImportError("hidden like on the GPU machine: " + name)
        if name == "capsim" and _Block.first:
            _Block.first = False
            raise ImportError("capsim/__init__ needs pydantic")
        return None
sys.meta_path.insert(0, _Block())
'''

# A sitecustomize that hides torch and triton (a core install without the calibrate extra).
NO_TORCH_SITECUSTOMIZE = '''
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError("not installed: " + name)
        return None
sys.meta_path.insert(0, _Block())
'''


def run_with_sitecustomize(tmp_path: Path, source: str, args: list[str], env: dict | None = None,
                           timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run a command with a sitecustomize.py (in tmp_path) loaded first by every python it starts."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(source)
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(args, capture_output=True, text=True, env=full_env, timeout=timeout_s, cwd=REPO)


def run_triton_cases() -> list[dict]:
    """Each case's max abs error against the float64 reference, computed under the interpreter."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
    from capsim.harness.kernels.torch_ref import make_paged_inputs, reference_decode
    from capsim.harness.kernels.triton import SplitPlan, paged_decode_triton

    out = []
    for name, lens, hq, hkv, dim, block, qd, kvd, partition in TRITON_CASES:
        inp = make_paged_inputs(lens, q_heads=hq, kv_heads=hkv, head_dim=dim, block_size=block, q_dtype=qd,
                                kv_dtype=kvd, seed=len(out))
        plan = SplitPlan(partition, -(-max(lens) // partition), 16)
        got = paged_decode_triton(*inp.backend_args(), **inp.backend_kwargs(), plan=plan)
        ref = reference_decode(*inp.backend_args(), **inp.backend_kwargs())
        out.append({"case": name, "q_dtype": qd, "max_abs_err": float((got.double() - ref).abs().max()),
                    "shape_ok": tuple(got.shape) == tuple(ref.shape), "dtype": str(got.dtype)})
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["triton-cases"]:
        for row in run_triton_cases():
            print(json.dumps(row))
