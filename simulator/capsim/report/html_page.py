"""One self-contained HTML page: Plotly's script and the styles inlined (the file opens with no
network), sections of text, tables and charts, written whole or not at all.

The page is built from `Section`s (html_report fills them from result objects); charts go in as
`<div>`s drawn by one inlined copy of plotly.js, each with its config (no logo, a PNG download
button sized for slides).
"""

from __future__ import annotations

import html
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from capsim.errors import CapsimError, short_path
from capsim.report.html_charts import require_plotly

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; color: #222;
       background: #f6f7f9; }
header { background: #1f3b57; color: white; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 26px; }
header p { margin: 0; opacity: 0.85; }
main { max-width: 1280px; margin: 0 auto; padding: 12px 24px 40px; }
section { background: white; border-radius: 8px; box-shadow: 0 1px 3px rgba(0,0,0,0.12); margin: 18px 0;
          padding: 14px 22px; }
h2 { font-size: 20px; margin: 6px 0 12px; }
table { border-collapse: collapse; font-size: 14px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e3e3; text-align: right; white-space: nowrap; }
th { background: #f0f2f5; } td.text, th.text { text-align: left; }
.wide { overflow-x: auto; }
.verdict { font-size: 18px; font-weight: 600; padding: 8px 14px; border-radius: 6px; display: inline-block; }
.met { background: #e3f4e6; color: #17652a; } .missed { background: #fbe5e5; color: #9b1c1c; }
.none { background: #eef0f3; color: #444; }
ul { margin: 6px 0; } li { margin: 3px 0; }
.note { color: #666; font-size: 13px; margin: 4px 0 0; }
pre { background: #f6f7f9; padding: 10px; font-size: 13px; overflow-x: auto; }
footer { color: #777; font-size: 12px; text-align: center; padding: 12px; }
"""
PLOT_CONFIG = {"displaylogo": False, "responsive": True,
               "toImageButtonOptions": {"format": "png", "width": 1600, "height": 900, "scale": 1}}


@dataclass
class Section:
    """One box of the page."""

    title: str  # the heading
    html: str = ""  # trusted HTML built by this module's helpers (escaped text, tables)
    charts: list = field(default_factory=list)  # plotly Figures, drawn in order under the text
    notes: list[str] = field(default_factory=list)  # plain-text notes under the charts (downsampling, knee rule)


def text(value) -> str:
    """Plain text as HTML."""
    return html.escape(str(value))


def items(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{text(line)}</li>" for line in lines) + "</ul>"


def key_values(pairs: list[tuple[str, object]], per_row: int = 1) -> str:
    """A table of names and values, `per_row` pairs a row."""
    cells = [f'<th class="text">{text(k)}</th><td class="text">{text(v)}</td>' for k, v in pairs]
    rows = "".join("<tr>" + "".join(cells[i:i + per_row]) + "</tr>" for i in range(0, len(cells), per_row))
    return f"<table>{rows}</table>"


def view_table(view: tuple[list[str], list[list[str]], list[str]]) -> str:
    """A planning table view (columns, rows of text cells, caption lines: the same view the
    console prints, capsim.report.planning_tables) as a scrollable HTML table."""
    columns, rows, caption = view
    head = "".join(f'<th class="{"text" if i == 0 else ""}">{text(c)}</th>' for i, c in enumerate(columns))
    body = "".join("<tr>" + "".join(f'<td class="{"text" if i == 0 else ""}">{text(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    notes = "".join(f'<p class="note">{text(line)}</p>' for line in caption)
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>{notes}'


def verdict_badge(slo_met: bool | None, describe: str = "") -> str:
    word, cls = {True: ("SLOs met", "met"), False: ("SLOs missed", "missed"), None: ("no SLO given", "none")}[slo_met]
    return f'<span class="verdict {cls}">{text(word)}</span> {text(describe)}'


def page(title: str, subtitle: str, sections: list[Section], footer: str = "") -> str:
    """The whole HTML document, plotly.js inlined once."""
    require_plotly()
    from plotly.offline import get_plotlyjs

    body, n = [], 0
    for sec in sections:
        parts = [f"<h2>{text(sec.title)}</h2>", sec.html]
        for fig in sec.charts:
            n += 1
            parts.append(_chart_div(fig, f"chart{n}"))
        parts += [f'<p class="note">{text(note)}</p>' for note in sec.notes]
        body.append("<section>" + "".join(parts) + "</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{text(title)}</title>"
            f"<style>{STYLE}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<header><h1>{text(title)}</h1><p>{text(subtitle)}</p></header><main>{''.join(body)}</main>"
            f"<footer>{text(footer)}</footer></body></html>\n")


def _chart_div(fig, div_id: str) -> str:
    """A chart's div and the script that draws it (Plotly's JSON, '</' escaped so that no label
    can close the script element)."""
    spec = fig.to_json().replace("</", "<\\/")
    return (f'<div id="{div_id}" class="chart"></div><script>(function(){{var f={spec};'
            f'Plotly.newPlot("{div_id}",f.data,f.layout,{json.dumps(PLOT_CONFIG)});}})();</script>')


def write_page(path: Path, document: str) -> Path:
    """Write the page to `path` whole: into a hidden temporary file beside it, then renamed over
    it, so a reader never sees half a report."""
    path = Path(path)
    if path.is_dir():
        raise CapsimError(f"--report {short_path(path)}: is a folder; give a file name such as report.html.")
    tmp = path.parent / f".{path.name}.partial-{secrets.token_hex(4)}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(document, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CapsimError(f"--report {short_path(path)}: cannot write it ({exc.strerror or exc}).") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
