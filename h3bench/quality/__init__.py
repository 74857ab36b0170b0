"""Quality gates: a candidate MP4 against its baseline, and one output against its expected duration.

The data flow is one module per step: :mod:`~h3bench.quality.files` (each
file reads and decodes), :mod:`~h3bench.quality.formats` (the two files have
the same format), :mod:`~h3bench.quality.expected` (each file has H3's shape
for the requested seconds), :mod:`~h3bench.quality.gates` (the metric
gates), into the :class:`~h3bench.quality.checks.QualityReport` of
:mod:`~h3bench.quality.checks`. :mod:`~h3bench.quality.engine` does the
measuring for a batch of pairs, decoding each file once for all of them;
:mod:`~h3bench.quality.compare` runs it for one pair.
:mod:`~h3bench.quality.assertions` turns a report into one assertion message.
:mod:`~h3bench.quality.lossless` judges whether a candidate's outputs deviate
beyond the baseline's own run-to-run variability, with the rank test of
:mod:`~h3bench.quality.relabelling`; its seeded powers ship as a table
(:mod:`~h3bench.quality.power_table` writes it).
"""

from __future__ import annotations

from h3bench.quality.assertions import assert_expected_duration, assert_quality_gates
from h3bench.quality.checks import Check, QualityReport, Status, Thresholds, format_value, json_safe, verdict
from h3bench.quality.compare import compare
from h3bench.quality.expected import expected_duration_checks
from h3bench.quality.files import require_readable
from h3bench.quality.formats import finite_check

__all__ = [
    "VALIDATOR_VERSION",
    "Check",
    "QualityReport",
    "Status",
    "Thresholds",
    "assert_expected_duration",
    "assert_quality_gates",
    "compare",
    "expected_duration_checks",
    "finite_check",
    "format_value",
    "json_safe",
    "require_readable",
    "verdict",
]

# Recorded with every quality result. Bump it when a check or metric changes, so
# re-validating a bundle writes a new result beside the frozen old one. Read it
# as ``quality.VALIDATOR_VERSION`` at the time of use.
VALIDATOR_VERSION = "h3bench-quality-2"  # 2: pixel format, display matrix, aspect, colour and audio layout checks
