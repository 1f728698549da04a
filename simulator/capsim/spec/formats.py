"""Number formats for weights and the KV cache: storage bits per value, block scales included.

Block formats store a shared scale (and sometimes a minimum) per block of values; their bits per
value include it, e.g. Q8_0 is 32 int8 values + one fp16 scale = 34 bytes per 32 values.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.errors import CapsimError, did_you_mean, quote


@dataclass(frozen=True)
class NumberFormat:
    name: str
    bits_per_value: float
    # Tensor-core dtype the matmuls run in when weights are stored in this format. Weight-only
    # quantisation (llama.cpp, AWQ, GPTQ) dequantises to fp16 and multiplies there.
    compute_dtype: str
    # Extra vector FLOPs per value to turn the stored value back into fp16/fp32 (unpack, scale,
    # offset). Charged in realistic mode when a quantised KV cache is read.
    dequant_flops_per_value: float
    kv_capable: bool
    source: str

    @property
    def bytes_per_value(self) -> float:
        return self.bits_per_value / 8.0


_GGML = "ggml block layouts, ggml/src/ggml-common.h (block_q8_0, block_q4_0, ...)"
_OCP = "OCP Microscaling Formats (MX) v1.0 spec, 2023: 32 x E2M1 + one E8M0 scale"

FORMATS: dict[str, NumberFormat] = {
    f.name: f
    for f in [
        NumberFormat("fp32", 32, "fp32", 0.0, True, "IEEE 754 binary32"),
        NumberFormat("fp16", 16, "fp16", 0.0, True, "IEEE 754 binary16"),
        NumberFormat("bf16", 16, "bf16", 0.0, True, "bfloat16"),
        NumberFormat("fp8_e4m3", 8, "fp8", 1.0, True, "OCP FP8 (E4M3), per-tensor scale"),
        NumberFormat("fp8_e5m2", 8, "fp8", 1.0, True, "OCP FP8 (E5M2), per-tensor scale"),
        NumberFormat(
            "fp8_block", 8 + 32 / (128 * 128), "fp8", 1.0, False,
            "fine-grained FP8 (E4M3) weights with one fp32 scale per 128 x 128 block, activations scaled per "
            "token and 128-channel group (DeepSeek-V3 and the Qwen team's FP8 checkpoints; Hugging Face "
            "transformers FineGrainedFP8Config, weight_block_size (128, 128))",
        ),
        NumberFormat("int8", 8, "int8", 1.0, True, "INT8, per-channel/per-token scales (amortised)"),
        NumberFormat("q8_0", 34 * 8 / 32, "fp16", 2.0, True, f"34 bytes / 32 values; {_GGML}"),
        NumberFormat("q4_0", 18 * 8 / 32, "fp16", 3.0, True, f"18 bytes / 32 values; {_GGML}"),
        NumberFormat("q4_1", 20 * 8 / 32, "fp16", 3.0, True, f"20 bytes / 32 values; {_GGML}"),
        NumberFormat("q5_0", 22 * 8 / 32, "fp16", 4.0, True, f"22 bytes / 32 values; {_GGML}"),
        NumberFormat("q5_1", 24 * 8 / 32, "fp16", 4.0, True, f"24 bytes / 32 values; {_GGML}"),
        NumberFormat("iq4_nl", 18 * 8 / 32, "fp16", 3.0, True, f"18 bytes / 32 values, non-linear; {_GGML}"),
        NumberFormat(
            "q4_k_m", 4.85, "fp16", 3.0, False,
            "llama.cpp Q4_K_M mix (Q4_K super-blocks, some tensors Q6_K): about 4.85 bits per weight "
            "as reported by llama-quantize for 7B-70B models",
        ),
        NumberFormat("mxfp4", 4.25, "fp16", 3.0, True, f"17 bytes / 32 values; {_OCP}"),
        NumberFormat(
            "nvfp4", 4.5, "fp4", 3.0, True,
            "NVIDIA NVFP4: 16 x E2M1 + one E4M3 scale per 16 values (Blackwell docs)",
        ),
        NumberFormat(
            "tbq4", 4.125, "fp16", 3.0, True,
            "TBQ4 4-bit cache with block scales: 4.125 bits per value (the source note, seeds/000)",
        ),
        NumberFormat(
            "int4_g128", 4 + 16 / 128 + 4 / 128, "fp16", 3.0, False,
            "AWQ/GPTQ int4 with one fp16 scale and a 4-bit zero point per group of 128",
        ),
        NumberFormat(
            "int4_g32", 4 + 16 / 32 + 4 / 32, "fp16", 3.0, False,
            "int4 with one fp16 scale and a 4-bit zero point per group of 32",
        ),
    ]
}

ALIASES = {"fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "fp8_blockwise": "fp8_block", "fp8-block": "fp8_block",
           "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int4": "int4_g128",
           "awq": "int4_g128", "gptq": "int4_g128"}


def get_format(name: str, *, for_kv: bool = False, where: str = "format") -> NumberFormat:
    """Look a format up by name or alias; a clear error names `where` and the allowed names."""
    key = ALIASES.get(name.lower(), name.lower())
    fmt = FORMATS.get(key)
    allowed = [f.name for f in FORMATS.values() if f.kv_capable or not for_kv]
    if fmt is None or (for_kv and not fmt.kv_capable):
        what = "KV-cache format" if for_kv else "format"
        raise CapsimError(
            f"{where}: unknown {what} {quote(name)}.{did_you_mean(name, allowed)} "
            f"Allowed: {', '.join(allowed)} (aliases: {', '.join(sorted(ALIASES))})."
        )
    return fmt
