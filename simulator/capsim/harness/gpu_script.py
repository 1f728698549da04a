"""Entry of the device-machine calibration run (`scripts/h200_calibrate.sh`): the whole grid under a
deadline, raw points and a fitted profile written under $OUT, a summary printed.

`--tiny` runs the same code path in seconds: on a machine without CUDA it runs the Triton backend
under Triton's interpreter on CPU (timings meaningless; the path is what is tested).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

DEFAULT_DEADLINE_S = 270.0  # measurement budget; startup, compiles and the fit fit in the rest of 7 min


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="h200_calibrate", description=__doc__)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/capsim-calibration")))
    p.add_argument("--backend", default="triton", choices=("triton", "flex", "sdpa", "flash"))
    p.add_argument("--device", default=None, choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tiny", action="store_true", help="seconds-long grid (CPU: Triton interpreter)")
    p.add_argument("--base-gpu", default=None)
    return p.parse_args(argv)


def _device(args: argparse.Namespace) -> str:
    """Pick the device; a tiny run without CUDA switches Triton to its interpreter before importing it."""
    if args.device:
        device = args.device
    else:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and args.backend == "triton":
        if not args.tiny:
            raise SystemExit("h200_calibrate: no CUDA GPU here; use --tiny for the CPU smoke test.")
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("h200_calibrate: triton was imported before TRITON_INTERPRET=1 could be set.")
        os.environ["TRITON_INTERPRET"] = "1"
    return device


def progress_printer(started: float):
    """A progress callback that prints a line at most every 5 s (and at the end)."""
    last = [0.0]

    def report(done: int, total: int, label: str) -> None:
        now = time.monotonic() - started
        if now - last[0] >= 5.0 or done == total:
            last[0] = now
            print(f"[{now:6.1f}s] {done}/{total} {label}", flush=True)

    return report


def main(argv: list[str] | None = None) -> int:
    """Run, write $OUT/{<gpu>.calibrated.yaml,.jsonl,.csv, summary.json}, print the MAPE table."""
    args = _args(sys.argv[1:] if argv is None else argv)
    device = _device(args)
    from capsim.harness.api import calibrate
    from capsim.harness.deps import versions

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"capsim calibration: device={device} backend={args.backend} deadline={args.deadline_s}s "
          f"python={platform.python_version()} {versions()}", flush=True)
    result = calibrate(device, args.backend, args.out, quick=args.quick, deadline_s=args.deadline_s,
                       tiny=args.tiny, base_gpu=args.base_gpu, progress=progress_printer(started))
    summary = {
        "profile": result.profile_path.name, "raw_data": result.raw_data_path.name,
        "points_measured": result.points_measured, "points_planned": result.points_planned,
        "points_failed": result.points_failed, "stopped_at_deadline": result.stopped_at_deadline,
        "elapsed_s": round(time.monotonic() - started, 1), "profile_validated": result.validated,
        "skipped_backends": result.skipped_backends, "mape": result.table_rows(),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    for row in result.table_rows():
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    failed = [r for r in _read(result.raw_data_path) if r.get("error")]
    for r in failed[:10]:
        print(f"  failed: {r.get('family')} {r.get('backend', '')} -> {r['error']}")
    print(json.dumps({k: v for k, v in summary.items() if k != "mape"}), flush=True)
    return 0


def _read(path: Path) -> list[dict]:
    from capsim.harness.api import read_raw

    return read_raw(path)


if __name__ == "__main__":
    sys.exit(main())
