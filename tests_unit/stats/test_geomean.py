"""One geometric-mean helper (:func:`h3bench.stats.intervals.geometric_mean`), and no other written by hand."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from h3bench.stats.intervals import geometric_mean, geometric_mean_of_logs

POSITIVE = st.lists(st.floats(min_value=1e-3, max_value=1e3, allow_nan=False), min_size=1, max_size=30)
PACKAGE = Path(__file__).resolve().parents[2] / "h3bench"
HELPER = PACKAGE / "stats" / "intervals.py"
# exp(mean(log x)) spelled by hand: math.exp / np.exp of a mean, or of a sum over a count.
BY_HAND = re.compile(r"exp\((float\()?(np\.|statistics\.)?(nan)?(f?mean)\(|exp\([^()]*\.mean\(\)\)|"
                     r"exp\(sum\([^()]*\)\s*/\s*len\(|statistics\.geometric_mean\(")


@given(POSITIVE)
def test_it_is_the_geometric_mean(values: list[float]) -> None:
    assert math.isclose(geometric_mean(values), statistics.geometric_mean(values), rel_tol=1e-9)
    assert math.isclose(geometric_mean_of_logs([math.log(v) for v in values]), geometric_mean(values), rel_tol=1e-12)


@given(POSITIVE, st.floats(min_value=1e-2, max_value=1e2))
def test_it_scales_with_its_values(values: list[float], scale: float) -> None:
    scaled = geometric_mean([v * scale for v in values])
    assert math.isclose(scaled, scale * geometric_mean(values), rel_tol=1e-9)


def test_none_has_no_geometric_mean() -> None:
    assert math.isnan(geometric_mean([])) and math.isnan(geometric_mean_of_logs([]))


def test_no_module_writes_a_geometric_mean_by_hand() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != HELPER
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if BY_HAND.search(line) and not line.lstrip().startswith(("#", "``", "geometric mean"))]
    assert found == []
