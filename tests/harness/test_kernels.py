"""Paged-decode kernels (triton, flex, sdpa, built-in flash), prefill SDPA and GEMMs: each checked
against a float64 dense reference on random block tables and ragged lengths.

CPU: sdpa and flex in eager mode, the Triton kernel under Triton's interpreter (fp32, fp16 and fp8 KV;
bf16 matmul is wrong in the interpreter, so bf16 is checked on GPU only). GPU tests are marked `gpu`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from capsim.errors import CapsimError  # noqa: E402
from capsim.harness.kernels.flex import builtin_paged_flash_supported, flex_block_mask, paged_decode_flex  # noqa: E402
from capsim.harness.kernels.torch_ref import (  # noqa: E402
    make_paged_inputs,
    paged_decode_sdpa,
    random_block_tables,
    reference_decode,
)
from harness_helpers import REPO, TRITON_CASES  # noqa: E402

TOL = {"fp32": 1e-5, "fp16": 3e-3, "bf16": 3e-2}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(lens, qd="fp32", kvd="fp32", *, hq=8, hkv=2, dim=32, block=16, device="cpu", seed=0):
    return make_paged_inputs(lens, q_heads=hq, kv_heads=hkv, head_dim=dim, block_size=block, q_dtype=qd,
                             kv_dtype=kvd, device=device, seed=seed)


def _err(fn, inp, **extra):
    got = fn(*inp.backend_args(), **inp.backend_kwargs(), **extra)
    ref = reference_decode(*inp.backend_args(), **inp.backend_kwargs())
    assert got.shape == ref.shape and got.dtype == inp.query.dtype
    return float((got.double().cpu() - ref).abs().max())


def test_random_block_tables_are_distinct_blocks_in_range():
    gen = torch.Generator().manual_seed(3)
    tables = random_block_tables([5, 40, 16], block_size=16, num_blocks=10, generator=gen)
    used = [tables[0, :1], tables[1, :3], tables[2, :1]]
    ids = torch.cat(used).tolist()
    assert tables.dtype == torch.int32 and tables.shape == (3, 3)
    assert len(set(ids)) == len(ids) and all(0 <= i < 10 for i in ids)


def test_random_block_tables_refuse_a_too_small_cache():
    with pytest.raises(CapsimError, match="blocks needed"):
        random_block_tables([100], block_size=16, num_blocks=3, generator=torch.Generator())


def test_reference_matches_a_hand_computed_single_token():
    # One token of context: attention returns that token's value whatever the scores are.
    inp = _inputs([1, 1], hq=4, hkv=2, dim=16)
    out = reference_decode(*inp.backend_args(), **inp.backend_kwargs())
    for b in range(2):
        block = int(inp.block_tables[b, 0])
        for h in range(4):
            expected = inp.v_cache[block, 0, h // 2].double()
            assert torch.allclose(out[b, h], expected)


@pytest.mark.parametrize("qd,kvd", [("fp32", "fp32"), ("fp16", "fp16"), ("fp32", "fp8"), ("bf16", "bf16")])
@pytest.mark.parametrize("block", [8, 16])
def test_sdpa_matches_reference_on_ragged_batches(qd, kvd, block):
    inp = _inputs([1, 3 * block, 2 * block + 5, 57], qd, kvd, block=block, seed=block)
    assert _err(paged_decode_sdpa, inp) < TOL[qd]


@pytest.mark.parametrize("qd,kvd,hq,hkv", [("fp32", "fp32", 8, 2), ("fp32", "fp32", 4, 4), ("fp16", "fp8", 8, 1)])
def test_flex_matches_reference_on_ragged_batches(qd, kvd, hq, hkv):
    inp = _inputs([2, 33, 16, 70], qd, kvd, hq=hq, hkv=hkv, seed=5)
    assert _err(paged_decode_flex, inp) < TOL[qd]


def test_flex_block_mask_lists_exactly_each_sequences_blocks():
    inp = _inputs([16, 20, 48], block=16)
    mask = flex_block_mask(inp.block_tables, inp.context_lens, inp.k_cache.shape[0], 16, 48)
    full = mask.full_kv_num_blocks.flatten().tolist()
    partial = mask.kv_num_blocks.flatten().tolist()
    assert full == [1, 1, 3] and partial == [0, 1, 0]
    assert int(mask.kv_indices[1, 0, 0, 0]) == int(inp.block_tables[1, 1])  # the partial second block


def test_triton_kernel_under_the_interpreter_matches_reference():
    """Runs in a fresh process: TRITON_INTERPRET=1 must be set before triton is first imported."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "harness_helpers.py"), "triton-cases"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["case"] for r in rows] == [c[0] for c in TRITON_CASES]
    for r in rows:
        assert r["shape_ok"], r
        assert r["max_abs_err"] < TOL[r["q_dtype"]], r


