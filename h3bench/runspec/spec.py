"""RunSpec: the frozen description of one campaign (campaign #293's frozen scope and protocol).

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
comparisons (campaign #293's protocol).

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
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, StrictBool, StrictStr, ValidationError, field_validator, model_validator

from h3bench.errors import RunSpecError
from h3bench.evidence.files import read_toml
from h3bench.evidence.hashing import sha256_file
from h3bench.evidence.scrub import Scrubber
from h3bench.runspec.arms import ARM_TAGS, BASELINE, Arm
from h3bench.runspec.base import Frozen, Problem, raise_at
from h3bench.runspec.bisection import Bisect
from h3bench.runspec.search import FORMAL_STEPS, Heldout
from h3bench.runspec.tables import UNPINNED, Gates, Hardware, Hints, Inputs, Model, Protocol, Source, Workload

__all__ = ["RunSpec", "Staging", "load_runspec", "parse_runspec", "require_same_spec"]

_ARM_NAME = re.compile(r"[a-z][a-z0-9_]*")


class Staging(Frozen):
    """``[staging]``: where the checkpoint is staged before the blocks, the same for every arm (h3bench.host.staging).

    ``mode = "copy"`` copies it into ``target`` (a local directory) and the servers read the copy;
    ``mode = "page_cache"`` reads every file once so that the first start finds it in memory.
    """

    mode: Literal["copy", "page_cache"]
    target: Annotated[StrictStr, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _target_for_a_copy(self) -> Staging:
        if self.mode == "copy" and self.target is None:
            raise ValueError("mode \"copy\" needs target, the local directory the checkpoint is copied into")
        if self.mode == "page_cache" and self.target is not None:
            raise ValueError("mode \"page_cache\" reads the checkpoint where it is; it takes no target")
        return self


class RunSpec(Frozen):
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
    hints: Hints | None = None
    # Research (h3bench.runspec.search): what kind of run, the final combination, held-out checks.
    diagnostic: StrictBool = False
    final: StrictStr | None = None
    original_baseline: StrictStr | None = None
    heldout: Heldout | None = None
    # A range of engine commits to search for a regression's culprit (h3bench.runspec.bisection, h3bench.bisect).
    bisect: Bisect | None = None
    # The checkpoint staged before the blocks (local copy or warm page cache).
    staging: Staging | None = None

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
        problems: list[Problem] = []
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
                unreserved = sorted(set(getattr(arm, "device_ids", ())) - set(self.hardware.device_ids))
                if unreserved:
                    message = (f"device(s) {unreserved} are not among hardware.device_ids "
                               f"{list(self.hardware.device_ids)}, the devices reserved and checked for the campaign")
                    problems.append((("arms", name, "device_ids"), message, None))
        if self.protocol.audit and self.protocol.audit_seed == self.workload.seed:
            problems.append(
                (
                    ("protocol", "audit_seed"),
                    f"must differ from workload.seed ({self.workload.seed}), or the audit proves nothing",
                    self.protocol.audit_seed,
                )
            )
        if self.protocol.warmup_steps is not None and self.protocol.warmup_steps >= self.workload.steps:
            message = (f"a cheap warmup runs fewer inference steps than the measured requests' "
                       f"workload.steps = {self.workload.steps}; leave it unset for a full warmup")
            problems.append((("protocol", "warmup_steps"), message, self.protocol.warmup_steps))
        if self.hints is not None:
            durations = {f"{d:g}" for d in self.workload.durations}
            for table, figures in (("e2e_s", self.hints.e2e_s), ("dit_step_s", self.hints.dit_step_s)):
                for hinted, per_duration in figures.items():
                    if hinted not in self.arms:
                        problems.append((("hints", table, hinted), f"no arm named {hinted!r}", hinted))
                    for duration in sorted(set(per_duration) - durations):
                        message = f"{duration!r} is not one of the workload's durations {sorted(durations)}"
                        problems.append((("hints", table, hinted, duration), message, duration))
        problems += research_problems(self)
        problems += bisect_problems(self)
        raise_at(problems, "RunSpec")
        return self

    # ---- identity

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace, every default filled in; the text that :attr:`spec_id` hashes.

        Secrets are masked first (:mod:`h3bench.evidence.scrub`, by name and pattern), so that the
        scrubbed copy in a bundle's manifest has the same id as the spec it was made from.
        """
        data = self.model_dump(mode="json")
        for table in ("bisect", "staging"):  # a spec without the table keeps the id it had before the table existed
            if data.get(table) is None:
                data.pop(table, None)
        if data["protocol"].get("warmup_steps") is None:  # likewise a spec without a cheap warmup
            data["protocol"].pop("warmup_steps", None)
        return json.dumps(
            Scrubber(environ=False).record(data),
            sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
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

    @property
    def diagnostic_reasons(self) -> tuple[str, ...]:
        """Why every run of this spec is DIAGNOSTIC; empty when it can be formal."""
        return tuple(diagnostic_reasons(self))

    @property
    def final_control(self) -> str:
        """The arm the final combination is compared with directly: ``original_baseline``, else the baseline."""
        return self.original_baseline or BASELINE

    # ---- arms

    @property
    def baseline(self) -> Arm:
        return self.arms[BASELINE]

    @property
    def candidates(self) -> tuple[str, ...]:
        """Names of every arm except ``baseline`` and the ``original_baseline``, in declaration order."""
        return tuple(name for name in self.arms if name not in (BASELINE, self.original_baseline))

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


def _real_errors(errors: list[Any]) -> list[Any]:
    """Drop a list's "too short" when its items were refused: pydantic drops invalid items first, then counts."""
    refused = {tuple(e["loc"][:-1]) for e in errors if e["loc"] and isinstance(e["loc"][-1], int)}
    return [e for e in errors if not (e["type"] == "too_short" and tuple(e["loc"]) in refused)] or errors


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if part in ARM_TAGS:
            continue  # which kind of arm pydantic tried; the field path is the same for both
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
        errors = _real_errors(exc.errors())
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
    data = read_toml(path, "RunSpec", error=lambda message: RunSpecError(message, source=str(path)))
    return parse_runspec(data, source=str(path), spec_dir=path.parent)


def require_same_spec(id_a: str, id_b: str) -> None:
    """Refuse to compare bundles that come from different frozen RunSpecs."""
    if id_a != id_b:
        raise RunSpecError(
            f"bundles come from different frozen RunSpecs ({id_a[:12]}… vs {id_b[:12]}…); "
            "a changed environment needs a new frozen spec, and both arms must run under it",
            field_path="spec_id",
        )


# -- the research rules (h3bench.runspec.search), applied to a whole spec ---------------------------------


def diagnostic_reasons(spec: RunSpec) -> list[str]:
    """Why a run of this spec is DIAGNOSTIC (empty for a spec whose runs can be formal)."""
    reasons = ["the spec says diagnostic = true"] if spec.diagnostic else []
    if spec.workload.steps != FORMAL_STEPS:
        reasons.append(f"workload.steps = {spec.workload.steps}, not the frozen {FORMAL_STEPS} (short-step bring-up)")
    return reasons


def _arm_ref(spec: RunSpec, loc: tuple[str, ...], name: str, *, what: str) -> list[Problem]:
    if name not in spec.arms:
        return [(loc, f"{what} {name!r} is not an arm of this spec (arms: {', '.join(spec.arms)})", name)]
    return []


def research_problems(spec: RunSpec) -> list[Problem]:
    """Every broken research rule, at its own field path."""
    problems: list[Problem] = []
    formal = not spec.diagnostic and spec.hardware.kind != "sim" and spec.workload.steps == FORMAL_STEPS
    baseline = spec.arms.get(BASELINE)
    if baseline is not None:
        for field in ("hypothesis", "source", "combination_of"):
            if getattr(baseline, field):
                message = "the baseline is the control: it has no hypothesis, source or combination_of"
                problems.append((("arms", BASELINE, field), message, None))
    for name, arm in spec.arms.items():
        if name == BASELINE:
            continue
        for index, part in enumerate(arm.combination_of):
            loc = ("arms", name, "combination_of", str(index))
            if part == name:
                problems.append((loc, f"arm {name!r} cannot be a combination of itself", part))
            elif part in (BASELINE, spec.original_baseline):
                problems.append((loc, "a baseline is a control, not a change to combine", part))
            else:
                problems += _arm_ref(spec, loc, part, what="combined arm")
        if formal and name != spec.original_baseline:
            for field in ("hypothesis", "source"):
                if getattr(arm, field) is None:
                    message = (f"a formal spec (hardware.kind {spec.hardware.kind!r}, not diagnostic) needs every "
                               f"candidate's {field}")
                    problems.append((("arms", name, field), message, None))
    if spec.protocol.profile:
        for name, arm in spec.arms.items():
            if any(arg == "--profiler-config" or arg.startswith("--profiler-config=") for arg in arm.argv):
                message = ("protocol.profile gives every server its own --profiler-config (h3bench.run.profiling): "
                           "leave the arm's profiler directory out")
                problems.append((("arms", name), message, None))
    if spec.final is not None:
        problems += _arm_ref(spec, ("final",), spec.final, what="final")
        if spec.final == BASELINE:
            problems.append((("final",), "the final combination must be a candidate, not the baseline", spec.final))
    if spec.original_baseline is not None:
        problems += _arm_ref(spec, ("original_baseline",), spec.original_baseline, what="original_baseline")
        if not [name for name in spec.arms if name not in (BASELINE, spec.original_baseline)]:
            message = "there must be at least one candidate besides baseline and the original baseline"
            problems.append((("original_baseline",), message, spec.original_baseline))
        if spec.final is None:
            message = "names the arm the final combination is compared with directly: give final as well"
            problems.append((("original_baseline",), message, spec.original_baseline))
        elif spec.original_baseline == spec.final:
            message = "the final combination cannot be its own original baseline"
            problems.append((("original_baseline",), message, spec.original_baseline))
    if spec.heldout is not None and spec.heldout.cases == 0:
        problems.append((("heldout",), "a [heldout] table needs seeds or inputs", None))
    if spec.heldout is not None and spec.workload.seed in spec.heldout.seeds:
        message = f"the formal seed {spec.workload.seed} is not held out; give other seeds"
        problems.append((("heldout", "seeds"), message, spec.workload.seed))
    return problems


def bisect_problems(spec: RunSpec) -> list[Problem]:
    """A ``[bisect]`` table's rules across the spec: one bad arm, and each commit's image or profile as its arms need."""
    table = spec.bisect
    if table is None:
        return []
    problems: list[Problem] = []
    bad = [name for name in spec.arms if name != BASELINE]
    if len(bad) != 1:
        problems.append((("arms",), f"a bisect spec has the good engine (baseline) and the bad one, one candidate; "
                                    f"found {', '.join(bad)}", None))
    vllm = [name for name, arm in spec.arms.items() if getattr(arm, "type", None) == "vllm"]
    if vllm and len(vllm) != len(spec.arms):
        problems.append((("arms",), "the good and the bad engine must be arms of one kind (both vllm, or both argv)",
                         None))
    for where, entry in table.entries():
        loc = ("bisect", *where)
        if vllm:
            if entry.image_digest is None:
                problems.append(((*loc, "image_digest"), "a vLLM commit needs its image digest", None))
            if not re.fullmatch(r"[0-9a-f]{40}", entry.commit):
                problems.append(((*loc, "commit"), "a vLLM engine commit is 40 hexadecimal digits", entry.commit))
            if entry.sim is not None:
                problems.append(((*loc, "sim"), "a simulator profile needs simulator arms", None))
        elif entry.image_digest is not None:
            problems.append(((*loc, "image_digest"), "simulator arms have no image; give the commit's sim profile",
                             entry.image_digest))
    if vllm:
        for name in ("image", "launcher"):
            if getattr(table, name) is None:
                problems.append((("bisect", name), "vLLM arms need the image repository and the launcher that runs "
                                                   "one image's engine ({image} in it)", None))
    else:
        if spec.arms.get(BASELINE) is not None and spec.arms[BASELINE].sim is None:
            problems.append((("arms", BASELINE, "sim"), "a simulated range starts from the good engine's profile",
                             None))
        for name in ("good", "bad"):
            if getattr(table, name).sim is not None:
                problems.append((("bisect", name, "sim"), f"the {name} engine's profile is its arm's", None))
    return problems
