"""How a block's measured requests are timed: pytest-benchmark in the perf tests, or the client's own E2E."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from h3bench.run.records import BlockResult
from h3bench.runspec import RunSpec

__all__ = ["Measure", "PlainMeasure", "block_info"]


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


def block_info(spec: RunSpec, result: BlockResult) -> dict[str, Any]:
    """What a measure keeps with a block's timings (pytest-benchmark's ``extra_info``)."""
    block = result.block
    return {
        "arm": block.arm,
        "candidate": block.candidate,
        "block_index": block.position,
        "order_position": f"{block.position}/{len(spec.protocol.order)} ({spec.protocol.order})",
        "server_pid": result.server_pid,
        "client_e2e_s": [s.e2e_s for s in result.measured],
        "server_inference_time_s": [s.inference_time_s for s in result.measured],
        "stage_durations": [s.stage_durations for s in result.measured],
        "output_sha256": [s.output_sha256 for s in result.measured],
        "startup_s": result.lifecycle.server.startup_s,
        "warmup_s": result.lifecycle.server.warmup_s,
        "shutdown_s": result.lifecycle.server.shutdown_s,
        "spec_id": spec.spec_id,
    }