def test_triton_wrapper_rejects_bad_shapes_with_a_clear_error():
    pytest.importorskip("triton")
    from capsim.harness.kernels.triton import paged_decode_triton

    inp = _inputs([5], hq=6, hkv=4, dim=16)
    with pytest.raises(CapsimError, match="multiple of 4 KV heads"):
        paged_decode_triton(*inp.backend_args(), **inp.backend_kwargs())
    inp = _inputs([5], hq=4, hkv=2, dim=24)
    with pytest.raises(CapsimError, match="power of two"):
        paged_decode_triton(*inp.backend_args(), **inp.backend_kwargs())


def test_split_plan_covers_the_longest_context():
    pytest.importorskip("triton")
    from capsim.harness.kernels.triton import plan_splits

    for batch, kv, ctx in [(1, 8, 32768), (256, 8, 512), (4, 32, 5000), (1, 1, 1)]:
        plan = plan_splits(batch, kv, ctx)
        assert plan.partition_tokens * plan.num_splits >= ctx
        assert plan.partition_tokens % plan.tile_tokens == 0
        assert plan.partition_tokens & (plan.partition_tokens - 1) == 0


def test_gemm_checks_against_float64_before_timing():
    from capsim.harness.gemm import make_gemm

    run, rel_err, m_run = make_gemm(8, 64, 128, "fp32", "cpu")
    assert run(0).shape == (8, 64) and m_run == 8
    assert rel_err < 1e-5


def test_flash_probe_says_why_without_cuda():
    from capsim.harness.kernels.flex import probe_flash

    assert probe_flash(16, "bf16", "cpu") == "needs CUDA"
    assert builtin_paged_flash_supported() in (True, False)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("qd,kvd", [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp8")])
@pytest.mark.parametrize("backend", ["triton", "sdpa", "flex"])
def test_backends_on_gpu_match_reference(backend, qd, kvd):
    from capsim.harness.measure import decode_backend

    inp = _inputs([1, 17, 300, 1000, 64], qd, kvd, hq=32, hkv=8, dim=128, block=16, device="cuda", seed=9)
    assert _err(decode_backend(backend), inp) < TOL[qd]


@pytest.mark.gpu
@cuda
def test_builtin_flash_on_gpu_matches_reference_when_present():
    from capsim.harness.kernels.flex import paged_decode_flash, probe_flash

    reason = probe_flash(16, "bf16", "cuda")
    if reason is not None:
        pytest.skip(f"no built-in paged flash here: {reason}")
    inp = _inputs([1, 17, 300], "bf16", "bf16", hq=32, hkv=8, dim=128, device="cuda")
    assert _err(paged_decode_flash, inp) < TOL["bf16"]


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gemm_on_gpu_checks_against_float64(dtype):
    from capsim.harness.gemm import make_gemm

    run, rel_err, m_run = make_gemm(1, 4096, 4096, dtype, "cuda")
    assert rel_err < 3e-2
    assert run(0).shape == (m_run, 4096) and m_run == (16 if dtype == "fp8" else 1)
