"""The campaigns a bisection runs, each a RunSpec of its own derived from the bisect spec and written beside the log.

Positions along the range: 0 is the good engine, ``1 … N`` the commits of
``[bisect]``, the last of them the bad engine (the culprit's index in
:mod:`h3bench.bisect.posterior` is its position minus one). Each campaign
compares two positions at the spec's cheapest duration with every gate of
the spec:

- **verify**: good (``A``) against bad (``B``), the spec's sequential design
  at its levels and margin 0 (any slowdown it can show, not one beyond the
  ship margin), looks after every pair from 2 to ``campaign_pairs`` (16:
  at 12, a true 5 % step with 2 % process noise was named in 92.6 % of
  simulated searches, at 16 in 98.2 %, for 3 % more device time; 1000
  searches, seed 7), without the futility stop (a regression is what it
  looks for, so "can no longer reach PASS" would end it at once);
  reproduced means "slower" (speed) or a failed gate (quality);
- **probe**: good against one commit in AB/BA pairs, fixed design, up to
  ``max_pairs`` pairs, the runner adding pairs one at a time while the probe
  test continues; no lossless control blocks (the lossless comparison runs on
  the probe's own processes, and says when they are too few). Every second
  probe starts with ``BA``, so an order effect does not push every
  single-pair probe the same way. A probe is ``diagnostic`` evidence, never a
  claim: the ledger refuses it;
- **confirm**: the named commit's parent against it (a group's parent
  against its last commit), like the verify (margin 0): the only verdict that enters
  the ledger, as the claim.

The spec text is written as TOML (:func:`toml_text`) so that ``h3bench run
--runspec`` repeats any of them exactly, and it is read back through
:func:`h3bench.runspec.load_runspec`, the campaign's own loader.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from h3bench.errors import UsageError
from h3bench.runspec import BASELINE, RunSpec, parse_runspec
from h3bench.runspec.bisection import Bisect, BisectCommit, arm_label
from h3bench.stats.sequential import series_order

__all__ = ["Kind", "bad_arm", "campaign_data", "campaign_spec", "duration_of", "engine", "label_of", "parse_step",
           "range_data", "read_range", "table_of", "toml_text", "write_spec"]

Kind = Literal["verify", "probe", "confirm"]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def parse_step(text: str) -> tuple[Kind, int]:
    """``verify``, ``confirm`` or ``probe:K`` (the K-th probe of the log's rounds)."""
    if text in ("verify", "confirm"):
        return text, 0  # type: ignore[return-value]
    kind, _, number = text.partition(":")
    if kind != "probe" or not number.isdigit():
        raise UsageError(f"a step is verify, confirm or probe:K, got {text!r}")
    return "probe", int(number)


def table_of(spec: RunSpec) -> Bisect:
    if spec.bisect is None:
        raise UsageError(f"{spec.name}: the spec has no [bisect] table: nothing to bisect")
    return spec.bisect


def bad_arm(spec: RunSpec) -> str:
    """The name of the bad engine's arm (the spec's one candidate)."""
    return next(name for name in spec.arms if name != BASELINE)


def duration_of(spec: RunSpec) -> float:
    """The cheaper duration every campaign of the bisection runs at."""
    return min(spec.workload.durations)


def engine(spec: RunSpec, position: int) -> BisectCommit:
    """The engine at ``position`` (0 the good engine, N the bad one)."""
    table = table_of(spec)
    return (table.good, *table.range)[position]


def label_of(spec: RunSpec, position: int) -> str:
    """The arm name of the engine at ``position``."""
    return arm_label(position, engine(spec, position))


def _arm(spec: RunSpec, position: int, *, candidate: bool) -> dict[str, Any]:
    """The arm of the engine at ``position``: the baseline's (the bad engine's own at the end), with its image or profile."""
    table = table_of(spec)
    entry = engine(spec, position)
    last = position == len(table.range)
    data = spec.arms[bad_arm(spec) if last else BASELINE].model_dump(mode="json")
    for field in ("hypothesis", "source", "combination_of"):
        data.pop(field, None)
    if data.get("type") == "vllm":
        data["launcher"] = list(table.launcher_of(entry))
    elif not last and position > 0 and entry.sim:
        data["sim"] = {**(data.get("sim") or {}), **entry.sim}
    data["description"] = f"engine {entry.commit}" + (f": {entry.note}" if entry.note else "")
    if candidate:
        data["hypothesis"] = f"engine commit {entry.commit} carries the regression the bisection looks for"
        data["source"] = {"kind": "code", "ref": f"engine commit {entry.commit}"}
    return data


def _hints(spec: RunSpec, duration: float, names: tuple[str, str]) -> dict[str, Any] | None:
    """The spec's hints for the campaign's two arms at its duration: both priced as the good engine."""
    if spec.hints is None:
        return None
    data = spec.hints.model_dump(mode="json")
    key = f"{duration:g}"
    base = data["e2e_s"].get(BASELINE, {})
    data["e2e_s"] = {name: {key: base[key]} for name in names} if key in base else {}
    steps = data["dit_step_s"].get(BASELINE, {})
    data["dit_step_s"] = {BASELINE: {key: steps[key]}} if key in steps else {}
    for name in ("startup_s", "compile_s", "shutdown_s"):
        if isinstance(data[name], dict):
            data[name] = data[name].get(BASELINE, 0.0)
    return data


def campaign_data(spec: RunSpec, kind: Kind, control: int, candidate: int, *, number: int = 0) -> dict[str, Any]:
    """The mapping of one campaign's RunSpec: ``control`` (A) against ``candidate`` (B), by position."""
    table = table_of(spec)
    if not (0 <= control < candidate <= len(table.range)):
        raise UsageError(f"positions {control} and {candidate} are not a pair of the range 0 … {len(table.range)}")
    duration = duration_of(spec)
    name = label_of(spec, candidate)
    data = spec.model_dump(mode="json")
    for key in ("bisect", "final", "original_baseline", "heldout"):
        data.pop(key, None)
    suffix = f"{kind}-{number:02d}" if kind == "probe" or number > 1 else kind
    data["name"] = f"{spec.name}-{suffix}-{name.replace('_', '-')}"
    data["description"] = (f"bisection of {spec.name}, {kind}: {engine(spec, candidate).commit} against "
                           f"{engine(spec, control).commit}")
    data["arms"] = {BASELINE: _arm(spec, control, candidate=False), name: _arm(spec, candidate, candidate=True)}
    data["workload"]["durations"] = [duration]
    files = spec.input_files()
    for field in ("reference_video", "reference_audio"):
        data["inputs"][field]["path"] = str(files[field])
    protocol = data["protocol"]
    protocol["looks"] = None
    protocol["profile"] = False
    if kind == "probe":
        pairs = table.max_pairs
        order = series_order(pairs) if number % 2 else ("BAAB" * (pairs // 2 + 1))[: 2 * pairs]
        protocol.update(design="fixed", lossless_baseline_blocks=0, order=order)
        data["diagnostic"] = True
        data["description"] += " (a probe: evidence for the posterior, never a claim)"
    else:
        protocol.update(design="sequential", futility=False, durations_in_order_of_cost=None,
                        looks=[list(range(2, table.campaign_pairs + 1))])
        # A bisection looks for any change its campaigns can show, not for one beyond the ship margin: "slower"
        # once the lower bound clears 1 (at 2 %, a 5 % step was reproduced in half the verifies, simulated).
        data["gates"]["speed_margin"] = 0.0
    hints = _hints(spec, duration, (BASELINE, name))
    data["hints"] = hints
    if data.get("source") is not None:
        entry = engine(spec, candidate)
        data["source"] = {"engine_commit": entry.commit, "image_digest": entry.image_digest}
    return data


def campaign_spec(spec: RunSpec, kind: Kind, control: int, candidate: int, *, number: int = 0) -> RunSpec:
    """:func:`campaign_data` validated as a RunSpec (in memory; the runner writes it with :func:`toml_text`)."""
    return parse_runspec(campaign_data(spec, kind, control, candidate, number=number),
                         source=f"{spec.name} [bisect] {kind}")


# -- TOML ---------------------------------------------------------------------------------------------------------


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    raise UsageError(f"cannot write {value!r} as TOML")


def _without_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value]
    return value


def toml_text(data: Mapping[str, Any], *, header: str = "") -> str:
    """JSON-like ``data`` as TOML (one key per line, tables inline; None left out), checked by reading it back."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in data.items() if v is not None]
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != _without_none(data):
        raise UsageError("the derived RunSpec did not survive its TOML round trip")
    return text


def write_spec(path: Path, data: Mapping[str, Any], header: str) -> Path:
    """Write a derived spec once; an existing file must hold the same text (a resume)."""
    text = toml_text(data, header=header)
    if path.exists():
        if path.read_text(encoding="utf-8") != text:
            raise UsageError(f"{path} exists with another spec: the bisection's directory belongs to another run")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def read_range(path: Path) -> list[dict[str, str]]:
    """A range file: one engine per line, ``COMMIT DIGEST [NOTE...]``, the good one first and the bad one last."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the range {path}: {exc.strerror}") from exc
    entries = []
    for number, line in enumerate(lines, start=1):
        fields = line.split(maxsplit=2)
        if not fields or line.lstrip().startswith("#"):
            continue
        if len(fields) < 2:
            raise UsageError(f"{path}: line {number}: expected COMMIT DIGEST [NOTE], got {line!r}")
        entries.append({"commit": fields[0], "image_digest": fields[1], "note": fields[2] if len(fields) > 2 else ""})
    if len(entries) < 3:
        raise UsageError(f"{path}: a range needs the good engine, at least one commit and the bad engine")
    return entries


def range_data(base: RunSpec, entries: list[dict[str, str]], *, image: str, launcher: list[str],
               image_s: float = 0.0) -> dict[str, Any]:
    """A bisect spec: ``base``'s engine configuration (its baseline arm), design, gates and hints over the range."""
    data = base.model_dump(mode="json")
    for key in ("final", "original_baseline", "heldout", "bisect"):
        data.pop(key, None)
    good = data["arms"]["baseline"]
    attribution = {"hypothesis": "the bad engine carries the regression the bisection looks for",
                   "source": {"kind": "code", "ref": f"engine commit {entries[-1]['commit']}"}}
    data["arms"] = {BASELINE: good, "bad": {**good, "description": f"engine {entries[-1]['commit']}", **attribution}}
    data["name"] = f"{base.name}-bisect"
    data["source"] = {"engine_commit": entries[0]["commit"], "image_digest": entries[0]["image_digest"]}
    data["bisect"] = {"good": entries[0], "bad": entries[-1], "commits": entries[1:-1], "image": image,
                      "launcher": launcher, "image_s": image_s}
    if data.get("hints"):
        data["hints"]["e2e_s"] = {BASELINE: data["hints"]["e2e_s"].get(BASELINE, {})}
        data["hints"]["dit_step_s"] = {}
    for name in ("reference_video", "reference_audio"):
        data["inputs"][name]["path"] = str(base.input_files()[name])
    parse_runspec(data, source=f"{base.name} over the range")  # refuse a range the spec rules refuse, here
    return data
