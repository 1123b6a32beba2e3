"""Reports: views of the run record for people and CI (Markdown, CI summary, JUnit XML)."""

from __future__ import annotations

import os
from pathlib import Path

from ..record.run import RunRecord


def write_all(record: RunRecord, run_dir: Path, pdf: bool = False) -> dict[str, Path]:
    """With `pdf`, report.pdf too, printed from report.html by headless Chromium."""
    from . import html, junit, markdown, plots
    from . import pdf as report_pdf

    if pdf:
        report_pdf.find_chromium()  # before writing anything: a missing browser is a setup error
    paths = {"report": markdown.write(record, run_dir / "report.md"),
             "html": html.write(record, run_dir / "report.html"),
             "junit": junit.write(record, run_dir / "junit.xml")}
    for v in record.variants:  # each grid's heat map also as a file beside the reports (and in MLflow)
        png = plots.grid_heatmap(v)
        if png:
            (run_dir / f"grid-{v.name}.png").write_bytes(png)
            paths[f"grid-{v.name}"] = run_dir / f"grid-{v.name}.png"
    summary = markdown.render_summary(record)
    (run_dir / "summary.md").write_text(summary)
    paths["summary"] = run_dir / "summary.md"
    if pdf:
        paths["pdf"] = report_pdf.write(paths["html"], run_dir / "report.pdf")
    # CI systems that read a step summary file (GitHub Actions and compatible runners) get the table
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as f:
            f.write(summary + "\n")
    return paths
