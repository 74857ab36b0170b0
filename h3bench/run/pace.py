"""How far a campaign has come and how long it has left: the ETAs of the progress line.

Each step of a block (the server start, each warmup, measured and audit
request) is expected to last what the same step lasted for the same duration
and arm earlier in this session (the median); before any has run, what the
plan estimates (earlier bundles of the spec, its hints, or a simulator arm's
profile: :func:`h3bench.plan.estimate.cost_of`, which the session hands in as
``estimate``). The campaign's ETA is the expected length of every step still
to come.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from h3bench.course.cases import Block
from h3bench.run.progress import Progress, Step
from h3bench.runspec import RunSpec

__all__ = ["Pace", "StepTimes"]

PHASES = ("start", "warmup", "measured", "audit")


class StepTimes(Protocol):
    """What a block's steps are expected to take before any has run (the plan's cost of a duration and arm)."""

    @property
    def startup_s(self) -> float: ...

    @property
    def request_s(self) -> float: ...


def _no_estimate(duration: float, arm: str) -> StepTimes | None:
    return None


class Pace:
    """The steps of the selected blocks, in order, with what each is expected to take."""

    def __init__(self, spec: RunSpec, progress: Progress,
                 estimate: Callable[[float, str], StepTimes | None] = _no_estimate) -> None:
        self.spec = spec
        self.progress = progress
        self._estimate = estimate
        self.status: Callable[[Block], str] = lambda block: ""  # the campaign's own words on where it stands
        self._costs: dict[tuple[float, str], StepTimes | None] = {}
        self._seen: dict[tuple[float, str, str], list[float]] = {}  # (duration, arm, phase) → seconds
        self._blocks: list[Block] = []
        self._done: set[str] = set()

    def expect(self, blocks: list[Block]) -> None:
        """The blocks still to run this session, in order."""
        self._blocks = list(blocks)

    def _expected(self, block: Block, phase: str) -> float | None:
        seen = self._seen.get((block.duration, block.arm, phase))
        if seen:
            return statistics.median(seen)
        key = (block.duration, block.arm)
        if key not in self._costs:
            self._costs[key] = self._estimate(block.duration, block.arm)
        cost = self._costs[key]
        if cost is None:
            return None
        return cost.startup_s if phase == "start" else cost.request_s

    def _steps(self, block: Block) -> list[str]:
        p = self.spec.protocol
        return ["start", *["warmup"] * p.warmups_per_block, *["measured"] * p.requests_per_block,
                *(["audit"] if p.audit else [])]

    def _left_after(self, block: Block, step_index: int) -> float | None:
        total = 0.0
        for later in [block, *(b for b in self._blocks if b.id != block.id and b.id not in self._done)]:
            steps = self._steps(later)[step_index + 1:] if later is block else self._steps(later)
            for phase in steps:
                expected = self._expected(later, phase)
                if expected is None:
                    return None
                total += expected
        return total

    @contextmanager
    def step(self, block: Block, phase: str, index: int = 0) -> Iterator[Step]:
        """Show one step of a block; its length teaches the ETA of the next ones like it."""
        steps = self._steps(block)
        # A profiled or held-out request is beyond the formal steps: it counts as the block's last.
        position = min(steps.index(phase) + (index if phase != "start" else 0), len(steps) - 1) \
            if phase in steps else len(steps) - 1
        what = f"{block.duration:g}s {block.arm} {block.position}{block.letter} " + (
            "server start" if phase == "start" else f"{phase} {index + 1}/{max(steps.count(phase), index + 1)}")
        with self.progress.step(what, eta_s=self._expected(block, phase), status=self.status(block),
                                campaign_left_s=lambda: self._left_after(block, position)) as current:
            yield current
        self._seen.setdefault((block.duration, block.arm, phase), []).append(time.monotonic() - current.started)

    def finished(self, block: Block) -> None:
        self._done.add(block.id)
