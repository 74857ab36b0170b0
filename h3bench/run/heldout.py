"""The held-out phase: after the formal blocks, every candidate not rejected is checked on inputs it was not measured on.

For each such candidate and duration, both arms run on every held-out case
(each ``[heldout]`` seed with the official inputs, then each extra input at
the workload's seed), in one AB or BA pair of fresh server processes (AB and
BA alternate over the candidates and durations), after the usual warmups.
Every case's candidate output goes through every quality gate against the
baseline output of the same case.

The requests are recorded with ``phase = "heldout"`` in ``samples.jsonl``, in
blocks of the series ``heldout-<candidate>`` (ids ``5s-heldout-...``): no formal block has one, so
they never enter the formal statistics, the audit, or the formal verdict.
Their verdict is their own, per candidate and duration: PASS when every case
passes every gate, FAIL when a case fails one (or the candidate's server or
request fails), INCONCLUSIVE when a gate could not be measured or the
baseline's block broke.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.course.cases import Block
from h3bench.errors import RunSpecError
from h3bench.evidence import Bundle
from h3bench.evidence.hashing import sha256_file
from h3bench.run.block import run_block
from h3bench.run.client import Reference, VideoClient
from h3bench.run.measure import Measure
from h3bench.run.pace import Pace
from h3bench.run.recorder import Recorder
from h3bench.run.records import BlockResult
from h3bench.run.script import warmups
from h3bench.runspec import BASELINE, RunSpec
from h3bench.server.process import ServerProcess

__all__ = ["HELDOUT", "HeldoutCase", "heldout_blocks", "heldout_cases", "run_heldout"]

HELDOUT = "heldout"


@dataclass(frozen=True)
class HeldoutCase:
    """One held-out request: its seed and, for an extra input, that input's references."""

    label: str
    seed: int
    references: tuple[Reference, ...] | None  # None: the spec's own inputs


def heldout_cases(spec: RunSpec) -> list[HeldoutCase]:
    """Every held-out case; each extra input is re-hashed against its pin first (RunSpecError on a mismatch)."""
    heldout = spec.heldout
    if heldout is None:
        return []
    found = [HeldoutCase(f"seed {seed}", seed, None) for seed in heldout.seeds]
    for index, item in enumerate(heldout.inputs):
        paths = []
        for name in ("reference_video", "reference_audio"):
            pinned = getattr(item, name)
            path = (spec.spec_dir / pinned.path).resolve()
            field = f"heldout.inputs[{index}].{name}"
            try:
                actual = sha256_file(path).hexdigest
            except OSError as exc:
                raise RunSpecError(f"{field}: cannot read {path} ({exc.strerror})", field_path=field) from exc
            if actual != pinned.sha256:
                raise RunSpecError(f"{field}: {path} has sha256 {actual}, but the spec pins {pinned.sha256}; "
                                   "a changed input needs a new frozen RunSpec", field_path=f"{field}.sha256")
            paths.append(path)
        found.append(HeldoutCase(f"input {item.name}", spec.workload.seed,
                                 tuple(Reference.from_path(p) for p in paths)))
    return found


def heldout_blocks(spec: RunSpec, candidate: str, index: int) -> list[Block]:
    """The candidate's held-out blocks: one pair per duration, AB or BA in turn (``index`` counts the pairs before)."""
    blocks = []
    for offset, duration in enumerate(spec.workload.durations):
        order = "AB" if (index + offset) % 2 == 0 else "BA"
        for position, letter in enumerate(order, start=1):
            arm = BASELINE if letter == "A" else candidate
            blocks.append(Block(duration, f"{HELDOUT}-{candidate}", arm, position, "A" if letter == "A" else "B"))
    return blocks


def _script(cases: list[HeldoutCase]) -> Any:
    def requests(recorder: Recorder, client: VideoClient, server: ServerProcess, _measure: Measure) -> None:
        warmups(recorder, client, server)
        for index, case in enumerate(cases):
            recorder.request(client, "measured", index, case.seed, case.references)
        server.snapshot()

    return requests


def run_heldout(spec: RunSpec, candidate: str, index: int, cases: list[HeldoutCase], *, bundle: Bundle,
                inputs: Mapping[str, Path], scratch: Path, campaign_id: str | None, pace: Pace,
                device_lock: Path | None = None) -> dict[float, dict[str, BlockResult]]:
    """Run the held-out blocks of one candidate, per duration: ``{duration: {block id: result}}``.

    ``index`` counts the held-out pairs that ran before (AB and BA alternate).
    An interrupt is raised again after its block has been recorded, like any block's.
    """
    blocks = heldout_blocks(spec, candidate, index)
    out: dict[float, dict[str, BlockResult]] = {}
    for block in blocks:
        out.setdefault(block.duration, {})[block.id] = run_block(
            spec, block, bundle=bundle, inputs=inputs, scratch=scratch, campaign_id=campaign_id, pace=pace,
            script=_script(cases), phase=HELDOUT, device_lock=device_lock)
    return out
