"""The robust anti-shortcut audit: slow requests do not fail an A/A candidate, a cache of repeated seeds is caught.

Campaigns are simulated through :func:`h3bench.course.designsim.simulate_campaigns`,
which applies :func:`h3bench.stats.cache_audit.cache_flags` at every look (through
:func:`h3bench.stats.sequential.judge_series`); "FAIL through the audit" is a
series that stopped with reason AUDIT. What is left per block is the output
half, :func:`h3bench.run.failures.audit_problem`: an audit output equal to a
measured one. (The old per-block latency rule, 25 % of the block's median,
failed 23.4 % of A/A candidates with one +50 % request per duration.)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from h3bench.course import designsim
from h3bench.course.design import fixed_design, sequential_design
from h3bench.errors import UsageError
from h3bench.run.failures import audit_problem
from h3bench.run.records import Sample
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.cache_audit import CACHE_RATIO, audit_log_ratios, cache_audit, cache_flags, output_problem
from h3bench.stats.intervals import PASS
from h3bench.stats.sequential import AUDIT

S = 20_000
BUDGET = BlockBudget(1, 2, True, True)
SEQ = sequential_design(2)
FIXED_NEW_AUDIT = dataclasses.replace(fixed_design(2), cache_ratio=CACHE_RATIO, name="fixed, new audit")


def se(rate: float, n: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-4) / n)


def _blocks(order: str, audits: dict[int, float], measured: float = 100.0) -> np.ndarray:
    samples = np.full((1, len(order), 3), measured)
    for index, value in audits.items():
        samples[0, index, 2] = value
    return samples


def test_a_cache_in_every_candidate_block_is_caught_and_one_slow_audit_is_not():
    order = "ABBAAB"
    cached = _blocks(order, {1: 200.0, 2: 200.0, 5: 200.0})  # the candidate's audits twice its measured time
    assert cache_flags(cached, order, BUDGET)[0][0]
    one_slow = _blocks(order, {1: 150.0})
    flag, excess = cache_flags(one_slow, order, BUDGET)
    assert not flag[0] and excess[0] == pytest.approx(0.0)  # the median of three candidate blocks ignores it
    two_of_two = _blocks("ABBA", {1: 150.0, 2: 150.0})
    assert cache_flags(two_of_two, "ABBA", BUDGET)[0][0]  # two blocks: both +50 % reach √2 (about 1e-4 of looks)


def test_the_baseline_audits_cancel_what_the_audit_seed_costs():
    order = "ABBA"
    dearer_seed = _blocks(order, dict.fromkeys(range(4), 160.0))
    assert not cache_flags(dearer_seed, order, BUDGET)[0][0]
    assert audit_log_ratios(dearer_seed, BUDGET)[0] == pytest.approx([math.log(1.6)] * 4)


def test_the_live_audit_describes_itself():
    blocks = [("A", (100.0, 101.0), 100.0), ("B", (50.0, 51.0), 100.0), ("B", (50.0, 50.0), 101.0),
              ("A", (99.0, 100.0), 100.0)]
    found = cache_audit(blocks, BUDGET)
    assert found.suspected and found.blocks == (2, 2) and found.excess == pytest.approx(2.0, rel=0.02)
    assert "a cache is suspected" in found.describe()
    with pytest.raises(UsageError, match="both arms"):
        cache_audit(blocks[:1], BUDGET)
    with pytest.raises(UsageError, match="no audit"):
        audit_log_ratios(np.ones((1, 2, 3)), BlockBudget(1, 3, False, False))


def test_equal_outputs_for_another_seed_are_a_cache_in_one_block():
    assert output_problem(["a", "b"], "b") is not None
    assert output_problem(["a", "b"], "c") is None and output_problem([None], None) is None


# ---- simulated campaigns -----------------------------------------------------------------------------------------


def audit_fails(design, ratios, seed, **model) -> tuple[float, np.ndarray]:
    run = designsim.simulate_campaigns(design, ratios, model=designsim.LatencyModel(process_cv=0.02, **model), n=S,
                                       seed=seed)
    return float((run.reason == AUDIT).any((1, 2)).mean()), run.outcome


SLOW = {"one +50 % request per duration": {"outliers_per_duration": 1},
        "1 % of requests at +50 %": {"outlier_rate": 0.01}}


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [1.0, 0.9], ids=["aa", "ten-percent-faster"])
@pytest.mark.parametrize("slow", list(SLOW))
@pytest.mark.parametrize("design", [SEQ, FIXED_NEW_AUDIT], ids=["sequential", "fixed"])
def test_slow_requests_rarely_fail_a_candidate_through_the_audit(design, slow, ratio):
    rate, _ = audit_fails(design, [[ratio, ratio]], seed=71 + int(ratio * 10), **SLOW[slow])
    print(f"{design.name}, true ratio {ratio}, {slow}: FAIL through the audit {rate:.3%}")
    assert rate <= 0.01


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [1.0, 0.9])
@pytest.mark.parametrize("design", [SEQ, FIXED_NEW_AUDIT], ids=["sequential", "fixed"])
def test_a_cache_of_repeated_seeds_is_caught(design, ratio):
    """Measured requests at half the time of a fresh seed: FAIL through the audit, never PASS."""
    rate, outcome = audit_fails(design, [[ratio, ratio]], seed=81, cache=0.5)
    print(f"{design.name}, true ratio {ratio}, cache of repeated seeds: caught {rate:.3%}")
    assert rate >= 0.99 and (outcome == PASS).mean() <= 0.01


def test_a_block_fails_only_on_its_audit_output_never_on_its_audit_latency():
    """The block's own half of the audit: an audit output equal to a measured one (a cache of outputs)."""
    measured = [Sample("b", "measured", i, 0, True, 1.0, output_sha256="m") for i in range(2)]
    slow = Sample("b", "audit", 0, 1, True, 3.0, output_sha256="a")  # three times the block's median: not a failure
    assert audit_problem([*measured, slow]) is None
    cached = Sample("b", "audit", 0, 1, True, 1.0, output_sha256="m")
    assert "equals a measured output" in (audit_problem([*measured, cached]) or "")
