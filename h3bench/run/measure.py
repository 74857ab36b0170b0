"""How a block's measured requests are timed: pytest-benchmark in the perf tests, or the client's own E2E."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["Measure", "PlainMeasure"]


class Measure(Protocol):
    """Times a block's measured requests: ``request()`` is timed, ``after()`` (storing evidence) is not."""

    def time(self, request: Callable[[], None], after: Callable[[], None], rounds: int) -> None: ...

    def annotate(self, info: Mapping[str, Any]) -> None:
        """Receive the block's details once it ended (pytest-benchmark keeps them in ``extra_info``)."""


class PlainMeasure:
    """No timing library: the client's own E2E is the measurement."""

    def time(self, request: Callable[[], None], after: Callable[[], None], rounds: int) -> None:
        for _ in range(rounds):
            request()
            after()

    def annotate(self, info: Mapping[str, Any]) -> None:
        pass
