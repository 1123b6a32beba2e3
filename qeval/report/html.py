"""The self-contained HTML report: the Markdown report's text and tables, with the figures inline."""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2
import markdown as md

from ..record import RunRecord
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
@media print { body { margin: 0; } figure, tr { break-inside: avoid; } }  /* `qeval report --pdf` */
</style></head><body>
<p class="verdict" id="verdict">Overall verdict: <strong>{{ r.verdict }}</strong></p>
{% for title, png in figures %}<figure><img alt="{{ title }}" src="data:image/png;base64,{{ png }}">
<figcaption>{{ title }}</figcaption></figure>
{% endfor %}
{{ body }}
</body></html>
"""


def render(r: RunRecord) -> str:
    figures = []
    for title, fn in (("Forest plot: each gate's interval and margin", plots.forest),
                      ("Trade-off: quality against memory and throughput", plots.tradeoff),
                      ("Latency and throughput against concurrency", plots.latency)):
        png = fn(r)
        if png:
            figures.append((title, base64.b64encode(png).decode()))
    for v in r.variants:
        png = plots.grid_heatmap(v)
        if png:
            figures.append((f"Batch size x concurrency ({v.name}): output tokens/s, best cell under the SLOs boxed",
                            base64.b64encode(png).decode()))
    body = md.markdown(report_md.render(r), extensions=["tables"])
    return jinja2.Template(PAGE).render(r=r, figures=figures, body=body)


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
