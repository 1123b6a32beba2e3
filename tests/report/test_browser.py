"""What people look at, in a real browser: the MLflow UI of a real `mlflow server` and the HTML report, both
opened in headless Chromium (Debian's package); the model registry's versions and their verdict tags.

The campaign is real from its stored per-item records on: `qeval finish` compares, gates, writes the reports
and logs to MLflow (with the registry on) exactly as after an interrupted run; only serving is skipped, so
the per-item scores are written here. Screenshots are kept in test-artifacts/browser/.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qeval.pipeline.campaign import Campaign
from qeval.pipeline.judge import summarize
from qeval.pipeline.plan import plan
from qeval.config import load_config
from qeval.hashing import tree_hash
from qeval.record.run import RunRecord, VariantResult
from qeval.settings import Settings
from qeval.record.store import Record, ResultsStore
from qeval.tracking.registry import passed_filter
from qeval.tracking.server import MlflowServer, runs_table_urls
from tests.browser import assert_real_png, dom, require_chromium, screenshot
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
EXPERIMENT, MODEL = "qeval-browser-check", "smollm2-135m-quantized"

pytestmark = pytest.mark.slow  # an MLflow server start-up (~10-20 s here) and several Chromium runs

def qeval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qeval.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


@pytest.fixture(scope="module")
def mlflow_url(tmp_path_factory):
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as url:
        yield url


def _stored_run(root: Path, url: str) -> Path:
    """What a run leaves after serving each variant (w8-down's engine failed): its record and per-item scores."""
    for name, size in (("bf16", 8000), ("w4-good", 2500), ("w4-bad", 2200), ("w8-down", 4100)):
        (root / "ckpt" / name).mkdir(parents=True)
        (root / "ckpt" / name / "config.json").write_text(json.dumps({"qeval_test": name}))
        (root / "ckpt" / name / "model.safetensors").write_bytes(name.encode() * size)
    config = campaign_file(
        root, name="browser-check", file="campaign.yaml", model={"path": root / "ckpt/bf16"}, output_dir=root / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": name, "method": "checkpoint", "checkpoint": root / "ckpt" / name}
                  for name in ("w4-good", "w4-bad", "w8-down")],
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]},
        mlflow={"tracking_uri": url, "experiment": EXPERIMENT, "registry": True, "registered_model": MODEL},
        extra={"description": "Per-item scores written by the test; everything after them is qeval's own pipeline.",
               "noise_floor": True})  # bf16-aa: the baseline's second evaluation
    cfg = load_config(config)
    settings = Settings.from_env()
    p = plan(cfg, settings, str(config))
    suite = p.suites[0]
    camp = Campaign(cfg, settings, config_file=str(config))
    camp.run_dir.mkdir(parents=True)
    record = RunRecord(run_id="browser-check-0001", campaign=cfg.name, config_hash=cfg.config_hash(),
                       config=cfg.model_dump(mode="json"), config_file=str(config), command=["qeval", "run"],
                       started_at="2026-11-30T00:00:00+00:00")
    # w4-good loses one of the baseline's right answers, within the A/A's two flips; w4-bad loses 15
    wrong = {"bf16": set(range(45, 53)), "w4-good": set(range(45, 53)) | {0}, "w4-bad": set(range(30, 53)),
             "bf16-aa": set(range(44, 52))}
    aa = next(vp for vp in camp.plans(p) if vp.role == "noise")
    with ResultsStore(camp.run_dir / "results.sqlite") as store:
        for v in [*cfg.all_variants(), aa.variant]:
            ckpt = v.checkpoint or cfg.model.path
            role = "baseline" if v is cfg.baseline else "noise" if v is aa.variant else "variant"
            res = VariantResult(name=v.name, method=v.method, role=role,
                                checkpoint=str(ckpt), checkpoint_hash=tree_hash(ckpt), engine="vllm",
                                weights_bytes=(ckpt / "model.safetensors").stat().st_size)
            if v.name not in wrong:
                res.status, res.error = "error", "the engine exited during start-up (written by the test)"
                record.variants.append(res)
                continue
            res.key = aa.key(res.checkpoint_hash) if role == "noise" else camp.variant_key(v, res.checkpoint_hash)
            score = {i: 0.0 if k in wrong[v.name] else 1.0 for k, i in enumerate(it.id for it in suite.items)}
            store.put(res.key, suite.key, v.name, f"custom/{suite.name}", [
                Record(item_id=it.id, scores={"contains": score[it.id], "normalized": score[it.id]},
                       prompt_hash=f"p-{it.id}", response="(answer)") for it in suite.items])
            store.mark_complete(res.key, suite.key, len(suite.items))
            res.suites = summarize(store, res.key, p)
            record.variants.append(res)
    record.save(camp.run_dir / "run.json")
    return config


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, mlflow_url) -> tuple[Path, RunRecord]:
    root = tmp_path_factory.mktemp("campaign")
    config = _stored_run(root, mlflow_url)
    done = qeval("finish", str(config))
    # exit 3: a variant was not evaluated (that outranks w4-bad's FAIL)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-3000:]
    run_dir = root / "runs" / "browser-check"
    rec = RunRecord.load(run_dir / "run.json")
    assert rec.tracking.get("parent_run_id"), rec.tracking
    assert rec.verdicts == {"w4-good": "PASS", "w4-bad": "FAIL", "w8-down": "NOT_EVALUATED"}
    assert rec.verdict == "NOT_EVALUATED"
    return run_dir, rec


