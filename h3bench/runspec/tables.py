"""The RunSpec's tables other than the arms: hardware, source, model, inputs, workload, protocol, gates."""

from __future__ import annotations

import itertools
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator, model_validator

from h3bench.quality.checks import Thresholds
from h3bench.runspec.base import Frozen, raise_at
from h3bench.runspec.launch import DeviceIds

__all__ = ["UNPINNED", "DesignMode", "Gates", "Hardware", "Hints", "InputFile", "Inputs", "Model", "Protocol", "Source",
           "Workload"]

UNPINNED = "UNPINNED"
_BLOCK_ORDER = re.compile(r"(?:AB|BA)+")

_Positive = Annotated[StrictFloat, Field(gt=0)]


class DesignMode(StrEnum):
    """How a campaign's blocks run: a fixed order judged once, or pairs judged at looks (:mod:`h3bench.course.design`).

    A race (:mod:`h3bench.course.race`) is priced by ``h3bench plan``; the
    live run refuses it before any server starts
    (:func:`h3bench.session.selection.require_runnable`).
    """

    FIXED = "fixed"
    SEQUENTIAL = "sequential"
    RACE = "race"


class Hardware(Frozen):
    """Where the campaign runs: the simulator or one NPU host's reserved devices."""

    kind: Literal["sim", "910b1", "910b2", "910c", "950pr", "950dt"]
    device_ids: DeviceIds = ()


class Source(Frozen):
    """The engine's source commit and the container image digest (campaign #293's protocol)."""

    engine_commit: Annotated[StrictStr, Field(pattern=rf"^(?:[0-9a-f]{{40}}|{UNPINNED})$")]
    image_digest: Annotated[StrictStr, Field(pattern=rf"^(?:sha256:[0-9a-f]{{64}}|{UNPINNED})$")]


class Model(Frozen):
    """The checkpoint: ``path`` is what ``{model}`` expands to; ``content_identity`` pins its bytes."""

    path: Annotated[StrictStr, Field(min_length=1)]
    content_identity: Annotated[StrictStr, Field(min_length=1)]


class InputFile(Frozen):
    """One reference input, pinned by SHA-256; a relative path is relative to the spec's directory."""

    path: Annotated[StrictStr, Field(min_length=1)]
    sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


class Inputs(Frozen):
    """The Ref2VA request inputs: prompt, reference video and reference audio (campaign #293; api_server.py)."""

    prompt: Annotated[StrictStr, Field(min_length=1)]
    reference_video: InputFile
    reference_audio: InputFile


class Workload(Frozen):
    """What every request asks for (campaign #293); durations in seconds, within [4, 15] (minimax_h3 time_request.py)."""

    durations: tuple[Annotated[StrictFloat, Field(ge=4, le=15)], ...] = Field((5.0, 15.0), min_length=1)
    size: StrictStr = "1344x768"
    fps: Annotated[StrictInt, Field(ge=1)] = 24
    seed: Annotated[StrictInt, Field(ge=0)] = 0
    steps: Annotated[StrictInt, Field(ge=1)] = 50
    flow_shift: _Positive = 12.0
    audio_flow_shift: _Positive = 3.0

    @field_validator("durations")
    @classmethod
    def _unique_durations(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"durations must be unique, got {list(value)}")
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)", value)
        if match is None:
            raise ValueError(f"size must be WIDTHxHEIGHT, such as 1344x768, got {value!r}")
        # H3's latent grid: 1344x768 and every reduced simulator canvas are multiples of 32.
        if any(int(side) % 32 for side in match.groups()):
            raise ValueError(f"size {value} must have width and height that are multiples of 32")
        return value

    @property
    def width(self) -> int:
        return int(self.size.split("x")[0])

    @property
    def height(self) -> int:
        return int(self.size.split("x")[1])


