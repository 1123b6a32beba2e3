"""The self-contained HTML report: the Markdown report's text and tables, each figure inline beside the
table it illustrates, verdicts in colour with a shape and a word (so they survive black-and-white print)."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

import jinja2
import markdown as md

from ..record.run import RunRecord
from . import markdown as report_md
from . import plots

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>qeval report: {{ r.campaign }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #111; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #999; padding: 3px 6px; text-align: left; }
th { background: #eee; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.verdict { font-size: 1.4em; padding: 0.4em 0.8em; border: 3px solid #111; display: inline-block; }
.badge { padding: 0 0.4em; border: 1px solid #111; border-radius: 3px; white-space: nowrap; }
.v-PASS { background: #c8f0c8; } .v-FAIL { background: #f7c4c4; } .v-INCONCLUSIVE, .v-WARN { background: #fbe7a6; }
.v-NOT_EVALUATED { background: #ddd; } .v-baseline { background: #fff; }
.v-NOT_RUN { background: #f2f2f2; border-style: dashed; }  /* skipped, neither passed nor failed */
details.flips { margin: 0.3em 0 0.3em 1em; } details.flips code { white-space: pre-wrap; font-size: 0.9em; }
@media print { body { margin: 0; } figure, tr { break-inside: avoid; }
  .badge, .verdict { -webkit-print-color-adjust: exact; print-color-adjust: exact; } }  /* `qeval report --pdf` */
</style></head><body>
{{ body }}
</body></html>
"""

FIGURES = {"forest": ("Forest plot: each gate's interval and margin", plots.forest),
           "tradeoff": ("Trade-off: quality against memory and throughput", plots.tradeoff),
           "latency": ("Latency and throughput against concurrency", plots.latency),
           "depth": ("KL against the baseline by depth in long documents", plots.depth),
           "needle": ("Retrieval at length: needle accuracy over length x depth, baseline and variant", plots.needle)}


class HtmlLook:
    """Marks for the Markdown text that Python-Markdown passes through as HTML."""

    def __init__(self, r: RunRecord):
        self.r = r

    def overall(self, verdict: str) -> str:
        return (f'<p class="verdict v-{verdict}" id="verdict">{report_md.SHAPES.get(verdict, "")} '
                f'Overall verdict: <strong>{verdict}</strong></p>')

    def badge(self, verdict: str, strong: bool = False) -> str:
        word = f"<strong>{verdict}</strong>" if strong else verdict
        shape = report_md.SHAPES.get(verdict)
        css = "".join(ch for ch in verdict if ch.isalnum() or ch in "_-")  # "A/A" is a word, not a class
        return f'<span class="badge v-{css}">{f"{shape} " if shape else ""}{word}</span>'

    def figure(self, name: str, variant=None) -> str:
        if name == "grid":
            title = f"Batch size x concurrency ({variant.name}): output tokens/s, best cell under the SLOs boxed"
            png = plots.grid_heatmap(variant)
        else:
            title, fn = FIGURES[name]
            png = fn(self.r)
        if not png:
            return ""
        # blank lines around it: Python-Markdown keeps a block of raw HTML as it is
        return (f'\n<figure id="figure-{name}"><img alt="{title}" src="data:image/png;base64,'
                f'{base64.b64encode(png).decode()}">\n<figcaption>{title}</figcaption></figure>\n')


    def flips(self, variant: str, suite: str, f) -> str:
        """Collapsible, one block per direction (open the one to read); the whole table is flips.parquet."""
        head = escape(report_md.flip_heading(variant, suite, f))
        if not f.rows:
            return f'\n<p class="flips">{head}: nothing flipped</p>\n'
        if f.kind == "chunks":
            body = "".join(f"<tr><td>{escape(r.item_id)}</td><td>{report_md._fmt(r.kl, '.4f')}</td>"
                           f"<td>{report_md._fmt(r.top1, '.3f')}</td></tr>" for r in f.rows)
            return (f'\n<details class="flips" data-variant="{escape(variant)}" data-suite="{escape(suite)}" '
                    f'data-direction="kl"><summary>{head}</summary><table><tr><th>chunk</th><th>KL</th>'
                    f'<th>top-1 agreement</th></tr>{body}</table></details>\n')
        blocks = []
        for direction, count, what in (("lost", f.lost, "baseline right, variant wrong"),
                                       ("gained", f.gained, "baseline wrong, variant right")):
            rows = [r for r in f.rows if r.direction == direction]
            if not rows:
                continue
            body = "".join(f"<tr><td>{escape(r.item_id)}</td><td>{_pre(r.target)}</td><td>{_pre(r.base_response)}</td>"
                           f"<td>{_pre(r.variant_response)}</td></tr>" for r in rows)
            blocks.append(
                f'<details class="flips" data-variant="{escape(variant)}" data-suite="{escape(suite)}" '
                f'data-direction="{direction}"><summary>{direction}: {count} ({what}); the first {len(rows)}</summary>'
                f'<table><tr><th>item</th><th>reference</th><th>baseline\'s answer</th><th>variant\'s answer</th></tr>'
                f'{body}</table></details>')
        return (f'\n<div class="flip-suite"><p><strong>{head}</strong> (all: <a href="flips.parquet">flips.parquet</a>)'
                f'</p>{"".join(blocks)}</div>\n')


def _pre(text: str | None) -> str:
    return "-" if text is None else f"<code>{escape(text)}</code>"


def render(r: RunRecord) -> str:
    body = md.markdown(report_md.render(r, HtmlLook(r)), extensions=["tables"])
    return jinja2.Template(PAGE).render(r=r, body=body)


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
