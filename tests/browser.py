"""Headless Chromium for tests: the DOM after the page's scripts ran, and a screenshot."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from qeval.errors import MissingEnvError
from qeval.report.pdf import chromium_argv, find_chromium

# virtual time runs the page's timers and waits for its fetches, so a single-page app has rendered by then
BUDGET_MS = 20000


def require_chromium() -> str:
    try:
        return find_chromium()
    except MissingEnvError as e:  # a failure, not a skip: the README's test command installs it
        pytest.fail(f"{e} (`make test` does)")


def _run(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="qeval-chromium-") as profile:
        done = subprocess.run(chromium_argv(Path(profile), f"--virtual-time-budget={BUDGET_MS}", *args),
                              capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def dom(url: str) -> str:
    return _run("--dump-dom", url).stdout


def screenshot(url: str, path: Path, width: int = 1400, height: int = 1000) -> Path:
    path.unlink(missing_ok=True)
    _run(f"--screenshot={path.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars", url)
    return path


def assert_real_png(path: Path, min_bytes: int = 20_000) -> None:
    """A PNG of the right size with something drawn on it: not one flat colour."""
    import numpy as np
    from PIL import Image

    assert path.is_file() and path.stat().st_size > min_bytes, f"{path}: missing or tiny"
    with Image.open(path) as im:
        assert im.format == "PNG"
        px = np.asarray(im.convert("L"), dtype=float)
    assert px.std() > 10, f"{path}: nearly blank (pixel std {px.std():.1f})"
    # many distinct grey levels: text and plots, not a blank page with a border
    assert len(np.unique(px)) > 32, f"{path}: only {len(np.unique(px))} grey levels"
