"""Which stage moved, from records to verdict.json: samples carry their /metrics delta and phases, blocks their
reconciliation, a series its per-part effects, and verdict.json reads back typed (no servers: synthetic records).

The campaign-level checks, with real simulator servers, are in tests_unit/test_stage_campaign.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from h3bench.course.cases import Block
from h3bench.course.schedule import Schedule
from h3bench.errors import RunSpecError
from h3bench.h3 import (
    DIFFUSION_EXEC_S,
    DIFFUSION_FORWARD_S,
    E2E_REQUEST_LATENCY_S,
    NUM_INFERENCE_STEPS,
    STAGE_PREFIX,
)
from h3bench.outcome import Outcome
from h3bench.report.terminal import stage_lines
from h3bench.run.phases import RequestPhases
from h3bench.run.records import BlockResult, Lifecycle, Sample
from h3bench.run.server_metrics import HistogramDelta, RequestMetrics
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.verdict.attribution import SIMULATOR_TOLERANCE, block_reconciliation, recipe_steps, series_effects
from h3bench.verdict.stage_effects import DIT_PER_FORWARD
from h3bench.verdict.verdicts import BlockRecord, CandidateVerdict, DurationVerdict, VerdictDocument

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
SPEC = load_runspec(FIXTURES / "sim.toml")
SERIES = Schedule(SPEC).series(5.0, "clean")  # ABBAABBA
STEPS = SPEC.workload.steps


def request(index: int, *, decode: float = 0.4, diffuse: float = 0.5, reported_decode: float | None = None,
            metrics: bool | None = True) -> Sample:
    """One measured request whose three accounts agree, unless the profiler reports another decode."""
    stages = {"encode_prompt": 0.01, "_encode_local_media": 0.05, "diffuse": diffuse,
              "decode": decode if reported_decode is None else reported_decode,
              "video_vae.decode_latent": decode * 0.95, "audio_vae.decode_latent": decode * 0.05}
    engine = 0.01 + 0.05 + diffuse + decode
    e2e = engine + 0.03
    found = None
    if metrics is True:
        found = RequestMetrics(True, "", {DIFFUSION_EXEC_S: HistogramDelta(engine, 1),
                                          E2E_REQUEST_LATENCY_S: HistogramDelta(engine, 1),
                                          DIFFUSION_FORWARD_S: HistogramDelta(diffuse, 1),
                                          NUM_INFERENCE_STEPS: HistogramDelta(STEPS, 1)}).to_dict()
    elif metrics is False:
        found = RequestMetrics(False, "scrape before the request: the server has no /metrics (HTTP 404)").to_dict()
    return Sample("b", "measured", index, 0, True, e2e_s=e2e, inference_time_s=engine,
                  stage_durations={STAGE_PREFIX + k: v for k, v in stages.items()}, server_metrics=found,
                  phases=RequestPhases(0.01, e2e - 0.02, 0.01).to_dict())


def block(where: Block, samples: list[Sample]) -> BlockResult:
    samples = [dataclasses.replace(s, block_id=where.id) for s in samples]
    return BlockResult(where, 1, tuple(samples), Lifecycle(where.id, where.arm, where.duration, where.position), None)


def series(candidate_decode: float, pairs: int = 4, jitter: float = 0.01) -> list[BlockResult]:
    out = []
    for position, where in enumerate(SERIES[: 2 * pairs]):
        decode = candidate_decode if where.letter == "B" else 0.4
        wobble = 1 + jitter * ((position * 7) % 5 - 2) / 2  # a spread that differs between blocks
        out.append(block(where, [request(i, decode=decode * wobble, diffuse=0.5 * (1 + jitter * (i - 1)))
                                 for i in range(3)]))
    return out


# -- records -------------------------------------------------------------------------------------------


def test_a_sample_keeps_its_metrics_delta_and_phases_and_an_older_line_reads_without_them() -> None:
    sample = request(0)
    line = json.loads(json.dumps({**sample.to_dict(), "arm": "baseline", "position": 1}))
    back = Sample.from_record(line)
    assert back == sample
    assert back.metrics is not None and back.metrics.seconds(DIFFUSION_EXEC_S) == pytest.approx(0.96)
    assert back.request_phases == RequestPhases(0.01, pytest.approx(0.97), 0.01)
    older = {k: v for k, v in line.items() if k not in ("server_metrics", "scrapes", "phases")}
    old = Sample.from_record(older)
    assert (old.server_metrics, old.scrapes, old.phases, old.metrics, old.request_phases) == (None,) * 5


# -- reconciliation per block ---------------------------------------------------------------------------


def test_a_block_whose_profiler_under_reports_decode_is_named_and_an_honest_one_is_not() -> None:
    honest = block(SERIES[0], [request(i) for i in range(3)])
    assert block_reconciliation(honest, STEPS, SIMULATOR_TOLERANCE) == ((), "available")
    under = block(SERIES[1], [request(i, reported_decode=0.1) for i in range(3)])
    findings, availability = block_reconciliation(under, STEPS, SIMULATOR_TOLERANCE)
    assert availability == "available"
    assert findings[0].startswith("VAE inside decode: in 3 of 3 request(s), e.g. the profiler's decode (0.1000 s) is "
                                  "0.3000 s shorter than the VAE decodes inside it (0.4000 s): decode is "
                                  "under-reported"), findings
    assert findings[1].startswith("profiler covers the engine: in 3 of 3 request(s), e.g. the server's profiler "
                                  "misses 0.3000 s of its own vllm_omni:diffusion_exec_s"), findings
    # Within the tolerance (0.25 s on the simulator) nothing is named.
    slight = block(SERIES[1], [request(i, reported_decode=0.2) for i in range(3)])
    assert block_reconciliation(slight, STEPS, SIMULATOR_TOLERANCE)[0] == ()


def test_a_server_without_metrics_is_noted_and_an_older_bundle_says_nothing() -> None:
    absent = block(SERIES[0], [request(i, metrics=False) for i in range(3)])
    findings, availability = block_reconciliation(absent, STEPS, SIMULATOR_TOLERANCE)
    assert availability == "not available: scrape before the request: the server has no /metrics (HTTP 404)"
    assert findings == ()  # the checks that need /metrics fall back to inference_time_s or are not checked
    older = block(SERIES[0], [request(i, metrics=None) for i in range(3)])
    assert block_reconciliation(older, STEPS, SIMULATOR_TOLERANCE) == ((), None)


# -- the series' per-part effects ------------------------------------------------------------------------


def test_a_candidate_that_changes_decode_only_moves_decode_and_the_parts_that_contain_it() -> None:
    effects = series_effects(series(candidate_decode=0.28), 5.0, STEPS)
    assert effects is not None
    parts = {p.part: p for p in effects.parts}
    for moved in ("profiler:decode", "profiler:video_vae.decode_latent", DIFFUSION_EXEC_S, "e2e"):
        assert parts[moved].moved is True, parts[moved]
    assert parts["profiler:decode"].ratio == pytest.approx(0.7, abs=0.02)
    for still in ("profiler:diffuse", DIT_PER_FORWARD, "profiler:encode_prompt", DIFFUSION_FORWARD_S):
        assert parts[still].moved is False and parts[still].ratio == pytest.approx(1.0, abs=1e-9), parts[still]
    assert {r.arm for r in effects.rtf} == {"A", "B"}


def test_no_effect_without_both_arms() -> None:
    assert series_effects([b for b in series(0.28) if b.block.letter == "A"], 5.0, STEPS) is None
    assert series_effects([], 5.0, STEPS) is None


# -- verdict.json ------------------------------------------------------------------------------------------


def test_verdict_json_carries_the_effects_typed_with_moved_for_readers_of_the_json_alone() -> None:
    effects = series_effects(series(candidate_decode=0.28), 5.0, STEPS)
    d = DurationVerdict("baseline", Outcome.PASS, ("faster",), None, None, 0, False, None,
                        blocks=(BlockRecord("5s-clean-2B-clean", 1.0, None, ("VAE inside decode: in 3 of 3",),
                                            "available"),),
                        stages=effects, reconciliation_tolerance=SIMULATOR_TOLERANCE.describe())
    document = VerdictDocument("ab" * 32, "sim", "0", "FORMAL", None, {"clean": CandidateVerdict({"5s": d}, None)})
    data = json.loads(json.dumps(document.to_dict()))
    written = data["candidates"]["clean"]["durations"]["5s"]
    assert [p["moved"] for p in written["stages"]["parts"]] == [p.moved for p in effects.parts]  # type: ignore[union-attr]
    assert VerdictDocument.from_dict(data) == document
    for key in ("stages", "recipe_steps", "reconciliation_tolerance"):  # a verdict.json written before them
        del written[key]
    for record in written["blocks"]:
        del record["reconciliation"], record["server_metrics"]
    older = VerdictDocument.from_dict(data).candidates["clean"].durations["5s"]
    assert (older.stages, older.recipe_steps, older.blocks[0].reconciliation) == (None, (), ())


def test_the_summary_says_which_stage_moved_and_notes_a_server_without_metrics() -> None:
    effects = series_effects(series(candidate_decode=0.28), 5.0, STEPS)
    d = DurationVerdict("baseline", Outcome.PASS, (), None, None, 0, False, None,
                        blocks=(BlockRecord("5s-clean-1A-baseline", 1.0, None, (), "not available: 404"),
                                      BlockRecord("5s-clean-2B-clean", 1.0, None, ("VAE inside decode: x",),
                                                  "available")),
                        stages=effects, reconciliation_tolerance="max(0.25 s, 1.00% of the reference)")
    text = "\n".join(stage_lines(d, "clean"))
    assert "  stages (attribution, not a verdict: two-sided 95% per part over k = 4 AB/BA pairs" in text
    assert "    interval excludes 1: e2e " in text and "profiler:decode 0.70" in text
    assert "    interval includes 1: " in text and "profiler:diffuse" in text.split("interval includes 1: ")[1]
    assert "  /metrics not available: 404 (noted, not failed)" in text
    assert "  reconciliation 5s-clean-2B-clean: VAE inside decode: x\n      (tolerance max(0.25 s" in text


# -- the recipe's per-step figures -------------------------------------------------------------------------


def test_the_recipes_per_step_figures_come_from_the_hints_and_must_name_arms_and_durations() -> None:
    spec = load_runspec(FIXTURES / "950pr-x4.toml")
    found = recipe_steps(spec, 15.0, "baseline", "eqbsa_mxfp8")
    assert [(r.arm, r.seconds) for r in found] == [("baseline", 119.33), ("eqbsa_mxfp8", 61.24)]
    assert found[0].source.startswith("the 950PR recipe's ref2va table")
    assert recipe_steps(SPEC, 5.0, "baseline") == ()  # no hints
    data = spec.model_dump(mode="json")
    data["hints"]["dit_step_s"]["nobody"] = {"5": 1.0}
    with pytest.raises(RunSpecError, match=r"hints.dit_step_s.nobody: no arm named 'nobody'"):
        parse_runspec(data, source="test")
    data["hints"]["dit_step_s"] = {"baseline": {"7": 1.0}}
    with pytest.raises(RunSpecError, match=r"hints.dit_step_s.baseline.7: '7' is not one of the workload's durations"):
        parse_runspec(data, source="test")
