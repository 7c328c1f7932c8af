"""One self-contained HTML page: plotly.js inlined once, then each figure with its caption.

The page loads nothing from the network, so it opens offline and can be mailed as one file.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.io as pio

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1200px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2.5rem; }
p.note { color: #555; max-width: 60rem; }
table.facts { border-collapse: collapse; font-size: 0.9rem; }
table.facts td, table.facts th { border-bottom: 1px solid #ddd; padding: 0.25rem 0.75rem;
       text-align: left; }
code { background: #f4f4f4; padding: 0 0.2rem; }
"""


@dataclass(frozen=True)
class Section:
    title: str
    note: str  # plain text: what to read in the figure
    figure: Any | None = None  # plotly Figure
    html_body: str = ""  # extra HTML (tables), already escaped


def facts_table(rows: Sequence[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
    )
    return f'<table class="facts">{cells}</table>'


def render_page(title: str, intro: str, sections: Sequence[Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="note">{html.escape(intro)}</p>',
    ]
    js_done = False
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.note:
            parts.append(f'<p class="note">{html.escape(s.note)}</p>')
        if s.html_body:
            parts.append(s.html_body)
        if s.figure is not None:
            parts.append(
                pio.to_html(
                    s.figure,
                    include_plotlyjs=not js_done,  # inline plotly.js once, in the first figure
                    full_html=False,
                    config={"displaylogo": False, "responsive": True},
                )
            )
            js_done = True
    parts.append("</body></html>")
    return "\n".join(parts)
