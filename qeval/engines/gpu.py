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


def visible_devices(value: str | None) -> list[int | str] | None:
    """CUDA_VISIBLE_DEVICES as NVML can look it up: indices, or UUIDs ("GPU-..."); None: every device.
    NVML ignores the variable, so a task Ray gave one GPU would otherwise count the whole machine's."""
    if value is None:
        return None
    out: list[int | str] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        if part.isdigit():
            out.append(int(part))
        elif part.startswith(("GPU-", "MIG-")):
            out.append(part)
        else:
            break  # CUDA stops at the first entry it cannot read, and so do we
    return out


def engine_gpu_memory(pids: set[int], visible: str | None = None) -> GpuMemory:
    """The engine's GPU memory on the devices it can see (`visible`: its CUDA_VISIBLE_DEVICES)."""
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
        devices = visible_devices(visible)
        for d in range(pynvml.nvmlDeviceGetCount()) if devices is None else devices:
            h = pynvml.nvmlDeviceGetHandleByUUID(d) if isinstance(d, str) else pynvml.nvmlDeviceGetHandleByIndex(d)
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
