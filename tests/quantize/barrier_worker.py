"""A stand-in quantizer worker: waits until every campaign's worker has started, then reads its spec
and writes a checkpoint folder, as a real worker does (reading the spec late is what exposes a shared
spec file)."""

import json
import os
import sys
import time
from pathlib import Path

spec_file = Path(sys.argv[1])
barrier = Path(os.environ["BARRIER_DIR"])
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 60
while len(list(barrier.iterdir())) < int(os.environ["BARRIER_N"]) and time.monotonic() < deadline:
    time.sleep(0.05)
spec = json.loads(spec_file.read_text())
out = Path(spec["out"])
out.mkdir(parents=True, exist_ok=True)
(out / "weights.bin").write_bytes(b"\0" * 1024)
(out / "config.json").write_text(json.dumps({"made_by": os.getpid()}))
