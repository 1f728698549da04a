"""Speed and memory of capsim: prints figures, asserts nothing (benchmarks/README.md explains them).

    python benchmarks/speed.py              # everything, medians of 5 (10K), 3 (100K), up to 3 (1M) runs
    python benchmarks/speed.py --quick      # one run each, 1M and the 100K/1M CLI runs left out
    python benchmarks/speed.py --markdown   # the tables as markdown (README.md's "Speed" section)

Every run is a fresh process, so peak RSS is per run (the process's own rusage from wait4):
`benchmarks/sim_once.py` times `capsim.simulate()` inside the process (imports excluded), and
`capsim run WORKLOAD > /dev/null` is timed whole, as a user runs it. A run longer than --limit-s
is killed and reported as "> limit".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path

import yaml
from capsim.compiled import PURE_PYTHON_VARIABLE, is_compiled
from speed_tables import MIB, OUTPUT_SCALING_RATE, Case, Measured, Run, report

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "sim_once.py"
BENCH_10K, BENCH_1M = "workloads/bench-10k.yaml", "workloads/bench-1m.yaml"


# ---------------------------------------------------------------- running one process

def run_process(argv: list[str], limit_s: float, capture: bool, env: dict | None = None) -> Run:
    """Run argv in its own process group (with `env`, or this one's); kill the group at limit_s.
    Wall time and peak RSS (ru_maxrss of this child alone, via wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out if capture else subprocess.DEVNULL, stderr=err,
                                start_new_session=True, env=env)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(limit_s, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        run = Run(wall, usage.ru_maxrss * 1024, killed.is_set(), proc.returncode)
        if capture and proc.returncode == 0:
            run.data = json.loads(out.read().decode().strip().splitlines()[-1])
        elif proc.returncode != 0 and not run.timed_out:
            last = err.read().decode(errors="replace").strip().splitlines()[-1:]
            run.error = last[0] if last else f"exit status {proc.returncode}"
        return run


def capsim_command() -> list[str]:
    script = Path(sys.executable).parent / "capsim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "capsim"]


def cli_args(overrides: dict) -> list[str]:
    args = []
    for key, value in overrides.items():
        if key == "macro_steps":
            continue
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def measure(case: Case, limit_s: float, rep_budget_s: float, log) -> Measured:
    """case.reps simulate() runs, then case.reps CLI runs; a run over the limit (or over
    rep_budget_s) ends the repetitions."""
    m = Measured(case)
    spec = json.dumps({"workload": case.workload, "overrides": case.overrides, "macro_steps": case.macro_steps,
                       "digest": case.digest})
    for _ in range(case.reps):
        run = run_process([sys.executable, str(CHILD), spec], limit_s, capture=True)
        m.sims.append(run)
        log(f"  {case.label}: simulate " + describe_run(run, limit_s))
        if run.data is None or run.wall_s > rep_budget_s:
            break
    if case.cli and m.ok_sims():
        argv = capsim_command() + ["run", case.workload] + cli_args(case.overrides)
        if not case.macro_steps:
            argv.append("--step-by-step")
        for _ in range(case.reps):
            run = run_process(argv, limit_s, capture=False)
            m.clis.append(run)
            log(f"  {case.label}: capsim run {describe_run(run, limit_s)}")
            if run.timed_out or run.returncode != 0 or run.wall_s > rep_budget_s:
                break
    return m


def describe_run(run: Run, limit_s: float) -> str:
    if run.timed_out:
        return f"> limit ({limit_s:.0f} s)"
    if run.returncode != 0:
        return f"FAILED: {run.error}"
    sim = f"sim {run.data['sim_s']:.3f} s, " if run.data else ""
    return f"{sim}process {run.wall_s:.3f} s, peak RSS {run.rss_bytes / MIB:.0f} MiB"


# ---------------------------------------------------------------- the cases

def output_workloads(directory: Path) -> dict[str, str]:
    """bench-10k with output lengths x1 and x4 (prompt lengths, request count and seed kept)."""
    base = yaml.safe_load((ROOT / BENCH_10K).read_text())
    split = base.pop("split")
    lo, hi = split["total_tokens"]["min"], split["total_tokens"]["max"]
    share = split["prompt_share"]
    paths = {}
    for factor in (1, 4):
        w = dict(base, name=f"bench-10k-output-x{factor}",
                 description=f"bench-10k's lengths, output x{factor}, {OUTPUT_SCALING_RATE} requests/s")
        w["arrivals"] = {"kind": "poisson", "rate_per_s": OUTPUT_SCALING_RATE}
        w["prompt_tokens"] = {"dist": "uniform", "min": round(lo * share), "max": round(hi * share)}
        w["output_tokens"] = {"dist": "uniform", "min": round(lo * (1 - share)) * factor,
                              "max": round(hi * (1 - share)) * factor}
        path = directory / f"output-x{factor}.yaml"
        path.write_text(yaml.safe_dump(w, sort_keys=False))
        paths[f"x{factor}"] = str(path)
    return paths


def cases(args, outputs: dict[str, str]) -> list[Case]:
    q = args.quick
    reps = (lambda full, quick: args.reps or (quick if q else full))
    sbs_requests = 1000 if q else 10000
    return [
        Case("1k", "bench-10k, 1K requests", BENCH_10K, {"requests": 1000}, reps(5, 1), digest=sbs_requests == 1000),
        Case("10k", "bench-10k continuous", BENCH_10K, {}, reps(5, 1), digest=sbs_requests == 10000),
        Case("10k-chunked", "bench-10k chunked 512", BENCH_10K, {"scheduler": "chunked", "max_num_batched_tokens": 512},
             reps(5, 1)),
        Case("sbs", f"bench-10k step-by-step, {sbs_requests // 1000}K", BENCH_10K, {"requests": sbs_requests},
             reps(1, 1), cli=False, macro_steps=False, digest=True),
        Case("chat-10k", "bench-1m, 10K requests", BENCH_1M, {"requests": 10000}, reps(5, 1)),
        Case("chat-100k", "bench-1m, 100K requests", BENCH_1M, {"requests": 100000}, reps(3, 1), cli=not q),
        Case("chat-1m", "bench-1m, 1M requests", BENCH_1M, {"requests": 1_000_000}, reps(3, 1), cli=not q),
        Case("out-x1", f"output x1 (10K, {OUTPUT_SCALING_RATE}/s)", outputs["x1"], {}, reps(3, 1), cli=False),
        Case("out-x4", f"output x4 (10K, {OUTPUT_SCALING_RATE}/s)", outputs["x4"], {}, reps(3, 1), cli=False),
    ]

def machine() -> list[tuple[str, str]]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("numpy", "simpy", "pandas"))
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return [("date", datetime.now().astimezone().isoformat(timespec="minutes")),
            ("machine", f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}"),
            ("software", f"Python {platform.python_version()}, {versions}, capsim {metadata.version('capsim')} "
                         f"(git {commit})"),
            ("engine", "compiled by mypyc" if is_compiled() else
             f"plain Python ({PURE_PYTHON_VARIABLE}=1 or not compiled at install)")]


def sources_digest() -> str:
    """Fingerprint of capsim's source files: others may edit the tree while a long benchmark runs."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "simulator" / "capsim").rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml", ".json"):
            h.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return h.hexdigest()[:12]

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one run per case; no 1M case; no CLI runs for 100K")
    p.add_argument("--reps", type=int, help="runs per case (default 5 for 10K, 3 for 100K and 1M)")
    p.add_argument("--limit-s", type=float, default=300.0, help="kill a run after this long (default 300)")
    p.add_argument("--rep-budget-s", type=float, default=120.0,
                   help="stop repeating a case once one of its runs took longer than this (default 120)")
    p.add_argument("--only", nargs="*", help="case keys to run (1k 10k 10k-chunked sbs chat-10k chat-100k "
                                             "chat-1m out-x1 out-x4); the others show as not run")
    p.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    p.add_argument("--json", type=Path, help="also write every run's raw figures here")
    p.add_argument("--from-json", type=Path, help="print the tables of a --json file instead of measuring")
    return p.parse_args(argv)


def measure_all(args, command: str) -> dict:
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    saved = {"header": machine(), "command": command, "loads": [os.getloadavg()[0]], "ms": [],
             "sources": sources_digest()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(args, output_workloads(Path(tmp))):
            if (args.only and case.key not in args.only) or (args.quick and not args.only and case.key == "chat-1m"):
                saved["ms"].append(Measured(case, skipped=True))
                continue
            saved["ms"].append(measure(case, args.limit_s, args.rep_budget_s, log))
            saved["loads"].append(os.getloadavg()[0])
    saved["seconds"] = time.perf_counter() - started
    before, after = saved["sources"], sources_digest()
    saved["header"].append(("capsim sources (sha256)", before if before == after else
                            f"{before} at the start, {after} at the end: CHANGED WHILE MEASURING"))
    log(f"measured in {saved['seconds']:.0f} s")
    return saved


def to_json(saved: dict) -> str:
    ms = [{"case": m.case.__dict__, "skipped": m.skipped, "sims": [r.__dict__ for r in m.sims],
           "clis": [r.__dict__ for r in m.clis]} for m in saved["ms"]]
    return json.dumps(dict(saved, ms=ms), indent=1)


def from_json(text: str) -> dict:
    saved = json.loads(text)
    saved["header"] = [tuple(h) for h in saved["header"]]
    saved["ms"] = [Measured(Case(**m["case"]), [Run(**r) for r in m["sims"]], [Run(**r) for r in m["clis"]],
                            m["skipped"]) for m in saved["ms"]]
    return saved


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.from_json:
        saved = from_json(args.from_json.read_text())
    else:
        command = "python benchmarks/speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
        saved = measure_all(args, command.strip())
        if args.json:
            args.json.write_text(to_json(saved))
    header = saved["header"] + [("command", saved["command"]), ("measuring took", f"{saved['seconds']:.0f} s")]
    print(report(saved["ms"], header, saved["loads"], args.markdown))


if __name__ == "__main__":
    main()
