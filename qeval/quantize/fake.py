"""A fake quantizer for fast orchestration tests, as the fake engine is one for serving (engines/fake.py).

It runs qeval's own quantizer lifecycle (a worker process in its own group, a temporary folder renamed when
complete, the content-keyed cache) on a fake checkpoint: the worker (workers/quantize_fake.py) writes a
fake checkpoint of its own identity, after the base's `quantize_s`, and says in its log which GPUs it was
given. Real quantization is llm-compressor's and ModelOpt's, tested on real models.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..settings import Runtime
from .base import QUANTIZERS, QuantizeTarget
from .worker import WORKERS, WorkerQuantizer


@QUANTIZERS.register("fake")
class FakeQuantizer(WorkerQuantizer):
    name = "fake"
    test_double = True  # a stand-in for qeval's own tests: `qeval doctor` shows it apart
    # the Python that runs qeval: its worker needs the standard library only
    runtime_of = staticmethod(lambda settings: Runtime("qeval-fake-quantizer-1", Path(sys.executable)))
    worker = WORKERS / "quantize_fake.py"
    version = "1"
    methods = frozenset({"gptq", "awq", "rtn", "int8", "fp8"})

    def spec(self, base: Path, variant: QuantizeTarget) -> dict:
        return {"method": variant.method, "bits": variant.recipe.bits}
