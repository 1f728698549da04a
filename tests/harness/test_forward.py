"""`capsim calibrate --forward` on CPU: the plumbing of whole forward passes (measure, raw rows,
comparison with the cost model), the device script's no-install path, and the pricing of a step
against a hand calculation. CPU times are never asserted: capsim models GPUs, so the CPU run
proves the plumbing only."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import yaml
from capsim.errors import CapsimError
from helpers import ROUND_GPU
from harness_helpers import DEVICE_IMAGE_SITECUSTOMIZE, REPO, run_with_sitecustomize

torch = pytest.importorskip("torch")

TINY_LLAMA = {"name": "tiny-llama", "source": "test", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
              "num_kv_heads": 2, "head_dim": 16, "intermediate_size": 128, "mlp": "gated", "vocab_size": 256,
              "max_context_tokens": 4096}


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny-llama.yaml"
    path.write_text(yaml.safe_dump(TINY_LLAMA))
    return path


@pytest.fixture(scope="module")
def cli_run(tiny_yaml, tmp_path_factory):
    """The CI command itself: `capsim calibrate --forward MODEL --device cpu --tiny`."""
    from capsim.cli.app import app
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("forward")
    result = CliRunner().invoke(app, ["calibrate", "--forward", str(tiny_yaml), "--device", "cpu", "--tiny",
                                      "--out", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result, out


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_planned_step_is_measured_with_its_full_shape(cli_run):
    from capsim.validation.forward import ROW_FIELDS
    from capsim.harness.forward_grid import forward_grid, plan_steps

    _, out = cli_run
    rows = _rows(out / "forward-tiny-llama.jsonl")
    planned = plan_steps(forward_grid("cpu", tiny=True), kv_bytes_per_token=0, max_kv_bytes=1)
    assert [(r["kind"], tuple(r["decode_contexts"]), tuple(map(tuple, r["prefill"]))) for r in rows] == \
        [(s.kind, s.decode_contexts, s.prefill) for s in planned]
    assert {r["kind"] for r in rows} == {"decode", "prefill", "mixed"}
    for r in rows:
        assert set(ROW_FIELDS) <= set(r) and "error" not in r
        assert r["family"] == "forward" and r["device"] == "cpu" and r["dtype"] == "fp32" and r["layers"] == 2
        assert len(r["times_s"]) == r["reps"] == 2 and all(t > 0 for t in r["times_s"])
        assert r["time_s"] == pytest.approx(sorted(r["times_s"])[1] / 2 + sorted(r["times_s"])[0] / 2)
        assert r["num_tokens"] == len(r["decode_contexts"]) + r["chunk_tokens"]
        assert r["chunk_tokens"] == sum(n for _, n in r["prefill"])
        assert r["model_spec"]["hidden_size"] == 64 and r["torch_version"] == torch.__version__


def test_the_cli_compares_and_writes_the_table(cli_run):
    result, out = cli_run
    assert "MAPE per kind" in result.stdout and "tiny-llama (2 layers) on h200" in result.stdout
    assert "priced as on an h200" in result.stderr  # no GPU here: said, not guessed silently
    summary = json.loads((out / "forward-check.json").read_text())
    assert summary["fitted_on_these_rows"] is False
    assert {m["kind"] for m in summary["mape"]} == {"decode", "prefill", "mixed"}
    assert all(math.isfinite(m["mape_pct"]) and m["points"] == 4 for m in summary["mape"])
    assert len((out / "forward-check.csv").read_text().splitlines()) == 1 + 12


def test_the_comparison_reads_the_raw_file_back_for_several_profiles(cli_run):
    from capsim.validation.forward import check_forward

    report = check_forward([cli_run[1] / "forward-tiny-llama.jsonl"], ["h200", "h200.calibrated"], engine="vllm")
    assert len(report.steps) == 2 * 12
    assert {(m["gpu"], m["kind"]) for m in report.mape_rows()} == {
        (g, k) for g in ("h200", "h200.calibrated") for k in ("decode", "prefill", "mixed")}
    assert all(math.isfinite(m["mape_pct"]) for m in report.mape_rows())


def _round_profile(tmp_path):
    path = tmp_path / "round-gpu.yaml"
    path.write_text(yaml.safe_dump(ROUND_GPU))
    return str(path)


def _row(decodes, prefill, layers=2):
    spec = {"hidden_size": 1000, "num_heads": 10, "num_kv_heads": 10, "head_dim": 100, "intermediate_size": 4000,
            "vocab_size": 1000, "mlp": "gated", "tie_embeddings": False, "max_context_tokens": 100_000}
    return {"model": "hand", "model_spec": spec, "layers": layers, "decode_contexts": decodes, "prefill": prefill,
            "block_size": 16, "dtype": "fp32", "kv_dtype": "fp32"}


def _gemm(compute_s, memory_s):
    return (compute_s ** 4 + memory_s ** 4) ** 0.25


def test_a_step_is_priced_as_a_hand_calculation_of_the_measured_slice(tmp_path):
    """Round GPU (1 TB/s, 10 TFLOP/s fp32, 100 TFLOP/s fp16, efficiencies 1, no overheads); 2 layers of
    16M parameters (4M attention + 12M gated MLP) and a 1M LM head, fp32: 33M x 4 B = 132 MB of weights.
    KV: 2 layers x 2 x 10 heads x 100 x 4 B = 16,000 B per token."""
    from capsim.spec.catalog import load_hardware
    from capsim.validation.forward import predict_s

    gpu = load_hardware(_round_profile(tmp_path))
    # Decode, one sequence attending 100 positions: weights 132 us + KV (100 read + 1 written) 1.616 us;
    # the compute sides (66 MFLOP at 10 TFLOP/s = 6.6 us; attention 0.8 MFLOP) are smaller. The GEMMs
    # take the 4-norm of their two sides (decode_runs.GEMM_OVERLAP_NORM).
    assert predict_s(_row([100], []), gpu, None) == pytest.approx(_gemm(6.6e-6, 132e-6) + 1.616e-6, rel=1e-9)
    # A 50-token prompt: GEMMs 2 x 32M x 50 + 2 x 1M (one logit) = 3.202 GFLOP at 10 TFLOP/s = 320.2 us;
    # attention: 50 x 16,000 B read + 50 x 16,000 B written = 1.6 us (its 10.2 MFLOP take 0.1 us).
    assert predict_s(_row([], [[0, 50]]), gpu, None) == pytest.approx(_gemm(320.2e-6, 132e-6) + 1.6e-6, rel=1e-9)
    # Half the layers: the weights and KV of one layer + the same LM head.
    assert predict_s(_row([100], [], layers=1), gpu, None) == pytest.approx(_gemm(3.4e-6, 68e-6) + 0.808e-6, rel=1e-9)


def test_mixed_steps_add_the_decodes_and_the_chunk(tmp_path):
    """Decodes and a chunk share one GEMM pass: tokens = 3 decodes + 20 new, 4 logits; attention reads
    the decodes' contexts and the chunk's 30 cached + 20 new positions."""
    from capsim.spec.catalog import load_hardware
    from capsim.validation.forward import predict_s

    gpu = load_hardware(_round_profile(tmp_path))
    flops = 2 * 32e6 * 23 + 2 * 1e6 * 4
    kv_bytes = 16_000 * (3 * 100 + 50) + 16_000 * 23
    assert predict_s(_row([100, 100, 100], [[30, 20]]), gpu, None) == pytest.approx(
        _gemm(flops / 10e12, 132e-6) + kv_bytes / 1e12, rel=1e-9)


def _mixed_inputs(block=16):
    from capsim.harness.kernels.forward_attention import step_meta, write_kv
    from capsim.harness.forward_shapes import StepShape
    from capsim.harness.kernels.torch_ref import random_block_tables

    step = StepShape("mixed", (block + 3, 3 * block), ((0, 20), (2 * block + 5, 37)))
    lens = step.seq_lengths()
    pool = sum(-(-n // block) for n in lens) + 2
    gen = torch.Generator().manual_seed(0)
    kc = torch.randn((pool, block, 2, 16), generator=gen)
    vc = torch.randn((pool, block, 2, 16), generator=gen)
    meta = step_meta(step, random_block_tables(lens, block, pool, gen), "cpu")
    q = torch.randn((step.num_tokens, 8, 16), generator=gen)
    k, v = torch.randn((step.num_tokens, 2, 16), generator=gen), torch.randn((step.num_tokens, 2, 16), generator=gen)
    write_kv(meta, step, k, v, kc, vc, block)
    return step, meta, q, k, v, kc, vc


def test_step_attention_matches_dense_float64_attention():
    """Decodes through the paged kernel, a whole prompt and a chunk with cached context through
    SDPA: each query row equals softmax(q k^T / sqrt(d)) v over exactly the positions it may see."""
    from capsim.harness.kernels.forward_attention import HarnessAttention, positions_of
    from capsim.harness.kernels.torch_ref import gather_kv

    step, meta, q, k, v, kc, vc = _mixed_inputs()
    got = HarnessAttention("sdpa")(meta, q, k, v, kc, vc).double()
    seq_of = list(range(step.num_decodes))
    for j, (_, new) in enumerate(step.prefill):
        seq_of += [step.num_decodes + j] * new
    for row, (seq, pos) in enumerate(zip(seq_of, positions_of(step), strict=True)):
        keys = gather_kv(kc, meta.tables[seq:seq + 1], pos + 1, 1.0, torch.float64)[0].repeat_interleave(4, 0)
        values = gather_kv(vc, meta.tables[seq:seq + 1], pos + 1, 1.0, torch.float64)[0].repeat_interleave(4, 0)
        scores = (keys @ q[row].double().unsqueeze(-1)).squeeze(-1) / 4.0
        want = (scores.softmax(-1).unsqueeze(1) @ values).squeeze(1)
        assert torch.allclose(got[row], want, atol=1e-5), (row, seq, pos)


def test_the_forward_pass_gives_finite_logits_for_each_logit_row():
    from capsim.harness.kernels.forward_attention import HarnessAttention
    from capsim.harness.forward_model import ForwardModel
    from capsim.harness.forward_shapes import StepShape, load_shape

    shape = load_shape("llama-3.1-8b")  # the catalogue's shapes, scaled down below only to fit a test
    tiny = type(shape)(**{**shape.__dict__, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
                          "intermediate_size": 96, "vocab_size": 100})
    fm = ForwardModel(tiny, 2, "cpu", "fp32", 16, pool_blocks=20, max_position=128)
    step = StepShape("mixed", (40, 7), ((16, 30),))
    logits = fm.prepare(step, HarnessAttention("sdpa"))()
    assert tuple(logits.shape) == (step.logit_tokens, 100) and bool(torch.isfinite(logits).all())


def test_flashinfer_is_skipped_with_the_reason(monkeypatch):
    from capsim.harness.kernels.forward_attention import probe_flashinfer

    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` raises ImportError
    assert probe_flashinfer("cpu", 8, 2, 16, 16, torch.float32).startswith("import flashinfer failed")
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    assert probe_flashinfer("cpu", 8, 2, 16, 16, torch.float32) == "FlashInfer's kernels need CUDA"


def test_attention_rows_time_a_second_backend_beside_the_harness(tiny_yaml, tmp_path, monkeypatch):
    """The FlashInfer comparison path, with the CPU attention standing in for FlashInfer."""
    import capsim.harness.forward_run as fr
    from capsim.validation.forward import check_forward
    from capsim.harness.kernels.forward_attention import HarnessAttention

    stand_in = HarnessAttention("sdpa")
    stand_in.name = "flashinfer"
    real = fr.make_attention
    monkeypatch.setattr(fr, "probe_flashinfer", lambda *a, **k: None)
    monkeypatch.setattr(fr, "make_attention", lambda name, **kw: stand_in if name == "flashinfer" else real(name, **kw))
    result = fr.measure_forward(str(tiny_yaml), "cpu", tmp_path, tiny=True, flashinfer=True, deadline_s=60)
    rows = _rows(result.raw_data_path)
    pairs = [r for r in rows if r["family"] == "attention"]
    assert result.points_measured == result.points_planned == 12 + 24 and not result.skipped
    assert [r["backend"] for r in pairs[:2]] == ["sdpa", "flashinfer"]
    table = check_forward([result.raw_data_path], ["h200"]).attention
    assert len(table) == 12 and all({"sdpa_ms", "flashinfer_ms", "flashinfer_vs_harness"} <= set(t) for t in table)


def test_bad_forward_input_is_a_clear_error(tiny_yaml, tmp_path):
    from capsim.validation.forward import check_forward
    from capsim.harness.forward_run import measure_forward
    from capsim.harness.forward_shapes import load_shape

    with pytest.raises(CapsimError, match="'moe' is set"):
        load_shape("mixtral-8x7b")
    with pytest.raises(CapsimError, match="allowed: 1 to 2"):
        measure_forward(str(tiny_yaml), "cpu", tmp_path, layers=3, tiny=True)
    with pytest.raises(CapsimError, match="allowed: triton, sdpa, flashinfer"):
        measure_forward(str(tiny_yaml), "cpu", tmp_path, attention="cudnn", tiny=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"family": "decode", "time_s": 1.0}) + "\n")
    with pytest.raises(CapsimError, match="field 'family'"):
        check_forward([bad], ["h200"])


def test_device_script_tiny_runs_without_pydantic_or_simpy(tiny_yaml, tmp_path):
    """The GPU-machine command (bash script, bare-package bootstrap) on CPU: raw rows written, the
    comparison left for a machine with capsim, and that comparison reads the rows here."""
    from capsim.validation.forward import check_forward

    out = tmp_path / "out"
    proc = run_with_sitecustomize(tmp_path, DEVICE_IMAGE_SITECUSTOMIZE,
                                  ["bash", str(REPO / "scripts" / "h200_forward.sh"), "--tiny", "--models",
                                   f"{tiny_yaml}:1"], env={"OUT": str(out), "PYTHON": sys.executable}, timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "comparison not run here" in proc.stdout and "--forward-check" in proc.stdout
    summary = json.loads((out / "forward-summary.json").read_text())
    (model,) = summary["models"]
    assert model["layers"] == 1 and model["points_measured"] == model["points_planned"] == 12
    assert "flashinfer" in model["skipped"]
    report = check_forward([out / model["raw_data"]], ["h200"])
    assert len(report.steps) == 12


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@cuda
def test_gpu_forward_steps_are_captured_and_timed(tiny_yaml, tmp_path):
    from capsim.harness.forward_run import measure_forward

    result = measure_forward(str(tiny_yaml), "cuda", tmp_path, tiny=True, flashinfer=True)
    rows = _rows(result.raw_data_path)
    forward = [r for r in rows if r["family"] == "forward"]
    assert len(forward) == 12 and all("error" not in r and r["graph"] for r in forward)
    assert all(r["dtype"] == "bf16" and r["attention"] == "triton" for r in forward)
