"""The set-up options: one definition every command takes (run, compare, sweep, capacity), a run
said with flags only, and --save-workload's file running the same simulation."""

from __future__ import annotations

import json

import pytest
import typer
from helpers import REPO, run_main

from capsim.api import load_workload, simulate
from capsim.cli.app import app
from capsim.cli.common import SETUP_OPTIONS, workload_for
from capsim.cli.planning import LOAD_AXES

FLAGS = ["--model", "llama-3.1-8b", "--gpu", "h100", "--users", "16", "--think-time-s", "0.5",
         "--prompt-tokens", "uniform:200:400", "--output-tokens", "lognormal:60:0.5", "--requests", "120",
         "--slo", "ttft_p99_ms=2000"]


def _flags(command: str) -> dict[str, str]:
    """Each of the command's options by parameter name -> its flags, as Typer builds them."""
    group = typer.main.get_command(app)
    cmd = group.get_command(group.context_class(group), command)
    return {p.name: " ".join(p.opts + p.secondary_opts) for p in cmd.params if p.param_type_name == "option"}


def test_every_command_takes_the_same_set_up_flags():
    run = _flags("run")
    for option in SETUP_OPTIONS:
        assert option.name in run, option.name
    for command in ("compare", "sweep", "capacity", "plan"):
        flags = _flags(command)
        for option in SETUP_OPTIONS:
            if command != "compare" and option.name in LOAD_AXES:
                continue  # sweep and capacity vary the load themselves (a --rate/--users range, a search)
            assert option.name in flags and flags[option.name] == run[option.name], (command, option.name)


def test_a_run_said_with_flags_only(tmp_path):
    code, out, err = run_main("run", *FLAGS, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["setup"]["workload"] == "command-line" and s["setup"]["model"] == "llama-3.1-8b"
    assert s["arrived"] == 120 and "p99_ttft_ms" in s


def test_saved_workload_runs_the_same_simulation(tmp_path):
    saved, first, again = tmp_path / "w.yaml", tmp_path / "first", tmp_path / "again"
    code, _, err = run_main("run", *FLAGS, "--save-workload", saved, "--out", first, "--steps")
    assert code == 0 and f"wrote {saved}" in err, err
    assert run_main("run", saved, "--out", again, "--steps")[0] == 0
    for name in ("requests.csv", "steps.csv"):
        assert (first / name).read_bytes() == (again / name).read_bytes()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (first, again)]
    for s in summaries:
        s.pop("provenance", None)
    assert summaries[0] == summaries[1]
    # The same by RunResult.fingerprint(): the config the CLI composes from the flags, and the
    # saved file's (both as config objects, so that the next-step text names no file in either).
    flags = {"model": "llama-3.1-8b", "gpu": "h100", "users": 16, "think_time_s": 0.5,
             "prompt_tokens": "uniform:200:400", "output_tokens": "lognormal:60:0.5", "requests": 120}
    job = workload_for(None, flags, ["ttft_p99_ms=2000"])
    first_run = simulate(job.workload, **job.overrides)
    assert first_run.fingerprint() == simulate(load_workload(saved)).fingerprint()
    assert first_run.summary["arrived"] == 120


