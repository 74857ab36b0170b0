"""Every rate a sequential campaign's verdict implies, measured through the project's own code, held to its bound.

Each scenario of :data:`h3bench.plan.guarantees.SCENARIOS` is simulated
through :func:`h3bench.course.designsim.simulate_campaigns` (the live run's
:func:`~h3bench.stats.sequential.judge_series` and course) at its own
number of campaigns, sized by its Monte-Carlo error, and must hold its bound
within 3.5 standard errors; docs/statistics.md quotes the same scenarios at
five times the campaigns (``benchmarks/bench_design.py``). Run with ``-s`` to
print the rates.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from h3bench.course.design import Design
from h3bench.plan import guarantees
from h3bench.runspec import load_runspec

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", guarantees.SCENARIOS, ids=[s.name for s in guarantees.SCENARIOS])
def test_every_guarantee_holds_within_its_monte_carlo_error(scenario):
    rate = guarantees.measure(scenario)
    print(f"{scenario.design}: {scenario.describe()}: {rate.value:.2%} ± {rate.se:.2%} ({rate.n})")
    assert rate.holds(scenario), (scenario.describe(), rate)


def test_a_bound_that_does_not_hold_is_caught():
    """The check can fail: the fixed design without the first-request rule, under a +10 % warmup leak."""
    leak = next(s for s in guarantees.SCENARIOS if s.name.startswith("+10% warmup leak into the baseline"))
    broken = dataclasses.replace(leak, design="fixed", n=4000)
    rate = guarantees.measure(broken)
    assert rate.value > 0.05 and not rate.holds(broken)


def test_the_designs_are_the_shipped_specs():
    assert guarantees.DESIGNS["sequential"] == Design.of(load_runspec(SPECS / "950pr-x4.toml"))
    found = Design.of(load_runspec(SPECS / "910b1-x8.toml"))
    assert guarantees.DESIGNS["sequential, 910b1-x8"] == dataclasses.replace(found, name="sequential, 910b1-x8")
