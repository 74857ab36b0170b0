"""h3bench.verdict.verdicts: typed outcomes per duration, every reason, the speed estimate and each block's record.

verdict.json is the one source every presentation reads, so it must come back
from disk as the same typed document that the run wrote.
"""

from __future__ import annotations

import json
import math

import pytest

from h3bench.errors import EvidenceError
from h3bench.outcome import Outcome
from h3bench.run.records import Stop
from h3bench.stats import intervals
from h3bench.stats import speed as stats
from h3bench.stats.speed import BlockSamples
from h3bench.stats.warmup import WarmupCheck
from h3bench.verdict.verdicts import (
    Acceptance,
    ArmStats,
    BlockRecord,
    CandidateAcceptance,
    CandidateVerdict,
    DurationVerdict,
    GateValue,
    HeldoutVerdict,
    LosslessSummary,
    VerdictDocument,
)

LEVELS = intervals.error_levels(2, 1)


def speed(ratio: float) -> stats.SpeedReport:
    medians = [(1.0, ratio * j) for j in (1.0, 1.002, 0.998, 1.001)]
    blocks = [BlockSamples(r, (v, v * 1.01, v * 0.99)) for a, b in medians for r, v in (("A", a), ("B", b))]
    return stats.speed_report(blocks, margin=0.02, levels=LEVELS)


def duration(ratio: float, *records: BlockRecord, quality: Outcome | None = None,
             lossless: LosslessSummary | None = None) -> DurationVerdict:
    report = speed(ratio)
    return DurationVerdict("baseline", report.verdict.outcome, report.verdict.reasons, report.estimate, quality, 3,
                           lossless is not None, lossless, records)


def document(**candidates: CandidateVerdict) -> VerdictDocument:
    return VerdictDocument("ab" * 32, "sim", "0.1.0", "FORMAL", None, dict(candidates))


def test_a_duration_keeps_every_reason_typed_and_the_estimate():
    d = duration(0.9)
    assert d.speed is Outcome.PASS and len(d.speed_reasons) >= 3
    entry = document(clean=CandidateVerdict({"5s": d}, None)).to_dict()["candidates"]["clean"]["durations"]["5s"]
    assert entry["speed"] == "PASS" and entry["speed_reasons"] == list(d.speed_reasons)
    assert entry["estimate"]["levels"] == {"pass_level": 0.025, "fail_level": 0.0125, "n_durations": 2,
                                           "n_candidates": 1, "alpha": 0.05}
    assert entry["estimate"]["mde_ratio"] < 0.98


def test_a_flagged_warmup_is_in_the_block_record():
    flagged = WarmupCheck("5s-clean-2B-clean", True, 0.12, 6.0, 4.5, 8)
    calm = WarmupCheck("5s-clean-1A-baseline", False, 0.001, 0.1, 4.5, 8)
    d = duration(0.9, BlockRecord(calm.block_id, 1.0, calm), BlockRecord(flagged.block_id, 0.9, flagged))
    assert d.warmup_flags == (flagged,)
    (_, record) = document(c=CandidateVerdict({"5s": d}, None)).to_dict()["candidates"]["c"]["durations"]["5s"]["blocks"]
    assert record["median_e2e_s"] == 0.9 and record["warmup"]["flagged"] and record["warmup"]["excess"] == 0.12
    assert not duration(0.9, BlockRecord(calm.block_id, 1.0, calm)).warmup_flags


def test_a_candidate_passes_on_speed_only_if_every_duration_passes_and_fails_if_one_fails():
    """The intersection-union rule behind the error levels (quality is left out here: INCONCLUSIVE parts)."""
    passed, unclear, failed = duration(0.9), duration(1.0), duration(1.2)
    assert (passed.speed, unclear.speed, failed.speed) == (Outcome.PASS, Outcome.INCONCLUSIVE, Outcome.FAIL)
    assert CandidateVerdict({"5s": passed, "15s": failed}, None).outcome is Outcome.FAIL
    speeds = [d.speed for d in CandidateVerdict({"5s": passed, "15s": unclear}, None).durations.values()]
    assert speeds == [Outcome.PASS, Outcome.INCONCLUSIVE]


def test_verdict_json_comes_back_as_the_document_the_run_wrote():
    exact = LosslessSummary(Outcome.PASS, True, ("every output decodes bitwise equal",), None, 6, 4)
    arm = ArmStats("baseline", 12, 6.1, (stats.percentile([6.0] * 12, 0.9),), (("diffuse", 5.0),), 0)
    d = duration(0.9, quality=Outcome.PASS, lossless=exact)
    d = DurationVerdict(d.control, d.speed, d.speed_reasons, d.estimate, d.quality, d.quality_pairs,
                        d.lossless_enabled, d.lossless, d.blocks, (arm,), (GateValue("psnr_db", math.inf, ">= 34"),))
    written = VerdictDocument(
        "ab" * 32, "sim", "0.1.0", "FORMAL", None,
        {"clean": CandidateVerdict({"5s": d, "15s": duration(1.2)}, Stop("5s-clean-3B-clean: request failed",
                                                                            Outcome.FAIL), ("a note",))},
        heldout={"clean": {"5s": HeldoutVerdict(Outcome.PASS, ("every gate passed",))}},
        accepted=Acceptance("clean", False, ("formal verdict FAIL",),
                            {"clean": CandidateAcceptance(False, ("formal verdict FAIL",))}))
    text = json.dumps(written.to_dict(), allow_nan=False)  # inf is written as "inf", never as a bare Infinity
    read = VerdictDocument.from_dict(json.loads(text))
    assert read == written
    assert read.candidates["clean"].durations["5s"].lossless_label == "EXACT"
    assert json.loads(text)["candidates"]["clean"]["verdict"] == "FAIL"


def test_a_verdict_json_that_does_not_fit_names_the_field():
    data = document(clean=CandidateVerdict({"5s": duration(0.9)}, None)).to_dict()
    data["candidates"]["clean"]["durations"]["5s"]["speed"] = "FASTER"
    with pytest.raises(EvidenceError, match=r"candidates\.clean\.durations\.5s\.speed: expected Outcome"):
        VerdictDocument.from_dict(data)
    del data["candidates"]["clean"]["durations"]["5s"]["control"]
    with pytest.raises(EvidenceError, match=r"durations\.5s\.control: missing"):
        VerdictDocument.from_dict(data)
