"""Where a result came from (summary.json's `provenance`): capsim's version and git revision, the
date, the resolved workload (content and hash), the profiles, the SLO, the load and the price.

Kept apart from the summary's figures: the figures are a pure function of the inputs and the seed
(byte-identical on every rerun), the provenance also records when and with which build they were made.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def capsim_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("capsim")
    except PackageNotFoundError:
        return "unknown (not installed)"


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The commit of the checkout capsim runs from (an editable install or a source tree), or None
    for an installed wheel, which has no repository beside it."""
    here = Path(__file__).resolve().parent
    if not any((parent / ".git").exists() for parent in here.parents):
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def workload_record(workload) -> dict:
    """The resolved workload as run (file values, command-line overrides and engine defaults applied)
    and the SHA-256 of its canonical JSON, so two results can be checked for the same input."""
    content = workload.model_dump(mode="json")
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return {"sha256": hashlib.sha256(canonical.encode()).hexdigest(), "content": content}


def provenance(setup, summary: dict, objectives) -> dict:
    """summary.json's `provenance` block for a run of `setup` (simulation.Setup)."""
    return {
        "capsim_version": capsim_version(),
        "git_revision": git_revision(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": setup.source,
        "workload": workload_record(setup.workload),
        "hardware_profile": setup.hardware.name,
        "engine_profile": setup.engine.name if setup.engine else None,
        "slo": objectives.as_dict(),
        "load": summary.get("cost", {}).get("load"),
        "price_per_gpu_hour_usd": summary.get("cost", {}).get("price_per_gpu_hour_usd"),
        "saturated": summary.get("saturated", False),
    }
