"""Time the chat-template work vLLM 0.11.0's chat endpoint does for every request, on this CPU.

vLLM 0.11.0 (`vllm/entrypoints/chat_utils.py`, `resolve_chat_template_kwargs`, called from
`apply_hf_chat_template` for each /v1/chat/completions request) builds a fresh sandboxed Jinja
environment, parses the model's whole chat template and lists its undeclared variables, with no
cache (0.10.2 has no such step; 0.11.1 caches it). This script repeats exactly that work on a
template and prints the median and the minimum time per request; the `vllm@0.11.0` engine
profile's `chat_request_s` is the minimum measured on a template the size of Qwen3's.

    python benchmarks/chat_template_parse.py TEMPLATE [--runs 300]

TEMPLATE is a .jinja file or a Hugging Face tokenizer_config.json (its `chat_template`). Needs
jinja2 (installed with the test extra). Wall-clock figures of this machine, not of the GPU host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox


class GenerationTag(jinja2.ext.Extension):
    """The `{% generation %}` block tag transformers' templates may use (vLLM registers one too),
    so that templates with it parse; its body is kept as it is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def per_request(template: str) -> set[str]:
    """What one chat request costs vLLM 0.11.0 here: a new environment, a parse, the variables."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[GenerationTag, jinja2.ext.loopcontrols])
    return jinja2.meta.find_undeclared_variables(env.parse(template))


def read_template(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".json":
        template = json.loads(text).get("chat_template")
        if not isinstance(template, str):
            raise SystemExit(f"{path}: no 'chat_template' string in it")
        return template
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path, help="a .jinja file or a tokenizer_config.json")
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    template = read_template(args.template)
    for _ in range(3):
        per_request(template)
    times_ms = []
    for _ in range(args.runs):
        start = time.perf_counter()
        per_request(template)
        times_ms.append((time.perf_counter() - start) * 1e3)
    print(f"{args.template.name}: {len(template):,} characters; per request over {args.runs} runs: "
          f"median {statistics.median(times_ms):.2f} ms, min {min(times_ms):.2f} ms")


if __name__ == "__main__":
    main()
