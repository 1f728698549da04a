"""Hostile and careless input through the real command line (capsim.cli.app.main, in this process):
every example gives a clean error (exit 2, one short paragraph naming the file and field, no
traceback) or a correct result. The fuzzer (test_fuzz_cli.py) covers the classes at random."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import ROUND_GPU, run_main

BASE = """model: llama-3.1-8b
gpu: rtx4090
max_model_len: 8192
arrivals: {kind: poisson, rate_per_s: 5}
prompt_tokens: {dist: fixed, value: 100}
output_tokens: {dist: fixed, value: 20}
requests: 20
"""


def write(tmp_path, text: str, name: str = "w.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def edited(tmp_path, **lines) -> str:
    """BASE with top-level lines replaced (key=None removes one), as a file."""
    data = dict(line.split(": ", 1) for line in BASE.strip().splitlines())
    data.update(lines)
    return str(write(tmp_path, "".join(f"{k}: {v}\n" for k, v in data.items() if v is not None)))


def clean_error(result, *fragments: str, warnings: int = 0, problems: int = 1) -> str:
    """The error (after `warnings` warning lines), checked: exit 2, one line under 1 KB per problem."""
    code, out, err = result
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().split("\n")
    assert len(lines) == warnings + problems and all(w.startswith("warning: ") for w in lines[:warnings]), err
    assert all(len(line.encode()) < 1024 for line in lines[warnings:]), err
    err = "\n".join(lines[warnings:])
    assert err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def summary_of(result) -> dict:
    code, out, err = result
    assert code == 0, err
    s = json.loads(out)
    assert s["arrived"] == s["completed"] + s["rejected"] + s["unfinished"]
    return s


# ---------------------------------------------------------------- crashes and hangs

def test_prefix_caching_with_swap_preemption_runs_to_the_end():
    s = summary_of(run_main("run", "workloads/prefix-sharing.yaml", "--preemption", "swap", "--num-gpu-blocks", "300",
                            "--requests", "400", "--json"))
    assert s["completed"] == 400 and s["swapped_bytes"] > 0 and s["prefix_cache_hit_rate"] > 0.5


def test_a_split_that_leaves_no_prompt_token_is_refused(tmp_path):
    w = edited(tmp_path, prompt_tokens=None, output_tokens=None,
               split="{total_tokens: {dist: fixed, value: 1}, prompt_share: 0.5}")
    clean_error(run_main("run", w), "w.yaml", "split", "at least 2")


def test_split_totals_drawn_from_a_distribution_give_every_request_a_prompt_and_an_answer(tmp_path):
    w = edited(tmp_path, prompt_tokens=None, output_tokens=None, requests=300,
               split="{total_tokens: {dist: lognormal, mean: 2, sigma: 1.5}, prompt_share: 0.9}")
    s = summary_of(run_main("run", w, "--json"))
    assert s["completed"] == 300 and s["total_input_tokens"] >= 300 and s["total_output_tokens"] >= 300


@pytest.mark.parametrize("name, text, fragment", [
    ("huge.csv", "arrival_s,prompt_tokens,output_tokens\n0,1e20,5\n1,10,5\n", "row 1, column prompt_tokens"),
    ("int64.csv", f"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,{2**63},5\n", "row 2, column prompt_tokens"),
    ("fraction.csv", "arrival_s,prompt_tokens,output_tokens\n0,10.5,5\n", "10.5 is not allowed (a whole number"),
    ("number.jsonl", "5\n", "line 1: expected a JSON object"),
    ("bool.jsonl", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 3}\n', "column prompt_tokens"),
    ("deep.jsonl", "[" * 100_000 + "\n", "cannot parse the trace"),
    ("binary.csv", "\x00\xff\xfe garbage", "cannot parse the trace"),
])
def test_trace_cells_out_of_range_are_named_by_row_and_column(tmp_path, name, text, fragment):
    (tmp_path / name).write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    w = edited(tmp_path, arrivals=f"{{kind: trace, file: {name}}}", prompt_tokens="{dist: trace}",
               output_tokens="{dist: trace}", requests=None)
    clean_error(run_main("run", w), name, fragment)


def test_alias_bombs_are_refused_before_validation(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]  # 10^9 leaves
    for field in ("name", "requests"):
        bomb = "\n".join(lines) + f"\n{field}: *a8\n" + BASE.replace("requests: 20\n", "" if field == "requests" else "requests: 20\n")
        clean_error(run_main("run", write(tmp_path, bomb)), "w.yaml", "aliases are expanded")
    recursive = "a: &a [1, *a]\n" + BASE
    clean_error(run_main("run", write(tmp_path, recursive)), "w.yaml")


def test_values_quoted_in_errors_are_cut_short(tmp_path):
    err = clean_error(run_main("run", edited(tmp_path, name="[" + ", ".join(["xxxxxxxxxx"] * 5000) + "]")),
                      "w.yaml", "field 'name'")
    assert len(err) < 400


def test_absurdly_long_names_and_paths_are_quoted_short(tmp_path):
    long = "x" * 5000
    for args in (["run", "workloads/chat.yaml", "--gpu", long], ["run", "workloads/chat.yaml", "--gpu", long + ".yaml"],
                 ["run", long + ".yaml"], ["sweep", "workloads/chat.yaml", "--rate", long],
                 ["compare", "workloads/chat.yaml", "--kv-cache", long], ["capacity", "workloads/chat.yaml", "--slo", long]):
        assert len(clean_error(run_main(*args))) < 600  # the 5,000 characters are not repeated


def test_request_counts_beyond_memory_are_refused_with_an_estimate(tmp_path, monkeypatch):
    from capsim.spec import limits

    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 16 * 2**30)
    clean_error(run_main("run", "workloads/chat.yaml", "--requests", "1000000000000"),
                "field 'requests' (1,000,000,000,000)", "TiB of memory", "16.0 GiB is available")
    clean_error(run_main("run", edited(tmp_path, requests=1_000_000_000)), "w.yaml", "838.2 GiB")
    clean_error(run_main("run", edited(tmp_path, requests=None, duration_s=1e8)), "w.yaml", "field 'duration_s'")


def test_files_in_other_encodings_are_read_or_refused_by_name(tmp_path):
    write(tmp_path, "", "utf16.yaml").write_bytes(BASE.encode("utf-16"))  # with a byte-order mark: YAML allows it
    assert summary_of(run_main("run", tmp_path / "utf16.yaml", "--json"))["completed"] == 20
    write(tmp_path, "", "binary.yaml").write_bytes(b"\x00\x01\xff\xfe garbage")
    clean_error(run_main("run", tmp_path / "binary.yaml"), "binary.yaml", "not UTF-8 text")
    write(tmp_path, "", "gpu.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    clean_error(run_main("run", edited(tmp_path, gpu="gpu.yaml")), "gpu.yaml", "not UTF-8 text")


@pytest.mark.parametrize("lines, fragments", [
    ({"classes": "[]", "prompt_tokens": None, "output_tokens": None}, ["field 'classes'", "at least 1 item"]),
    ({"prompt_tokens": f"{{dist: fixed, value: {2**63}}}"}, ["field 'prompt_tokens.value'", "1000000000"]),
    ({"requests": None, "duration_s": "1e308"}, ["field 'duration_s'", "less than or equal to 100000000"]),
    ({"arrivals": "{kind: closed_loop, users: 2, think_time_s: 1e308}"}, ["field 'arrivals.think_time_s'"]),
])
def test_numbers_that_used_to_overflow_are_refused(tmp_path, lines, fragments):
    clean_error(run_main("run", edited(tmp_path, **lines)), "w.yaml", *fragments)


def test_capacity_where_no_load_meets_the_slo_still_names_the_gpu():
    code, out, err = run_main("capacity", "workloads/chat.yaml", "--slo", "ttft_p99_ms=0.001", "--requests", "30",
                              "--workers", "1", "--format", "csv")
    assert code == 0, err
    assert "rtx4090" in out and "capacity_rate_per_s" in out


def test_plot_of_damaged_files_names_the_file(tmp_path):
    out_dir = tmp_path / "run"
    assert run_main("run", "workloads/chat.yaml", "--requests", "20", "--out", out_dir)[0] == 0
    (out_dir / "summary.json").write_text("{bad")
    clean_error(run_main("plot", out_dir, "--out", tmp_path / "figs"), "summary.json", "not JSON")
    (out_dir / "summary.json").write_text("[1, 2]")
    clean_error(run_main("plot", out_dir, "--out", tmp_path / "figs"), "summary.json", "not a run summary")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text('{"over": "rate_per_s"}')
    (tmp_path / "sweep" / "sweep.csv").write_text("a,b\n1,2\n")
    clean_error(run_main("plot", tmp_path / "sweep", "--out", tmp_path / "figs2"), "sweep", "lack what the figures need")


@pytest.mark.parametrize("args", [
    ["tables", "--free-memory-gib", "nan"], ["run", "workloads/chat.yaml", "--rate", "inf"],
    ["run", "workloads/chat.yaml", "--horizon", "nan"], ["capacity", "workloads/chat.yaml", "--tolerance", "nan"],
    ["sweep", "workloads/chat.yaml", "--users", "1,2", "--think-time", "-inf"],
])
def test_non_finite_numbers_on_the_command_line_are_usage_errors(args):
    code, out, err = run_main(*args)
    assert code == 2 and "Traceback" not in err and "give a finite number" in err


def test_tables_and_plot_arguments_out_of_range_create_nothing(tmp_path):
    clean_error(run_main("tables", "--free-memory-gib", "1e308"), "--free-memory-gib", "at most 1,048,576")
    clean_error(run_main("tables", "--context", str(10**20)), "--context", "from 1 to 1,000,000,000")
    clean_error(run_main("plot", tmp_path / "missing"), "missing': not a folder")
    clean_error(run_main("plot", "workloads/chat.yaml"), "chat.yaml': not a folder")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- silent guesses

@pytest.mark.parametrize("lines, field", [
    ({"requests": "true"}, "requests"),
    ({"arrivals": "{kind: poisson, rate_per_s: true}"}, "arrivals.rate_per_s"),
    ({"prompt_tokens": "{dist: sequence, values: [100, true]}"}, "prompt_tokens.values[1]"),
    ({"max_model_len": "false"}, "max_model_len"),
])
def test_true_and_false_are_not_numbers(tmp_path, lines, field):
    clean_error(run_main("run", edited(tmp_path, **lines)), "w.yaml", f"field '{field}'", "'true'" if "true" in
                str(lines) else "'false'")


def test_true_is_not_a_number_in_a_gpu_profile(tmp_path):
    write(tmp_path, yaml.safe_dump(dict(ROUND_GPU, memory_bandwidth_bytes_per_s=True)), "gpu.yaml")
    clean_error(run_main("run", edited(tmp_path, gpu="gpu.yaml")), "gpu.yaml", "memory_bandwidth_bytes_per_s")


def test_duplicate_keys_are_errors_with_both_lines(tmp_path):
    clean_error(run_main("run", write(tmp_path, BASE + "requests: 5\n")), "w.yaml", "line 8", "duplicate key 'requests'",
                "first given at line 7")
    nested = BASE.replace("{kind: poisson, rate_per_s: 5}", "{kind: poisson, rate_per_s: 5, rate_per_s: 6}")
    clean_error(run_main("run", write(tmp_path, nested)), "duplicate key 'rate_per_s'")
    merged = BASE.replace("prompt_tokens: {dist: fixed, value: 100}", "prompt_tokens: &len {dist: fixed, value: 100}")
    merged = merged.replace("output_tokens: {dist: fixed, value: 20}", "output_tokens: {<<: *len, value: 20}")
    assert summary_of(run_main("run", write(tmp_path, merged), "--json"))["total_output_tokens"] == 400  # a merge
    # key's values may be overridden: that is what it is for


def test_requests_and_duration_s_together_end_at_whichever_comes_first(tmp_path):
    few = summary_of(run_main("run", edited(tmp_path, requests=5, duration_s=100), "--json"))
    short = summary_of(run_main("run", edited(tmp_path, requests=1000, duration_s=2), "--json"))
    assert few["arrived"] == 5 and 5 < short["arrived"] < 30  # 5 requests/s for 2 s
    replaced = summary_of(run_main("run", edited(tmp_path, requests=None, duration_s=2), "--requests", "40", "--json"))
    assert replaced["arrived"] == 40  # --requests replaces the workload's stopping rule


def test_max_model_len_above_the_models_context_is_refused(tmp_path):
    clean_error(run_main("run", edited(tmp_path, max_model_len=10_000_000)), "w.yaml", "field 'max_model_len'",
                "llama-3.1-8b's context length of 131,072 tokens")


@pytest.mark.parametrize("args, fragments", [
    (["--group", "nogroup"], ["--group 'nogroup'", "Groups: ", "decode"]),
    (["--only", "zzzz"], ["--only 'zzzz'", "no point id"]),
    (["--group", "decode", "--only", "h200"], ["in the chosen groups"]),
    (["--split", "train"], ["--split 'train'", "allowed: test, calibration"]),
    (["--split", "calibration", "--only", "llamacpp-pr4766"], ["--only 'llamacpp-pr4766'", "in the chosen split"]),
])
def test_validate_filters_that_match_nothing_are_errors(args, fragments):
    clean_error(run_main("validate", *args), *fragments)


def test_misspelled_keys_get_a_suggestion(tmp_path):
    clean_error(run_main("run", write(tmp_path, BASE.replace("requests:", "reqests:"))), "field 'reqests'",
                "Did you mean: requests?")
    nested = BASE.replace("rate_per_s", "rate_pr_s")
    clean_error(run_main("run", write(tmp_path, nested)), "field 'arrivals.rate_pr_s'", "Did you mean: rate_per_s?",
                "field 'arrivals.rate_per_s': required field is missing", problems=2)
    far = BASE.replace("requests:", "zzz: 1\nrequests:")
    clean_error(run_main("run", write(tmp_path, far)), "field 'zzz': unknown key; allowed here: allocator")


def test_every_problem_is_listed_at_once_each_on_its_own_line(tmp_path):
    text = BASE.replace("requests: 20", "reqests: 20\nmax_num_seqs: 64\nscheduler: {max_num_seq: 8, block_size: -1}")
    text = text.replace("rate_per_s: 5", "rate_per_s: 0")
    path = write(tmp_path, text)
    err = clean_error(run_main("run", path), problems=5)
    lines = err.removeprefix("error: ").split("\n")
    assert all(line.startswith(f"{path}: field '") for line in lines), err
    for fragment in ("field 'reqests': unknown key. Did you mean: requests?",
                     "field 'max_num_seqs': unknown key here; 'max_num_seqs' belongs in the 'scheduler' block",
                     "field 'scheduler.max_num_seq': unknown key. Did you mean: max_num_seqs",
                     "field 'scheduler.block_size': Input should be greater than 0 (got -1)",
                     "field 'arrivals.rate_per_s': Input should be greater than or equal to"):
        assert fragment in err, fragment
    # Checks across fields (once the fields are valid) are listed together too.
    both = BASE.replace("requests: 20", "split: {total_tokens: {dist: fixed, value: 9}, prompt_share: 0.5}")
    both = both.replace("{kind: poisson, rate_per_s: 5}", "{kind: all_at_once}") + "duration_s: 5\n"
    err = clean_error(run_main("run", write(tmp_path, both)), problems=2)
    assert "give either 'split' or 'prompt_tokens'/'output_tokens', not both" in err
    assert "arrivals 'all_at_once' sends 'requests' requests at once" in err


def test_unknown_names_are_listed_together(tmp_path):
    path = write(tmp_path, BASE.replace("llama-3.1-8b", "lama-3.1-8b").replace("rtx4090", "rtx4909"))
    clean_error(run_main("run", path), f"{path}: field 'model': unknown model 'lama-3.1-8b'. Did you mean: llama-3.1-8b",
                f"{path}: field 'gpu': unknown GPU 'rtx4909'. Did you mean: rtx4090", problems=2)
    # A name given on the command line replaces the file's, so only the model is left to report.
    clean_error(run_main("run", path, "--gpu", "h100"), "field 'model': unknown model", problems=1)


def test_meaningless_numbers_are_refused_with_their_range(tmp_path):
    clean_error(run_main("run", edited(tmp_path, arrivals="{kind: all_at_once, at_s: 1e308}")), "arrivals.at_s",
                "less than or equal to 100000000")
    clean_error(run_main("run", edited(tmp_path, mode="unit", unit_step_s="1e308")), "field 'unit_step_s'")
    write(tmp_path, yaml.safe_dump(dict(ROUND_GPU, memory_bandwidth_bytes_per_s=1e-300)), "slow.yaml")
    clean_error(run_main("run", edited(tmp_path, gpu="slow.yaml")), "slow.yaml",
                "field 'memory_bandwidth_bytes_per_s': Input should be greater than or equal to 1000000")


def test_a_trace_in_epoch_seconds_is_taken_from_its_first_arrival_and_says_so(tmp_path):
    rows = "".join(f"{1_700_000_000 + i},100,10\n" for i in range(20))
    write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n" + rows, "epoch.csv")
    w = edited(tmp_path, arrivals="{kind: trace, file: epoch.csv}", prompt_tokens="{dist: trace}",
               output_tokens="{dist: trace}", requests=None)
    code, out, err = run_main("run", w, "--json")
    s = summary_of((code, out, err))
    assert s["trace_time_offset_s"] == 1_700_000_000 and 0.9 < s["request_throughput"] < 1.1
    assert err.count("\n") == 1 and "first arrival is at 1,700,000,000.000 s" in err


# ---------------------------------------------------------------- messages

def test_install_hints_print_their_brackets(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if Dask were not installed
    err = clean_error(run_main("sweep", "workloads/chat.yaml", "--rate", "1,2", "--requests", "10",
                               "--dask-scheduler", "tcp://127.0.0.1:1"), "pip install 'capsim[dask]'", warnings=1)
    assert "[dask]" in err
    monkeypatch.setitem(sys.modules, "torch", None)
    clean_error(run_main("calibrate", "--device", "cpu", "--out", tmp_path / "calib"), "pip install '.[calibrate]'")
    assert not list(tmp_path.iterdir())  # nothing measured: no folder left behind


def test_names_in_brackets_print_as_written(tmp_path):
    code, out, err = run_main("run", edited(tmp_path, name="'[bold]x[/] {task}'"))
    assert code == 0 and "[bold]x[/] {task}: llama-3.1-8b" in out


def test_an_unknown_draft_model_names_the_file_and_field(tmp_path):
    w = edited(tmp_path, speculative="{draft_tokens: 2, acceptance_rate: 0.5, draft_model: bogus}")
    clean_error(run_main("run", w), "w.yaml", "field 'speculative.draft_model': unknown model 'bogus'")


def test_block_sizes_beyond_the_limit_or_the_memory_say_so(tmp_path):
    clean_error(run_main("run", edited(tmp_path, scheduler="{block_size: 100000}")), "field 'scheduler.block_size'",
                "less than or equal to 1024")
    squeezed = edited(tmp_path, scheduler="{block_size: 1024}", gpu_memory_utilization=0.66, engine="vllm")
    clean_error(run_main("run", squeezed), "field 'scheduler.block_size' is 1,024", "takes 128.0 MiB, more than the "
                "40.4 MiB left for the KV cache on rtx4090", "use a smaller block_size")


def test_every_path_in_a_workload_is_relative_to_the_workload_file(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    write(folder, yaml.safe_dump(dict(ROUND_GPU, name="sub-gpu")), "gpu.yaml")
    write(folder, "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},50,5\n" for i in range(10)), "t.csv")
    poisson = write(folder, BASE.replace("gpu: rtx4090", "gpu: gpu.yaml"), "poisson.yaml")
    trace = write(folder, BASE.replace("gpu: rtx4090", "gpu: gpu.yaml").replace(
        "{kind: poisson, rate_per_s: 5}", "{kind: trace, file: t.csv}").replace("requests: 20\n", ""), "trace.yaml")
    for w in (poisson, trace):  # run from the repository root, not the workload's folder
        assert summary_of(run_main("run", w, "--json"))["setup"]["gpu"] == "sub-gpu"
    for args in (["sweep", poisson, "--rate", "1,2"], ["compare", trace, "--kv-cache", "fp16", "--kv-cache", "fp8"],
                 ["capacity", poisson, "--slo", "ttft_p99_ms=60000", "--tolerance", "0.5"]):
        code, out, err = run_main(*args, "--workers", "1", "--format", "csv")
        assert code == 0 and "sub-gpu" in out, err


def test_dask_warns_before_connecting_and_fails_fast_on_no_scheduler():
    code, out, err = run_main("sweep", "workloads/chat.yaml", "--rate", "1,2", "--requests", "10",
                              "--dask-scheduler", "tcp://127.0.0.1:1")
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("warning: --dask-scheduler: the cluster runs capsim's simulations")
    assert lines[1].startswith("error: --dask-scheduler 'tcp://127.0.0.1:1': cannot connect")


def test_a_dask_address_that_is_a_web_server_or_another_service_fails_within_the_timeout(monkeypatch):
    import http.server
    import socketserver
    import threading

    import capsim.planning.parallel

    monkeypatch.setattr(capsim.planning.parallel, "DASK_CONNECT_TIMEOUT_S", 1)
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)

    class Junk(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(b"\xff" * 64)  # 'a message of 16 EiB follows'

    junk = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Junk)
    for server in (web, junk):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for server, fragment in ((web, "no Dask scheduler answered within 1 s"), (junk, "not a Dask scheduler")):
            address = f"tcp://127.0.0.1:{server.server_address[1]}"
            clean_error(run_main("sweep", "workloads/chat.yaml", "--rate", "1,2", "--requests", "10",
                                 "--dask-scheduler", address), fragment, warnings=1)
    finally:
        for server in (web, junk):
            server.shutdown()
            server.server_close()


def test_users_that_could_only_resend_rejected_requests_for_ever_are_refused(tmp_path):
    # closed loop, no think time, duration-bound, every request over max_model_len: before, the users
    # resent at the same instant for ever (the run never ended)
    w = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_model_len": 1000, "duration_s": 10,
         "arrivals": {"kind": "closed_loop", "users": 2, "think_time_s": 0},
         "prompt_tokens": {"dist": "fixed", "value": 900}, "output_tokens": {"dist": "uniform", "min": 200, "max": 300}}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(w))
    clean_error(run_main("run", path), "every request is at least 1,100 tokens", "max_model_len 1,000")


# ---------------------------------------------------------------- runs without a file, and their output files

FLAG_RUN = ("run", "--model", "llama-3.1-8b", "--gpu", "rtx4090", "--requests", "20", "--prompt-tokens", "100",
            "--output-tokens", "20", "--rate", "5")


@pytest.mark.parametrize("args, fragments", [
    (("--output-tokens", "lognormal:"), ["--output-tokens 'lognormal:': not a length distribution", "allowed: N"]),
    (("--output-tokens", "uniform:5:1"), ["max must be >= min"]),
    (("--output-tokens", "nan"), ["--output-tokens 'nan'"]),
    (("--output-tokens", "lognormal:1e309:1"), ["mean: Input should be a finite number"]),
    (("--prompt-tokens", "-5"), ["--prompt-tokens '-5'"]),
    (("--prompt-tokens", "99999999999999"), ["less than or equal to 1000000000"]),
    (("--users", "10"), ["--rate: the arrivals are 'closed_loop'"]),
    (("--think-time-s", "3"), ["--think-time-s: the arrivals are 'poisson'"]),
    (("--set", "schedular.kind=x"), ["field 'schedular': unknown key. Did you mean: scheduler"]),
    (("--set", "model.x=1"), ["--set model.x: 'model' holds a value"]),
    (("--set", "a..b=1"), ["--set 'a..b=1': give KEY=VALUE"]),
    (("--set", "tp=!!python/object:os.system ls"), ["--set tp: not valid YAML"]),
    (("--trace-seconds", "5"), ["--trace-seconds limits the --trace file, and no --trace was given"]),
    (("--trace-events", "10"), ["--trace-events limits the --trace file"]),
    (("--format", "parquet"), ["--format says what --out writes"]),
])
def test_bad_set_up_flags_name_the_flag(args, fragments):
    clean_error(run_main(*FLAG_RUN, *args), *fragments)


def _no_strays(tmp_path, before: set) -> None:
    """Nothing written: no file or folder beyond those there before (temporary ones included)."""
    assert {p.relative_to(tmp_path) for p in tmp_path.rglob("*")} == before


@pytest.mark.parametrize("option", ["--report", "--trace", "--save-workload"])
def test_file_options_that_cannot_be_written_are_refused_before_the_run(tmp_path, option):
    """A folder, a path below a file, the --out folder itself, a file inside --out or --plots
    (written whole), a place that cannot be written: each refused before the run, leaving nothing."""
    pytest.importorskip("plotly") if option == "--report" else None
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    before = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    out = tmp_path / "out"
    cases = [((option, tmp_path / "adir"), "is a folder"),
             ((option, tmp_path / "afile" / "x"), "afile is a file, not a folder"),
             ((option, "/proc/capsim/x"), "cannot write there"),
             (("--plots", tmp_path / "figs", option, tmp_path / "figs" / "x"), "inside the output folder"),
             (("--out", out, option, out), "the --out folder itself" if option == "--trace" else "the same path")]
    if option != "--trace":  # a trace may sit at the --out folder's top (run_files); the others may not
        cases.append((("--out", out, option, out / "summary.json"), "inside the output folder"))
    for args, fragment in cases:
        clean_error(run_main(*FLAG_RUN, *args), f"{option} ", fragment)
        _no_strays(tmp_path, before)


def test_two_file_options_on_one_path_are_refused(tmp_path):
    pytest.importorskip("plotly")
    same = tmp_path / "x.out"
    clean_error(run_main(*FLAG_RUN, "--report", same, "--save-workload", same), "--save-workload", "the same file as --report")
    clean_error(run_main(*FLAG_RUN, "--report", same, "--trace", same), "--trace", "the same file as --report")
    # the workload file would create the folder the trace is then refused at (found by the CLI fuzzer)
    nested = ("--trace", tmp_path / "out", "--save-workload", tmp_path / "out" / "w.yaml")
    clean_error(run_main(*FLAG_RUN, *nested), "--trace", "--save-workload", "one lies inside the other")
    clean_error(run_main(*FLAG_RUN, *nested[2:], "--trace", tmp_path / "out" / "w.yaml" / "t.json"), "one lies inside")
    clean_error(run_main(*FLAG_RUN, "--save-workload", tmp_path / "out", "--report", tmp_path / "out" / "r.html"),
                "--report", "--save-workload", "one lies inside the other")
    assert list(tmp_path.iterdir()) == []


def test_capacitys_users_switch_and_think_time_say_how_they_are_used():
    flags = ("--model", "llama-3.1-8b", "--gpu", "rtx4090", "--requests", "20", "--prompt-tokens", "100",
             "--output-tokens", "20", "--slo", "ttft_p99_ms=500")
    clean_error(run_main("capacity", *flags, "--users", "64"), "--users 64: capacity's --users is a switch",
                "--start 64")
    clean_error(run_main("capacity", *flags, "--think-time-s", "1"), "--think-time-s: the search varies the request "
                "rate", "add --users")
