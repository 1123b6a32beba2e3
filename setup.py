"""Stamps the commit a wheel or sdist is built from into it (qeval/_build_info.py), so that an installed qeval
names its commit in every run record (qeval/machine/provenance.py). Everything else is in pyproject.toml."""

import importlib.util
import json
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
STAMP = "_build_info.py"


def _provenance():
    spec = importlib.util.spec_from_file_location("qeval_provenance", ROOT / "qeval" / "machine" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)  # by path: the package itself is not importable while it is built
    return module.provenance(ROOT / "qeval")


def _write_stamp(package: Path) -> None:
    # from a git checkout: its commit; from an unpacked sdist (no .git): the commit stamped into the sdist
    p = _provenance()
    package.mkdir(parents=True, exist_ok=True)
    (package / STAMP).write_text('"""Written when this qeval was built (setup.py): what qeval/machine/provenance.py '
                                 'reads."""\n'
                                 f"VERSION = {json.dumps(p.version)}\nCOMMIT = {json.dumps(p.commit)}\n")


class BuildPy(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):  # an editable install reads git from its tree
            _write_stamp(Path(self.build_lib) / "qeval")


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        stamp = Path(base_dir) / "qeval" / STAMP
        stamp.unlink(missing_ok=True)  # a hard link to the tree's own copy, if it had one: not written through
        _write_stamp(Path(base_dir) / "qeval")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