class Protocol(Frozen):
    """How blocks run (campaign #293's protocol).

    ``order`` is the block sequence per duration: ``A`` is a baseline block,
    ``B`` a candidate block, each a fresh server process. It must be made of
    adjacent ``AB``/``BA`` pairs, because the statistics pair exactly those
    (:func:`h3bench.stats.speed.paired_block_ratios`). The default ``ABBAABBA``
    gives four pairs: with ``ABBA``'s two pairs the t interval has one degree
    of freedom and a real 10 % speedup is called faster in under 10 % of
    campaigns; with four pairs, in 80–99 % (2 % request noise, 2 % to 1 %
    process noise; tests_unit/stats/test_error_rates.py).

    ``lossless_baseline_blocks`` baseline blocks per duration run before the
    AB/BA blocks and serve only the lossless test, as extra baseline
    processes (:mod:`h3bench.quality.lossless`); unset, it is 2 when
    ``gates.lossless`` is on and 0 otherwise (:func:`h3bench.course.design.control_blocks`).
    ``anchored_order`` is what a candidate-only run (``--arm candidate
    --baseline-evidence``) runs per duration: ``A`` a fresh baseline anchor,
    ``B`` a candidate block; without an ``A`` the speed verdict cannot be
    more than INCONCLUSIVE (:func:`h3bench.stats.speed.anchored_speed_report`).
    Unset, it is ``BABBAB``, or with the lossless test on the fewest anchors
    that let that test decide (:func:`h3bench.course.design.anchored_order`).

    ``design`` is ``fixed`` (every block of ``order`` at every duration, one
    look at the end) or ``sequential`` (:mod:`h3bench.stats.sequential`):
    the series' AB/BA pairs run round-robin, and after each planned look
    (``looks``: AB/BA pairs per look, per duration in the order they run;
    unset, a look after every pair from 2 to 8 at the cheapest duration and
    after 3, 4 and 5 at the others) a candidate stops as soon as its interval
    clears the margin either way, or can no longer reach PASS (``futility``).
    The look levels spend each duration's level by ``spending`` (``hsd``
    with ``spending_gamma``, ``obf`` or ``pocock``). With
    ``durations_in_order_of_cost`` the shorter (cheaper) duration runs first,
    and a dearer one only for a candidate that passed it. Both designs judge
    the same way: the first-request rule (``first_request_level``,
    :mod:`h3bench.stats.blockstat`) and the cache audit
    (``audit_cache_ratio``, :mod:`h3bench.stats.cache_audit`).

    Each block gets ``warmups_per_block`` warmup requests (at the measured
    shape and seed; with ``warmup_steps``, a cheap warmup of that many
    inference steps instead of ``workload.steps``, the same for every arm,
    accepted only where the two-sided first-request check finds the first
    measured requests steady: :mod:`h3bench.stats.blockstat`), then
    ``requests_per_block`` measured ones, then, when ``audit`` is on, one
    audit request with ``audit_seed``: its output must differ from the
    fixed-seed outputs (else the block fails), and over the blocks of a
    series its latency against the block's measured ones must not be a
    cache's (the candidate's audit more than ``audit_cache_ratio`` slower,
    relative to its measured requests, than the baseline's). With
    ``audit_counts`` the audit's latency counts in the block's median (both
    arms use the same audit seed, so it cancels in the ratio). A block's
    median needs at least three counted requests, and the campaign at least
    three measured requests per workload and arm. A lossless campaign holds
    ``lossless_per_candidate`` per candidate, most of it at the dearest
    duration (:func:`h3bench.quality.lossless_design.lossless_levels`). ``shutdown_budget_s`` is one budget for every arm,
    disclosed in the report. ``request_api`` is how a request is sent:
    ``sync`` (``POST /v1/videos/sync``, the E2E with no polling in it) or
    ``async`` (a job, polled; its progress shows while an hour-long request
    runs, at the cost of up to 100 ms of polling in E2E). On NPU hosts,
    ``npu-smi`` is sampled every ``telemetry_interval_s`` while a block's
    server runs (:mod:`h3bench.host.telemetry`). With ``profile``, every server
    is started with a profiler directory and one extra, unmeasured request per
    arm and duration runs between ``/start_profile`` and ``/stop_profile``
    (:mod:`h3bench.run.profiling`).
    """

    design: DesignMode = DesignMode.FIXED
    order: StrictStr = "ABBAABBA"
    looks: tuple[tuple[Annotated[StrictInt, Field(ge=2)], ...], ...] | None = None
    spending: Literal["hsd", "obf", "pocock"] = "hsd"
    spending_gamma: StrictFloat = 0.0
    futility: StrictBool = True
    durations_in_order_of_cost: StrictBool | None = None  # unset: on in the sequential design only
    warmups_per_block: Annotated[StrictInt, Field(ge=1)] = 1
    warmup_steps: Annotated[StrictInt, Field(ge=2)] | None = None  # unset: the warmups run workload.steps
    requests_per_block: Annotated[StrictInt, Field(ge=2)] = 3
    request_timeout_s: _Positive
    startup_budget_s: _Positive
    shutdown_budget_s: _Positive
    audit: StrictBool = True
    audit_seed: Annotated[StrictInt, Field(ge=0)] = 1
    audit_counts: StrictBool = False
    audit_cache_ratio: Annotated[StrictFloat, Field(gt=1)] = 2 ** 0.5
    first_request_level: Annotated[StrictFloat, Field(gt=0, lt=1)] | None = 0.10
    lossless_per_candidate: Annotated[StrictFloat, Field(gt=0, lt=1)] = 0.05
    request_api: Literal["sync", "async"] = "sync"
    telemetry_interval_s: _Positive = 10.0
    lossless_baseline_blocks: Annotated[StrictInt, Field(ge=0)] | None = None
    anchored_order: StrictStr | None = None  # unset: h3bench.course.design.anchored_order chooses
    profile: StrictBool = False

    @field_validator("order")
    @classmethod
    def _ab_ba_pairs(cls, value: str) -> str:
        if not _BLOCK_ORDER.fullmatch(value):
            raise ValueError(
                f"order {value!r} must be adjacent AB/BA pairs of A (baseline) and B (candidate) blocks, "
                "such as ABBA or ABBAABBA"
            )
        return value

    @field_validator("looks")
    @classmethod
    def _increasing(cls, value: tuple[tuple[int, ...], ...] | None) -> tuple[tuple[int, ...], ...] | None:
        for looks in value or ():
            if not looks or any(b <= a for a, b in itertools.pairwise(looks)):
                raise ValueError(f"looks {list(looks)} must be pair counts in increasing order, such as [2, 4, 6, 8]")
        return value

    @model_validator(mode="after")
    def _block_budget(self) -> Protocol:
        counted = self.requests_per_block + int(self.audit and self.audit_counts)
        if self.audit_counts and not self.audit:
            raise ValueError("audit_counts needs audit = true")
        if counted < 3:
            raise ValueError(f"protocol.requests_per_block = {self.requests_per_block} gives {counted} counted "
                             "requests, and a block's median needs at least three: requests_per_block = 3, or 2 "
                             "with audit_counts = true")
        return self

    @field_validator("anchored_order")
    @classmethod
    def _anchors_and_candidates(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[AB]*B[AB]*", value):
            raise ValueError(
                f"anchored_order {value!r} must be A (fresh baseline anchor) and B (candidate) blocks with at "
                "least one B, such as BABBAB"
            )
        return value


_DEFAULT = Thresholds()


class Gates(Frozen):
    """Quality thresholds, the lossless mode and the speed margin.

    The six metric thresholds have :class:`h3bench.quality.Thresholds`' names
    and defaults (a test holds the two to each other); a RunSpec adds their
    ranges (similarities in (0, 1], every other threshold above 0,
    ``rms_ratio_min`` below ``rms_ratio_max``). ``speed_margin``: "candidate
    faster" is PASS only when the ratio's upper bound lies below
    ``1 - speed_margin``, "slower" FAIL only when its lower bound lies above
    ``1 + speed_margin`` (:func:`h3bench.stats.speed.speed_verdict`). ``lossless``
    turns on the lossless test against the baseline's own run-to-run
    variability (:mod:`h3bench.quality.lossless`).
    """

    ssim_min: StrictFloat = _DEFAULT.ssim_min
    psnr_min_db: StrictFloat = _DEFAULT.psnr_min_db
    lpips_max: StrictFloat = _DEFAULT.lpips_max
    audio_cosine_min: StrictFloat = _DEFAULT.audio_cosine_min
    rms_ratio_min: StrictFloat = _DEFAULT.rms_ratio_min
    rms_ratio_max: StrictFloat = _DEFAULT.rms_ratio_max
    lpips_required: StrictBool = True
    lossless: StrictBool = False
    speed_margin: Annotated[StrictFloat, Field(ge=0, lt=1)] = 0.02

    @property
    def thresholds(self) -> Thresholds:
        """The six metric thresholds, as the quality gates take them."""
        return Thresholds(**{name: getattr(self, name) for name in Thresholds.names()})

    @model_validator(mode="after")
    def _ranges(self) -> Gates:
        problems: list[tuple[tuple[str, ...], str, Any]] = []
        for name in Thresholds.names():
            value = getattr(self, name)
            if value <= 0:
                problems.append(((name,), "Input should be greater than 0", value))
            elif name in ("ssim_min", "audio_cosine_min") and value > 1:
                problems.append(((name,), "Input should be less than or equal to 1", value))
        raise_at(problems, "Gates")
        return self

    @model_validator(mode="after")
    def _rms_range(self) -> Gates:
        if self.rms_ratio_min >= self.rms_ratio_max:
            message = f"must be below rms_ratio_max ({self.rms_ratio_max:g})"
            raise_at([(("rms_ratio_min",), message, self.rms_ratio_min)], "Gates")
        return self


class Hints(Frozen):
    """What ``h3bench plan`` estimates a campaign from when no earlier bundle of the spec exists.

    ``e2e_s`` gives, per arm, the seconds of one request per duration
    (``{"5": 745.43, "15": 5887.24}``); ``startup_s`` one server start (weight
    load), ``compile_s`` what the first request adds (regional compilation),
    ``shutdown_s`` one stop: each one figure for every arm, or a table by arm
    (an arm it does not name gets the baseline's). ``source`` says where the
    figures come from, and what a figure that was not measured was scaled from.
    ``dit_step_s`` gives, per arm and duration, a published DiT per-step time
    (the 950PR recipe's "DiT per-step", DiT total over its 49 forwards): the
    summary and the report show it beside the measured one; nothing is judged
    by it.
    """

    source: Annotated[StrictStr, Field(min_length=1)]
    e2e_s: dict[StrictStr, dict[StrictStr, _Positive]] = Field(default_factory=dict)
    dit_step_s: dict[StrictStr, dict[StrictStr, _Positive]] = Field(default_factory=dict)
    startup_s: Annotated[StrictFloat, Field(ge=0)] | dict[StrictStr, Annotated[StrictFloat, Field(ge=0)]] = 0.0
    compile_s: Annotated[StrictFloat, Field(ge=0)] | dict[StrictStr, Annotated[StrictFloat, Field(ge=0)]] = 0.0
    shutdown_s: Annotated[StrictFloat, Field(ge=0)] | dict[StrictStr, Annotated[StrictFloat, Field(ge=0)]] = 0.0

    def of(self, name: Literal["startup_s", "compile_s", "shutdown_s"], arm: str) -> float:
        """One arm's figure: its own, else the baseline's, else 0."""
        value = getattr(self, name)
        if isinstance(value, dict):
            return float(value.get(arm, value.get("baseline", 0.0)) or 0.0)
        return float(value)
