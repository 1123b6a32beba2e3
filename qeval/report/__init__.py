"""Reports: views of the run record for people and CI (Markdown, CI summary, JUnit XML)."""

from __future__ import annotations

import os
from pathlib import Path

from ..record import RunRecord


def write_all(record: RunRecord, run_dir: Path) -> dict[str, Path]:
    from . import html, junit, markdown

    paths = {"report": markdown.write(record, run_dir / "report.md"),
             "html": html.write(record, run_dir / "report.html"),
             "junit": junit.write(record, run_dir / "junit.xml")}
    summary = markdown.render_summary(record)
    (run_dir / "summary.md").write_text(summary)
    paths["summary"] = run_dir / "summary.md"
    # CI systems that read a step summary file (GitHub Actions and compatible runners) get the table
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as f:
            f.write(summary + "\n")
    return paths
