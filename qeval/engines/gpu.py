"""GPU memory of an engine, through NVML (nvidia-ml-py). Absent NVML or GPU, every figure is None."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuMemory:
    bytes: int | None
    # "processes": summed over the engine's own PIDs; "device": the whole GPU's used memory, when the
    # PIDs NVML reports are not ours (a container with its own PID namespace) — then it counts everything
    source: str | None = None
    device_total: int | None = None


def engine_gpu_memory(pids: set[int]) -> GpuMemory:
    try:
        import pynvml
    except ImportError:
        return GpuMemory(None)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return GpuMemory(None)
    try:
        ours, used, total = 0, 0, 0
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            info = pynvml.nvmlDeviceGetMemoryInfo(h)
            used, total = used + info.used, total + info.total
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if proc.pid in pids and proc.usedGpuMemory:
                    ours += proc.usedGpuMemory
        if ours:
            return GpuMemory(ours, "processes", total)
        return GpuMemory(used or None, "device" if used else None, total or None)
    except pynvml.NVMLError:
        return GpuMemory(None)
    finally:
        pynvml.nvmlShutdown()
