"""Reading a YAML file a person wrote, within bounds: the text, its encoding, duplicate keys, and
the size of the document once its aliases are expanded.

A YAML file can be hostile without being long: ten lines of anchors and aliases (`&a`, `*a`) name
a billion values, which PyYAML builds as shared objects in microseconds but which validation,
error messages and output files then walk one by one. So the document is composed into nodes
first, its expanded size is counted over the node graph (each shared node counted once per use,
at the cost of one visit), and only a document within the bounds is built into Python values.
Duplicate keys are errors with both lines, instead of the last one silently winning.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from capsim.errors import CapsimError, quote, short_path

# A workload or profile is a few kilobytes and the largest shipped catalogue about 60 KB; these
# bounds are far above any real file and far below what would take noticeable time or memory.
MAX_FILE_BYTES = 4 * 2**20
MAX_VALUES = 100_000  # scalars, lists and mappings, aliases expanded
MAX_TEXT_CHARS = 4 * 2**20  # characters of all scalars, aliases expanded

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"), (codecs.BOM_UTF8, "utf-8-sig"))


class _Loader(_Base):  # type: ignore[misc,valid-type]
    """The safe loader, refusing duplicate keys in a mapping (merge keys `<<` excepted)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ConstructorError(None, None, f"duplicate key {quote(key)} (first given at line {seen[key]}); "
                                           "give each key once", key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_text(path: Path) -> str:
    """The file's text: UTF-8, or UTF-16/32 with a byte-order mark (YAML allows both); at most
    MAX_FILE_BYTES. Anything else is a CapsimError naming the file."""
    name = short_path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise CapsimError(f"{name}: cannot read the file ({getattr(exc, 'strerror', None) or exc}).") from None
    if len(raw) > MAX_FILE_BYTES:
        raise CapsimError(f"{name}: larger than {MAX_FILE_BYTES // 2**20} MiB; a workload or profile file is a few "
                          "kilobytes (is this the right file?).")
    encoding = next((name for bom, name in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise CapsimError(f"{name}: not {encoding.upper()} text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                          "save it as UTF-8 YAML.") from None


def load(text: str, source: str) -> Any:
    """Parse one YAML document within the bounds; errors name `source`, the line and column."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, source)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
        raise CapsimError(f"{source}: not valid YAML at character {exc.position + 1}: {exc.reason} "
                          f"(#x{exc.character if isinstance(exc.character, int) else 0:04x}).") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CapsimError(f"{source}: not valid YAML{where}: {_cut(' '.join(str(problem).split()))}.") from None
    finally:
        loader.dispose()


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_size(root: Node, source: str) -> None:
    """Refuse a document whose values, aliases expanded, exceed MAX_VALUES or MAX_TEXT_CHARS, or
    that refers to itself. Each node is visited once; a shared node counts once per use."""
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, characters) it expands to
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            values, chars = 1, len(node.value) if isinstance(node, ScalarNode) else 0
            for child in _children(node):
                v, c = size[id(child)]
                values, chars = values + v, chars + c
            if values > MAX_VALUES or chars > MAX_TEXT_CHARS:
                line = node.start_mark.line + 1
                raise CapsimError(
                    f"{source}: the document is too large once its aliases are expanded (the value at line {line} "
                    f"alone holds more than {MAX_VALUES:,} values or {MAX_TEXT_CHARS // 2**20} MiB of text); "
                    "a workload needs a few hundred values at most.")
            size[key] = (values, chars)
        elif key not in size:
            if key in on_path:
                raise CapsimError(f"{source}: line {node.start_mark.line + 1}: an alias refers to the value that "
                                  "contains it (a recursive document); aliases may only repeat earlier values.")
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in size)
