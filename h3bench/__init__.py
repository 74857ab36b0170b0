"""h3bench: benchmark and qualification suite for MiniMax-H3 Ref2VA on vLLM-Omni."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
