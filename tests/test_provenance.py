"""Every record names the qeval version and commit that made it: from this source tree, from a copy of it
without .git, and from a wheel built from it."""

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from qeval.pipeline.environment import environment
from qeval.machine.provenance import provenance
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# what a Python with no qeval installed prints: no site-packages (-S), the copy first on the path
PRINT = ("import sys; sys.path.insert(0, sys.argv[1]); from qeval.machine.provenance import provenance; "
         "p = provenance(); print(p.version, p.commit)")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_from_this_source_tree_the_version_is_pyprojects_and_the_commit_is_head():
    dirty = "+dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""
    p = provenance()
    assert p.version == PYPROJECT_VERSION
    assert p.commit == _git("rev-parse", "HEAD") + dirty


def test_the_records_environment_names_both():
    env = environment(Settings.from_env())
    assert env["qeval"] == PYPROJECT_VERSION and env["qeval_commit"].startswith(_git("rev-parse", "HEAD"))


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "copy"
    shutil.copytree(ROOT / "qeval", tree / "qeval", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree)
    return tree


def test_a_copy_of_the_tree_without_git_or_metadata_still_names_its_version(tmp_path):
    tree = _copy(tmp_path)
    out = subprocess.run([sys.executable, "-S", "-c", PRINT, str(tree)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [PYPROJECT_VERSION, "unknown"]
    # a stamped copy (an unpacked sdist) names the commit it was made from
    (tree / "qeval" / "_build_info.py").write_text('VERSION = "9.9"\nCOMMIT = "abc123"\n')
    out = subprocess.run([sys.executable, "-S", "-c", PRINT, str(tree)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [PYPROJECT_VERSION, "abc123"]


def test_another_trees_editable_install_does_not_speak_for_a_copy(tmp_path):
    # this Python may have qeval installed (editable, from elsewhere): the copy's own pyproject decides
    tree = _copy(tmp_path)
    text = (tree / "pyproject.toml").read_text().replace(f'version = "{PYPROJECT_VERSION}"', 'version = "7.7.7"')
    (tree / "pyproject.toml").write_text(text)
    out = subprocess.run([sys.executable, "-c", PRINT, str(tree)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["7.7.7", "unknown"]


def test_a_wheel_built_from_a_checkout_carries_its_commit_and_an_install_of_it_names_both(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    head = _git("rev-parse", "HEAD", cwd=clone)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(clone)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("qeval-*.whl"))
    stamp = zipfile.ZipFile(wheel).read("qeval/_build_info.py").decode()
    assert f"COMMIT = {json.dumps(head)}" in stamp
    target = tmp_path / "site"  # installed: metadata and the stamp, no pyproject.toml, no .git
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-S", "-c", PRINT, str(target)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [PYPROJECT_VERSION, head]
