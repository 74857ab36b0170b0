"""h3bench.verdict.verdicts: typed outcomes per duration, every reason, the speed estimate and each block's record."""

from __future__ import annotations

from h3bench.outcome import Outcome
from h3bench.stats import intervals
from h3bench.stats import speed as stats
from h3bench.stats.speed import BlockSamples
from h3bench.stats.warmup import WarmupCheck
from h3bench.verdict.verdicts import BlockRecord, CandidateVerdict, DurationVerdict

LEVELS = intervals.error_levels(2, 1)


def speed(ratio: float) -> stats.SpeedReport:
    medians = [(1.0, ratio * j) for j in (1.0, 1.002, 0.998, 1.001)]
    blocks = [BlockSamples(r, (v, v * 1.01, v * 0.99)) for a, b in medians for r, v in (("A", a), ("B", b))]
    return stats.speed_report(blocks, margin=0.02, levels=LEVELS)


def duration(ratio: float, *records: BlockRecord) -> DurationVerdict:
    return DurationVerdict.of(speed(ratio), [], (), lossless_enabled=False, lossless=None, blocks=records)


def test_a_duration_keeps_every_reason_typed_and_the_estimate():
    d = duration(0.9)
    assert d.speed is Outcome.PASS and len(d.speed_reasons) >= 3
    entry = d.to_dict()
    assert entry["speed"] == "PASS" and entry["speed_reasons"] == list(d.speed_reasons)
    assert entry["speed_estimate"]["levels"] == {"pass_level": 0.025, "fail_level": 0.0125, "n_durations": 2,
                                                 "n_candidates": 1, "alpha": 0.05}
    assert entry["speed_estimate"]["mde_ratio"] < 0.98


def test_a_flagged_warmup_is_in_the_block_record():
    flagged = WarmupCheck("5s-clean-2B-clean", True, 0.12, 6.0, 4.5, 8)
    calm = WarmupCheck("5s-clean-1A-baseline", False, 0.001, 0.1, 4.5, 8)
    d = duration(0.9, BlockRecord(calm.block_id, 1.0, calm), BlockRecord(flagged.block_id, 0.9, flagged))
    assert d.warmup_flags == (flagged,)
    record = d.to_dict()["blocks"]["5s-clean-2B-clean"]
    assert record["median_e2e_s"] == 0.9 and record["warmup"]["flagged"] and record["warmup"]["excess"] == 0.12
    assert not duration(0.9, BlockRecord(calm.block_id, 1.0, calm)).warmup_flags


def test_a_candidate_passes_on_speed_only_if_every_duration_passes_and_fails_if_one_fails():
    """The intersection-union rule behind the error levels (quality is left out here: INCONCLUSIVE parts)."""
    passed, unclear, failed = duration(0.9), duration(1.0), duration(1.2)
    assert (passed.speed, unclear.speed, failed.speed) == (Outcome.PASS, Outcome.INCONCLUSIVE, Outcome.FAIL)
    assert CandidateVerdict({"5s": passed, "15s": failed}, None).outcome is Outcome.FAIL
    speeds = [d.speed for d in CandidateVerdict({"5s": passed, "15s": unclear}, None).durations.values()]
    assert speeds == [Outcome.PASS, Outcome.INCONCLUSIVE]
