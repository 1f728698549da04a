"""Serving-engine profiles: the catalogue, `extends`, scheduling defaults applied where the
workload is silent, and the engine terms the cost model adds (host time, kernels, graphs)."""

import json

import pytest
from capsim.spec.catalog import load_hardware, load_model
from capsim.cost.roofline import CostModel
from capsim.spec.serving import EngineProfile, engine_catalog, load_engine
from capsim.errors import CapsimError
from capsim.spec.formats import get_format
from capsim.api import resolve, simulate
from helpers import script_module, workload

ENGINE_FIELDS_WITH_NUMBERS = ("scheduler", "overhead", "kernels_per_layer", "kernel_efficiency", "memory")


def test_every_engine_loads_and_says_where_its_numbers_come_from():
    cat = engine_catalog()
    assert {"vllm", "sglang@0.3", "trt-llm", "llama.cpp"} <= set(cat)
    for name, prof in cat.items():
        for field in ENGINE_FIELDS_WITH_NUMBERS:
            assert prof.sources.get(field, "").strip(), f"{name}: no source for {field}"


def test_every_per_gpu_weight_format_factor_names_a_catalogue_gpu():
    from capsim.spec.catalog import hardware_catalog

    names = {hw.name for hw in hardware_catalog().values()}
    keyed = [(e.name, key) for e in engine_catalog().values()
             for key in (*e.kernel_efficiency.weight_formats, *e.kernel_efficiency.compute_dtypes) if "@" in key]
    assert keyed  # sglang@0.4's measured FP8 rates, vLLM's FP8 GEMM shares
    assert [(e, key) for e, key in keyed if key.split("@")[1] not in names] == []


def test_an_older_release_extends_its_engine_and_lists_only_differences():
    new, old = load_engine("llama.cpp@2024-05"), load_engine("llama.cpp@2024-01")
    assert new.cuda_graphs and not old.cuda_graphs
    assert old.kernels_per_layer == new.kernels_per_layer and old.overhead == new.overhead
    assert old.sources["scheduler"] == new.sources["scheduler"]  # inherited key by key
    assert "PR #6766" in old.sources["cuda_graphs"]
    # a chain: 2025-08 extends the default (2025-12), which extends 2024-05
    aug, dec = load_engine("llama.cpp@2025-08"), load_engine("llama.cpp")
    assert aug.flash_attention and dec.flash_attention and not new.flash_attention
    assert aug.kernels_per_layer == dec.kernels_per_layer and aug.extra_kernels_moe > dec.extra_kernels_moe
    assert aug.sources["scheduler"] == new.sources["scheduler"] and "#17621" in aug.sources["extra_kernels_moe"]
    assert load_engine("llama.cpp@2025-12").name == "llama.cpp"
    assert load_engine("vllm@0.6-ms10").overhead.steps_per_schedule == 10
    assert load_engine("TensorRT-LLM").name == "trt-llm"  # aliases, any case


def test_unknown_engine_names_the_field_and_the_choices(round_gpu_file):
    with pytest.raises(CapsimError, match=r"field 'engine': unknown engine 'vlm'. Did you mean: vllm"):
        resolve(workload(round_gpu_file, engine="vlm"), "w.yaml")


def test_engine_defaults_fill_only_what_the_workload_leaves_unset(round_gpu_file):
    w = workload(round_gpu_file, engine="vllm", scheduler=None, gpu_memory_utilization=None)
    setup = resolve(w, "w.yaml")
    s = setup.workload.scheduler
    assert (s.kind, s.max_num_seqs, s.block_size) == ("chunked", 1024, 16)  # 100 GB round GPU: >= 70 GiB
    assert setup.max_num_batched_tokens == 8192 and setup.workload.gpu_memory_utilization == 0.9
    given = resolve(workload(round_gpu_file, engine="vllm", gpu_memory_utilization=0.5,
                             scheduler={"kind": "continuous", "max_num_seqs": 8, "block_size": 4}), "w.yaml")
    g = given.workload.scheduler
    assert (g.kind, g.max_num_seqs, g.block_size, given.workload.gpu_memory_utilization) == ("continuous", 8, 4, 0.5)
    a100 = resolve(workload("a100-80g", model="llama-3.1-8b", engine="vllm", scheduler=None), "w.yaml")
    assert a100.workload.scheduler.max_num_seqs == 256 and a100.max_num_batched_tokens == 2048  # vLLM leaves A100s small


