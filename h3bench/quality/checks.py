"""Checks, the thresholds they compare against, and the report of one comparison.

Every gate is a :class:`Check` with a status of ``pass``, ``fail`` or
``not_measured``. The verdict over a set of checks is FAIL if any check
fails, INCONCLUSIVE if any is not measured, and PASS otherwise.

Non-finite floats (PSNR is ``inf`` for identical inputs, as ffmpeg prints it)
are written to JSON as the strings ``"inf"``, ``"-inf"`` and ``"nan"``, since
JSON has no such numbers.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from h3bench.errors import UsageError
from h3bench.outcome import Outcome, combine

if TYPE_CHECKING:
    from h3bench.metrics.lpips import LpipsResult
    from h3bench.metrics.ssim_psnr import VideoMetrics

__all__ = [
    "Check",
    "QualityReport",
    "Status",
    "Thresholds",
    "at_least",
    "at_most",
    "blocked_by",
    "equal",
    "format_value",
    "json_safe",
    "not_measured",
    "passes_if",
    "verdict",
    "within",
]


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_MEASURED = "not_measured"

    def __str__(self) -> str:
        return self.value


_OUTCOME_OF = {Status.PASS: Outcome.PASS, Status.FAIL: Outcome.FAIL, Status.NOT_MEASURED: Outcome.INCONCLUSIVE}


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON types, for ``json.dumps(allow_nan=False)``.

    Non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``, fractions
    become ``"24/1"``, and dataclasses become objects.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Fraction):
        return format_value(value)
    if is_dataclass(value) and not isinstance(value, type):
        return json_safe({item.name: getattr(value, item.name) for item in fields(value)})
    if isinstance(value, Mapping):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def format_value(value: Any) -> str:
    """A check value as the reports print it: ``-`` for None, ``24/1``, six significant digits."""
    if value is None:
        return "-"
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@dataclass(frozen=True)
class Check:
    """One gate's result.

    ``value`` is what was measured (the candidate's, for equality checks),
    ``threshold`` the rule in words (``">= 0.97"``, ``"== 124 (baseline)"``),
    and ``detail`` one sentence a reviewer can act on.
    """

    name: str
    status: Status
    value: float | int | str | None
    threshold: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "value": json_safe(self.value),
            "threshold": self.threshold,
            "detail": self.detail,
        }


def verdict(checks: Iterable[Check]) -> Outcome:
    """FAIL if any check fails, INCONCLUSIVE if any is not measured, else PASS."""
    return combine(_OUTCOME_OF[check.status] for check in checks)


@dataclass(frozen=True)
class Thresholds:
    """Gate thresholds; the defaults are the campaign's.

    SSIM and PSNR come from vLLM-Omni's accuracy test
    (``tests/e2e/accuracy/helpers.py``), LPIPS and the audio gates from its H3
    quantization quality test. The RunSpec's ``[gates]`` table
    (:class:`h3bench.runspec.Gates`) takes its names and defaults from here
    and adds range rules; here any finite number is a threshold.

    A plain dataclass, not a pydantic model: ``h3bench compare`` builds one
    before it decodes anything, and importing pydantic costs about 0.1 s.

    Raises
    ------
    UsageError
        A value that is not a finite number, or ``rms_ratio_min`` above
        ``rms_ratio_max``.
    """

    ssim_min: float = 0.97
    psnr_min_db: float = 34.0
    lpips_max: float = 0.20
    audio_cosine_min: float = 0.80
    rms_ratio_min: float = 0.50
    rms_ratio_max: float = 2.00

    def __post_init__(self) -> None:
        for name in self.names():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise UsageError(f"threshold {name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.rms_ratio_min > self.rms_ratio_max:
            raise UsageError(
                f"rms_ratio_min ({self.rms_ratio_min:g}) must not exceed rms_ratio_max ({self.rms_ratio_max:g})")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(Thresholds))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> Thresholds:
        """Thresholds from a table such as a RunSpec's ``gates``; missing names keep their defaults.

        Raises
        ------
        UsageError
            An unknown name, or as the class.
        """
        unknown = sorted(set(mapping) - set(cls.names()))
        if unknown:
            raise UsageError(f"unknown threshold name(s) {', '.join(unknown)}; known: {', '.join(sorted(cls.names()))}")
        return cls(**mapping)

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.names()}


# What a metric field of ``compare --json`` holds where its value can surprise, printed with it.
FIELD_DESCRIPTIONS = {
    "audio_spectral_cosine": ("multi-resolution STFT magnitude cosine, computed in float32 as upstream's formula is: "
                              "its rounding can give values slightly above 1 (such as 1.0000024); they are kept "
                              "as upstream computes them, not clipped"),
}


@dataclass(frozen=True)
class QualityReport:
    """Every check of one baseline/candidate comparison, and the metric values.

    A metric value is None when it was not measured. ``video`` and
    ``lpips_result`` keep the per-frame series for diagnostics and plots.
    ``lpips_weights`` names the files (and their SHA-256) that authenticated
    the LPIPS weights, whenever weights were authenticated.
    """

    baseline: str
    candidate: str
    checks: tuple[Check, ...]
    ssim: float | None = None
    psnr_db: float | None = None
    lpips: float | None = None
    audio_spectral_cosine: float | None = None
    audio_rms_ratio: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    video: VideoMetrics | None = field(default=None, compare=False, repr=False)
    lpips_result: LpipsResult | None = field(default=None, compare=False, repr=False)
    lpips_weights: Mapping[str, Any] | None = None  # the source that authenticated the LPIPS weights

    @property
    def verdict(self) -> Outcome:
        return verdict(self.checks)

    def check(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check named {name!r}; checks: {', '.join(c.name for c in self.checks)}")

    def failing(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status is Status.FAIL)

    def not_measured(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status is Status.NOT_MEASURED)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``h3bench compare --json`` prints (non-finite floats as strings)."""
        return json_safe(
            {
                "baseline": self.baseline,
                "candidate": self.candidate,
                "ssim": self.ssim,
                "psnr_db": self.psnr_db,
                "lpips": self.lpips,
                "audio_spectral_cosine": self.audio_spectral_cosine,
                "audio_rms_ratio": self.audio_rms_ratio,
                "checks": [check.to_dict() for check in self.checks],
                "verdict": self.verdict.value,
                "thresholds": self.thresholds.to_dict(),
                "lpips_weights": self.lpips_weights,
                "series": self._series_summary(),
                "descriptions": FIELD_DESCRIPTIONS,
            }
        )

    def _series_summary(self) -> dict[str, Any]:
        # The worst frame of each per-frame series says where to look first.
        summary: dict[str, Any] = {}
        if self.video is not None and self.video.frames:
            ssim_all = np.asarray(self.video.ssim_per_frame)[:, -1]
            psnr_all = np.asarray(self.video.psnr_per_frame)[:, -1]
            summary["frames"] = int(self.video.frames)
            summary["ssim_worst_frame"] = _worst(ssim_all, np.argmin)
            summary["psnr_worst_frame_db"] = _worst(psnr_all, np.argmin)
        if self.lpips_result is not None and self.lpips_result.frames:
            summary["lpips_worst_frame"] = _worst(np.asarray(self.lpips_result.per_frame), np.argmax)
        return summary


def _worst(series: np.ndarray, pick: Callable[[np.ndarray], Any]) -> dict[str, Any]:
    index = int(pick(series))
    return {"index": index, "value": float(series[index])}


# --- check builders ------------------------------------------------------------------


def passes_if(ok: bool, name: str, value: Any, threshold: str, detail: str) -> Check:
    return Check(name, Status.PASS if ok else Status.FAIL, value, threshold, detail)


def not_measured(name: str, threshold: str, reason: str) -> Check:
    return Check(name, Status.NOT_MEASURED, None, threshold, reason)


def blocked_by(prerequisites: Iterable[Check]) -> str | None:
    """Why a check cannot run, or None when every prerequisite passed.

    Failed prerequisites are the reason; those not measured are named only
    when none failed, since they were themselves blocked by a failure.
    """
    prerequisites = list(prerequisites)
    failed = [check.detail for check in prerequisites if check.status is Status.FAIL]
    unmeasured = [f"{check.name} was not measured" for check in prerequisites if check.status is Status.NOT_MEASURED]
    reasons = failed or unmeasured
    return f"not measured: {'; '.join(reasons)}" if reasons else None


def equal(name: str, what: str, baseline: Any, candidate: Any) -> Check:
    same = baseline == candidate
    return passes_if(
        same,
        name,
        format_value(candidate) if isinstance(candidate, Fraction) else candidate,
        f"== {format_value(baseline)} (baseline)",
        f"{what} {'match' if same else 'differ'}: "
        f"baseline {format_value(baseline)}, candidate {format_value(candidate)}",
    )


def at_least(name: str, what: str, value: float, minimum: float) -> Check:
    rule = f">= {minimum:g}"
    return passes_if(value >= minimum, name, value, rule, f"{what} is {format_value(value)}; the gate is {rule}")


def at_most(name: str, what: str, value: float, maximum: float) -> Check:
    rule = f"<= {maximum:g}"
    return passes_if(value <= maximum, name, value, rule, f"{what} is {format_value(value)}; the gate is {rule}")


def within(name: str, what: str, value: float, low: float, high: float) -> Check:
    return passes_if(
        low <= value <= high,
        name,
        value,
        f"in [{low:g}, {high:g}]",
        f"{what} is {format_value(value)}; the gate is [{low:g}, {high:g}]",
    )
