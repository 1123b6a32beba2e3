"""Engines serve a variant behind an OpenAI-compatible endpoint; see base.Engine for the contract."""

from .base import Endpoint, Engine, EngineBase, EngineMemory, build_engine, serve_dtypes
from .capabilities import Capabilities, MetricNames, PromptLogprobsRoute
from . import external, fake, tgi, trtllm, vllm  # noqa: F401,E402  (registers the built-ins: an uninstalled checkout has no entry points)

__all__ = ["Capabilities", "Endpoint", "Engine", "EngineBase", "EngineMemory", "MetricNames", "PromptLogprobsRoute",
           "build_engine", "serve_dtypes"]
