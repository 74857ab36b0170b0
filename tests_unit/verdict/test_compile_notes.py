"""A comparison whose arms' engines compile in different places says so, from the blocks' lifecycle lines.

The bundles are real sealed ones (:mod:`tests_unit.bundlesim`) whose lifecycle lines carry each
server's start-up phases as :class:`~h3bench.server.process.ServerProcess` records them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from h3bench.course.cases import Block
from h3bench.evidence import Bundle
from h3bench.evidence.codec import to_json
from h3bench.runspec import load_runspec
from h3bench.server.startup import CompileWhere, StartupPhases, compile_differs
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.bundlesim import FIXTURES, write_bundle

SPEC = load_runspec(FIXTURES / "sim.toml")


def _notes(tmp_path: Path, candidate_compiles: CompileWhere) -> tuple[str, ...]:
    def phases(block: Block) -> dict[str, object]:
        where = CompileWhere.NONE if block.arm == "baseline" else candidate_compiles
        return {"startup_phases": to_json(StartupPhases(ready_s=1.0, compile=where))}

    path = write_bundle(tmp_path, SPEC, lambda block, index: block.duration * (1 + 0.01 * index),
                        started_at="2026-12-01T00:00:00Z", lifecycle=phases)
    document = VerdictDocument.read(Bundle.open(path))
    assert document is not None
    return document.candidates["clean"].notes


def test_arms_that_compile_in_different_places_are_named_in_the_candidates_notes(tmp_path: Path) -> None:
    notes = [n for n in _notes(tmp_path, CompileWhere.FIRST_REQUEST) if "compile in different places" in n]
    assert len(notes) == len(SPEC.workload.durations)
    assert "baseline none; clean first request" in notes[0]


def test_arms_that_compile_alike_get_no_note(tmp_path: Path) -> None:
    assert not [n for n in _notes(tmp_path, CompileWhere.NONE) if "compile" in n]


@pytest.mark.parametrize(("candidate", "differs"), [
    ([CompileWhere.NONE], False),
    ([CompileWhere.STARTUP], True),
    ([CompileWhere.UNKNOWN], False),  # a log that says nothing is no evidence of a difference
    ([None], False),  # a line written before phases were recorded
    ([CompileWhere.NONE, CompileWhere.STARTUP], True),  # one block of the arm compiled
])
def test_compile_differs(candidate: list[CompileWhere | None], differs: bool) -> None:
    baseline = [StartupPhases(compile=CompileWhere.NONE)] * 2
    found = compile_differs({"baseline": baseline,
                             "clean": [None if c is None else StartupPhases(compile=c) for c in candidate]})
    assert (found is not None) is differs
