"""The fake quantizer's worker (quantize/fake.py): standard library only, never imports qeval.

Usage: python quantize_fake.py SPEC.json
SPEC: {"base": a fake checkpoint folder, "out": dir, "method": str, "bits": int, ...}
Writes OUT/config.json: the base's fake spec under a new identity (its answers now differ where the base
errs by a hash of its identity; its logprobs sit a little further from the base's), with the base's answer
files copied beside it. Prints the GPUs it was given (CUDA_VISIBLE_DEVICES), then waits the base's quantize_s.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

SPEC_KEY = "qeval_fake"  # engines/fake.py's


def main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    base, out = Path(spec["base"]), Path(spec["out"])
    body = json.loads((base / "config.json").read_text())
    fake = dict(body.get(SPEC_KEY, {}))
    t0 = time.time()
    print(f"fake quantization ({spec['method']}, {spec['bits']} bits) of {base.name} in pid {os.getpid()}: "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} start={t0:.3f}", flush=True)
    time.sleep(float(fake.get("quantize_s", 0.0)))
    out.mkdir(parents=True, exist_ok=True)
    answers = []
    for i, rel in enumerate(fake.get("answers", [])):  # copied in: a checkpoint folder names nothing outside it
        src = Path(rel) if Path(rel).is_absolute() else base / rel
        shutil.copyfile(src, out / f"answers-{i}{src.suffix}")
        answers.append(f"answers-{i}{src.suffix}")
    fake.update(model=f"{fake.get('model', 'fake')}+{spec['method']}{spec['bits']}", answers=answers,
                logprob_noise=float(fake.get("logprob_noise", 0.0)) + 0.05)
    (out / "config.json").write_text(json.dumps({**body, SPEC_KEY: fake}, indent=1))
    print(f"fake quantization done: end={time.time():.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
