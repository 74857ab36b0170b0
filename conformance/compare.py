"""Comparing the two servers' answers probe by probe, against the list of deliberate differences.

Each probe step has one :class:`~conformance.answers.Answer` per
server. Two answers differ at every path of :meth:`Answer.flat` whose values
are not equal, or that only one of them has; a step that only one server
reached differs at ``step``. A difference is *deliberate* when an entry of
the deliberate-differences file (``conformance/deliberate.toml``)
names its probe, its step and a field pattern that matches the path
(:func:`fnmatch.fnmatchcase`), and says why. Everything else is
*unexplained*, and so is an entry that matches nothing any more (the
difference it excused has gone: remove it). The conformance step fails on
either.

The file::

    [[difference]]
    probe = "spread-extra-params"      # a probe's name, or a pattern over the names
    step = "create"                    # one of its steps, or "*"
    fields = ["status", "body.*"]      # patterns over the flattened paths
    why = "the simulator refuses ...; upstream ignores the fields"
    engine = "real"                    # optional: which lane it belongs to (default "standin")

An entry belongs to one lane: ``standin`` (``./dev conformance``, upstream's
serving code over the stand-in engine) or ``real`` (``--engine-mode real``,
upstream's own engine, :mod:`conformance.realrun`); each lane reads
only its own entries, and only those can be stale.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.answers import Answer
from h3bench.errors import UsageError
from h3bench.evidence.files import read_toml

__all__ = [
    "DELIBERATE_PATH",
    "ENGINE_MODES",
    "Comparison",
    "Deliberate",
    "FieldDifference",
    "StepRow",
    "compare",
    "load_deliberate",
    "parse_deliberate",
    "render_table",
]

DELIBERATE_PATH = Path(__file__).resolve().with_name("deliberate.toml")
_ABSENT = "<absent>"
_KEYS = {"probe", "step", "fields", "why"}
ENGINE_MODES = ("standin", "real")


@dataclass(frozen=True)
class Deliberate:
    """One difference kept on purpose: where it is and why."""

    probe: str
    step: str
    fields: tuple[str, ...]
    why: str

    def matches(self, probe: str, step: str, path: str) -> bool:
        return (fnmatch.fnmatchcase(probe, self.probe) and fnmatch.fnmatchcase(step, self.step)
                and any(fnmatch.fnmatchcase(path, pattern) for pattern in self.fields))


@dataclass(frozen=True)
class FieldDifference:
    """One path at which the two answers differ (``<absent>`` where one answer lacks the path)."""

    path: str
    upstream: Any
    sim: Any

    def describe(self) -> str:
        return f"{self.path}: upstream {_show(self.upstream)} | sim {_show(self.sim)}"


@dataclass(frozen=True)
class StepRow:
    """One probe step: both answers, and its differences split into deliberate and unexplained."""

    probe: str
    step: str
    upstream: Answer | None
    sim: Answer | None
    deliberate: tuple[tuple[FieldDifference, Deliberate], ...]
    unexplained: tuple[FieldDifference, ...]

    @property
    def verdict(self) -> str:
        if self.unexplained:
            return "DIFFERS"
        return "deliberate" if self.deliberate else "same"


@dataclass(frozen=True)
class Comparison:
    """Every probe step compared, and the deliberate entries that matched no difference."""

    rows: tuple[StepRow, ...]
    stale: tuple[Deliberate, ...]

    @property
    def ok(self) -> bool:
        return not self.stale and all(not row.unexplained for row in self.rows)

    def counts(self) -> dict[str, int]:
        counts = {"same": 0, "deliberate": 0, "DIFFERS": 0}
        for row in self.rows:
            counts[row.verdict] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "rows": [
                {"probe": row.probe, "step": row.step, "verdict": row.verdict,
                 "upstream": None if row.upstream is None else row.upstream.to_dict(),
                 "sim": None if row.sim is None else row.sim.to_dict(),
                 "deliberate": [{"path": d.path, "why": entry.why} for d, entry in row.deliberate],
                 "unexplained": [d.describe() for d in row.unexplained]}
                for row in self.rows
            ],
            "stale": [entry.__dict__ | {"fields": list(entry.fields)} for entry in self.stale],
        }


def _show(value: Any) -> str:
    text = value if value == _ABSENT else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:119] + "…"


def parse_deliberate(data: Mapping[str, Any], *, source: str, probes: Collection[str] | None = None,
                     engine: str = "standin") -> tuple[Deliberate, ...]:
    """Validate the file's ``[[difference]]`` tables; return those of the ``engine`` lane.

    Raises
    ------
    UsageError
        An entry with a missing or unknown key, an empty ``why`` or ``fields``,
        an ``engine`` other than those of :data:`ENGINE_MODES`, a probe that
        ``probes`` (when given) does not hold, or a top-level key other than
        ``difference``.
    """
    extra = set(data) - {"difference"}
    if extra:
        raise UsageError(f"{source}: unknown top-level key(s) {sorted(extra)}; write [[difference]] tables")
    entries = data.get("difference", [])
    if not isinstance(entries, list):
        raise UsageError(f"{source}: difference must be an array of tables ([[difference]])")
    out = []
    for index, entry in enumerate(entries):
        where = f"{source}: difference {index + 1}"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: not a table")
        if set(entry) - {"engine"} != _KEYS:
            missing, unknown = sorted(_KEYS - set(entry)), sorted(set(entry) - _KEYS - {"engine"})
            raise UsageError(f"{where}: missing {missing}, unknown {unknown}; each entry has probe, step, fields, why "
                             "(and may name its engine)")
        probe, step, fields, why = entry["probe"], entry["step"], entry["fields"], entry["why"]
        lane = entry.get("engine", "standin")
        if lane not in ENGINE_MODES:
            raise UsageError(f"{where} ({probe}/{step}): engine must be one of {list(ENGINE_MODES)}, got {lane!r}")
        if not (isinstance(probe, str) and isinstance(step, str) and probe and step):
            raise UsageError(f"{where}: probe and step must be non-empty strings")
        if probes is not None and not any(fnmatch.fnmatchcase(name, probe) for name in probes):
            raise UsageError(f"{where}: no probe named {probe!r}")
        if not (isinstance(fields, list) and fields and all(isinstance(f, str) and f for f in fields)):
            raise UsageError(f"{where} ({probe}/{step}): fields must be a non-empty list of path patterns")
        if not (isinstance(why, str) and why.strip()):
            raise UsageError(f"{where} ({probe}/{step}): every deliberate difference says why")
        if lane == engine:
            out.append(Deliberate(probe, step, tuple(fields), " ".join(why.split())))
    return tuple(out)


def load_deliberate(path: Path = DELIBERATE_PATH, *, probes: Collection[str] | None = None,
                    engine: str = "standin") -> tuple[Deliberate, ...]:
    """Read and validate a deliberate-differences file (:func:`parse_deliberate`); the ``engine`` lane's entries."""
    data = read_toml(path, "the deliberate differences")
    return parse_deliberate(data, source=str(path), probes=probes, engine=engine)


