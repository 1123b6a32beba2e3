# Imported first by a tool's Python that has this folder on its PYTHONPATH (qeval/emulate): its ISA probes
# answer as an AVX2-only CPU's would; vLLM picks its kernel build and its attention / GEMM paths from them
import os

if os.environ.get("QEVAL_EMULATED_ISA") == "avx2":
    import torch.cpu

    for name in dir(torch.cpu):
        if name.startswith("_is_") and name != "_is_avx2_supported":
            setattr(torch.cpu, name, lambda: False)
