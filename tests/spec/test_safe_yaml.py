"""Reading YAML within bounds: aliases counted as expanded before anything is built, duplicate
keys, encodings, size; and values quoted in messages cut short."""

from __future__ import annotations

import codecs

import pytest
from capsim.spec import safe_yaml
from capsim.errors import CapsimError, quote


def _bomb(levels: int, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_at_once_and_named():
    with pytest.raises(CapsimError, match="too large once its aliases are expanded") as exc:
        safe_yaml.load(_bomb(9), "bomb.yaml")  # 10^9 leaves from ten lines: counted over the nodes, never expanded
    assert str(exc.value).startswith("bomb.yaml: ") and len(str(exc.value)) < 400


def test_aliases_within_the_bounds_load_as_usual():
    assert safe_yaml.load(_bomb(3), "ok.yaml")["a2"][0][0] == ["lol"] * 10  # 1,000 leaves


def test_a_recursive_alias_is_refused():
    with pytest.raises(CapsimError, match="refers to the value that contains it"):
        safe_yaml.load("a: &a [1, *a]\n", "loop.yaml")


def test_long_text_repeated_by_aliases_counts_as_its_expanded_size():
    text = "s: &s " + "x" * 100_000 + "\nt: [" + ", ".join(["*s"] * 100) + "]\n"
    with pytest.raises(CapsimError, match="MiB of text"):
        safe_yaml.load(text, "text.yaml")


def test_duplicate_keys_name_both_lines_and_merge_keys_still_override():
    with pytest.raises(CapsimError, match=r"line 3, column 1: duplicate key 'a' \(first given at line 1\)"):
        safe_yaml.load("a: 1\nb: 2\na: 3\n", "dup.yaml")
    assert safe_yaml.load("base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\n", "m.yaml")["c"] == {"x": 1, "y": 3}


@pytest.mark.parametrize("bom, codec", [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
                                        (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF8, "utf-8")])
def test_text_with_a_byte_order_mark_is_read(tmp_path, bom, codec):
    path = tmp_path / "w.yaml"
    path.write_bytes(bom + "name: ünïcode\n".encode(codec))
    assert safe_yaml.load(safe_yaml.read_text(path), str(path)) == {"name": "ünïcode"}


def test_binary_and_oversized_files_are_refused_by_name(tmp_path):
    (tmp_path / "b.yaml").write_bytes(b"name: \xff\xfe\x00")
    with pytest.raises(CapsimError, match=r"b.yaml: not UTF-8 text \(byte 0xff at offset 6\)"):
        safe_yaml.read_text(tmp_path / "b.yaml")
    (tmp_path / "big.yaml").write_bytes(b"#" * (safe_yaml.MAX_FILE_BYTES + 1))
    with pytest.raises(CapsimError, match="big.yaml: larger than 4 MiB"):
        safe_yaml.read_text(tmp_path / "big.yaml")
    with pytest.raises(CapsimError, match="cannot read the file"):
        safe_yaml.read_text(tmp_path / "missing.yaml")


def test_syntax_errors_give_line_and_column():
    with pytest.raises(CapsimError, match="bad.yaml: not valid YAML at line 2, column"):
        safe_yaml.load("a: [1, 2\nb: 3\n", "bad.yaml")


def test_quote_cuts_what_a_message_repeats():
    assert quote("short") == "'short'"
    long = quote("x" * 10_000)
    assert len(long) <= 61 and "..." in long
    assert len(quote([[["deep"] * 1000] * 1000] * 1000)) <= 61
    import numpy as np

    assert quote(np.float64(1e20)) == "1e+20"
