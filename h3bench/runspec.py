"""RunSpec: the frozen description of one campaign (issue 4; REFERENCE §1 and §8).

A RunSpec is a TOML file, validated into frozen pydantic models that forbid
unknown keys. It fixes everything a comparison holds constant: hardware,
engine source and image, model, pinned inputs, workload, the arms (a
``baseline`` and one or more candidates), the block protocol and the gate
thresholds.

Freezing
--------
The spec's **id** is the SHA-256 of its canonical JSON: the validated spec
with every default filled in, keys sorted, no whitespace, UTF-8. Writing a
default explicitly, reordering tables or changing comments leaves the id
unchanged; changing any value changes it. Two things are deliberately outside
the id: where the spec file lives (input paths are kept as written and
resolved against the spec's directory only when used; the files are
identified by their pinned SHA-256) and the order in which candidates are
declared (each candidate is compared only inside its own AB/BA blocks).

Bundles from different ids are never compared (:func:`require_same_spec`):
the campaign says a changed environment needs a new frozen RunSpec before
comparisons (REFERENCE §8).

Placeholders
------------
Identity values that a real NPU host has to record before a formal campaign
(engine commit, image digest, checkpoint content identity) may be written as
``"UNPINNED"``. The spec then loads, and :attr:`RunSpec.unpinned` names them;
the simulator has no engine and omits ``[source]``.

Errors
------
Every problem is a :class:`~h3bench.errors.RunSpecError` whose message names
the file and the field path (``protocol.requests_per_block``) and whose
``field_path`` and ``source`` attributes carry the same, for TOML syntax
errors, missing fields, wrong types, unknown keys and rule violations alike.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from h3bench.errors import RunSpecError
from h3bench.hashing import sha256_file
from h3bench.quality.checks import Thresholds

__all__ = [
    "BASELINE",
    "PLACEHOLDERS",
    "UNPINNED",
    "Arm",
    "Gates",
    "Hardware",
    "InputFile",
    "Inputs",
    "Model",
    "Protocol",
    "RunSpec",
    "Source",
    "Workload",
    "load_runspec",
    "parse_runspec",
    "require_same_spec",
]

BASELINE = "baseline"
UNPINNED = "UNPINNED"
# What an arm's argv may contain; everything else in braces (JSON configs) is literal.
PLACEHOLDERS = ("host", "port", "model", "python")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARM_NAME = re.compile(r"[a-z][a-z0-9_]*")
_BLOCK_ORDER = re.compile(r"(?:AB|BA)+")

_Positive = Annotated[StrictFloat, Field(gt=0)]
_Fraction = Annotated[StrictFloat, Field(gt=0, le=1)]


def _raise_at(problems: list[tuple[tuple[str, ...], str, Any]], title: str) -> None:
    """Raise the problems found by a model validator as errors at their own field paths.

    A plain ValueError would be reported at the model's path; pydantic merges
    the line errors of a ValidationError raised here, locations included.
    """
    if problems:
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(type=PydanticCustomError("runspec", message), loc=loc, input=value)
                for loc, message, value in problems
            ],
        )


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Hardware(_Frozen):
    """Where the campaign runs: the simulator or one NPU host's reserved devices."""

    kind: Literal["sim", "910b1", "910b2", "910c", "950pr", "950dt"]
    device_ids: tuple[Annotated[StrictInt, Field(ge=0)], ...] = ()

    @field_validator("device_ids")
    @classmethod
    def _unique_devices(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"device ids must be unique, got {list(value)}")
        return value


class Source(_Frozen):
    """The engine's source commit and the container image digest (REFERENCE §8)."""

    engine_commit: Annotated[StrictStr, Field(pattern=rf"^(?:[0-9a-f]{{40}}|{UNPINNED})$")]
    image_digest: Annotated[StrictStr, Field(pattern=rf"^(?:sha256:[0-9a-f]{{64}}|{UNPINNED})$")]


class Model(_Frozen):
    """The checkpoint: ``path`` is what ``{model}`` expands to; ``content_identity`` pins its bytes."""

    path: Annotated[StrictStr, Field(min_length=1)]
    content_identity: Annotated[StrictStr, Field(min_length=1)]


