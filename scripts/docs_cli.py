"""Write the CLI reference page (docs/reference/cli.md) from the Typer app itself.

    python scripts/docs_cli.py            # rewrite docs/reference/cli.md
    python scripts/docs_cli.py --check    # exit 1 if the committed page is not what the app gives

The page is generated, never edited by hand: it walks `typer.main.get_command(app)` and writes each
command's help text, usage line and every argument and option with the help, default and
requirement that `capsim COMMAND --help` prints. tests/test_docs.py fails when the committed page
differs from what this script writes, so a changed option or help text shows up there.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "cli.md"
COMMAND = "python scripts/docs_cli.py"


def _escape(text: str) -> str:
    """Markdown-safe text for a table cell: code spans kept as written, `<`, `>` and `|` escaped
    outside them (help texts write `<path>`-style metavars and `a|b` choices), line breaks joined."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part.replace("|", "\\|"))
        else:
            out.append(part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|"))
    return "".join(out)


def _help_paragraphs(text: str | None) -> list[str]:
    """A command's docstring as paragraphs (Typer keeps the docstring's line breaks)."""
    if not text:
        return []
    return [" ".join(block.split()) for block in text.strip().split("\n\n") if block.strip()]


def _command_section(group, name: str, ctx_class) -> list[str]:
    """One command: heading, help, usage, and a table of its arguments and options."""
    command = group.commands[name]
    parent = ctx_class(group, info_name="capsim")
    ctx = ctx_class(command, info_name=name, parent=parent)
    usage = command.get_usage(ctx).replace("Usage: ", "", 1).strip()
    lines = [f"## `capsim {name}`", ""]
    lines += [p for para in _help_paragraphs(command.help) for p in (_escape(para), "")]
    lines += ["```text", usage, "```", ""]
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:  # hidden
            continue
        names, help_text = record
        kind = "argument" if param.param_type_name == "argument" else "option"
        rows.append(f"| `{names.replace('|', chr(92) + '|')}` | {kind} | {_escape(help_text or '')} |")
    if rows:
        lines += ["| name | kind | what it does |", "| --- | --- | --- |", *rows, ""]
    return lines


def render() -> str:
    """The whole page as markdown, commands in the order `capsim --help` lists them."""
    import typer.main

    from capsim.cli.app import app

    group = typer.main.get_command(app)
    ctx_class = type(group).context_class
    lines = [
        "# CLI reference",
        "",
        f"Generated from the command-line app by `{COMMAND}`; do not edit by hand. "
        "`capsim COMMAND --help` prints the same.",
        "",
        *(_escape(p) for p in _help_paragraphs(group.help)),
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    names = list(group.commands)
    for name in names:
        first = _help_paragraphs(group.commands[name].help)
        summary = first[0].split(". ")[0].rstrip(".") + "." if first else ""
        lines.append(f"| [`capsim {name}`](#capsim-{name}) | {_escape(summary)} |")
    lines.append("")
    for name in names:
        lines += _command_section(group, name, ctx_class)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(REPO)} is not what the app gives: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