def test_choosing_another_batching_mode_drops_the_engines_token_budget():
    # vLLM with chunked prefill turned off prefills whole prompts: its budget is max(max_model_len, 2048),
    # not the chunked 2048, so a continuous scheduler with a long max_model_len still resolves.
    w = workload("rtx4090", model="mistral-7b", engine="vllm", max_model_len=8192,
                 scheduler={"kind": "continuous", "max_num_seqs": 128})
    setup = resolve(w, "w.yaml")
    assert setup.workload.scheduler.kind == "continuous" and setup.max_num_batched_tokens == 8192
    chunked = resolve(workload("rtx4090", model="mistral-7b", engine="vllm", scheduler={"kind": "chunked"}), "w.yaml")
    assert chunked.max_num_batched_tokens == 2048  # the engine's own mode keeps its budget


def _engine(**over) -> EngineProfile:
    data = {"name": "e", "version": "test", "scheduler": {"kind": "chunked", "max_num_seqs": 8, "block_size": 16},
            "gpu_memory_utilization": 0.9, "kernels_per_layer": 10, "cuda_graph_max_batch": 4,
            "overhead": {"step_s": 1e-3, "seq_s": 1e-5}, "sources": {"all": "test"}}
    return EngineProfile.model_validate({**data, **over})


def test_engine_host_time_and_kernels_add_to_every_step(tiny_model, round_gpu):
    gpu = round_gpu.model_copy(update={"overhead": round_gpu.overhead.model_copy(
        update={"kernel_s": 2e-6, "launch_gap_s": 1e-6})})
    fp16 = get_format("fp16")
    cm = CostModel(tiny_model, gpu, fp16, fp16, engine=_engine())
    # 1 layer: host 1 ms + 10 us per sequence; 10 kernels x 2 us with the graph, + 1 us each without
    assert cm.fixed_seconds(4, 4, decode_only=True)[0] == pytest.approx(1e-3 + 4e-5 + 20e-6)
    assert cm.fixed_seconds(5, 5, decode_only=True)[0] == pytest.approx(1e-3 + 5e-5 + 30e-6)  # above the graphs
    assert cm.fixed_seconds(100, 1, decode_only=False)[0] == pytest.approx(1e-3 + 1e-5 + 30e-6)
    multi = CostModel(tiny_model, gpu, fp16, fp16, engine=_engine(overhead={"step_s": 1e-3, "seq_s": 1e-5,
                                                                          "steps_per_schedule": 10}))
    assert multi.fixed_seconds(4, 4, decode_only=True)[0] == pytest.approx((1e-3 + 4e-5) / 10 + 20e-6)
    bare = CostModel(tiny_model, gpu, fp16, fp16)
    assert bare.fixed_seconds(4, 4, decode_only=True) == (0.0, 0.0)


def test_llama_cpp_on_an_h100_reaches_a_smaller_share_of_peak_bandwidth_than_on_a_4090():
    """The issue's example: at batch 1, per-kernel fixed costs, not bandwidth, dominate small
    models on fast GPUs."""
    model, q4, f16 = load_model("llama-3.1-8b"), get_format("q4_k_m"), get_format("fp16")
    share = {}
    for gpu in ("rtx4090", "h100-pcie"):
        hw = load_hardware(gpu)
        cm = CostModel(model, hw, q4, f16, engine=load_engine("llama.cpp@2024-05"))  # the measurements' builds
        step_s = cm.decode_seconds(1, 512, 0)
        share[gpu] = cm.gemm_part(1, 1, 1)[3] / step_s / hw.memory_bandwidth_bytes_per_s
    # measured (validation/xiongjiedai-*): 4.9 GB x 130.6 tokens/s = 0.64 of the 4090's 1,008 GB/s,
    # 4.9 GB x 145.6 tokens/s = 0.36 of the H100 PCIe's 2 TB/s
    assert share["h100-pcie"] < 0.7 * share["rtx4090"]
    assert share["rtx4090"] > 0.5


