"""Assertion helpers for tests: every failing check, with its value and threshold, in one message.

The pytest plugin re-exports them (``from h3bench.plugin import assert_quality_gates``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from h3bench.errors import UsageError
from h3bench.quality.checks import Check, QualityReport, Status, format_value
from h3bench.quality.compare import compare
from h3bench.quality.expected import expected_duration_checks
from h3bench.quality.files import Probed

__all__ = ["assert_expected_duration", "assert_quality_gates"]


def _describe(check: Check, prefix: str = "") -> str:
    value, threshold = format_value(check.value), check.threshold or "-"
    return f"  {prefix}{check.name}: {value} (threshold {threshold}) — {check.detail}"


def assert_quality_gates(
    report: QualityReport | str | os.PathLike[str],
    candidate: str | os.PathLike[str] | None = None,
    *,
    allow_not_measured: Iterable[str] = (),
    **compare_kwargs: Any,
) -> QualityReport:
    """Assert that a comparison passes every gate; return the report.

    Pass a :class:`QualityReport`, or the baseline and candidate paths (and
    :func:`compare`'s keyword arguments). A check that is not measured fails
    the assertion too, because a verdict that is not PASS must not pass a
    gate test; name in ``allow_not_measured`` the checks your RunSpec
    declares optional (e.g. ``("lpips",)``). The AssertionError lists every
    failing check, then every not-measured one, with value and threshold.
    """
    __tracebackhide__ = True
    if not isinstance(report, QualityReport):
        if candidate is None:
            raise UsageError("assert_quality_gates needs a QualityReport, or baseline and candidate paths")
        report = compare(report, candidate, **compare_kwargs)
    elif candidate is not None or compare_kwargs:
        raise UsageError("assert_quality_gates takes either a QualityReport or paths, not both")
    allowed = set(allow_not_measured)
    failing = report.failing()
    missing = [check for check in report.not_measured() if check.name not in allowed]
    if failing or missing:
        lines = [f"quality gates: {report.verdict} for {report.candidate} against {report.baseline}"]
        if failing:
            lines += [f"{len(failing)} failing:", *map(_describe, failing)]
        if missing:
            lines += [f"{len(missing)} not measured:", *map(_describe, missing)]
        raise AssertionError("\n".join(lines))
    return report


def assert_expected_duration(path: str | os.PathLike[str] | Probed, seconds: float) -> list[Check]:
    """Assert that ``path`` (or a file's probe) has exactly the shape H3 produces for ``seconds``; return the checks.

    The AssertionError lists every check that failed or could not be
    measured, with its measured value and threshold.
    """
    __tracebackhide__ = True
    checks = expected_duration_checks(path, seconds)
    bad = [check for check in checks if check.status is not Status.PASS]
    if bad:
        name = path.path if isinstance(path, Probed) else os.fspath(path)
        lines = [f"expected duration: {name} is not H3's {seconds:g} s output ({len(bad)} checks):"]
        lines += [_describe(check, prefix=f"[{check.status}] ") for check in bad]
        raise AssertionError("\n".join(lines))
    return checks
