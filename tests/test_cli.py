"""The CLI: bad input exits 2 with one line naming the file and the place, and writes nothing."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import campaign_file

# `qeval plan` reads the embedded model and the benchmark data that `make setup` builds: not in `make test-fast`
NEEDS_SETUP = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def qeval(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qeval.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def base(tmp_path: Path, suite: str = f"{ROOT}/suites/custom/capitals.yaml") -> str:
    # written by hand, not by tests.conftest.campaign_file: the errors below name its lines (6, 9)
    return f"""name: t
model: {{builtin: smollm2-135m-instruct}}
output_dir: {tmp_path}/runs
baseline: {{name: base, method: bf16}}
variants:
  - {{name: q, method: gptq}}
suites:
  - {{kind: custom, path: {suite}}}
"""


@pytest.mark.parametrize("mutate, expect", [
    (lambda t: t.replace("method: gptq", "methd: gptq"), r"c.yaml:line 6: variants.0.methd: unknown key (did you mean 'method'?)"),
    (lambda t: t.replace("{name: q, method: gptq}", "{name: q, method: checkpoint, checkpoint: /nope}"),
     "c.yaml:variant q: checkpoint: /nope does not exist"),
    (lambda t: t + "engine: {startup_timeout_s: -1}\n", "c.yaml:line 9: engine.startup_timeout_s"),
])
def test_bad_config_exits_2_with_one_line(tmp_path, mutate, expect):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(mutate(base(tmp_path)))
    for cmd in ("run", "validate"):
        r = qeval(cmd, str(cfg))
        assert r.returncode == 2, r.stderr
        assert expect in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_suite_line_not_json_exits_2(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "prompt": "p", "reference": "r"}\n{"id": "b", "prompt": \n')
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nitems: items.jsonl\nscorers: [{kind: exact}]\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(base(tmp_path, str(suite)))
    r = qeval("run", str(cfg))
    assert r.returncode == 2
    assert f"{items}:line 2: not valid JSON" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_config_file(tmp_path):
    r = qeval("run", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "nope.yaml: file not found" in r.stderr


@NEEDS_SETUP
def test_plan_reports_n_and_mde_per_suite():
    import json

    r = qeval("plan", str(ROOT / "examples" / "demo.yaml"), "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["suite"]: row for row in json.loads(r.stdout)}
    assert rows["lm_eval/oe_copa"]["n"] == 100  # the whole task: fewer rows than the limit
    assert rows["lm_eval/oe_arc_easy"]["n"] == 200  # the limit: ARC-Easy has 570
    assert rows["custom/capitals"]["n"] == 53
    gk = rows["lm_eval/oe_copa"]
    assert gk["mde_assumed"] < gk["mde_worst_case"] and gk["supports_margin"] is True


@NEEDS_SETUP
def test_plan_counts_groups_when_the_policy_assumes_their_correlation(tmp_path):
    """60 items in 12 groups of 5: with planning_icc 0.5 (design effect 3) the plan's MDE and n needed
    grow as the gate's will after the run."""
    import json

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "items.jsonl").write_text("".join(json.dumps({"id": f"i{k}", "prompt": f"q{k}", "reference": "a",
                                                           "group": f"passage{k // 5}"}) + "\n" for k in range(60)))
    (suite / "s.yaml").write_text("name: grouped\nitems: items.jsonl\nscorers: [{kind: exact}]\n")
    rows = {}
    for icc in ("null", "0.5"):
        cfg = campaign_file(tmp_path, name="grouped", file=f"c-{icc}.yaml",
                            model={"builtin": "smollm2-135m-instruct"}, output_dir=None,
                            baseline={"name": "b", "method": "bf16"}, variants=[{"name": "q", "method": "int8"}],
                            suites=[{"kind": "custom", "path": suite / "s.yaml"}],
                            gates={"rules": [{"match": "*", "margin": 0.1, "planning_icc": yaml.safe_load(icc)}]})
        r = qeval("plan", str(cfg), "--json")
        assert r.returncode == 0, r.stderr
        [rows[icc]] = json.loads(r.stdout)
    plain, grouped = rows["null"], rows["0.5"]
    assert plain["n"] == grouped["n"] == 60
    assert grouped["mde_assumed"] > plain["mde_assumed"] * 3 ** 0.5  # sqrt(design effect), and t at 11 df
    assert grouped["n_needed"] > plain["n_needed"] * 2 and grouped["n_needed"] % 5 == 0


def test_run_prints_where_each_sequential_gate_stopped_and_the_items_saved(stopped_campaign, tmp_path):
    """The verdict lines a CI log shows: run again over a copy of a finished sequential campaign (it serves
    nothing: every suite is stored, or was skipped after a failed gate)."""
    import shutil

    root = tmp_path / "campaign"
    shutil.copytree(stopped_campaign.run_dir.parents[1], root)
    r = qeval("run", "--no-mlflow", str(root / "s.yaml"))
    assert r.returncode == 1, r.stderr  # bad FAILs
    rows = {tuple(c.strip() for c in line.strip("│┃").split("│")[:2]): line for line in r.stdout.splitlines()
            if line.startswith("│")}
    assert "FAIL (worse than the margin) at 100 of 400 items (gsd)" in rows[("bad", "custom/facts/contains")]
    assert "PASS at 200 of 400 items (gsd)" in rows[("same", "custom/sums/numeric")]
    assert rows[("bad", "custom/sums/numeric")].rstrip(" │").endswith("NOT_RUN")
    lines = r.stdout.splitlines()
    assert any(line.startswith("sequential: bad: 100 of 800 items evaluated, 700 saved, about ")
               and line.endswith("of engine time (an estimate); custom/sums not run") for line in lines), r.stdout
    assert any(line.startswith("sequential: 1,100 of 1,600 items saved in all, about ") for line in lines)


def test_validate_says_what_each_variant_changes_and_refuses_a_width_no_gpu_kernel_takes(tmp_path):
    """On a machine without a GPU, `qeval validate` of a `device: gpu` campaign: an FP8 KV variant's weights rule is
    not applicable, W3A16 is simulated (auto) or refused (simulate: false): the plan needs no device."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 576, "intermediate_size": 1536}')
    doc = {"name": "kv", "model": {"path": str(model)}, "output_dir": str(tmp_path / "runs"),
           "baseline": {"name": "bf16", "method": "bf16"}, "engine": {"device": "gpu"}, "probe": {"enabled": True},
           "variants": [{"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}},
                        {"name": "w3", "method": "rtn", "recipe": {"bits": 3}}],
           "gates": {"performance": [{"metric": "weights_bytes", "max_ratio": 0.75}]}}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    r = qeval("validate", str(cfg))
    assert r.returncode == 0, r.stderr
    assert ("kv-fp8: differs in: kv_cache_dtype auto -> fp8; weights_bytes <= 0.75x: not applicable" in r.stdout
            and "w3: differs in: weights\n" in r.stdout), r.stdout
    assert "w3: simulated automatically: vLLM's CUDA weight-only int kernels (Marlin)" in r.stdout, r.stdout
    doc["variants"][1]["recipe"]["simulate"] = False
    cfg.write_text(yaml.safe_dump(doc))
    r = qeval("validate", str(cfg))
    assert r.returncode == 2 and "variant w3: recipe.simulate" in r.stderr and "4- and 8-bit" in r.stderr, r.stderr
