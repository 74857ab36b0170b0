"""The end of a campaign on one screen (:func:`h3bench.report.screen.screen_lines`), from real verdict documents.

At most six lines per candidate and duration: the ratio with its bounds and the verdict; where the design
stopped and the device time spent and saved; each gate's worst value; lossless; which stage moved, only when
one did, naming at most three parts. The documents are what the project's own results give for a sealed
bundle (:mod:`tests_unit.bundlesim`); the parts a bundle without outputs cannot have (lossless, stages) are
set on them as a campaign would write them.

Each figure is computed once and read by every presentation (issue 43): the screen names the rule that decided
speed by its stored reason code, never by a reason's wording; the screen and ``-v`` print one verdict line; the
report's stage figure draws the medians ``verdict.json`` holds; one rule says which stage-duration keys are the
profiler's.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import pytest

from h3bench.h3 import STAGE_KEYS, mux_and_transfer_s, profiler_key
from h3bench.outcome import Outcome
from h3bench.report.contents import DERIVED_STAGE, Series
from h3bench.report.figures import stage_figure
from h3bench.report.screen import screen_lines
from h3bench.report.terminal import summary_lines
from h3bench.runspec import load_runspec
from h3bench.stats.stages import stage_median_values
from h3bench.verdict.stage_effects import PartEffect, StageEffects
from h3bench.verdict.verdicts import (
    Acceptance,
    ArmStats,
    CandidateAcceptance,
    GateValue,
    LosslessSummary,
    VerdictDocument,
)
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


def _heads(lines: list[str]) -> list[str]:
    return [line for line in lines if " vs " in line and not line.startswith(" ")]


def test_the_screen_reads_the_deciding_rule_from_its_stored_code_not_from_a_reasons_wording(document):
    heads = _heads(screen_lines(SPEC, document, bundle=None))
    assert all(head.endswith("speed PASS, faster: upper bound below 1 - margin = 0.98") for head in heads), heads

    reworded = _with(document, speed_reasons=("the candidate was quicker, as reworded by a later version",))
    assert _heads(screen_lines(SPEC, reworded, bundle=None)) == heads


def test_a_rule_that_a_later_step_overruled_is_not_named_as_the_deciding_one(document):
    # A pool whose shard is missing makes speed INCONCLUSIVE over a series whose look said "faster".
    overruled = _with(document, speed=Outcome.INCONCLUSIVE, speed_reasons=("shard 2 of 2 is missing",))
    heads = _heads(screen_lines(SPEC, overruled, bundle=None))
    assert heads and all(head.endswith("speed INCONCLUSIVE, shard 2 of 2 is missing") for head in heads), heads


def _not_selected(document: VerdictDocument) -> VerdictDocument:
    verdict = document.candidates["clean"]
    return dataclasses.replace(document, not_selected={"clean": ("15s",)}, candidates={
        "clean": dataclasses.replace(verdict, durations={"5s": verdict.durations["5s"]})})


CHANGES: list[Callable[[VerdictDocument], VerdictDocument]] = [
    lambda d: d,
    lambda d: dataclasses.replace(d, baseline_evidence="/evidence/stored"),
    _not_selected,
]


@pytest.mark.parametrize("change", CHANGES, ids=["plain", "candidate-only", "not selected"])
def test_the_screen_and_v_print_one_verdict_line(document, change):
    changed = change(document)
    screen = [line for line in screen_lines(SPEC, changed, bundle=None) if line.startswith("verdict ")]
    verbose = [line for line in summary_lines(SPEC, changed, bundle=None) if line.startswith("verdict ")]
    assert screen and screen == verbose


def test_the_stage_figure_draws_the_medians_verdict_json_holds(document):
    d = document.candidates["clean"].durations["5s"]
    stored = (ArmStats("baseline", 4, 1.0, (), (("diffuse", 0.7), (DERIVED_STAGE, 0.125))),
              ArmStats("clean", 4, 0.9, (), (("diffuse", 0.6), (DERIVED_STAGE, 0.125))))
    # No request of the series is given: what the figure shows can only come from the verdict.
    series = Series(5.0, "clean", (), dataclasses.replace(d, arms=stored), {}, None)
    figure = stage_figure(SPEC, series)
    assert figure is not None and figure.svg is not None
    assert "0.825 s" in figure.svg and "0.725 s" in figure.svg  # each arm's stacked total
    assert stage_figure(SPEC, dataclasses.replace(series, verdict=dataclasses.replace(d, arms=()))) is None


def test_one_rule_says_which_keys_are_the_profilers(document):
    # The API layer's own timings have no dot, whatever their name: never a stage, in any reader.
    stages = {STAGE_KEYS[0]: 0.25, "diffuse": 999.0, "queue_wait_ms": 12.0}
    assert [k for k in stages if profiler_key(k)] == [STAGE_KEYS[0]]
    assert mux_and_transfer_s(2.0, stages) == pytest.approx(1.75)
    medians, _ = stage_median_values([(2.0, stages)])
    assert "diffuse" not in medians and medians[STAGE_KEYS[0].rpartition(".")[2]] == pytest.approx(0.25)


def test_v_lists_only_the_profilers_keys_of_a_profiled_request(document):
    profile = {"duration": 5.0, "arm": "baseline", "block_id": "b", "ok": True, "e2e_s": 1.0,
               "stage_durations": {STAGE_KEYS[0]: 0.25, "queue_wait_ms": 12.0}}
    (line,) = [x for x in summary_lines(SPEC, document, bundle=None, profiles=[profile]) if x.startswith("profile ")]
    assert "queue_wait_ms" not in line and "encode_prompt 0.250" in line


def test_the_screen_says_whether_a_cheap_warmup_was_accepted_or_refused(document):
    def heads(left_out: bool | None) -> list[str]:
        verdict = document.candidates["clean"]
        durations = {k: dataclasses.replace(d, looks=dataclasses.replace(
            d.looks, look=1, warmup_steps=None if left_out is None else 2,
            first_requests_left_out=bool(left_out))) for k, d in verdict.durations.items()}
        changed = dataclasses.replace(document, candidates={"clean": dataclasses.replace(verdict, durations=durations)})
        return _heads(screen_lines(SPEC, changed, bundle=None))

    assert all(h.endswith("(the 2-step warmup proven steady, -v)") for h in heads(False))
    assert all(h.endswith("(the 2-step warmup refused: first requests not steady, -v)") for h in heads(True))
    assert not any("warmup" in h for h in heads(None))
    looks = dataclasses.replace(next(iter(document.candidates["clean"].durations.values())).looks, look=1)
    assert looks.warmup is None and "warmup" not in looks.describe()
    assert dataclasses.replace(looks, look=None, warmup_steps=2).warmup is None  # before the first look: nothing yet
    refused = dataclasses.replace(looks, warmup_steps=2, first_requests_left_out=True)
    assert refused.warmup is not None and refused.warmup.startswith("the 2-step warmup was refused")
    assert refused.warmup in refused.describe()
