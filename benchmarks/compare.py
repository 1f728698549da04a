"""Paired speed comparison of the working tree against an earlier commit: prints figures, asserts nothing.

    python benchmarks/compare.py 8603a02                     # 1K, bench-10k continuous and chunked, chat 10K
    python benchmarks/compare.py HEAD~3 --only 10k --pairs 9

On a shared machine the speed drifts by tens of percent within minutes, so two benchmark runs taken
apart cannot show a 10% change. This alternates fresh processes of the two versions (REF's
simulator/capsim, extracted with `git archive`, and the working tree's), in the order A B, B A,
A B, ..., each timing one `simulate()` call as benchmarks/speed.py does, and reports the median of
the per-pair ratios: drift slower than a pair cancels out. Both versions run the working tree's
workload files, and the first pair's results are fingerprinted (summary, requests and steps), so
the comparison also says whether the two versions give identical results.

Both versions run as plain Python from their sources on PYTHONPATH, even where `pip install .`
compiled the installed engine (setup.py): the ratio is the code's. speed.py measures the install.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from speed import CHILD, ROOT, cases, output_workloads, run_process

DEFAULT_CASES = ("1k", "10k", "10k-chunked", "chat-10k")


def extract(ref: str, into: Path) -> Path:
    """REF's simulator/ directory under `into` (its capsim package is what PYTHONPATH points at)."""
    archive = subprocess.run(["git", "archive", "--format=tar", ref, "simulator"], cwd=ROOT, capture_output=True,
                             check=False)
    if archive.returncode != 0:
        sys.exit(f"compare.py: git cannot read simulator/ at '{ref}': {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse odd members
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    return into / "simulator"


def time_once(spec: dict, simulator_dir: Path, limit_s: float) -> dict:
    """One simulate() in a fresh process, importing capsim from simulator_dir (whatever is
    installed, editable or not)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(simulator_dir), env.get("PYTHONPATH")]))
    run = run_process([sys.executable, str(CHILD), json.dumps(spec)], limit_s, capture=True, env=env)
    if run.data is None:
        reason = f"> {limit_s:.0f} s" if run.timed_out else run.error
        sys.exit(f"compare.py: a run of {spec['workload']} {spec['overrides']} failed: {reason}")
    if not Path(run.data.get("capsim", "")).resolve().is_relative_to(simulator_dir.resolve()):
        sys.exit(f"compare.py: a run imported capsim from {run.data.get('capsim')}, not from {simulator_dir}")
    return run.data


def compare(case, ref_dir: Path, pairs: int, limit_s: float, log) -> dict:
    spec = {"workload": case.workload, "overrides": case.overrides, "macro_steps": case.macro_steps}
    ref_s, new_s, digests = [], [], {}
    for i in range(pairs):
        first = {**spec, "digest": True} if i == 0 else spec
        order = (("ref", ref_dir, ref_s), ("new", ROOT / "simulator", new_s))
        for which, where, times in order if i % 2 == 0 else order[::-1]:
            data = time_once(first, where, limit_s)
            times.append(data["sim_s"])
            if data.get("digest"):
                digests[which] = data["digest"]
        log(f"  {case.label}: pair {i + 1}: ref {ref_s[-1]:.3f} s, working tree {new_s[-1]:.3f} s")
    ratios = [n / r for r, n in zip(ref_s, new_s)]
    return {"case": case.label, "ref_s": statistics.median(ref_s), "new_s": statistics.median(new_s),
            "ratio": statistics.median(ratios), "lo": min(ratios), "hi": max(ratios), "pairs": pairs,
            "identical": digests.get("ref") == digests.get("new") and "ref" in digests}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ref", help="the git commit (or branch, tag) to compare the working tree against")
    p.add_argument("--only", nargs="*", default=list(DEFAULT_CASES),
                   help="case keys, as benchmarks/speed.py's --only (default: 1k 10k 10k-chunked chat-10k)")
    p.add_argument("--pairs", type=int, default=5, help="alternating pairs of runs per case (default 5)")
    p.add_argument("--limit-s", type=float, default=600.0, help="give up on a run after this long (default 600)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.pairs < 1:
        sys.exit("compare.py: --pairs must be at least 1")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir = extract(args.ref, Path(tmp))
        known = {c.key: c for c in cases(argparse.Namespace(quick=False, reps=1), output_workloads(Path(tmp)))}
        unknown = [k for k in args.only if k not in known]
        if unknown:
            sys.exit(f"compare.py: unknown case {', '.join(unknown)}; known: {' '.join(known)}")
        rows = [compare(known[k], ref_dir, args.pairs, args.limit_s, log) for k in args.only]
    head = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    print(f"simulate() time, working tree ({head.stdout.strip() or 'unknown'}) against {args.ref}; "
          f"ratio: median over pairs of working tree / ref (below 1: faster)\n")
    print("| case | ref s | working tree s | ratio | range | pairs | results |\n| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['ref_s']:.3f} | {r['new_s']:.3f} | {r['ratio']:.3f} | {r['lo']:.3f}–{r['hi']:.3f} "
              f"| {r['pairs']} | {'identical' if r['identical'] else 'DIFFERENT'} |")


if __name__ == "__main__":
    main()
