"""h3bench.stats.warmup: a block's first measured request against the scatter of every block's later requests."""

from __future__ import annotations

import numpy as np
import pytest

from h3bench.stats.warmup import warmup_checks, warmup_flags


def blocks(first_of_block_3: float) -> list[tuple[str, list[float]]]:
    rng = np.random.default_rng(1)
    samples = 100.0 * np.exp(rng.normal(0, 0.02, (8, 3)))
    samples[2, 0] *= first_of_block_3
    return [(f"b{i}", list(row)) for i, row in enumerate(samples)]


def test_a_slow_first_request_is_flagged_with_its_excess():
    checks = warmup_checks(blocks(1.3))
    assert [c.flagged for c in checks] == [i == 2 for i in range(8)]
    flagged = checks[2]
    assert flagged.excess > 0.2 and flagged.t > flagged.threshold and flagged.df == 8
    assert flagged.describe().startswith("b2: the first measured request is +")
    assert "a warmup that was not enough, or a disturbance at the block's start" in flagged.describe()


def test_ordinary_noise_is_not_flagged():
    assert not any(c.flagged for c in warmup_checks(blocks(1.0)))


def test_a_tiny_excess_is_not_flagged_even_without_scatter():
    """Below 1 % nothing is flagged, however small the scatter of the other requests."""
    samples = np.full((4, 3), 10.0)
    samples[0, 0] = 10.05
    flags, excess, t, _ = warmup_flags(samples)
    assert not flags.any() and excess[0] == pytest.approx(0.005) and t[0] == np.inf
    samples[0, 0] = 10.5
    assert warmup_flags(samples)[0][0]


def test_blocks_with_missing_requests_are_left_out_and_k_below_three_is_refused():
    checks = warmup_checks([("a", [1.0, 1.0, 1.0]), ("b", [1.0, 1.1])])
    assert [c.block_id for c in checks] == ["a"]
    assert warmup_checks([("a", [1.0, 1.0])]) == ()
    with pytest.raises(ValueError, match="at least 3"):
        warmup_flags(np.ones((2, 2)))
