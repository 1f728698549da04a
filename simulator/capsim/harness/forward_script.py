"""Entry of the device-machine forward run (`scripts/h200_forward.sh`): whole forward passes of
several models under one deadline, raw rows written under $OUT, a summary printed.

Models are `NAME[:LAYERS]` (a catalogue name or a model YAML, and how many of its layers to build).
The measuring budget is shared out as the run goes: each model gets the time left divided by the
models still to run, so one that finishes early leaves its time to the next. `--tiny` runs the same
path on CPU in seconds (give it a small model YAML with --models).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

DEFAULT_MODELS = "llama-3.1-8b,llama-3.1-70b:10"  # the 8B whole; a tenth of the GQA 70B (80 layers)
DEFAULT_DEADLINE_S = 240.0  # measuring budget; startup, weights, compiles and the writing fit in the rest of 6 min


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="h200_forward", description=__doc__)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/capsim-forward")))
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated NAME[:LAYERS]")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--attention", default=None, choices=("triton", "sdpa", "flashinfer"),
                   help="default: triton on cuda, sdpa on cpu")
    p.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tiny", action="store_true", help="seconds-long grid (CPU smoke test; pass --models)")
    p.add_argument("--no-flashinfer", action="store_true", help="do not time FlashInfer's attention beside")
    return p.parse_args(argv)


def parse_models(text: str) -> list[tuple[str, int | None]]:
    """'a,b:10' -> [('a', None), ('b', 10)]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, layers = part.rpartition(":")
        out.append((name, int(layers)) if sep and layers.isdigit() else (part, None))
    if not out:
        raise SystemExit("h200_forward: --models names no model.")
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure every model; write $OUT/forward-<model>.jsonl and $OUT/forward-summary.json."""
    args = _args(sys.argv[1:] if argv is None else argv)
    import torch

    from capsim.harness.deps import versions
    from capsim.harness.forward_run import measure_forward
    from capsim.harness.gpu_script import progress_printer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and not args.tiny:
        raise SystemExit("h200_forward: no CUDA GPU here; use --tiny --models MODEL.yaml for the CPU smoke test.")
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"capsim forward: device={device} models={args.models} deadline={args.deadline_s}s "
          f"python={platform.python_version()} {versions()}", flush=True)
    models = parse_models(args.models)
    results = []
    for i, (model, layers) in enumerate(models):
        left = args.deadline_s - (time.monotonic() - started)
        result = measure_forward(model, device, args.out, layers=layers, attention=args.attention, quick=args.quick,
                                 tiny=args.tiny, deadline_s=max(1.0, left / (len(models) - i)),
                                 flashinfer=not args.no_flashinfer, progress=progress_printer(started))
        results.append({"model": result.model, "layers": result.layers, "raw_data": result.raw_data_path.name,
                        "points_measured": result.points_measured, "points_planned": result.points_planned,
                        "points_failed": result.points_failed, "stopped_at_deadline": result.stopped_at_deadline,
                        "elapsed_s": round(result.elapsed_s, 1), "skipped": result.skipped})
        print(json.dumps(results[-1]), flush=True)
    summary = {"device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
               "gpu_profile": _profile_name(device), "versions": versions(),
               "elapsed_s": round(time.monotonic() - started, 1), "models": results}
    (args.out / "forward-summary.json").write_text(json.dumps(summary, indent=2))
    return 0


def _profile_name(device: str) -> str | None:
    """The catalogue profile of the GPU measured on (to price the rows with), if there is one."""
    if device != "cuda":
        return None
    import torch

    from capsim.harness.profile import find_base

    base = find_base(torch.cuda.get_device_name(0), None)
    return base["name"] if base else None


if __name__ == "__main__":
    sys.exit(main())
