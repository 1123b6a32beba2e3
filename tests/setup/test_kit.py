"""`qeval kit`'s layout on small files with a tiny part size: split, pack, manifest, and install.sh joining and
checking them (offline: no test downloads a wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qeval.errors import ConfigError
from qeval.setup import kit, parts

PART = 12 * 1024  # room for install.sh and the manifest in part-001, and several pieces per folder
ROOT = Path(__file__).resolve().parents[2]  # the checkout: its examples/ and suites/ are what a kit carries


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    rng = __import__("random").Random(7)
    for name, size in [("big-1.0-py3-none-any.whl", 40_000), ("mid-2.0-py3-none-any.whl", 9_000),
                       ("small-0.1-py3-none-any.whl", 1_500), ("antlr4-python3-runtime-4.9.3.tar.gz", 12 * 1024),
                       ("empty-1.0-py3-none-any.whl", 0)]:
        (src / name).write_bytes(bytes(rng.getrandbits(8) for _ in range(size)))
    return src


def make_kit(wheelhouse: Path, out: Path) -> dict:
    info = dict(qeval_wheel="small-0.1-py3-none-any.whl", device="cuda",
                python_version="%d.%d" % sys.version_info[:2], platform="manylinux_2_28_x86_64",
                system_site_packages=False, assets=True, left_out=[])
    return parts.write_kit(wheelhouse, out, PART, info)


def check(kit_dir: Path, prefix: Path, script: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    script = script or kit_dir / "part-001" / "install.sh"
    return subprocess.run(["bash", str(script), "--check", str(prefix)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=120)


def folder_sizes(out: Path) -> dict[str, int]:
    return {d.name: sum(f.stat().st_size for f in d.iterdir()) for d in sorted(out.glob("part-*"))}


def test_every_part_folder_holds_at_most_the_part_size_and_the_first_the_installer(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    manifest = make_kit(wheelhouse, out)
    sizes = folder_sizes(out)
    assert len(sizes) == manifest["folders"] >= 5  # 40 kB alone needs four folders of 12 KiB
    assert all(0 < s <= PART for s in sizes.values()), sizes
    assert (out / "part-001" / "install.sh").is_file() and (out / "part-001" / "manifest.json").is_file()
    big = next(f for f in manifest["files"] if f["name"].startswith("big-"))
    assert [p["name"] for p in big["pieces"]] == [f"big-1.0-py3-none-any.whl.part-{i:03d}" for i in range(4)]
    exact = next(f for f in manifest["files"] if f["name"] == "antlr4-python3-runtime-4.9.3.tar.gz")  # exactly one part's size
    assert len(exact["pieces"]) == 1 and exact["pieces"][0]["name"] == "antlr4-python3-runtime-4.9.3.tar.gz"
    on_disk = json.loads((out / "part-001" / "manifest.json").read_text())
    assert on_disk["files"] == manifest["files"] and on_disk["part_size"] == PART


def test_install_check_joins_every_file_back_byte_for_byte(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    make_kit(wheelhouse, out)
    r = check(out, tmp_path / "prefix")
    assert r.returncode == 0, r.stderr
    assert "5 files checked" in r.stderr
    joined = tmp_path / "prefix" / "wheelhouse"
    assert sorted(p.name for p in joined.iterdir()) == sorted(p.name for p in wheelhouse.iterdir())
    for p in wheelhouse.iterdir():
        assert (joined / p.name).read_bytes() == p.read_bytes(), p.name


def test_install_check_finds_the_pieces_copied_into_one_folder(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    make_kit(wheelhouse, out)
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in out.glob("part-*/*"):
        shutil.copy(f, flat)
    r = check(flat, tmp_path / "prefix", script=flat / "install.sh")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "prefix/wheelhouse/big-1.0-py3-none-any.whl").read_bytes() == \
        (wheelhouse / "big-1.0-py3-none-any.whl").read_bytes()


def test_install_check_names_a_missing_piece_and_installs_nothing(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    manifest = make_kit(wheelhouse, out)
    piece = next(p for f in manifest["files"] if f["name"].startswith("big-") for p in f["pieces"][2:3])
    (out / piece["folder"] / piece["name"]).unlink()
    r = check(out, tmp_path / "prefix", KIT_DIR=str(out))
    assert r.returncode != 0
    assert f"missing {piece['folder']}/big-1.0-py3-none-any.whl.part-002" in r.stderr
    assert "1 missing, 0 damaged" in r.stderr
    assert not (tmp_path / "prefix/wheelhouse/big-1.0-py3-none-any.whl").exists()


def test_install_check_names_a_corrupted_piece(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    manifest = make_kit(wheelhouse, out)
    piece = next(p for f in manifest["files"] if f["name"].startswith("mid-") for p in f["pieces"])
    path = out / piece["folder"] / piece["name"]
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    r = check(out, tmp_path / "prefix")
    assert r.returncode != 0
    assert f"sha256 mismatch {piece['folder']}/mid-2.0-py3-none-any.whl" in r.stderr
    assert "0 missing, 1 damaged" in r.stderr


def test_install_check_refuses_a_kit_for_another_python(wheelhouse, tmp_path):
    out = tmp_path / "kit"
    make_kit(wheelhouse, out)
    m = out / "part-001" / "manifest.json"
    m.write_text(m.read_text().replace('"python_version": "%d.%d"' % sys.version_info[:2], '"python_version": "2.7"'))
    r = check(out, tmp_path / "prefix")
    assert r.returncode != 0 and "the kit is for Python 2.7" in r.stderr


def test_have_leaves_out_what_the_target_has_at_the_locked_version(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.11.0+cu130\nNumPy==2.0.1\n-e git+https://example.invalid/x#egg=x\n"
                      "pkg @ file:///wheels/pkg.whl\ntransformers==5.17.0\n")
    have = kit.read_freeze(freeze)
    assert have == {"torch": "2.11.0", "numpy": "2.0.1", "transformers": "5.17.0"}
    pins = [("torch", "2.11.0"), ("numpy", "2.3.5"), ("transformers", "5.17.0"), ("sqlitedict", "2.1.0"),
            ("vllm", "0.26.0"), ("jinja2", "3.1.6")]
    binary, source, gone = kit.plan_lock(pins, have, already={("jinja2", "3.1.6")})
    assert binary == ["numpy==2.3.5", "vllm==0.26.0"]  # numpy: the target's 2.0.1 is not the locked 2.3.5
    assert source == ["sqlitedict==2.1.0"]
    assert gone == [{"name": "torch", "version": "2.11.0"}, {"name": "transformers", "version": "5.17.0"}]
    kept, gone = kit.leave_out(["qeval-0.1.0-py3-none-any.whl", "numpy-2.0.1-cp312-cp312-manylinux_2_17_x86_64.whl",
                                "PyYAML-6.0.4-cp312-cp312-manylinux_2_17_x86_64.whl"],
                               {"numpy": "2.0.1", "qeval": "0.1.0", "pyyaml": "6.0.3"})
    assert kept == ["qeval-0.1.0-py3-none-any.whl", "PyYAML-6.0.4-cp312-cp312-manylinux_2_17_x86_64.whl"]
    assert gone == [{"name": "numpy", "version": "2.0.1"}]
    assert kit.merge_left_out([dict(name="torch", version="2.11.0", needed_by="cuda-vllm.txt"),
                               dict(name="torch", version="2.11.0", needed_by="cuda-llmc.txt")]) == \
        [dict(name="torch", version="2.11.0", needed_by=["cuda-vllm.txt", "cuda-llmc.txt"])]


def test_a_bad_freeze_line_is_named_with_file_and_line(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.11.0\ntorch>=2\n")
    with pytest.raises(ConfigError, match=r"freeze.txt:line 2: not a `pip freeze` line: 'torch>=2'") as e:
        kit.read_freeze(freeze)
    assert e.value.exit_code == 2


def test_sizes_and_platform_tags():
    assert parts.parse_size("60MiB") == 60 * 2 ** 20 and parts.parse_size("500KB") == 500_000
    assert parts.parse_size("1.5GiB") == 3 * 2 ** 29 and parts.parse_size("65536") == 65536
    for bad in ("60 parsecs", "MiB", "1KB"):
        with pytest.raises(ConfigError):
            parts.parse_size(bad)
    tags = kit.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_29_x86_64" not in tags


def test_the_kit_command_refuses_a_cpu_kit_and_a_missing_freeze(tmp_path):
    from typer.testing import CliRunner

    from qeval.cli import app

    r = CliRunner().invoke(app, ["kit", "--device", "cpu", "--out", str(tmp_path / "k")])
    assert r.exit_code == 2 and "a kit is built for --device cuda" in r.output
    r = CliRunner().invoke(app, ["kit", "--out", str(tmp_path / "k"), "--have", str(tmp_path / "nope.txt")])
    assert r.exit_code == 2 and "nope.txt: no such file (--have)" in r.output
    r = CliRunner().invoke(app, ["kit", "--out", str(tmp_path / "k"), "--part-size", "lots"])
    assert r.exit_code == 2 and "not a size" in r.output


def test_a_rerun_drops_what_this_kit_does_not_need_and_names_what_is_missing(tmp_path):
    from qeval.progress import PlainReporter
    from qeval.setup.build import SetupError

    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for name in ("qeval-0.1.0-py3-none-any.whl", "qeval-0.0.9-py3-none-any.whl", "torch-2.11.0-cp312-cp312-x.whl",
                 "numpy-2.3.5-cp312-cp312-x.whl", "antlr4-python3-runtime-4.9.3.tar.gz"):
        (wheels / name).write_bytes(b"x")
    builder = kit.KitBuilder(tmp_path, PlainReporter(lambda s: None), kit.KitOptions())
    # a second run with --have: the target has torch, so the first run's torch wheel goes
    builder._prune(wheels, {("numpy", "2.3.5"), ("antlr4-python3-runtime", "4.9.3")}, "qeval-0.1.0-py3-none-any.whl")
    assert sorted(p.name for p in wheels.iterdir()) == ["antlr4-python3-runtime-4.9.3.tar.gz", "numpy-2.3.5-cp312-cp312-x.whl",
                                                        "qeval-0.1.0-py3-none-any.whl"]
    with pytest.raises(SetupError, match=r"not downloaded: vllm==0\.26\.0"):
        builder._prune(wheels, {("numpy", "2.3.5"), ("vllm", "0.26.0")}, "qeval-0.1.0-py3-none-any.whl")


def _wheel(folder: Path, name: str, metadata: str = "", files: dict[str, str] | None = None) -> str:
    import zipfile

    wheel, info = f"{name}-0.0.1-py3-none-any.whl", f"{name}-0.0.1.dist-info"
    files = dict(files or {}, **{f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n{metadata}",
                                 f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"})
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / wheel, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return wheel


def _stand_in_qeval_wheel(folder: Path) -> str:
    """A wheel named qeval whose `qeval` command only writes down its arguments: what install.sh runs. Its `ray`
    extra needs a stand-in ray (a kit carries the extra's wheels)."""
    _wheel(folder, "ray", files={"ray_stand_in.py": ""})
    return _wheel(folder, "qeval", 'Provides-Extra: ray\nRequires-Dist: ray==0.0.1; extra == "ray"\n', {
        "qeval_stand_in.py": "import json, os, sys\n\ndef main():\n"
                             "    open(os.environ['QEVAL_ARGS_FILE'], 'w').write(json.dumps(sys.argv[1:]))\n",
        "qeval-0.0.1.dist-info/entry_points.txt": "[console_scripts]\nqeval = qeval_stand_in:main\n"})


@pytest.mark.parametrize("system_site,assets,ray", [(False, True, True), (True, False, False)])
def test_install_makes_a_venv_installs_qeval_offline_and_runs_setup_from_the_wheelhouse(tmp_path, system_site, assets,
                                                                                          ray):
    src = tmp_path / "src"
    src.mkdir()
    wheel = _stand_in_qeval_wheel(src)
    (src / "filler-1.0-py3-none-any.whl").write_bytes(b"\0" * 30_000)  # split over folders
    campaigns = kit.campaign_archive(ROOT, src, "0.0.1")  # beside the wheels: pip's --find-links passes it over
    info = dict(qeval_wheel=wheel, device="cuda", python_version="%d.%d" % sys.version_info[:2],
                platform="manylinux_2_31_x86_64", system_site_packages=system_site, assets=assets,
                extras=["ray"] if ray else [], campaigns=campaigns.name, left_out=[])
    parts.write_kit(src, tmp_path / "kit", PART, info)
    prefix, args_file = tmp_path / "prefix", tmp_path / "args.json"
    r = subprocess.run(["bash", str(tmp_path / "kit" / "part-001" / "install.sh"), str(prefix)], capture_output=True,
                       text=True, env={**os.environ, "PYTHON": sys.executable, "QEVAL_ARGS_FILE": str(args_file)},
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = (prefix / "venv" / "pyvenv.cfg").read_text()
    assert f"include-system-site-packages = {'true' if system_site else 'false'}" in cfg
    expected = ["setup", "--device", "cuda", "--wheelhouse", str(prefix / "wheelhouse")]
    expected += ["--system-site-packages"] * system_site + ["--no-assets"] * (not assets)
    assert json.loads(args_file.read_text()) == expected
    site = next((prefix / "venv" / "lib").glob("python*/site-packages"))
    assert (site / "ray_stand_in.py").is_file() == ray  # the extra installed where the kit carries it
    assert f"{prefix}/venv/bin/qeval run {prefix}/examples/gpu-quick.yaml" in r.stdout
    _the_quick_campaign_reads_its_suites_under(prefix)


def _the_quick_campaign_reads_its_suites_under(prefix: Path) -> None:
    """Unpacked side by side, the examples' ../suites/... paths and gates/ files are the prefix's own."""
    from qeval.config import CustomSuiteRef, LmEvalSuiteRef, load_config

    for name in ("examples/gpu-quick.yaml", "suites/custom/capitals.jsonl", "examples/gates/demo.yaml"):
        assert (prefix / name).read_bytes() == (ROOT / name).read_bytes(), name
    cfg = load_config(prefix / "examples" / "gpu-quick.yaml")  # its gate policy file is read here too
    paths = [s.path if isinstance(s, CustomSuiteRef) else s.include_path for s in cfg.suites
             if isinstance(s, (CustomSuiteRef, LmEvalSuiteRef))]
    assert len(paths) == 3
    for path in paths:
        assert path.exists() and path.resolve().is_relative_to(prefix.resolve() / "suites"), path
    assert cfg.output_dir.resolve() == prefix.resolve() / "runs"


def test_the_campaign_archive_holds_examples_and_suites_the_same_bytes_each_time(tmp_path):
    import tarfile

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    a, b = kit.campaign_archive(ROOT, first, "0.1.0"), kit.campaign_archive(ROOT, second, "0.1.0")
    assert a.name == "qeval-campaigns-0.1.0.tar.gz" and a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        names = tar.getnames()
    assert "examples/gpu-quick.yaml" in names and "suites/custom/capitals.yaml" in names
    tracked = {str(p.relative_to(ROOT)) for f in ("examples", "suites") for p in (ROOT / f).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")}
    assert set(names) == tracked
    bare = tmp_path / "installed"  # qeval without a checkout's folders beside it
    bare.mkdir()
    assert kit.campaign_archive(bare, tmp_path, "0.1.0") is None


def test_a_damaged_campaign_archive_is_named_and_nothing_is_unpacked(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    wheel = _stand_in_qeval_wheel(src)
    campaigns = kit.campaign_archive(ROOT, src, "0.0.1")
    info = dict(qeval_wheel=wheel, device="cuda", python_version="%d.%d" % sys.version_info[:2],
                platform="manylinux_2_31_x86_64", system_site_packages=False, assets=True, extras=[],
                campaigns=campaigns.name, left_out=[])
    manifest = parts.write_kit(src, tmp_path / "kit", PART, info)
    entry = next(f for f in manifest["files"] if f["name"] == campaigns.name)
    assert entry["sha256"] == parts.sha256_of(campaigns) and entry["size"] == campaigns.stat().st_size
    piece = entry["pieces"][0]
    path = tmp_path / "kit" / piece["folder"] / piece["name"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    r = subprocess.run(["bash", str(tmp_path / "kit" / "part-001" / "install.sh"), str(tmp_path / "prefix")],
                       capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=120)
    assert r.returncode != 0 and f"sha256 mismatch {piece['folder']}/{piece['name']}" in r.stderr
    assert not (tmp_path / "prefix" / "examples").exists() and not (tmp_path / "prefix" / "venv").exists()


@pytest.mark.parametrize("ray", [True, False])
def test_the_kit_carries_the_campaign_archive_and_the_ray_extra_in_its_manifest(tmp_path, monkeypatch, ray):
    """KitBuilder.build with pip standing in (no download): what it asks pip for qeval, and what its manifest
    says of the campaign files."""
    from qeval.progress import PlainReporter

    calls = []

    def pip(self, step, *args):
        calls.append(args)
        if args[0] == "wheel":  # qeval's own wheel, built from this checkout
            out = Path(args[args.index("-w") + 1])
            out.mkdir(parents=True, exist_ok=True)
            _wheel(out, "qeval")
        elif args[0] == "download":
            Path(args[args.index("-d") + 1]).mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(kit.KitBuilder, "_pip", pip)
    monkeypatch.setattr(kit.KitBuilder, "_lock", lambda self, *a: set())
    logged = []
    options = kit.KitOptions(part_size=PART * 1024, assets=False, ray=ray)
    manifest = kit.KitBuilder(tmp_path / "kit", PlainReporter(logged.append), options).build()
    download = next(c for c in calls if c[0] == "download")
    requirement = next(a for a in download if a.endswith((".whl", "[ray]")))
    assert requirement.endswith("qeval-0.0.1-py3-none-any.whl" + "[ray]" * ray)
    assert manifest["extras"] == (["ray"] if ray else [])
    assert manifest["campaigns"] == "qeval-campaigns-0.0.1.tar.gz"
    entry = next(f for f in manifest["files"] if f["name"] == manifest["campaigns"])
    archive = tmp_path / "kit" / entry["pieces"][0]["folder"] / manifest["campaigns"]
    assert parts.sha256_of(archive) == entry["sha256"]
    assert json.loads((tmp_path / "kit" / "part-001" / "manifest.json").read_text())["campaigns"] == manifest["campaigns"]
