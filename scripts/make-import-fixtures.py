"""Copy the lm-eval output a campaign left (its `--log_samples` folders) into tests/fixtures/imports/lmeval/.

usage: python scripts/make-import-fixtures.py RUN_DIR [VARIANT ...]   (default variants: bf16 int8)

RUN_DIR is a finished campaign's run folder (runs/<campaign>): lm-eval wrote each variant's output under
work/<variant>/<key>/lmeval-out/<served name>/. The results file's `pretty_env_info` (the host's `collect_env`
dump: CPU flags, kernel, libraries) is emptied: nothing reads it, and it describes a machine, not the run.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "imports" / "lmeval"


def main(run_dir: Path, variants: list[str]) -> None:
    for v in variants:
        [src] = [p for p in (run_dir / "work" / v).glob("*/lmeval-out/*") if p.is_dir()]
        dest = OUT / v
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            if f.name.startswith("results_"):
                doc = json.loads(f.read_text())
                doc["pretty_env_info"] = ""
                text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
                # the machine's own folders say nothing of the format: the run's folder and HOME, shortened
                text = text.replace(str(run_dir.resolve()), "<run>").replace(str(Path.home()), "~")
                (dest / f.name).write_text(text)
            else:
                shutil.copyfile(f, dest / f.name)
        print(dest)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["bf16", "int8"])
