"""Verifying the ledger against its bundles: every entry derived again from the bundle state it names.

:func:`verify_ledger` re-reads every line and the chain
(:func:`h3bench.ledger.chain.read_ledger`), finds each entry's bundle at its
recorded path or by its seal under ``--bundles``, verifies it as of that
seal, and compares the entry field by field with what the bundle says;
:func:`unverified_entries` names the entries whose bundle cannot be found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import EvidenceError, UsageError
from h3bench.ledger.chain import CHAIN_FIELDS, LedgerFile, read_ledger

if TYPE_CHECKING:
    from h3bench.ledger.entries import LedgerEntry

__all__ = ["LedgerReport", "unverified_entries", "verify_ledger"]

# Not derived from the bundle: the chain, when and by which h3bench the entry was written, what it replaces.
_NOT_DERIVED = (*CHAIN_FIELDS, "added_at", "written_by", "supersedes")


@dataclass(frozen=True)
class LedgerReport:
    """What :func:`verify_ledger` found: the entries, problems, and bundles it could not find to check."""

    path: str
    entries: int
    bundles_checked: int  # bundle states found, verified and derived again
    problems: tuple[str, ...]  # each names its line; any one makes the ledger fail
    not_found: tuple[str, ...]  # entries whose bundle is neither at its recorded path nor under --bundles
    notes: tuple[str, ...] = ()  # true but worth saying: an earlier state nobody superseded, a line without newline

    @property
    def ok(self) -> bool:
        return not self.problems


def _seals_of(bundle: Path) -> list[str]:
    from h3bench.evidence import BundleReader

    try:
        return [sha for _, sha in BundleReader.open(bundle).seals()]
    except (EvidenceError, OSError):
        return []


def _bundle_index(dirs: Sequence[Path]) -> dict[str, Path]:
    """Every seal → bundle directory, for every bundle under ``dirs`` (moved or copied bundles are found by it)."""
    index: dict[str, Path] = {}
    for root in dirs:
        for manifest in sorted(root.rglob("manifest.json")):
            for seal in _seals_of(manifest.parent):
                index.setdefault(seal, manifest.parent)
    return index


def _locate(entry: LedgerEntry, index: dict[str, Path]) -> Path | None:
    """The bundle an entry names: at its recorded path if that bundle holds the recorded seal, else found by seal."""
    recorded = Path(entry.bundle.path)
    if entry.bundle.final_sha256 in _seals_of(recorded):
        return recorded
    found = index.get(entry.bundle.final_sha256)
    if found is None and (recorded / "manifest.json").is_file():
        return recorded  # there, but without the recorded seal: checked below, and reported
    return found


def _differ(expected: dict[str, Any], found: dict[str, Any], ignore: Sequence[str]) -> list[str]:
    """The keys whose values differ; an entry written before a field existed is compared on the fields it has."""
    wanted = {k: v for k, v in expected.items() if k not in ignore and k in found}
    kept = {k: v for k, v in found.items() if k not in ignore}
    return sorted(k for k in wanted.keys() | kept.keys() if wanted.get(k) != kept.get(k))


def _on_its_fields(want: Any, have: Any) -> Any:
    return {k: v for k, v in want.items() if k in have} if isinstance(want, dict) and isinstance(have, dict) else want


def _derived_problems(line: str, entry: dict[str, Any], derived: list[dict[str, Any]]) -> list[str]:
    same = [d for d in derived if (d["candidate"], d["duration"]) == (entry.get("candidate"), entry.get("duration"))]
    if not same:
        return [f"{line}: its bundle has no candidate {entry.get('candidate')!r} at {entry.get('duration')} s"]
    differ = _differ(same[0], entry, (*_NOT_DERIVED, "bundle"))
    # The bundle's identity too (its seals, its shard or pooled shards), not where it was when it was entered.
    expected, found = dict(same[0]["bundle"]), entry["bundle"]
    if isinstance(found, dict):  # a shard mark written before a field existed is compared on the fields it has
        marks = found.get("pooled")
        if isinstance(marks, list) and len(marks) == len(expected.get("pooled") or ()):
            expected["pooled"] = [_on_its_fields(want, have) for want, have in zip(expected["pooled"], marks,
                                                                                    strict=True)]
        expected["shard"] = _on_its_fields(expected.get("shard"), found.get("shard"))
    differ += [f"bundle.{k}" for k in _differ(expected, found, ("path", "name"))]
    return [f"{line}: differs from what its bundle says: {', '.join(differ)}"] if differ else []


def verify_ledger(ledger: str | Path, bundle_dirs: Sequence[str | Path] = ()) -> LedgerReport:
    """Re-check every line and the chain, and every referenced bundle that can be found.

    A bundle is found at its recorded path or, by its seal, under
    ``bundle_dirs``; it is verified (:func:`h3bench.session.stored.open_verified`)
    and read as of the seal the entry recorded (an entry of an earlier state
    is checked against the bundle as it was then), and the entry is derived
    again from it and compared field by field.
    """
    from h3bench.ledger.entries import entries_of  # stats and the spec load only when a bundle is read
    from h3bench.session.stored import open_verified

    found = read_ledger(ledger)
    problems = found.problems
    notes = list(found.notes)
    index = _bundle_index([Path(d) for d in bundle_dirs])
    derived: dict[tuple[str, str], list[dict[str, Any]]] = {}
    not_found: list[str] = []
    for line in found.lines:
        entry, record = line.entry, line.record
        if entry is None or record is None:
            continue  # already a problem: nothing to check it against
        name = f"line {line.number}"
        where = _locate(entry, index)
        if where is None:
            not_found.append(f"{name}: {entry.bundle.path} (give --bundles DIR if it moved)")
            continue
        key = (str(where), entry.bundle.final_sha256)
        seals = _seals_of(where)
        if key not in derived and entry.bundle.final_sha256 not in seals:
            derived[key] = []
            problems.append(f"{name}: {where}/final.json changed (sha256 {seals[-1] if seals else 'absent'}, recorded "
                            f"{entry.bundle.final_sha256}): no seal of the bundle there is the one entered")
        if key not in derived:
            try:
                stored = open_verified(where, seal=entry.bundle.final_sha256)
                derived[key] = [e.to_dict() for e in entries_of(stored)]
                if not stored.latest and line.seq not in found.superseded_by:
                    notes.append(f"{name}: an earlier state of {where} (it was resumed since, and that state is not "
                                 "entered yet): `ledger add` it to supersede this entry")
            except (EvidenceError, UsageError) as exc:
                derived[key] = []
                problems.append(f"{name}: {exc}")
        if derived[key]:
            problems += _derived_problems(name, record, derived[key])
    return LedgerReport(str(found.path), len(found.lines), len(derived), tuple(problems), tuple(not_found),
                        tuple(notes))


def unverified_entries(found: LedgerFile, bundle_dirs: Sequence[str | Path] = ()) -> dict[int, str]:
    """Per entry (its seq) whose bundle is neither at its recorded path nor, by its seal, under ``bundle_dirs``: why.

    Such an entry is unverified: nothing it claims can be checked here
    (``ledger show`` marks it; ``ledger verify`` fails on it unless told ``--allow-missing``).
    """
    index = _bundle_index([Path(d) for d in bundle_dirs])
    located: dict[tuple[str, str], Path | None] = {}  # the entries of one bundle share it
    missing = {}
    for line in found.lines:
        if line.entry is None:
            continue
        ref = line.entry.bundle
        key = (ref.path, ref.final_sha256)
        if key not in located:
            located[key] = _locate(line.entry, index)
        if located[key] is None:
            missing[line.seq] = f"its bundle is not at {ref.path} (final.json {ref.final_sha256[:12]}…)"
    return missing