def _client(url: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=url, registry_uri=url)


def test_registry_has_one_version_per_variant_with_its_verdict(campaign, mlflow_url, tmp_path):
    run_dir, rec = campaign
    client = _client(mlflow_url)
    versions = {mv.tags["qeval.variant"]: mv for mv in client.search_model_versions(f"name = '{MODEL}'")}
    assert set(versions) == {"w4-good", "w4-bad", "w8-down"}  # the variants, not the baseline
    for name, mv in versions.items():
        v = next(x for x in rec.variants if x.name == name)
        assert mv.tags["qeval.verdict"] == rec.verdicts[name]
        assert mv.tags["qeval.run_id"] == rec.run_id
        assert mv.tags["method"] == "checkpoint" and mv.tags["checkpoint_hash"] == v.checkpoint_hash
        # a reference to the checkpoint, not a copy of it
        info = Path(client.download_artifacts(mv.run_id, "model/qeval-variant.json", str(tmp_path)))
        assert json.loads(info.read_text())["checkpoint_hash"] == v.checkpoint_hash
        assert [a.path for a in client.list_artifacts(mv.run_id, "model")] == ["model/qeval-variant.json"]

    # a second sync (and a third) adds no version
    for _ in range(2):
        again = qeval("sync", str(run_dir))
        assert again.returncode == 0, again.stderr[-3000:]
    assert len(client.search_model_versions(f"name = '{MODEL}'")) == 3

    # what deployment tooling asks: the passed versions, and only those
    passed = client.search_model_versions(passed_filter(MODEL))
    assert [mv.tags["qeval.variant"] for mv in passed] == ["w4-good"]
    same = client.search_model_versions(f"name = '{MODEL}' and tags.`qeval.verdict` = 'PASS'")
    assert [mv.version for mv in same] == [mv.version for mv in passed]


def test_mlflow_ui_shows_the_campaign(chromium, campaign, mlflow_url):
    _, rec = campaign
    exp_id = rec.tracking["experiment_id"]
    # the runs table, at the link `qeval ui` prints (a bare URL opens the GenAI overview): the campaign's
    # run and its 5 children (the A/A's among them)
    runs = runs_table_urls(mlflow_url)[EXPERIMENT]
    assert f"/#/experiments/{exp_id}/runs?" in runs
    page = dom(runs)
    assert EXPERIMENT in page and ">browser-check<" in page
    assert re.search(r"\b6(</strong>)?\s*matching runs", page), "the runs table did not render"

    client = _client(mlflow_url)
    kids = client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = '{rec.tracking['parent_run_id']}'")
    ids = json.dumps([k.info.run_id for k in kids]).replace(" ", "")
    compare = f"{mlflow_url}/#/compare-runs?runs={ids}&experiments=[\"{exp_id}\"]"
    page = dom(compare)
    # MLflow's own comparison keys (compare/<baseline run id[:8]>/...) sort first among a variant's metrics; the
    # view renders only the rows in sight, so qeval's delta/... are read through the client below
    base_id = next(k.info.run_id for k in kids if k.info.run_name == "bf16")
    for name in ("bf16", "w4-good", "w4-bad", "bf16-aa", f"compare/{base_id[:8]}/custom/capitals/contains/diff",
                 "checkpoint_hash"):
        assert name in page, f"{name!r} not in the compare view"
    assert all("delta/custom/capitals/contains" in k.data.metrics for k in kids if k.info.run_name.startswith("w4-"))
    # the floor on the campaign's run, and which variant sits within it on its own (the compare view lists
    # only some of a run's metrics: read through the client)
    parent = client.get_run(rec.tracking["parent_run_id"])
    assert parent.data.metrics["noise_floor/custom/capitals/contains"] == pytest.approx(2 / 53)
    within = {k.info.run_name for k in kids if k.data.metrics.get("within_noise_floor/custom/capitals/contains")}
    assert within == {"w4-good"}
    assert next(k for k in kids if k.info.run_name == "bf16-aa").data.tags["qeval.verdict"] == "NOISE_FLOOR"

    # the flip explorer's table, as MLflow's artifact view shows a logged table (flips.json of w4-bad's run)
    bad = next(k for k in kids if k.info.run_name == "w4-bad")
    flips_view = f"{mlflow_url}/#/experiments/{exp_id}/runs/{bad.info.run_id}/artifacts/flips.json"
    page = dom(flips_view)
    lost = [r.item_id for r in next(v for v in rec.variants if v.name == "w4-bad").flips["custom/capitals"].rows]
    assert "flips.json" in page and "direction" in page and lost[0] in page, "the flips table did not render"

    models = dom(f"{mlflow_url}/#/models/{MODEL}")
    assert MODEL in models and "Version 1" in models

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for shot, url in (("mlflow-runs.png", runs), ("mlflow-flips.png", flips_view),
                      ("mlflow-compare.png", compare), ("mlflow-registry.png", f"{mlflow_url}/#/models/{MODEL}")):
        assert_real_png(screenshot(url, ARTIFACTS / shot))
    print(f"\nscreenshots: {ARTIFACTS}")


