"""The end of a campaign on one screen (:func:`h3bench.report.screen.screen_lines`), from real verdict documents.

At most six lines per candidate and duration: the ratio with its bounds and the verdict; where the design
stopped and the device time spent and saved; each gate's worst value; lossless; which stage moved, only when
one did, naming at most three parts. The documents are what the project's own results give for a sealed
bundle (:mod:`tests_unit.bundlesim`); the parts a bundle without outputs cannot have (lossless, stages) are
set on them as a campaign would write them.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from h3bench.outcome import Outcome
from h3bench.report.screen import screen_lines
from h3bench.runspec import load_runspec
from h3bench.verdict.stage_effects import PartEffect, StageEffects
from h3bench.verdict.verdicts import Acceptance, CandidateAcceptance, GateValue, LosslessSummary, VerdictDocument
from tests_unit.bundlesim import FIXTURES, write_bundle

# Its module fixtures run once: every test of the module on one xdist worker.
pytestmark = pytest.mark.xdist_group("screen")

SPEC = load_runspec(FIXTURES / "sim.toml")


@pytest.fixture(scope="module")
def document(tmp_path_factory) -> VerdictDocument:
    path = write_bundle(tmp_path_factory.mktemp("screen"), SPEC,
                        lambda block, index: (0.9 if block.letter == "B" else 1.0) * (1 + 0.01 * index) * block.duration,
                        started_at="2026-12-01T00:00:00Z")
    from h3bench.evidence import Bundle

    found = VerdictDocument.read(Bundle.open(path))
    assert found is not None
    return found


def _part(name: str, ratio: float, low: float, high: float, base: float = 1.0) -> PartEffect:
    return PartEffect(name, "profiler", 4, base, base * ratio, ratio, low, high, base * (ratio - 1), 0.0, 0.0)


def _with(document: VerdictDocument, **changes: object) -> VerdictDocument:
    verdict = document.candidates["clean"]
    durations = {key: dataclasses.replace(d, **changes) for key, d in verdict.durations.items()}
    return dataclasses.replace(document, candidates={"clean": dataclasses.replace(verdict, durations=durations)})


def _blocks(lines: list[str]) -> dict[str, list[str]]:
    """Each candidate-and-duration head with the indented lines under it."""
    out = {}
    for i, line in enumerate(lines):
        if " vs " in line and not line.startswith(" "):
            out[line.split(":")[0]] = [line, *itertools.takewhile(lambda x: x.startswith("  "), lines[i + 1:])]
    return out


def test_every_part_fits_six_lines_and_moved_stages_name_three_parts_at_most(document):
    stages = StageEffects(0.025, "", (_part("e2e", 0.9, 0.88, 0.92), _part("profiler:diffuse", 0.9, 0.88, 0.92, 5.0),
                                      _part("profiler:decode", 0.95, 0.9, 0.99, 0.2),
                                      _part("profiler:encode_prompt", 1.0, 0.98, 1.02, 0.1),
                                      _part("profiler:_encode_local_media", 0.8, 0.7, 0.9, 0.02),
                                      _part("profiler:audio_vae.decode_latent", 0.7, 0.6, 0.8, 0.01),
                                      _part("vllm_omni:diffusion_exec_s", 0.9, 0.88, 0.92, 5.1)), ())
    lossless = LosslessSummary(Outcome.PASS, False, ("no deviation ...",), 0.471, 7, 4)
    worst = (GateValue("ssim", 0.9912, ">= 0.97"), GateValue("lpips", 0.012, "<= 0.2"))
    lines = screen_lines(SPEC, _with(document, stages=stages, lossless=lossless, lossless_enabled=True, worst=worst),
                         bundle=None)
    blocks = _blocks(lines)
    assert set(blocks) == {"clean 5s vs baseline", "clean 15s vs baseline"}
    for block in blocks.values():
        assert len(block) <= 6, block
        moved = next(line for line in block if "stage moved" in line)
        # The pipeline's stages, the largest change in seconds first; E2E is the headline, not a stage;
        # encode_prompt did not move; three named, the rest counted.
        assert moved.index("diffuse") < moved.index("decode") < moved.index("_encode_local_media")
        assert "encode_prompt" not in moved and "e2e" not in moved and "audio_vae" not in moved
        assert moved.endswith("; 2 more part(s) in -v")
        assert "  lossless PASS: no deviation beyond the control variability (7 + 4 processes, p = 0.471)" in block
        assert "  quality PASS over 3 matched pairs; worst ssim 0.9912 (>= 0.97), lpips 0.012 (<= 0.2)" in block
    assert "verdict clean: PASS" in lines


def test_no_stage_line_when_no_stage_moved(document):
    still = StageEffects(0.025, "", (_part("profiler:diffuse", 1.0, 0.98, 1.02),), ())
    lines = screen_lines(SPEC, _with(document, stages=still), bundle=None)
    assert not any("stage moved" in line for line in lines)


def test_a_selection_is_not_judged_and_nothing_is_rejected(document):
    verdict = document.candidates["clean"]
    partial = dataclasses.replace(
        document, not_selected={"clean": ("15s",)},
        candidates={"clean": dataclasses.replace(verdict, durations={"5s": verdict.durations["5s"]})},
        accepted=Acceptance(None, False, (), {"clean": CandidateAcceptance(False, ("ref2va_15s not selected",),
                                                                          judged=False)}))
    lines = screen_lines(SPEC, partial, bundle=None)
    assert "verdict clean for ref2va_5s: PASS; not judged: ref2va_15s not selected" in lines, lines
    assert not any("rejected" in line for line in lines)


def test_a_candidate_only_run_that_cannot_decide_lossless_says_which_order_can(document):
    reason = ("2 baseline + 4 candidate server processes (the independent units; their 15 pairs are not independent): "
              "a process-relabelling test has 15 labelings, smallest p 0.0667, and 0% power against a 3x deviation at "
              "level 0.01; it cannot reach 90%: 5 more baseline block(s) per duration would be needed; for this "
              "candidate-only run: protocol.anchored_order = 'AABAABAABAB'")
    lossless = LosslessSummary(Outcome.INCONCLUSIVE, False, (reason,), None, 2, 4)
    lines = screen_lines(SPEC, _with(document, lossless=lossless, lossless_enabled=True), bundle=None)
    assert ("  lossless INCONCLUSIVE: 2 + 4 processes cannot decide; protocol.anchored_order = 'AABAABAABAB'"
            in lines), lines


def test_a_diagnostic_run_says_so_on_every_line(document):
    lines = screen_lines(SPEC, dataclasses.replace(document, run="DIAGNOSTIC"), bundle=None)
    assert all(line.startswith("DIAGNOSTIC") for line in lines)