class InputFile(_Frozen):
    """One reference input, pinned by SHA-256; a relative path is relative to the spec's directory."""

    path: Annotated[StrictStr, Field(min_length=1)]
    sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]


class Inputs(_Frozen):
    """The Ref2VA request inputs: prompt, reference video and reference audio (REFERENCE §1, §4)."""

    prompt: Annotated[StrictStr, Field(min_length=1)]
    reference_video: InputFile
    reference_audio: InputFile


class Workload(_Frozen):
    """What every request asks for (REFERENCE §1); durations in seconds, within [4, 15] (REFERENCE §2)."""

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


class Arm(_Frozen):
    """One server configuration.

    ``argv`` is the server command; ``{host}``, ``{port}``, ``{model}`` and
    ``{python}`` (this interpreter) are substituted at launch and any other
    braces, such as JSON configs, are literal. ``env`` is added to the
    launcher's environment. ``sim`` is the simulator profile, kept opaque
    here and validated by the simulator.
    """

    description: Annotated[StrictStr, Field(min_length=1)]
    argv: tuple[StrictStr, ...] = Field(min_length=1)
    env: dict[StrictStr, StrictStr] = {}
    sim: dict[str, Any] | None = None

    @field_validator("argv")
    @classmethod
    def _known_placeholders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            for name in _PLACEHOLDER.findall(arg):
                if name not in PLACEHOLDERS:
                    known = ", ".join("{" + item + "}" for item in PLACEHOLDERS)
                    raise ValueError(f"unknown placeholder {{{name}}} in {arg!r}; known: {known}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    def command(self, host: str, port: int, model: str) -> list[str]:
        """The argv with its placeholders substituted."""
        values = {"host": host, "port": str(port), "model": model, "python": sys.executable}
        return [_PLACEHOLDER.sub(lambda match: values[match.group(1)], arg) for arg in self.argv]


class Protocol(_Frozen):
    """How blocks run (REFERENCE §8, issues 4 and 5).

    ``order`` is the block sequence per duration: ``A`` is a baseline block,
    ``B`` a candidate block, each a fresh server process. It must be made of
    adjacent ``AB``/``BA`` pairs, because the statistics pair exactly those
    (:func:`h3bench.stats.paired_block_ratios`). The default ``ABBAABBA``
    gives four pairs: with ``ABBA``'s two pairs the t interval has one degree
    of freedom (t = 12.71) and finds a real 10 % speedup under 2 % request
    noise only about 38 % of the time; with four pairs, nearly always
    (tests_unit/test_stats.py).

    Each block gets ``warmups_per_block`` warmup requests, then
    ``requests_per_block`` measured ones (at least 3, the campaign's floor),
    then, when ``audit`` is on, one audit request with ``audit_seed``: its
    output must differ from the fixed-seed outputs and its E2E must be within
    ``audit_latency_tolerance`` (relative) of the block's median, or the
    candidate is stopped. ``shutdown_budget_s`` is one budget for every arm,
    disclosed in the report.
    """

    order: StrictStr = "ABBAABBA"
    warmups_per_block: Annotated[StrictInt, Field(ge=1)] = 1
    requests_per_block: Annotated[StrictInt, Field(ge=3)] = 3
    request_timeout_s: _Positive
    startup_budget_s: _Positive
    shutdown_budget_s: _Positive
    audit: StrictBool = True
    audit_seed: Annotated[StrictInt, Field(ge=0)] = 1
    audit_latency_tolerance: _Positive = 0.25

    @field_validator("order")
    @classmethod
    def _ab_ba_pairs(cls, value: str) -> str:
        if not _BLOCK_ORDER.fullmatch(value):
            raise ValueError(
                f"order {value!r} must be adjacent AB/BA pairs of A (baseline) and B (candidate) blocks, "
                "such as ABBA or ABBAABBA"
            )
        return value


class Gates(Thresholds):
    """Quality thresholds, the lossless mode and the speed margin.

    The six metric thresholds are :class:`h3bench.quality.Thresholds`' own
    fields, names and defaults; a RunSpec adds their ranges (similarities in
    (0, 1], every other threshold above 0, ``rms_ratio_min`` below
    ``rms_ratio_max``). ``speed_margin``: "candidate faster" is PASS only when
    the ratio's whole 95 % interval lies below ``1 - speed_margin``
    (:func:`h3bench.stats.speed_verdict`). ``control_envelope_tolerance`` is
    the relative slack on the worst baseline-vs-baseline (control) deviation
    that a candidate's deviation may reach in lossless mode (1.0: up to twice
    the worst control; see :mod:`h3bench.lossless` for why the worst of a few
    controls alone is too tight), and ``min_control_pairs`` the fewest pairs
    of distinct baseline server processes from which an envelope is built;
    fewer gives INCONCLUSIVE.
    """

    lpips_required: StrictBool = True
    lossless: StrictBool = False
    speed_margin: Annotated[StrictFloat, Field(ge=0, lt=1)] = 0.02
    control_envelope_tolerance: Annotated[StrictFloat, Field(ge=0)] = 1.0
    min_control_pairs: Annotated[StrictInt, Field(ge=1)] = 2

    @model_validator(mode="after")
    def _ranges(self) -> Gates:
        problems: list[tuple[tuple[str, ...], str, Any]] = []
        for name in Thresholds.names():
            value = getattr(self, name)
            if value <= 0:
                problems.append(((name,), "Input should be greater than 0", value))
            elif name in ("ssim_min", "audio_cosine_min") and value > 1:
                problems.append(((name,), "Input should be less than or equal to 1", value))
        _raise_at(problems, "Gates")
        return self

    def _rms_problem(self) -> str | None:
        return None  # _rms_range reports it at its field

    @model_validator(mode="after")
    def _rms_range(self) -> Gates:
        if self.rms_ratio_min >= self.rms_ratio_max:
            message = f"must be below rms_ratio_max ({self.rms_ratio_max:g})"
            _raise_at([(("rms_ratio_min",), message, self.rms_ratio_min)], "Gates")
        return self


class RunSpec(_Frozen):
    """A validated, frozen campaign description; see the module docstring."""

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    description: StrictStr = ""
    hardware: Hardware
    source: Source | None = None
    model: Model
    inputs: Inputs
    workload: Workload = Workload()
    arms: dict[StrictStr, Arm]
    protocol: Protocol
    gates: Gates = Gates()

    # Where the spec came from; neither is part of the id.
    _spec_dir: Path | None = PrivateAttr(default=None)
    _source: str = PrivateAttr(default="RunSpec")

    @field_validator("arms")
    @classmethod
    def _baseline_and_candidates(cls, value: dict[str, Arm]) -> dict[str, Arm]:
        for name in value:
            if not _ARM_NAME.fullmatch(name):
                raise ValueError(f"arm name {name!r} must be lower-case letters, digits and _, starting with a letter")
        if BASELINE not in value:
            raise ValueError(f"there must be an arm named {BASELINE!r}")
        if len(value) < 2:
            raise ValueError("there must be at least one candidate arm besides baseline")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RunSpec:
        """Rules across sections, each reported at the field that breaks it."""
        problems: list[tuple[tuple[str, ...], str, Any]] = []
        kind = self.hardware.kind
        if kind != "sim":
            if not self.hardware.device_ids:
                message = f"kind {kind!r} needs the ids of its reserved devices"
                problems.append((("hardware", "device_ids"), message, None))
            if self.source is None:
                message = f"hardware.kind {kind!r} needs [source] with engine_commit and image_digest"
                problems.append((("source",), message, None))
            for name, arm in self.arms.items():
                if arm.sim is not None:
                    message = f"a simulator profile needs hardware.kind 'sim', not {kind!r}"
                    problems.append((("arms", name, "sim"), message, arm.sim))
        if self.protocol.audit and self.protocol.audit_seed == self.workload.seed:
            problems.append(
                (
                    ("protocol", "audit_seed"),
                    f"must differ from workload.seed ({self.workload.seed}), or the audit proves nothing",
                    self.protocol.audit_seed,
                )
            )
        _raise_at(problems, "RunSpec")
        return self

    # ---- identity

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace, every default filled in; the text that :attr:`spec_id` hashes."""
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )

    @property
    def spec_id(self) -> str:
        """SHA-256 (hex) of the UTF-8 canonical JSON."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    @property
    def unpinned(self) -> tuple[str, ...]:
        """Field paths still set to ``"UNPINNED"``; a formal campaign needs none."""
        values = {"model.content_identity": self.model.content_identity}
        if self.source is not None:
            values["source.engine_commit"] = self.source.engine_commit
            values["source.image_digest"] = self.source.image_digest
        return tuple(path for path, value in values.items() if value == UNPINNED)

    # ---- arms

    @property
    def baseline(self) -> Arm:
        return self.arms[BASELINE]

    @property
    def candidates(self) -> tuple[str, ...]:
        """Names of every arm except ``baseline``, in declaration order."""
        return tuple(name for name in self.arms if name != BASELINE)

    # ---- inputs

    @property
    def spec_dir(self) -> Path:
        """The directory relative input paths resolve against: the spec file's, else the working directory."""
        return self._spec_dir if self._spec_dir is not None else Path.cwd()

    def input_files(self) -> dict[str, Path]:
        """``reference_video`` and ``reference_audio`` as resolved paths, not yet verified."""
        return {
            name: (self.spec_dir / getattr(self.inputs, name).path).resolve()
            for name in ("reference_video", "reference_audio")
        }

    def verify_inputs(self) -> dict[str, Path]:
        """Re-hash every input file against its pin and return the resolved paths.

        Raises
        ------
        RunSpecError
            A missing file or a SHA-256 mismatch, with the path, the pinned and
            the actual hash. A mismatch is an error, never a skip.
        """
        for name, path in self.input_files().items():
            field_path = f"inputs.{name}"
            expected = getattr(self.inputs, name).sha256
            try:
                actual = sha256_file(path).hexdigest
            except OSError as exc:
                raise RunSpecError(
                    f"{self._source}: {field_path}: cannot read {path} ({exc.strerror}); "
                    f"the spec pins sha256 {expected}",
                    field_path=f"{field_path}.path",
                    source=self._source,
                ) from exc
            if actual != expected:
                raise RunSpecError(
                    f"{self._source}: {field_path}: {path} has sha256 {actual}, but the spec pins {expected}; "
                    "a changed input needs a new frozen RunSpec",
                    field_path=f"{field_path}.sha256",
                    source=self._source,
                )
        return self.input_files()


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    # Our own value errors quote the value already; a missing field or a table has none worth showing.
    value = error.get("input")
    if error["type"] in ("missing", "extra_forbidden", "value_error") or value is None or isinstance(value, Mapping):
        return message
    shown = repr(value)
    return f"{message} (got {shown if len(shown) <= 80 else shown[:77] + '...'})"


def parse_runspec(data: Mapping[str, Any], *, source: str, spec_dir: str | os.PathLike[str] | None = None) -> RunSpec:
    """Validate a mapping (parsed TOML, or a bundle's JSON copy) into a :class:`RunSpec`.

    ``source`` names the origin in messages; ``spec_dir`` is where relative
    input paths resolve.
    """
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        lines = [f"{_field_path(error['loc']) or '(top level)'}: {_describe(error)}" for error in errors]
        raise RunSpecError(
            f"{source}: invalid RunSpec: " + ("\n  ".join(["", *lines]) if len(lines) > 1 else lines[0]),
            field_path=_field_path(errors[0]["loc"]),
            source=source,
        ) from exc
    spec._source = source
    if spec_dir is not None:
        spec._spec_dir = Path(spec_dir).resolve()
    return spec


def load_runspec(path: str | os.PathLike[str]) -> RunSpec:
    """Read, parse and validate a RunSpec TOML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise RunSpecError(f"cannot read RunSpec {path}: {reason}", source=str(path)) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunSpecError(f"{path}: TOML syntax error: {exc}", source=str(path)) from exc
    return parse_runspec(data, source=str(path), spec_dir=path.parent)


def require_same_spec(id_a: str, id_b: str) -> None:
    """Refuse to compare bundles that come from different frozen RunSpecs."""
    if id_a != id_b:
        raise RunSpecError(
            f"bundles come from different frozen RunSpecs ({id_a[:12]}… vs {id_b[:12]}…); "
            "a changed environment needs a new frozen spec, and both arms must run under it",
            field_path="spec_id",
        )
