"""Quality gates: thresholds → checks → verdict, and the expected-duration rules.

Every gate is a :class:`Check` with a status of ``pass``, ``fail`` or
``not_measured``. The verdict over a set of checks is FAIL if any check
fails, INCONCLUSIVE if any is not measured, and PASS otherwise.

:func:`compare` runs, on a baseline and a candidate MP4:

1. the format checks that the campaign requires before any metric
   (REFERENCE §7): every file decodes, both have video and audio, equal frame
   count, frame size and ``avg_frame_rate`` (an exact fraction), equal audio
   rate, channels and decoded sample count, and finite PCM;
2. optionally, the expected-duration checks of each file for a requested
   number of seconds (REFERENCE §2 and §3), prefixed ``baseline.`` and
   ``candidate.``;
3. the metric gates with upstream's definitions (REFERENCE §7): SSIM ≥ 0.97
   and PSNR ≥ 34 dB (ffmpeg), LPIPS ≤ 0.20 (alex, v0.1), audio spectral
   cosine ≥ 0.80 and RMS ratio in [0.50, 2.00].

A metric whose prerequisites failed is ``not_measured`` with the reason (the
verdict is FAIL anyway, because a prerequisite failed). LPIPS weights that
cannot be authenticated make the ``lpips`` check ``not_measured``, so the
verdict cannot be PASS.

Audio metrics compare PCM trimmed to an expected sample count, because the
decoder keeps the AAC padding at the end (REFERENCE §3): the count for
``expect_seconds`` when given, otherwise each stream's declared duration
times its rate, which is the waveform the muxer was given.

The metric modules (numba, torch) are imported only when a metric is
computed, so importing this module (the pytest plugin, ``h3bench probe``)
stays light.

Non-finite floats (PSNR is ``inf`` for identical inputs, as ffmpeg prints it)
are written to JSON as the strings ``"inf"``, ``"-inf"`` and ``"nan"``, since
JSON has no such numbers.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from h3bench import media
from h3bench.errors import MediaDecodeError, MediaShapeError, UsageError, WeightIntegrityError
from h3bench.outcome import Outcome

if TYPE_CHECKING:
    from h3bench.metrics.lpips import LpipsResult, LpipsWeights
    from h3bench.metrics.ssim_psnr import VideoMetrics

__all__ = [
    "VALIDATOR_VERSION",
    "AAC_FRAME_SAMPLES",
    "AUDIO_CHANNELS",
    "AUDIO_SAMPLES_PER_LATENT",
    "AUDIO_SAMPLE_RATE",
    "FPS",
    "MAX_SECONDS",
    "MIN_SECONDS",
    "Check",
    "ExpectedShape",
    "QualityReport",
    "Status",
    "Thresholds",
    "assert_expected_duration",
    "assert_quality_gates",
    "compare",
    "expected_duration_checks",
    "expected_shape",
    "finite_check",
    "format_value",
    "json_safe",
    "require_readable",
    "verdict",
]

# Recorded with every quality result. Bump it when a check or metric changes, so
# re-validating a bundle writes a new result beside the frozen old one.
VALIDATOR_VERSION = "h3bench-quality-1"

# REFERENCE §2: H3's output clock and audio format.
FPS = 24
AUDIO_SAMPLE_RATE = 32_000
AUDIO_CHANNELS = 2
AUDIO_SAMPLES_PER_LATENT = 800
MIN_SECONDS = 4.0
MAX_SECONDS = 15.0
# REFERENCE §3: the decoder keeps the last AAC frame's padding, so decoded PCM
# may exceed the waveform by less than one AAC frame.
AAC_FRAME_SAMPLES = 1024
_DECLARED_DURATION_TOLERANCE_S = 1e-3
# Admits millisecond time bases (steps of 41 and 42 ms), not a skipped frame.
_PTS_STEP_TOLERANCE_S = 1e-3


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_MEASURED = "not_measured"

    def __str__(self) -> str:
        return self.value


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
    statuses = {check.status for check in checks}
    if Status.FAIL in statuses:
        return Outcome.FAIL
    if Status.NOT_MEASURED in statuses:
        return Outcome.INCONCLUSIVE
    return Outcome.PASS


@dataclass(frozen=True)
class Thresholds:
    """Gate thresholds; the defaults are the campaign's (REFERENCE §7)."""

    ssim_min: float = 0.97
    psnr_min_db: float = 34.0
    lpips_max: float = 0.20
    audio_cosine_min: float = 0.80
    rms_ratio_min: float = 0.50
    rms_ratio_max: float = 2.00

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UsageError(f"threshold {item.name} must be a finite number, got {value!r}")
            object.__setattr__(self, item.name, float(value))
        if self.rms_ratio_min > self.rms_ratio_max:
            raise UsageError(
                f"rms_ratio_min ({self.rms_ratio_min:g}) must not exceed rms_ratio_max ({self.rms_ratio_max:g})"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> Thresholds:
        """Thresholds from a table such as a RunSpec's ``gates``; missing names keep their defaults."""
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise UsageError(f"unknown threshold name(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**mapping)

    def to_dict(self) -> dict[str, float]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


@dataclass(frozen=True)
class QualityReport:
    """Every check of one baseline/candidate comparison, and the metric values.

    A metric value is None when it was not measured. ``video`` and
    ``lpips_result`` keep the per-frame series for diagnostics and plots.
    """

    baseline: str
    candidate: str
    checks: tuple[Check, ...]
    ssim: float | None = None
    psnr_db: float | None = None
    lpips: float | None = None
    audio_spectral_cosine: float | None = None
    audio_rms_ratio: float | None = None
    thresholds: Thresholds = Thresholds()
    video: VideoMetrics | None = field(default=None, compare=False, repr=False)
    lpips_result: LpipsResult | None = field(default=None, compare=False, repr=False)

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
                "series": self._series_summary(),
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


# ---------------------------------------------------------------------------
# Check builders


def format_value(value: Any) -> str:
    """A check value as the reports print it: ``-`` for None, ``24/1``, six significant digits."""
    if value is None:
        return "-"
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _result(ok: bool, name: str, value: Any, threshold: str, detail: str) -> Check:
    return Check(name, Status.PASS if ok else Status.FAIL, value, threshold, detail)


def _not_measured(name: str, threshold: str, reason: str) -> Check:
    return Check(name, Status.NOT_MEASURED, None, threshold, reason)


def _blocked_by(prerequisites: Iterable[Check]) -> str | None:
    """Why a check cannot run, or None when every prerequisite passed.

    Failed prerequisites are the reason; those not measured are named only
    when none failed, since they were themselves blocked by a failure.
    """
    prerequisites = list(prerequisites)
    failed = [check.detail for check in prerequisites if check.status is Status.FAIL]
    unmeasured = [f"{check.name} was not measured" for check in prerequisites if check.status is Status.NOT_MEASURED]
    reasons = failed or unmeasured
    return f"not measured: {'; '.join(reasons)}" if reasons else None


def _equal(name: str, what: str, baseline: Any, candidate: Any) -> Check:
    same = baseline == candidate
    return _result(
        same,
        name,
        format_value(candidate) if isinstance(candidate, Fraction) else candidate,
        f"== {format_value(baseline)} (baseline)",
        f"{what} {'match' if same else 'differ'}: "
        f"baseline {format_value(baseline)}, candidate {format_value(candidate)}",
    )


def _at_least(name: str, what: str, value: float, minimum: float) -> Check:
    rule = f">= {minimum:g}"
    return _result(value >= minimum, name, value, rule, f"{what} is {format_value(value)}; the gate is {rule}")


def _at_most(name: str, what: str, value: float, maximum: float) -> Check:
    rule = f"<= {maximum:g}"
    return _result(value <= maximum, name, value, rule, f"{what} is {format_value(value)}; the gate is {rule}")


def _within(name: str, what: str, value: float, low: float, high: float) -> Check:
    return _result(
        low <= value <= high,
        name,
        value,
        f"in [{low:g}, {high:g}]",
        f"{what} is {format_value(value)}; the gate is [{low:g}, {high:g}]",
    )


# ---------------------------------------------------------------------------
# Files


def require_readable(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as a string if it names a readable regular file, else raise UsageError.

    A file that exists but does not decode is not a usage error: it fails the
    ``decodable`` check instead.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not a media file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return path


@dataclass(frozen=True)
class _Probed:
    """One file's probe, or why it does not decode."""

    role: str
    path: str
    info: media.MediaInfo | None
    error: str | None


def _probe(role: str, path: str | os.PathLike[str]) -> _Probed:
    path = require_readable(path)
    try:
        return _Probed(role, path, media.probe(path), None)
    except MediaDecodeError as exc:
        return _Probed(role, path, None, str(exc))


def _per_file(files: Sequence[_Probed], has: Callable[[_Probed], bool]) -> str:
    if len(files) == 1:
        return "yes" if has(files[0]) else "no"
    return ", ".join(f"{f.role} {'yes' if has(f) else 'no'}" for f in files)


def _decodable_check(files: Sequence[_Probed]) -> Check:
    errors = [f.error for f in files if f.error is not None]
    detail = "; ".join(errors) if errors else "every file probes and decodes"
    return _result(not errors, "decodable", _per_file(files, lambda f: f.error is None), "every file decodes", detail)


def _stream_check(files: Sequence[_Probed], decodable: Check, kind: str) -> Check:
    name, threshold = f"has_{kind}", "present in every file"
    reason = _blocked_by([decodable])
    if reason:
        return _not_measured(name, threshold, reason)
    missing = [f"{f.path} ({f.role})" for f in files if getattr(f.info, kind) is None]
    detail = f"no {kind} stream in {', '.join(missing)}" if missing else f"{kind} stream present in every file"
    return _result(not missing, name, _per_file(files, lambda f: getattr(f.info, kind) is not None), threshold, detail)


def finite_check(baseline_pcm: np.ndarray, candidate_pcm: np.ndarray) -> Check:
    """The ``audio_finite`` check: no NaN or inf in either decoded waveform."""
    counts = {
        "baseline": int(np.size(baseline_pcm) - np.count_nonzero(np.isfinite(baseline_pcm))),
        "candidate": int(np.size(candidate_pcm) - np.count_nonzero(np.isfinite(candidate_pcm))),
    }
    total = sum(counts.values())
    detail = ", ".join(f"{role} has {count} non-finite samples" for role, count in counts.items())
    return _result(total == 0, "audio_finite", total, "== 0", detail if total else "every PCM sample is finite")


# ---------------------------------------------------------------------------
# Expected duration (REFERENCE §2 and §3)


@dataclass(frozen=True)
class ExpectedShape:
    """What H3 produces for a requested duration (REFERENCE §2)."""

    seconds: float
    frames: int
    audio_latents: int
    audio_samples: int
    audio_duration_s: float
    video_duration_s: float


def expected_shape(seconds: float) -> ExpectedShape:
    """The frame and audio counts H3 produces for ``seconds`` of output.

    Reproduces vllm-omni's minimax_h3 ``encoder_processing`` and
    ``time_request``: requested frames = round(seconds·24), snapped up to the
    next count with ``frames % 17 == 5``; audio latents = round(40·frames/24),
    800 samples per channel each, at 32 kHz. Raises UsageError outside [4, 15] s.

    Examples: 5 s → 124 frames, 165 600 samples; 15 s → 362 frames, 482 400 samples.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise UsageError(f"the expected duration must be a number of seconds, got {seconds!r}")
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UsageError(f"the expected duration must be within [4, 15] s (H3's range), got {seconds:g}")
    frames = round(seconds * FPS)
    frames += (5 - frames) % 17
    latents = round(Fraction(40 * frames, FPS))
    samples = latents * AUDIO_SAMPLES_PER_LATENT
    return ExpectedShape(
        seconds=float(seconds),
        frames=frames,
        audio_latents=latents,
        audio_samples=samples,
        audio_duration_s=samples / AUDIO_SAMPLE_RATE,
        video_duration_s=frames / FPS,
    )


_VIDEO_DURATION_CHECKS = ("expected_frames", "expected_fps", "video_start", "video_pts_steps")
_AUDIO_DURATION_CHECKS = (
    "expected_audio_format",
    "audio_declared_duration",
    "audio_not_short",
    "audio_padding",
    "audio_start",
    "audio_covers_video",
)


def _duration_checks(f: _Probed, shape: ExpectedShape) -> list[Check]:
    """The expected-duration checks of one probed file; those of a missing stream are not measured."""
    video = f.info.video if f.info is not None else None
    sound = f.info.audio if f.info is not None else None
    checks: list[Check] = []
    if video is None:
        reason = f"not measured: {f.path} has no decodable video stream"
        checks += [_not_measured(name, "", reason) for name in _VIDEO_DURATION_CHECKS]
    else:
        checks += _video_duration_checks(video, shape)
    if sound is None:
        reason = f"not measured: {f.path} has no decodable audio stream"
        checks += [_not_measured(name, "", reason) for name in _AUDIO_DURATION_CHECKS]
    else:
        checks += _audio_duration_checks(sound, video, shape)
    return checks


def _video_duration_checks(video: media.VideoInfo, shape: ExpectedShape) -> list[Check]:
    rule = "17n+5" if video.frames % 17 == 5 else "not 17n+5"
    checks = [
        _result(
            video.frames == shape.frames,
            "expected_frames",
            video.frames,
            f"== {shape.frames}",
            f"{video.frames} frames decoded ({rule}); {shape.seconds:g} s at {FPS} FPS gives {shape.frames}",
        ),
        _result(
            video.avg_frame_rate == FPS,
            "expected_fps",
            format_value(video.avg_frame_rate),
            f"== {FPS}/1",
            f"avg_frame_rate is {format_value(video.avg_frame_rate)}; H3 writes {FPS} FPS",
        ),
        _result(
            video.start_time_s == 0,
            "video_start",
            video.start_time_s,
            "== 0",
            f"the video stream starts at {video.start_time_s:.6g} s",
        ),
    ]
    steps = np.diff(np.asarray(video.frame_pts_s, dtype=np.float64))
    irregular = np.flatnonzero(~(np.abs(steps - 1 / FPS) <= _PTS_STEP_TOLERANCE_S))
    if irregular.size:
        first = int(irregular[0])
        detail = (
            f"{irregular.size} of {steps.size} timestamp steps are not 1/{FPS} s; "
            f"the first is frame {first} → {first + 1}, {steps[first] * 1e3:.3f} ms"
        )
    else:
        detail = f"every timestamp step is 1/{FPS} s"
    checks.append(_result(not irregular.size, "video_pts_steps", int(irregular.size), "== 0 irregular steps", detail))
    return checks


def _audio_duration_checks(sound: media.AudioInfo, video: media.VideoInfo | None, shape: ExpectedShape) -> list[Check]:
    expected = shape.audio_samples
    excess = sound.samples - expected
    fmt = f"{sound.sample_rate} Hz, {sound.channels} ch"
    want = f"{AUDIO_SAMPLE_RATE} Hz, {AUDIO_CHANNELS} ch"
    declared = sound.duration_s
    checks = [
        _result(fmt == want, "expected_audio_format", fmt, f"== {want}", f"the audio is {fmt}; H3 writes {want}"),
        _result(
            declared is not None and abs(declared - shape.audio_duration_s) <= _DECLARED_DURATION_TOLERANCE_S,
            "audio_declared_duration",
            declared,
            f"== {shape.audio_duration_s:g} s ± 1 ms",
            f"the audio stream declares {format_value(declared)} s; {shape.frames} frames give "
            f"{shape.audio_latents} latents × {AUDIO_SAMPLES_PER_LATENT} samples = {shape.audio_duration_s:g} s",
        ),
        _result(
            excess >= 0,
            "audio_not_short",
            sound.samples,
            f">= {expected}",
            f"{sound.samples} samples decoded per channel; {shape.seconds:g} s needs {expected}",
        ),
        _result(
            excess < AAC_FRAME_SAMPLES,
            "audio_padding",
            excess,
            f"< {AAC_FRAME_SAMPLES}",
            f"decoded PCM exceeds the expected {expected} samples by {excess}; "
            f"AAC padding is less than one {AAC_FRAME_SAMPLES}-sample frame",
        ),
        _result(
            sound.start_time_s == 0,
            "audio_start",
            sound.start_time_s,
            "== 0",
            f"the audio stream starts at {sound.start_time_s:.6g} s",
        ),
    ]
    if video is None or not video.frame_pts_s:
        checks.append(_not_measured("audio_covers_video", "", "not measured: no decoded video frames"))
        return checks
    # H3's audio may end up to 1/120 s before the last frame's display ends
    # (15 s: 15.075 s of audio, 362/24 = 15.0833 s of video), so "covers"
    # means the audio reaches the last frame's timestamp.
    last_frame = video.frame_pts_s[-1]
    length = declared if declared is not None else sound.samples / sound.sample_rate
    audio_end = sound.start_time_s + length
    checks.append(
        _result(
            audio_end >= last_frame,
            "audio_covers_video",
            audio_end,
            f">= {last_frame:.6g} s (last frame)",
            f"the audio ends at {audio_end:.6g} s and the last video frame is shown at {last_frame:.6g} s",
        )
    )
    return checks


def expected_duration_checks(path: str | os.PathLike[str], seconds: float) -> list[Check]:
    """Check one output MP4 against what H3 produces for ``seconds`` (REFERENCE §2 and §3).

    The checks are ``decodable``, ``has_video``, ``has_audio``, then
    ``expected_frames`` (17n+5 rule), ``expected_fps`` (24/1), ``video_start``
    (0), ``video_pts_steps`` (every step 1/24 s, within 1 ms),
    ``expected_audio_format`` (32 kHz stereo), ``audio_declared_duration``
    (800·round(40·frames/24)/32000 s within 1 ms), ``audio_not_short`` (decoded
    PCM never short), ``audio_padding`` (longer by less than one AAC frame),
    ``audio_start`` (0) and ``audio_covers_video`` (the audio reaches the last
    frame's timestamp; by design it may end up to 1/120 s before that frame's
    display ends, as at 15 s). Raises UsageError if ``seconds`` is outside [4, 15]
    or ``path`` cannot be read.
    """
    shape = expected_shape(seconds)
    probed = _probe("output", path)
    decodable = _decodable_check([probed])
    checks = [decodable, _stream_check([probed], decodable, "video"), _stream_check([probed], decodable, "audio")]
    return checks + _duration_checks(probed, shape)


# ---------------------------------------------------------------------------
# Compare


def _video_format_checks(base: _Probed, cand: _Probed, has_video: Check) -> list[Check]:
    names = ("frame_count", "frame_size", "frame_rate")
    reason = _blocked_by([has_video])
    if reason:
        return [_not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.info.video, cand.info.video
    return [
        _equal("frame_count", "frame counts", b.frames, c.frames),
        _equal("frame_size", "frame sizes", f"{b.width}x{b.height}", f"{c.width}x{c.height}"),
        _equal("frame_rate", "average frame rates", b.avg_frame_rate, c.avg_frame_rate),
    ]


def _audio_format_checks(base: _Probed, cand: _Probed, has_audio: Check) -> list[Check]:
    names = ("audio_rate", "audio_channels", "audio_samples")
    reason = _blocked_by([has_audio])
    if reason:
        return [_not_measured(name, "equal to the baseline", reason) for name in names]
    b, c = base.info.audio, cand.info.audio
    return [
        _equal("audio_rate", "audio sample rates", b.sample_rate, c.sample_rate),
        _equal("audio_channels", "audio channel counts", b.channels, c.channels),
        _equal("audio_samples", "decoded audio sample counts", b.samples, c.samples),
    ]


def _audio_trim_count(sound: media.AudioInfo, shape: ExpectedShape | None) -> int:
    if shape is not None:
        return shape.audio_samples
    if sound.duration_s is None:
        return sound.samples
    return round(sound.duration_s * sound.sample_rate)


def _video_metric_checks(
    base: _Probed,
    cand: _Probed,
    prerequisites: list[Check],
    thresholds: Thresholds,
) -> tuple[list[Check], VideoMetrics | None]:
    ssim_rule, psnr_rule = f">= {thresholds.ssim_min:g}", f">= {thresholds.psnr_min_db:g}"
    reason = _blocked_by(prerequisites)
    if reason:
        return [_not_measured("ssim", ssim_rule, reason), _not_measured("psnr_db", psnr_rule, reason)], None
    from h3bench.metrics import ssim_psnr

    try:
        metrics = ssim_psnr.compare_video(base.path, cand.path)
    except (MediaShapeError, MediaDecodeError) as exc:
        detail = f"ffmpeg-style SSIM/PSNR could not be computed: {exc}"
        return [
            Check("ssim", Status.FAIL, None, ssim_rule, detail),
            Check("psnr_db", Status.FAIL, None, psnr_rule, detail),
        ], None
    return [
        _at_least("ssim", "SSIM (ffmpeg All)", metrics.ssim, thresholds.ssim_min),
        _at_least("psnr_db", "PSNR (ffmpeg average, dB)", metrics.psnr_db, thresholds.psnr_min_db),
    ], metrics


def _lpips_check(
    base: _Probed,
    cand: _Probed,
    prerequisites: list[Check],
    thresholds: Thresholds,
    *,
    measure: bool,
    weights: LpipsWeights | None,
    directory: str | os.PathLike[str] | None,
    device: str,
) -> tuple[Check, LpipsResult | None]:
    rule = f"<= {thresholds.lpips_max:g}"
    reason = _blocked_by(prerequisites)
    if reason:
        return _not_measured("lpips", rule, reason), None
    if not measure:
        return _not_measured("lpips", rule, "LPIPS not measured (--no-lpips, measure_lpips=False)"), None
    from h3bench.metrics import lpips

    if weights is None:
        try:
            weights = lpips.authenticate_weights(directory)
        except WeightIntegrityError as exc:
            detail = (
                f"LPIPS not measured: weights refused ({exc}); path {exc.path}, "
                f"expected sha256 {exc.expected_sha256 or '-'}, actual {exc.actual_sha256 or '-'}"
            )
            return _not_measured("lpips", rule, detail), None
    try:
        result = lpips.lpips_video(base.path, cand.path, weights=weights, device=device)
    except (MediaShapeError, MediaDecodeError) as exc:
        return Check("lpips", Status.FAIL, None, rule, f"LPIPS could not be computed: {exc}"), None
    return _at_most("lpips", "LPIPS (alex, v0.1, mean over frames)", result.mean, thresholds.lpips_max), result


def _audio_metric_checks(
    base: _Probed,
    cand: _Probed,
    pcm: tuple[np.ndarray, np.ndarray] | None,  # None only when a prerequisite failed
    prerequisites: list[Check],
    thresholds: Thresholds,
    shape: ExpectedShape | None,
) -> tuple[list[Check], float | None, float | None]:
    cosine_rule = f">= {thresholds.audio_cosine_min:g}"
    rms_rule = f"in [{thresholds.rms_ratio_min:g}, {thresholds.rms_ratio_max:g}]"
    reason = _blocked_by(prerequisites)
    if reason:
        return [
            _not_measured("audio_spectral_cosine", cosine_rule, reason),
            _not_measured("audio_rms_ratio", rms_rule, reason),
        ], None, None
    from h3bench.metrics import audio

    try:
        b = audio.trim_to(pcm[0], _audio_trim_count(base.info.audio, shape))
        c = audio.trim_to(pcm[1], _audio_trim_count(cand.info.audio, shape))
        cosine = audio.spectral_cosine(
            b, c, baseline_rate=base.info.audio.sample_rate, candidate_rate=cand.info.audio.sample_rate
        )
        ratio = audio.rms_ratio(b, c)
    except MediaShapeError as exc:
        detail = f"audio metrics could not be computed: {exc}"
        return [
            Check("audio_spectral_cosine", Status.FAIL, None, cosine_rule, detail),
            Check("audio_rms_ratio", Status.FAIL, None, rms_rule, detail),
        ], None, None
    return [
        _at_least("audio_spectral_cosine", "the multi-resolution spectral cosine", cosine, thresholds.audio_cosine_min),
        _within(
            "audio_rms_ratio",
            "the RMS ratio (candidate / baseline)",
            ratio,
            thresholds.rms_ratio_min,
            thresholds.rms_ratio_max,
        ),
    ], cosine, ratio


def compare(
    baseline: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    thresholds: Thresholds = Thresholds(),
    expect_seconds: float | None = None,
    lpips_weights: LpipsWeights | None = None,
    lpips_dir: str | os.PathLike[str] | None = None,
    lpips_device: str = "cpu",
    measure_lpips: bool = True,
) -> QualityReport:
    """Run every format check and quality gate of a candidate MP4 against its baseline.

    Parameters
    ----------
    baseline, candidate
        Paths to the two MP4s. A path that cannot be read raises UsageError;
        a file that does not decode fails the ``decodable`` check.
    thresholds
        Gate thresholds (REFERENCE §7 by default).
    expect_seconds
        If given, also run the expected-duration checks on both files, and
        trim the PCM to the expected sample count for the audio metrics.
    lpips_weights, lpips_dir
        Authenticated weights, or the directory to authenticate them from
        (default: the ``H3BENCH_LPIPS_DIR`` environment variable).
    lpips_device
        Torch device for LPIPS (``cpu``, ``cuda``, ``npu``).
    measure_lpips
        False leaves the ``lpips`` check not measured, so the verdict is at
        best INCONCLUSIVE.

    Returns
    -------
    QualityReport
        Checks in a fixed order: format checks, expected-duration checks, then
        ``ssim``, ``psnr_db``, ``lpips``, ``audio_spectral_cosine``, ``audio_rms_ratio``.
    """
    shape = expected_shape(expect_seconds) if expect_seconds is not None else None
    base, cand = _probe("baseline", baseline), _probe("candidate", candidate)
    files = (base, cand)
    decodable = _decodable_check(files)
    has_video = _stream_check(files, decodable, "video")
    has_audio = _stream_check(files, decodable, "audio")
    video_format = _video_format_checks(base, cand, has_video)
    audio_format = _audio_format_checks(base, cand, has_audio)
    # Each file's PCM is decoded once, here, for the finite check and the metrics.
    pcm = None
    if has_audio.status is Status.PASS:
        pcm = (media.read_pcm(base.path)[0], media.read_pcm(cand.path)[0])
        finite = finite_check(*pcm)
    else:
        finite = _not_measured("audio_finite", "== 0", _blocked_by([has_audio]))
    checks = [decodable, has_video, has_audio, *video_format, *audio_format, finite]
    if shape is not None:
        for f in files:
            checks += [replace(check, name=f"{f.role}.{check.name}") for check in _duration_checks(f, shape)]

    video_prerequisites = [has_video, *video_format]
    video_checks, video = _video_metric_checks(base, cand, video_prerequisites, thresholds)
    lpips_check, lpips_result = _lpips_check(
        base,
        cand,
        video_prerequisites,
        thresholds,
        measure=measure_lpips,
        weights=lpips_weights,
        directory=lpips_dir,
        device=lpips_device,
    )
    audio_prerequisites = [has_audio, *audio_format, finite]
    audio_checks, cosine, ratio = _audio_metric_checks(base, cand, pcm, audio_prerequisites, thresholds, shape)
    checks += [*video_checks, lpips_check, *audio_checks]
    return QualityReport(
        baseline=base.path,
        candidate=cand.path,
        checks=tuple(checks),
        ssim=video.ssim if video is not None else None,
        psnr_db=video.psnr_db if video is not None else None,
        lpips=lpips_result.mean if lpips_result is not None else None,
        audio_spectral_cosine=cosine,
        audio_rms_ratio=ratio,
        thresholds=thresholds,
        video=video,
        lpips_result=lpips_result,
    )


# ---------------------------------------------------------------------------
# Assertion helpers for tests


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


def assert_expected_duration(path: str | os.PathLike[str], seconds: float) -> list[Check]:
    """Assert that ``path`` has exactly the shape H3 produces for ``seconds``; return the checks.

    The AssertionError lists every check that failed or could not be
    measured, with its measured value and threshold.
    """
    __tracebackhide__ = True
    checks = expected_duration_checks(path, seconds)
    bad = [check for check in checks if check.status is not Status.PASS]
    if bad:
        lines = [f"expected duration: {os.fspath(path)} is not H3's {seconds:g} s output ({len(bad)} checks):"]
        lines += [_describe(check, prefix=f"[{check.status}] ") for check in bad]
        raise AssertionError("\n".join(lines))
    return checks
