"""Number formats: bits per value including block scales."""

import pytest
from capsim.errors import CapsimError
from capsim.spec.formats import FORMATS, get_format


@pytest.mark.parametrize("name, bits", [
    ("fp32", 32), ("fp16", 16), ("bf16", 16), ("fp8_e4m3", 8), ("fp8_e5m2", 8), ("int8", 8),
    ("q8_0", 34 * 8 / 32), ("q4_0", 18 * 8 / 32), ("q4_1", 20 * 8 / 32), ("q5_0", 22 * 8 / 32),
    ("q5_1", 24 * 8 / 32), ("iq4_nl", 4.5), ("q4_k_m", 4.85), ("mxfp4", 4.25), ("nvfp4", 4.5), ("tbq4", 4.125),
])
def test_bits_per_value(name, bits):
    assert FORMATS[name].bits_per_value == pytest.approx(bits)


def test_aliases_and_kv_capability():
    assert get_format("fp8").name == "fp8_e4m3" and get_format("AWQ").name == "int4_g128"
    assert get_format("int4").bits_per_value == pytest.approx(4 + 20 / 128)
    with pytest.raises(CapsimError, match="unknown KV-cache format 'q4_k_m'"):
        get_format("q4_k_m", for_kv=True)
    with pytest.raises(CapsimError, match=r"Did you mean: q8_0"):
        get_format("q8_1")


def test_every_format_is_sourced_and_sane():
    for fmt in FORMATS.values():
        assert 1 < fmt.bits_per_value <= 32 and fmt.source
        assert fmt.bytes_per_value == fmt.bits_per_value / 8
