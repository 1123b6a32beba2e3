# Sourced on the device: where the staged kit lives, and which Python runs each tool (see qeval/settings.py).
export QEVAL_CACHE=${QEVAL_CACHE:-/tmp/qcache}
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export QEVAL_VLLM_PYTHON=${QEVAL_VLLM_PYTHON:-$(command -v python3)} QEVAL_VLLM_PYTHONPATH=${QEVAL_VLLM_PYTHONPATH:-/tmp/site}
export QEVAL_LLMC_PYTHON=${QEVAL_LLMC_PYTHON:-$(command -v python3)}
export QEVAL_LLMC_PYTHONPATH=${QEVAL_LLMC_PYTHONPATH:-/tmp/site-gguf:/tmp/site-llmc:/tmp/site}
export QEVAL_MODELOPT_PYTHON=${QEVAL_MODELOPT_PYTHON:-$(command -v python3)}
export QEVAL_MODELOPT_PYTHONPATH=${QEVAL_MODELOPT_PYTHONPATH:-/tmp/site-modelopt:/tmp/site-llmc:/tmp/site}
export QEVAL_VLLM_NAME=${QEVAL_VLLM_NAME:-vllm-0.26.0-cuda13} QEVAL_LLMC_NAME=${QEVAL_LLMC_NAME:-llmc-0.14.0.1-cuda13} QEVAL_MODELOPT_NAME=${QEVAL_MODELOPT_NAME:-modelopt-0.47.0-cuda13}
# vLLM keeps its torch.compile cache here: a restarted engine (or a rerun) skips the compile
export VLLM_CACHE_ROOT=/tmp/vllm-cache
# Ray (the `ray` executor): no OOM killer of its own; the VM's MemTotal starts far below what it can grow to
export RAY_memory_monitor_refresh_ms=${RAY_memory_monitor_refresh_ms:-0} RAY_USAGE_STATS_ENABLED=0
# NVLink multicast stays off (the device notes, KINDS.md: a program using it can put the host's shared GPUs out
# of service for days). Set here whatever the caller had; vLLM's tensor-parallel workers and Ray's inherit them
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
