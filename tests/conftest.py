"""Shared fixtures: the round-number GPU (expected times are mental arithmetic) and the tiny model
as validated objects and as profile files, and capsim's command line on a wide console. The data
and factories they use are in helpers.py, which tests import as a module."""

from __future__ import annotations

import pytest
from capsim.spec.config import HardwareProfile, ModelSpec
from helpers import ROUND_GPU, TINY_MODEL
from hypothesis import settings

# `pytest --hypothesis-profile=long`: every property test that does not fix its own number of
# examples (the command-line fuzzer in test_fuzz_cli.py among them) draws 2,000 instead of 100.
settings.register_profile("long", max_examples=2000)


@pytest.fixture
def round_gpu() -> HardwareProfile:
    return HardwareProfile.model_validate(ROUND_GPU)


@pytest.fixture
def tiny_model() -> ModelSpec:
    return ModelSpec.model_validate(TINY_MODEL)


@pytest.fixture
def round_gpu_file(tmp_path):
    """The round-number GPU as a profile YAML, for workloads (`gpu: <path>`)."""
    import yaml

    path = tmp_path / "round-gpu.yaml"
    path.write_text(yaml.safe_dump(ROUND_GPU))
    return str(path)


@pytest.fixture
def priced_gpu_file(tmp_path):
    """The round-number GPU with a price of $2.00 per GPU-hour, as a profile YAML."""
    import yaml

    path = tmp_path / "priced-round-gpu.yaml"
    path.write_text(yaml.safe_dump(dict(ROUND_GPU, price_per_hour_usd=2.0)))
    return str(path)


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """capsim's main() in this process: (exit code, stdout, stderr), on a 200-column console."""
    import sys

    from capsim.cli.app import main
    from capsim.cli.common import err, out

    monkeypatch.setattr(out, "width", 200)
    monkeypatch.setattr(err, "width", 200)

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["capsim", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