def test_llama_cpp_pays_fp32_score_traffic_without_flash_attention(tiny_model, round_gpu):
    fp16 = get_format("fp16")
    fa = CostModel(tiny_model, round_gpu, fp16, fp16, engine=_engine())
    no_fa = CostModel(tiny_model, round_gpu, fp16, fp16, engine=_engine(flash_attention=False))
    # 1,000 (query, key) pairs x 10 heads x 16 bytes (4 fp32 passes)
    extra = no_fa.attention_part(0.0, 0.0, 1000.0, 0.0, 0)[3] - fa.attention_part(0.0, 0.0, 1000.0, 0.0, 0)[3]
    assert extra == pytest.approx(1000 * 10 * 16)


def test_fp16_accumulate_engines_get_the_geforce_fp16_accumulate_peak_and_its_measured_share():
    model, f16 = load_model("llama-3.1-8b"), get_format("fp16")
    hw = load_hardware("rtx4090")
    acc16 = CostModel(model, hw, f16, f16, engine=load_engine("llama.cpp"))
    acc32 = CostModel(model, hw, f16, f16, engine=load_engine("vllm"))
    assert (acc16.peak, acc16.eta_fl) == (330.3e12, hw.efficiency.compute_by_dtype["fp16_acc16"])
    assert (acc32.peak, acc32.eta_fl) == (165.2e12, hw.efficiency.compute)
    a100 = CostModel(model, load_hardware("a100-80g"), f16, f16, engine=load_engine("llama.cpp"))
    assert (a100.peak, a100.eta_fl) == (312e12, load_hardware("a100-80g").efficiency.compute)  # no separate rate


def test_macro_steps_equal_step_by_step_with_an_engine_and_tp(round_gpu_file):
    from capsim.api import simulate

    w = workload(round_gpu_file, engine="vllm@0.6-ms10", tp=2, requests=30,
                 scheduler={"kind": "continuous", "max_num_seqs": 8, "block_size": 4})
    fast, slow = simulate(w), simulate(w, macro_steps=False)
    assert fast.requests.equals(slow.requests)
    assert fast.summary["setup"]["engine"] == "vllm@0.6-ms10" and fast.summary["setup"]["tp"] == 2


def test_an_extends_cycle_or_unknown_parent_is_a_clear_error(tmp_path, monkeypatch):
    import capsim.spec.serving as serving

    path = tmp_path / "engines.yaml"
    path.write_text("- {name: a, extends: b}\n- {name: b, extends: a}\n")
    monkeypatch.setattr(serving, "_data_path", lambda: path)
    serving.engine_catalog.cache_clear()
    try:
        with pytest.raises(CapsimError, match=r"engines.yaml \(engine a\): field 'extends' names a cycle of 'a'"):
            serving.engine_catalog()
        path.write_text("- {name: a, extends: c}\n")
        serving.engine_catalog.cache_clear()
        with pytest.raises(CapsimError, match=r"field 'extends' names unknown engine 'c'"):
            serving.engine_catalog()
    finally:
        serving.engine_catalog.cache_clear()


def test_sglang_runs_prompt_chunks_apart_from_its_decoders():
    # SGLang's server_args default enable_mixed_chunk = False: prefill batches carry no decodes
    assert load_engine("sglang").scheduler.kind == load_engine("sglang@0.3").scheduler.kind == "prefill_first"
    assert load_engine("vllm").scheduler.kind == "chunked"


def test_sglang_derives_its_running_request_limit_from_the_kv_pool():
    rule = load_engine("sglang").max_num_seqs_from_pool
    # 1,000,000 pool tokens at a 131,072-token context: int(1e6 / 131072 x 512) = 3,906 requests,
    # inside SGLang's [2,048, 5,120] and under half the pool.
    assert rule.limit(1_000_000, 131_072) == 3906
    assert rule.limit(100_000, 131_072) == 2048  # the floor
    assert rule.limit(5_000_000, 8_192) == 5120  # the cap
    assert rule.limit(3_000, 131_072) == 1500  # never more than half the pool's tokens
    w = workload("h200", model="llama-3.1-70b", engine="sglang", tp=4, scheduler=None, gpu_memory_utilization=None,
                 max_model_len=None)  # the model's own 131,072-token context, as SGLang by default
    setup = resolve(w, "w.yaml")
    assert setup.memory.kv_tokens > 1_000_000
    assert setup.workload.scheduler.max_num_seqs == rule.limit(setup.memory.kv_tokens, 131_072) > 4000
    given = resolve(workload("h200", model="llama-3.1-70b", engine="sglang", tp=4,
                             scheduler={"max_num_seqs": 64}, gpu_memory_utilization=None), "w.yaml")
    assert given.workload.scheduler.max_num_seqs == 64  # --max-running-requests given: kept


