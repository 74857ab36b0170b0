"""The device time a campaign's blocks took, and what the fixed design would have cost at their seconds.

A block's wall time on its devices is its start, warmups, timed requests and
stop (:func:`block_seconds`); its device time that times its arm's devices.
The fixed design (:meth:`h3bench.course.design.Design.fixed_of`) is priced
at the seconds the blocks that ran took: their start and stop as measured,
its warmups and timed requests at these blocks' warmup and mean timed
request (:func:`fixed_block_seconds`). These are the figures ``verdict.json``
holds (:class:`~h3bench.verdict.verdicts.LookRecord` per series,
:class:`~h3bench.verdict.verdicts.DeviceTime` per duration) and the live
line shows; the plan prices designs before anything runs
(:mod:`h3bench.course.devicetime`).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence

from h3bench.course.cases import Block
from h3bench.course.design import Design, looks_of, series_of
from h3bench.course.shards import Shard
from h3bench.run.records import BlockResult
from h3bench.runspec import RunSpec
from h3bench.stats import sequential
from h3bench.stats.sequential import LookDecision
from h3bench.verdict.verdicts import DeviceTime, LookRecord, duration_key

__all__ = ["block_seconds", "device_time", "fixed_block_seconds", "look_record"]


def _timed(result: BlockResult) -> list[float]:
    return [s.e2e_s for s in result.samples if s.phase != "heldout" and s.kind in ("measured", "audit")
            and s.e2e_s is not None]


def block_seconds(result: BlockResult) -> float:
    """A block's wall time on its devices: start, warmup, the timed requests, stop."""
    life = result.lifecycle.server
    return sum(v or 0.0 for v in (life.startup_s, life.warmup_s, life.shutdown_s)) + sum(_timed(result))


def _devices(spec: RunSpec, arm: str) -> int:
    return max(1, len(getattr(spec.arms[arm], "device_ids", ()) or spec.hardware.device_ids))


def fixed_block_seconds(spec: RunSpec, result: BlockResult) -> float:
    """What a block of the fixed design (:meth:`Design.fixed_of`) costs at this block's seconds per request.

    Its start and stop as measured, its warmups and timed requests (1 +
    3 + 1 by default) at this block's warmup and mean timed request.
    """
    life = result.lifecycle.server
    own, fixed = Design.of(spec).budget, Design.fixed_of(spec).budget
    timed = _timed(result)
    per_request = statistics.fmean(timed) if timed else 0.0
    return ((life.startup_s or 0.0) + (life.shutdown_s or 0.0) + (life.warmup_s or 0.0) * fixed.warmups / own.warmups
            + per_request * fixed.columns)


def _fixed_s(spec: RunSpec, ran: Sequence[BlockResult], letters: str) -> float | None:
    """What the fixed design's ``letters`` blocks would cost at the seconds these blocks took, on their devices."""
    cost = {}
    for letter in set(letters):
        mine = [r for r in ran if r.block.letter == letter]
        if not mine:
            return None
        cost[letter] = statistics.fmean(fixed_block_seconds(spec, r) * _devices(spec, r.block.arm) for r in mine)
    return sum(cost[letter] for letter in letters)


def _share(order: str, shard: Shard | None) -> str:
    """The fixed design's letters that ``shard`` runs (its AB/BA units), so a shard is priced against its own share."""
    return order if shard is None else "".join(a for i, a in enumerate(order) if shard.runs_pair(i // 2))


def _controls(count: int, shard: Shard | None) -> int:
    """The fixed design's control blocks that ``shard`` runs: round-robin over the shards (:mod:`h3bench.course.shards`)."""
    return count if shard is None else len([c for c in range(count) if c % shard.count == shard.index - 1])


def look_record(spec: RunSpec, duration: float, planned: Sequence[Block], ran: Mapping[str, BlockResult],
                found: LookDecision | None, *, shard: Shard | None = None, stopped: bool = False) -> LookRecord:
    """Where a series stood: its look and why it stopped, which of its ``planned`` blocks ran, and their device time.

    The fixed design's price compares like with like: a shard's own share of
    it, and none for a candidate a stop rule stopped (a failure stops the
    fixed design at the same block: nothing was saved by the design).
    """
    done = [r for b in planned if (r := ran.get(b.id)) is not None]
    device = sum(block_seconds(r) * _devices(spec, r.block.arm) for r in done)
    p = spec.protocol
    return LookRecord(
        str(p.design), looks_of(spec, duration), found.look if found else None, found.pairs if found else 0,
        bool(found and found.stop), sequential.REASONS[found.reason_code] if found else "continue",
        bool(found and found.first_requests_left_out), tuple(r.block.id for r in done),
        tuple(b.id for b in planned if b.id not in ran), device,
        None if stopped else _fixed_s(spec, done, _share(p.order, shard)), p.warmup_steps)


def device_time(spec: RunSpec, blocks: Sequence[Block], ran: Mapping[str, BlockResult], *,
                shard: Shard | None = None, stopped: Collection[str] = ()) -> dict[str, DeviceTime]:
    """Per duration: the blocks that ran and did not, their wall and device time, and the fixed design's.

    The fixed design runs every series at every duration: a series that
    ran no block here (it did not pass a cheaper duration) is priced as
    the duration's baseline blocks, both arms, as the plan prices an arm
    with no figure of its own. A shard is priced against its own share of
    it; a duration where a candidate in ``stopped`` ran has no fixed price
    (its stop rule would have stopped the fixed design too).
    """
    out = {}
    order = _share(spec.protocol.order, shard)
    for duration in spec.workload.durations:
        planned = [b for b in blocks if b.duration == duration]
        done = [r for b in planned if (r := ran.get(b.id)) is not None]
        baseline = [r for r in done if r.block.letter == "A"]
        fixed = []
        for series in series_of(spec):
            own = [r for r in done if r.block.candidate == series.name]
            fixed.append(None if own and series.name in stopped else _fixed_s(spec, own, order) if own
                         else _fixed_s(spec, baseline, "A" * len(order)))
        controls = _fixed_s(spec, baseline, "A" * _controls(Design.fixed_of(spec).fixed_controls, shard))
        total = None if None in fixed or controls is None else sum(f for f in fixed if f) + controls
        out[duration_key(duration)] = DeviceTime(
            len(done), len(planned) - len(done), sum(block_seconds(r) for r in done),
            sum(block_seconds(r) * _devices(spec, r.block.arm) for r in done), total)
    return out
