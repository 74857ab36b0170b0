"""The shipped powers of the lossless test are the simulation's own, and the default specs need no other.

``h3bench/data/lossless_power.json`` (``python -m h3bench.quality.power_table``) caches
:func:`h3bench.quality.lossless.simulated_power` for the reference design. A stale table (a changed stress
model, test or seed) would change the designs every campaign plans, so its entries where the power crosses
the required 90 % at each level are recomputed here, with a seeded sample of the others.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from h3bench.course.course import Course
from h3bench.course.design import anchored_order
from h3bench.quality import lossless, lossless_design
from h3bench.quality.power_table import levels
from h3bench.runspec import load_runspec

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
TABLE = lossless.power_table()


def _parse(key: str) -> tuple[int, int, float, int]:
    b, c, alpha, m = key.split(",")
    return int(b), int(c), float(alpha), int(m)


def _crossings() -> list[str]:
    """Per level, at four candidate processes and five metrics: the last baseline count below 90 % and the first at it."""
    keys = []
    for alpha in levels():
        column = [key for b in range(2, 41) if (key := lossless.power_key(b, 4, alpha, 5)) in TABLE]
        first = next(i for i, key in enumerate(column) if TABLE[key] >= lossless.REQUIRED_POWER)
        keys += column[max(0, first - 1):first + 1]
    return keys


CHECKED = sorted(set(_crossings()) | set(random.Random(20261).sample(sorted(TABLE), 6)))


@pytest.mark.parametrize("key", CHECKED)
def test_a_shipped_power_is_what_the_simulation_gives(key):
    b, c, alpha, m = _parse(key)
    assert lossless.simulated_power(b, c, alpha, m, *lossless.REFERENCE) == TABLE[key]
    assert lossless.lossless_power(b, c, alpha, m) == TABLE[key]


def test_a_power_outside_the_table_is_simulated():
    assert lossless.power_key(3, 9, 0.3, 5) not in TABLE
    assert lossless.lossless_power(3, 9, 0.3, 5, n_sims=250) == lossless.simulated_power(3, 9, 0.3, 5, 3.0, 250, 20261)


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.toml")), ids=lambda p: p.stem)
def test_the_specs_of_the_project_plan_their_lossless_designs_from_the_table(spec, monkeypatch):
    simulated = []
    monkeypatch.setattr(lossless, "simulated_power", lambda *args: simulated.append(args) or 0.0)
    for cached in (lossless.lossless_power, lossless_design.baseline_needed, lossless_design.pass_from_pairs):
        cached.cache_clear()
    try:
        runspec = load_runspec(spec)
        needs = Course.of(runspec)._needed_table  # every look's baseline need, as the control rule asks for it
        anchored_order(runspec)
    finally:
        lossless.lossless_power.cache_clear()  # nothing computed under the patch outlives it
        lossless_design.baseline_needed.cache_clear()
        lossless_design.pass_from_pairs.cache_clear()
    assert len(needs) == len(runspec.workload.durations)
    assert simulated == [], f"{spec.name}: powers not in the shipped table"
