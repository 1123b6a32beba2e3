"""Quantizers make a variant's checkpoint from the base; outputs are cached by content hash."""

from .base import QUANTIZERS, Quantizer, QuantizerBase, quantizer_for
from . import fake, llmcompressor, nvidia  # noqa: F401  (registers the built-ins)

__all__ = ["QUANTIZERS", "Quantizer", "QuantizerBase", "quantizer_for"]
