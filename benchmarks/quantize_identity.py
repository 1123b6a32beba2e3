"""Does re-quantizing give the same checkpoint? Each method is made twice from the same base and recipe,
into two fresh folders, by the quantizer a campaign uses; then their content identities (qeval's
checkpoint hash: weights, config, tokenizer; not the timings and paths of qeval-quantize.json) and each
file are compared. Where the identity matches, a campaign re-run on a fresh cache reuses its stored
results; where it does not, the re-made variant is another model and is evaluated again.

Run: .venv/bin/python benchmarks/quantize_identity.py [--methods rtn fp8 gptq int8 awq] [--samples 16]
     [--model DIR] [--dtype bfloat16|float32] [--json out.json]
(needs `make setup`, or `qeval setup --device cuda` on a GPU: the tool envs a campaign uses)
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from qeval.config import EngineSpec, RecipeSpec, VariantSpec
from qeval.hashing import file_hash, identity_files, tree_hash
from qeval.quantize import quantizer_for
from qeval.settings import Settings


def make(settings: Settings, base: Path, method: str, recipe: RecipeSpec, dtype: str, out: Path) -> tuple[Path, float]:
    variant = VariantSpec(name=method, method=method, recipe=recipe)
    q = quantizer_for(method, runtime=settings.llmc, engine=EngineSpec(dtype=dtype))
    t0 = time.monotonic()
    ckpt = q.quantize(base, variant, out, out.parent / f"{out.name}.log")
    return ckpt, time.monotonic() - t0


def compare(a: Path, b: Path) -> dict:
    fa = {str(p.relative_to(a)): file_hash(p) for p in identity_files(a)}
    fb = {str(p.relative_to(b)): file_hash(p) for p in identity_files(b)}
    differing = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    raw = (a / "qeval-quantize.json").read_bytes() == (b / "qeval-quantize.json").read_bytes()
    return {"identical": tree_hash(a) == tree_hash(b), "differing_files": differing,
            "raw_records_identical": raw}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=["rtn", "fp8", "gptq", "int8", "awq"])
    ap.add_argument("--model", type=Path, default=None, help="base checkpoint (default: the embedded SmolLM2)")
    ap.add_argument("--samples", type=int, default=16, help="calibration sequences (the demo uses 64)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--awq-grid", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    settings = Settings.from_env()
    base = args.model or settings.models / "smollm2-135m-instruct"
    recipe = RecipeSpec(calibration_samples=args.samples, calibration_seq_len=args.seq_len, awq_n_grid=args.awq_grid)
    rows = []
    print(f"machine: {settings.cpu.kind()}; {platform.node()}; base {base.name}; dtype {args.dtype}")
    with tempfile.TemporaryDirectory(prefix="qeval-identity-") as tmp:
        for method in args.methods:
            a, ta = make(settings, base, method, recipe, args.dtype, Path(tmp) / f"{method}-1")
            b, tb = make(settings, base, method, recipe, args.dtype, Path(tmp) / f"{method}-2")
            row = {"method": method, "seconds": [round(ta, 1), round(tb, 1)], "hash": tree_hash(a), **compare(a, b)}
            rows.append(row)
            print(f"{method:5s} identical={row['identical']!s:5s} seconds={row['seconds']} hash={row['hash'][:16]} "
                  f"differing={row['differing_files'] or '-'} (qeval-quantize.json equal: {row['raw_records_identical']})",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": settings.cpu.kind(), "dtype": args.dtype, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