def test_vllm_0_11_0s_chat_endpoint_pays_its_templating_on_every_request():
    base, v0110 = load_engine("vllm"), load_engine("vllm@0.11.0")
    chat, completions = v0110.for_endpoint("chat").overhead, v0110.for_endpoint("completions").overhead
    assert chat.request_s == pytest.approx(base.overhead.request_s + v0110.overhead.chat_request_s)
    assert completions.request_s == base.overhead.request_s and chat.chat_request_s == completions.chat_request_s == 0
    assert base.for_endpoint("chat") is base  # nothing chat-only to add

    # Two requests 1 s apart on an idle H100: the same steps, each chat request 17 ms later in TTFT and E2EL.
    def run(endpoint):
        w = workload("h100-sxm", model="llama-3.1-8b", engine="vllm@0.11.0", scheduler=None, gpu_memory_utilization=None,
                     arrivals={"kind": "constant", "rate_per_s": 1.0}, requests=2, endpoint=endpoint,
                     prompt_tokens={"dist": "fixed", "value": 200}, output_tokens={"dist": "fixed", "value": 5})
        return simulate(w)
    chatted, completed = run("chat"), run("completions")
    extra_ms = 1e3 * v0110.overhead.chat_request_s
    assert extra_ms == pytest.approx(17.0)
    for key in ("ttft_ms", "e2el_ms"):
        assert list(chatted.requests[key] - completed.requests[key]) == pytest.approx([extra_ms] * 2)
    assert completed.summary["setup"]["endpoint"] == "completions" and "endpoint" not in chatted.summary["setup"]
    with pytest.raises(CapsimError, match="endpoint"):
        workload("h100-sxm", endpoint="grpc")


def test_the_chat_template_calibration_run_repeats_vllm_0_11_0s_per_request_work(tmp_path):
    bench = script_module("chat_template_parse", folder="benchmarks")
    template = ("{% for m in messages %}{{ m.content }}{% if loop.last and add_generation_prompt %}<a>{% endif %}"
                "{% endfor %}{% generation %}{{ x }}{% endgeneration %}")
    assert bench.per_request(template) == {"messages", "add_generation_prompt", "x"}  # parsed whole, tags included
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": template}))
    assert bench.read_template(config) == template


def test_an_overlap_scheduler_hands_each_token_on_after_the_next_step():
    # Two requests 0.5 s apart on one H100, SGLang 0.4 (overlap scheduler) and 0.3 (none): a token
    # leaves at the end of the replica's next step, so TTFT is the prefill step, the first decode
    # step and the front end; the last token, with no step right after it, leaves when its step ends.
    def run(engine):
        w = workload("h100-sxm", model="llama-3.1-8b", engine=engine, scheduler=None, gpu_memory_utilization=None,
                     max_model_len=None, arrivals={"kind": "constant", "rate_per_s": 2.0}, requests=2,
                     prompt_tokens={"dist": "fixed", "value": 300}, output_tokens={"dist": "fixed", "value": 5})
        return simulate(w)
    lagged, plain = run("sglang@0.4"), run("sglang@0.3")
    steps, req = lagged.steps, lagged.requests
    ends = steps["end_s"].to_numpy()
    front_ms = (3e-3 + 2e-6 * 300) * 1e3
    for i, arrival in enumerate(req["arrival_s"]):
        mine = ends[(ends > arrival) & (ends < arrival + 0.5)]
        assert len(mine) == 5  # a prefill step and four decode steps, before the next arrival
        assert req["ttft_ms"][i] == pytest.approx((mine[1] - arrival) * 1e3 + front_ms)
        assert req["e2el_ms"][i] == pytest.approx((mine[-1] - arrival) * 1e3 + front_ms)  # the replica idles next
    assert plain.requests["ttft_ms"][0] == pytest.approx((plain.steps["end_s"][0] - 0.0) * 1e3 + 4.0)
