"""What the comparison tests of every result format share: a comparison file over two imported results, running
it as `qeval compare FILE` does, and a refusal (exit 2, nothing recorded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qeval.config import load_config
from qeval.errors import EXIT_USAGE, ConfigError
from qeval.pipeline.campaign import CampaignResult
from qeval.pipeline.imported import compare


def comparison_file(tmp_path: Path, fmt: str, names: tuple[str, str], base: Path | str, cand: Path | str,
                    gates: dict, results: dict | None = None, **extra) -> Path:
    """`tmp_path/cmp.yaml`: baseline `names[0]` and variant `names[1]`, both `method: results` of format `fmt`;
    `results`: further keys of both sides' `results:` (a tracking URI)."""
    def side(name: str, path: Path | str) -> dict:
        return {"name": name, "method": "results", "results": {"format": fmt, "path": str(path), **(results or {})}}

    doc = {"name": "cmp", "output_dir": str(tmp_path / "runs"), "baseline": side(names[0], base),
           "variants": [side(names[1], cand)], "gates": gates, "mlflow": {"enabled": False}, **extra}
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def compare_file(path: Path) -> CampaignResult:
    return compare(load_config(path), config_file=str(path))


def refused(path: Path, *needles: str) -> ConfigError:
    """The comparison is refused as bad input (exit 2), saying each of `needles`, before anything is recorded."""
    with pytest.raises(ConfigError) as e:
        compare_file(path)
    assert e.value.exit_code == EXIT_USAGE
    for n in needles:
        assert n in str(e.value), str(e.value)
    assert not (path.parent / "runs" / "cmp" / "run.json").exists()
    return e.value