def test_flags_over_a_file_and_the_file_saved_with_them(tmp_path):
    saved = tmp_path / "chat-64.yaml"
    code, out, err = run_main("run", REPO / "workloads/chat.yaml", "--users", "64", "--requests", "200",
                              "--max-num-seqs", "32", "--save-workload", saved, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["setup"]["workload"] == "chat" and s["setup"]["max_num_seqs"] == 32 and s["arrived"] == 200
    text = saved.read_text()
    assert "closed_loop" in text and "users: 64" in text and "max_num_seqs: 32" in text and "rate_per_s" not in text
    code, again, _ = run_main("run", saved, "--json")
    a, b = json.loads(out), json.loads(again)
    assert {k: v for k, v in a.items() if k != "provenance"} == {k: v for k, v in b.items() if k != "provenance"}


def test_missing_set_up_is_one_message():
    code, _, err = run_main("run", "--model", "llama-3.1-8b", "--rate", "2")
    assert code == 2 and "Traceback" not in err
    assert "--gpu" in err and "--prompt-tokens" in err and "--output-tokens" in err


@pytest.mark.parametrize("args", [
    ["sweep", "--users", "2,8"],
    ["capacity", "--users", "--start", "4", "--tolerance", "0.5", "--points-per-round", "2", "--slo", "tpot_p99_ms=8"],
    ["compare", "--users", "8", "--gpu", "h100", "--gpu", "a100-80gb"],
])
def test_planning_commands_without_a_file(args):
    common = ["--model", "llama-3.1-8b", "--prompt-tokens", "300", "--output-tokens", "50", "--requests", "60",
              "--workers", "1", "--format", "json"]
    if args[0] != "compare":
        common += ["--gpu", "h100", "--tp", "2"]
    if args[0] != "capacity":
        common += ["--slo", "ttft_p99_ms=5000"]
    code, out, err = run_main(*args, *common)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all(r["model"] == "llama-3.1-8b" for r in rows)
    if args[0] == "compare":
        assert {r["gpu"] for r in rows} == {"h100-sxm", "a100-80g"}
    else:
        assert all(r["tp"] == 2 for r in rows)


def test_a_hugging_face_config_as_the_model():
    config = REPO / "tests/data/hf_configs/qwen3-30b-a3b.json"
    code, out, err = run_main("models", "--from", config)
    assert code == 0, err
    assert "qwen3-30b-a3b" in out and "30.53" in out and "MoE 8 of 128 experts of 768" in out
    code, out, err = run_main("models", "--from", config, "--format", "json")
    assert json.loads(out)["qwen3-30b-a3b"]["moe"]["num_experts"] == 128
    code, out, err = run_main("run", "--model", config, "--gpu", "h100", "--rate", "2", "--prompt-tokens", "500",
                              "--output-tokens", "50", "--requests", "40", "--json")
    assert code == 0, err
    assert json.loads(out)["setup"]["model"] == "qwen3-30b-a3b"
    code, _, err = run_main("models", "--from", REPO / "workloads" / "chat.yaml")
    assert code == 2 and "cannot read it as a Hugging Face config.json" in err


def test_a_config_json_can_be_one_of_several_compared_models():
    """A config.json among compared models is read by the catalogue (load_model) and labelled by its name."""
    config = REPO / "tests/data/hf_configs/qwen3-8b.json"
    code, out, err = run_main("compare", REPO / "workloads/chat.yaml", "--model", config, "--model", "llama-3.1-8b",
                              "--gpu", "h100", "--requests", "30", "--workers", "1", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["rows"] if isinstance(json.loads(out), dict) else json.loads(out)
    assert {r["model"] for r in rows} == {"qwen3-8b", "llama-3.1-8b"}
    code, _, err = run_main("compare", REPO / "workloads/chat.yaml", "--model", config, "--model", "nope.json",
                            "--requests", "30")
    assert code == 2 and "nope.json: cannot read it as a Hugging Face config.json" in err, err


def test_a_config_json_as_a_workload_files_model_is_read_from_the_files_folder(tmp_path):
    folder = tmp_path / "models" / "Qwen3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((REPO / "tests/data/hf_configs/qwen3-8b.json").read_text())
    (tmp_path / "w.yaml").write_text("model: models/Qwen3-8B/config.json\ngpu: h100\narrivals: {kind: poisson, "
                                     "rate_per_s: 2}\nprompt_tokens: {dist: fixed, value: 300}\n"
                                     "output_tokens: {dist: fixed, value: 30}\nrequests: 30\n")
    code, out, err = run_main("run", tmp_path / "w.yaml", "--json")  # run from the repository, not tmp_path
    assert code == 0, err
    assert json.loads(out)["setup"]["model"] == "qwen3-8b"
    (tmp_path / "w.yaml").write_text((tmp_path / "w.yaml").read_text().replace("Qwen3-8B", "Qwen9"))
    code, _, err = run_main("run", tmp_path / "w.yaml")
    assert code == 2 and "field 'model'" in err and "Qwen9/config.json: cannot read it" in err, err


@pytest.mark.parametrize("load", [["--rate", "4"], ["--users", "4", "--think-time-s", "0.5"]])
def test_a_flag_only_runs_next_command_runs_as_printed(load):
    """Without a file the verdict's `capsim capacity ...` repeats the set-up flags (less the load
    the search varies), so it runs; before, it named a file 'workload' that does not exist."""
    import shlex

    flags = ["--model", "llama-3.1-8b", "--gpu", "h100", "--prompt-tokens", "200", "--output-tokens", "lognormal:30:0.5",
             "--requests", "40", "--no-prefix-caching", "--set", "scheduler.watermark=0.02", *load]
    code, out, err = run_main("run", *flags, "--json", "--slo", "ttft_p99_ms=60")  # tight: a short search
    assert code == 0, err
    steps = json.loads(out)["verdict"]["next_steps"]
    command = next(s.split("`")[1] for s in steps if "`capsim capacity" in s)
    words = shlex.split(command)
    assert words[:2] == ["capsim", "capacity"] and "workload" not in words and "--rate" not in words
    assert ("--users" in words) == ("--users" in load) and "--no-prefix-caching" in words
    code, out, err = run_main(*words[1:], "--tolerance", "0.5", "--workers", "1", "--format", "json")
    assert code == 0, err
    assert json.loads(out)


def test_a_seeds_runs_next_command_names_its_file(tmp_path):
    code, out, err = run_main("run", REPO / "workloads" / "chat.yaml", "--requests", "40", "--seeds", "2",
                              "--workers", "1", "--out", tmp_path / "o")
    assert code == 0, err
    steps = json.loads((tmp_path / "o" / "summary.json").read_text())["verdict"]["next_steps"]
    assert any(f"`capsim capacity {REPO / 'workloads' / 'chat.yaml'} --requests 40 " in s for s in steps), steps