# after load, the page's images as drawn: their natural widths (0 = not decoded)
PROBE = ("<script>addEventListener('load', () => document.body.setAttribute('data-drawn', "
         "[...document.images].map(i => i.complete ? i.naturalWidth : 0).join(' ')))</script>")


def test_html_report_in_chromium(chromium, campaign, tmp_path):
    run_dir, rec = campaign
    report = run_dir / "report.html"
    page = dom(report.as_uri())
    assert "Overall verdict: <strong>NOT_EVALUATED</strong>" in page
    assert "<th>variant</th>" in page and "<td>w4-good</td>" in page and "<strong>PASS</strong>" in page
    assert page.count('src="data:image/png;base64,') >= 2  # forest plot and trade-off, inline
    # read as a sign-off: title, verdicts, recommendation, what was not evaluated, then the gates and their plot
    marks = ("<h1>", 'id="verdict"', "<th>verdict</th>", "Recommended: w4-good", "w8-down was not evaluated",
             "<h2>Gates</h2>", 'id="figure-forest"', "<h2>Every comparison</h2>", "<h2>Noise floor (A/A)</h2>",
             "<h2>Flipped items</h2>")
    at = [page.index(m) for m in marks]
    assert at == sorted(at), list(zip(marks, at))
    # the flip explorer: w4-bad lost 15 of the baseline's right answers; the first 10 are listed, collapsed
    flips = next(v for v in rec.variants if v.name == "w4-bad").flips["custom/capitals"]
    assert (flips.lost, flips.gained) == (15, 0)
    assert "w4-bad, custom/capitals (contains): 15 lost, 0 gained of 53" in page
    block = page.split('data-variant="w4-bad" data-suite="custom/capitals" data-direction="lost"', 1)[1]
    block = block.split("</details>", 1)[0]
    assert [m for m in re.findall(r"<tr><td>([^<]+)</td>", block)] == [r.item_id for r in flips.rows]
    assert len(flips.rows) == 10 and 'href="flips.parquet"' in page and (run_dir / "flips.parquet").is_file()
    # the noise floor: the A/A flipped 2 of 53 (3.8%); w4-good's one loss (1.9%) sits within it, w4-bad's 15 not
    floor = page.split("<h2>Noise floor (A/A)</h2>", 1)[1].split("<h2>", 1)[0]
    assert re.search(r"<td>custom/capitals / contains</td>\s*<td>flip rate</td>\s*<td>3.8% \(53\)</td>\s*"
                     r"<td>1.9% \(within\)</td>\s*<td>28.3%</td>", floor), floor
    assert "<strong>w4-good</strong>, custom/capitals / contains: flip rate 1.9%, within the noise floor (3.8%)" in floor
    assert "<strong>w4-bad</strong>" not in floor

    probe = tmp_path / "report-probe.html"  # a copy, so the report itself stays script-free
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    drawn = dom(probe.as_uri()).split('data-drawn="', 1)[1].split('"', 1)[0].split()
    assert len(drawn) >= 2 and all(int(w) > 300 for w in drawn), drawn

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert_real_png(screenshot(report.as_uri(), ARTIFACTS / "report.png", height=1800))
    print(f"\nscreenshot: {ARTIFACTS / 'report.png'}")


def test_report_pdf_printed_by_chromium(chromium, campaign, tmp_path):
    run_dir, _ = campaign
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    done = qeval("report", str(copy), "--pdf")
    assert done.returncode == 0, done.stderr[-3000:]
    pdf = copy / "report.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 50_000
    assert pdf.read_bytes().count(b"/Type /Page") - pdf.read_bytes().count(b"/Type /Pages") >= 2
