"""The lm-eval page's worked example (docs/guides/results/lm-eval.md) is run as the page writes it: its
`gates.yaml`, its `qeval compare` command from a checkout's root, and the figures its table states."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from qeval.record.run import RunRecord

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "results" / "lm-eval.md"


def _example() -> tuple[str, list[str], dict[str, str]]:
    text = PAGE.read_text().split("## A worked example", 1)[1]
    gates = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    command = re.search(r"```sh\n(.*?)```", text, re.S).group(1).replace("\\\n", " ")
    header, _, row = [line for line in text.splitlines() if line.startswith("| ")][:3]
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    return gates, shlex.split(command), dict(zip(cells(header), cells(row)))


def test_the_worked_example_runs_as_written_and_reaches_its_table(tmp_path):
    gates, argv, table = _example()
    assert argv[:2] == ["qeval", "compare"]
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the page runs from a checkout's root
    (tmp_path / "gates.yaml").write_text(gates)
    p = subprocess.run([sys.executable, "-m", "qeval.cli", *argv[1:]], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert str(p.returncode) == table["exit"], p.stderr + p.stdout
    r = RunRecord.load(tmp_path / argv[argv.index("--out") + 1] / "run.json")
    [c] = r.comparisons
    [g] = r.gates
    assert table == {
        "n": str(c.n_paired), "bf16": f"{c.base_mean:.3f}", "int8": f"{c.variant_mean:.3f}", "delta": f"{c.delta:+.3f}",
        "interval (90%)": f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]", "MDE": f"{c.mde:.3f}", "verdict": g.verdict,
        "exit": table["exit"]}
