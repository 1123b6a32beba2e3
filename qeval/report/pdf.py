"""The HTML report printed to PDF by headless Chromium (Debian's `chromium` package; `make browser`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import MissingEnvError, QevalError

# no sandbox: CI machines run as root; the rest keeps a headless run off the network and the GPU
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync")


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise MissingEnvError("Chromium (for the PDF report)", "$PATH", "make browser")


def chromium_argv(profile: Path, *args: str) -> list[str]:
    """A headless Chromium command line with its own profile folder (so runs never share a lock)."""
    return [find_chromium(), *FLAGS, f"--user-data-dir={profile}", *args]


def write(html_path: Path, pdf_path: Path, timeout_s: float = 120) -> Path:
    pdf_path.unlink(missing_ok=True)  # an old PDF must not pass for a new one
    with tempfile.TemporaryDirectory(prefix="qeval-chromium-") as profile:
        argv = chromium_argv(Path(profile), "--no-pdf-header-footer", f"--print-to-pdf={pdf_path.resolve()}",
                             html_path.resolve().as_uri())
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise QevalError(f"Chromium did not print {html_path} within {timeout_s:.0f} s") from None
    if done.returncode != 0 or not pdf_path.is_file() or pdf_path.stat().st_size == 0:
        raise QevalError(f"Chromium could not print {html_path} (exit {done.returncode}):\n{done.stderr[-1500:]}")
    return pdf_path