def _differences(upstream: Answer | None, sim: Answer | None) -> list[FieldDifference]:
    if upstream is None or sim is None:
        return [FieldDifference("step", "answered" if upstream else _ABSENT, "answered" if sim else _ABSENT)]
    left, right = upstream.flat(), sim.flat()
    return [
        FieldDifference(path, left.get(path, _ABSENT), right.get(path, _ABSENT))
        for path in sorted(left.keys() | right.keys())
        if left.get(path, _ABSENT) != right.get(path, _ABSENT)
    ]


def compare(
    upstream: Mapping[tuple[str, str], Answer], sim: Mapping[tuple[str, str], Answer],
    deliberate: Iterable[Deliberate], *, order: Iterable[tuple[str, str]] | None = None,
) -> Comparison:
    """Compare every ``(probe, step)`` either server answered; ``order`` (default: upstream's, then sim's) sorts the rows."""
    entries = tuple(deliberate)
    used: set[Deliberate] = set()
    keys = list(dict.fromkeys([*(order or ()), *upstream, *sim]))
    rows = []
    for probe, step in keys:
        left, right = upstream.get((probe, step)), sim.get((probe, step))
        if left is None and right is None:
            continue
        kept, unexplained = [], []
        for difference in _differences(left, right):
            entry = next((e for e in entries if e.matches(probe, step, difference.path)), None)
            if entry is None:
                unexplained.append(difference)
            else:
                used.add(entry)
                kept.append((difference, entry))
        rows.append(StepRow(probe, step, left, right, tuple(kept), tuple(unexplained)))
    return Comparison(tuple(rows), tuple(entry for entry in entries if entry not in used))


def render_table(comparison: Comparison, *, width: int = 58) -> str:
    """Every probe step with both answers, then each difference: deliberate ones with their reason."""
    header = f"{'probe / step':<40} {'upstream (vLLM-Omni)':<{width}} {'simulator':<{width}} verdict"
    lines = [header, "-" * len(header)]
    for row in comparison.rows:
        name = f"{row.probe} / {row.step}"
        left = row.upstream.summary(width) if row.upstream else _ABSENT
        right = row.sim.summary(width) if row.sim else _ABSENT
        lines.append(f"{name:<40} {left:<{width}} {right:<{width}} {row.verdict}")
    counts = comparison.counts()
    lines.append("-" * len(header))
    lines.append(f"{len(comparison.rows)} steps: {counts['same']} same, {counts['deliberate']} with deliberate "
                 f"differences only, {counts['DIFFERS']} with unexplained differences")
    for row in comparison.rows:
        if row.deliberate or row.unexplained:
            lines.append(f"\n{row.probe} / {row.step}:")
            for difference in row.unexplained:
                lines.append(f"  UNEXPLAINED {difference.describe()}")
            by_entry: dict[Deliberate, list[FieldDifference]] = {}
            for difference, entry in row.deliberate:
                by_entry.setdefault(entry, []).append(difference)
            for entry, differences in by_entry.items():
                shown = differences[:4]
                lines += [f"  deliberate  {difference.describe()}" for difference in shown]
                if len(differences) > len(shown):
                    lines.append(f"  deliberate  ... and {len(differences) - len(shown)} more field(s)")
                lines.append(f"    why: {' '.join(entry.why.split())}")
    for entry in comparison.stale:
        lines.append(f"\nSTALE deliberate entry {entry.probe} / {entry.step} {list(entry.fields)}: it matches no "
                     f"difference any more; remove it (why it was there: {entry.why})")
    return "\n".join(lines)
