"""Engines serve a variant behind an OpenAI-compatible endpoint; see base.Engine for the contract."""

from .base import Endpoint, Engine, EngineMemory, build_engine

__all__ = ["Endpoint", "Engine", "EngineMemory", "build_engine"]
