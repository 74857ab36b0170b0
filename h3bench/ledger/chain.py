"""The ledger: an append-only, hash-chained JSONL file of every candidate any campaign tried.

Each line is one entry (:class:`h3bench.ledger.entries.LedgerEntry`) plus its place in the chain::

    seq         0, 1, 2, ... (the line's index)
    prev        the hash of the line before (64 zeros for the first)
    supersedes  the seqs of earlier entries this one replaces (absent or empty: none)
    hash        SHA-256 of the entry's canonical JSON (sorted keys, no spaces, ASCII), without "hash"

Changing any line breaks its own hash; rewriting its hash too breaks the
``prev`` of the next line; rewriting the last line whole is caught by
:func:`verify_ledger`, which derives every entry again from its bundle; a
line whose fields are missing or of the wrong type is named with the field.
Rejected and inconclusive candidates are kept like accepted ones; nothing
is ever removed or rewritten.

A bundle is one campaign whatever its path: it is known by its seals (the
SHA-256 of each segment's ``final.json``; :class:`~h3bench.ledger.entries.BundleRef`).
Adding a bundle whose latest seal is already in the ledger (the same path
again, or a copy) is refused. A bundle entered while interrupted and again
after ``--resume`` completed it is one history: each new entry names, in
``supersedes``, the entry of the earlier state it replaces, so the chain
itself records the replacement and both entries verify (the earlier one
against the bundle as it was at its seal). An earlier state of a bundle whose
later state is in the ledger is refused.

The shards of a campaign over several hosts, their pool and any re-pool are
one campaign (:mod:`~h3bench.ledger.campaigns`: the spec id and the set of
shard seals). A shard's entry is marked as the shard and is never a claim.
A pool's entries supersede, by the same ``supersedes`` field, the entries
of the shards it pooled and of a pool of fewer of them (one with a shard
missing, or of fewer rounds). Adding what a pool in the ledger already holds
(one of its shards, the same shards pooled again, a pool of fewer of them)
is refused, naming the line that holds the campaign; so is a pool that
shares a shard with one in the ledger while neither holds the other.

Appends are made under an exclusive ``flock`` on ``<ledger>.lock``, so two
writers cannot both extend the same tail: the second one reads the first
one's lines, checks the chain and duplicates again, and appends after them.
All the entries of one bundle are written in one ``O_APPEND`` write and
fsynced (:func:`h3bench.evidence.files.append_line`).

Reading never drops a line. A last line without its newline that is a
complete, hash-valid entry is an entry (the next ``add`` writes the newline
before its own lines). A last line without its newline that is not a JSON
object is what a crash left of an append: it is reported, and the next
``add`` moves its bytes to ``<ledger>.fragments`` (appended, with the line's
number and SHA-256) before appending. Any other line that does not parse, or
breaks the chain, is reported by ``show`` and ``verify`` and stops ``add``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h3bench
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import files

if TYPE_CHECKING:
    from h3bench.ledger.entries import LedgerEntry

__all__ = ["FRAGMENTS", "GENESIS", "Added", "LedgerFile", "LedgerLine", "LedgerReport", "add_bundle", "entry_hash",
           "read_ledger", "replaces", "unverified_entries", "verify_ledger"]

GENESIS = "0" * 64
FRAGMENTS = ".fragments"  # beside the ledger: what crashes left of appends, moved out by the next add
_CHAIN = ("seq", "prev", "hash")
# Not derived from the bundle: the chain, when and by which h3bench the entry was written, what it replaces.
_NOT_DERIVED = (*_CHAIN, "added_at", "written_by", "supersedes")


def entry_hash(entry: dict[str, Any]) -> str:
    """SHA-256 of the entry's canonical JSON, without its own ``hash``."""
    body = {key: value for key, value in entry.items() if key != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                          .encode("ascii")).hexdigest()


# -- reading ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerLine:
    """One line of the ledger file as it is on disk."""

    number: int  # 1-based
    raw: bytes  # without its newline
    terminated: bool
    record: dict[str, Any] | None  # None: not a JSON object
    entry: LedgerEntry | None  # the record read as an entry; None when a field is missing or mistyped
    problems: tuple[str, ...]  # why this line is broken; empty for a good line

    @property
    def seq(self) -> int:
        return self.number - 1

    @property
    def fragment(self) -> bool:
        """What a crash left of an append: an unterminated line that is not even a JSON object."""
        return not self.terminated and self.record is None


@dataclass(frozen=True)
class LedgerFile:
    """Every line of a ledger, each with its problems (a line is never dropped), and the supersessions."""

    path: Path
    lines: tuple[LedgerLine, ...]
    notes: tuple[str, ...] = ()
    superseded_by: dict[int, int] = field(default_factory=dict)  # seq → seq of the entry that replaces it

    @property
    def problems(self) -> list[str]:
        return [f"line {line.number}: {problem}" for line in self.lines for problem in line.problems]

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The records of every line that is a JSON object (broken or not), in order."""
        return [line.record for line in self.lines if line.record is not None]

    @property
    def fragment(self) -> LedgerLine | None:
        last = self.lines[-1] if self.lines else None
        return last if last is not None and last.fragment else None


def _typed(record: dict[str, Any]) -> tuple[LedgerEntry | None, str | None]:
    from h3bench.ledger.entries import LedgerEntry  # the verdict types load only when a ledger is read

    try:
        return LedgerEntry.from_dict(record, where=""), None
    except EvidenceError as exc:
        return None, str(exc)


def _chain_fields(record: dict[str, Any], index: int, prev: str) -> list[str]:
    problems = []
    if record.get("seq") != index:
        problems.append(f"seq is {record.get('seq')!r}, expected {index}")
    if record.get("prev") != prev:
        problems.append("prev does not match the hash of the line before (a line was changed, removed or inserted)")
    if record.get("hash") != entry_hash(record):
        problems.append("hash does not match its content (the line was changed)")
    supersedes = record.get("supersedes", [])
    if not isinstance(supersedes, list) or not all(type(s) is int for s in supersedes):
        problems.append(f"supersedes: expected a list of line seqs, found {supersedes!r}")
    return problems


def read_ledger(path: str | Path) -> LedgerFile:
    """Every line of the ledger at ``path`` with its problems; UsageError when it is missing or not a file."""
    ledger = Path(path)
    if ledger.is_dir():
        raise UsageError(f"{ledger}: is a directory, not a ledger file (give the file with --ledger FILE)")
    try:
        data = ledger.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{ledger}: no such ledger file") from None
    except OSError as exc:
        raise UsageError(f"{ledger}: cannot read the ledger ({exc.strerror or exc})") from exc
    pieces = data.split(b"\n")
    terminated = [True] * (len(pieces) - 1) + [False]
    if pieces and pieces[-1] == b"":  # the file ends with a newline (or is empty)
        pieces, terminated = pieces[:-1], terminated[:-1]
    lines: list[LedgerLine] = []
    notes: list[str] = []
    prev = GENESIS
    for index, (raw, ended) in enumerate(zip(pieces, terminated, strict=True)):
        number = index + 1
        why: str | None = None
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            parsed, why = None, f"not JSON ({exc})"
        if parsed is not None and not isinstance(parsed, dict):
            why = f"not a JSON object but {type(parsed).__name__}"
        record = parsed if isinstance(parsed, dict) else None
        if record is None:
            if not ended:
                why = (f"{why}: what a crash left of an unfinished append ({len(raw)} bytes, no newline); not an "
                       f"entry: the next `ledger add` moves it to {ledger.name}{FRAGMENTS}")
            lines.append(LedgerLine(number, raw, ended, None, None, (str(why),)))
            continue
        problems = _chain_fields(record, index, prev)
        entry, mistyped = _typed(record)
        if mistyped is not None:
            problems.append(mistyped)
        if not ended and not problems:
            notes.append(f"line {number}: a complete, hash-valid entry without its newline (an append that stopped "
                         "just before it); it is kept, and the next add ends it")
        lines.append(LedgerLine(number, raw, ended, record, entry, tuple(problems)))
        prev = str(record.get("hash"))
    found = LedgerFile(ledger, tuple(lines), tuple(notes))
    return _with_supersessions(found)


def replaces(newer: LedgerEntry, older: LedgerEntry) -> str | None:
    """Why ``newer`` may supersede ``older`` (same candidate and duration), or None when it may not."""
    if (older.candidate, older.duration) != (newer.candidate, newer.duration):
        return None
    if older.bundle.final_sha256 in newer.bundle.seals[:-1]:
        return "a later state of its bundle"
    pool, other = newer.campaign_key, older.campaign_key
    if pool is None or other is None or not pool.folds(other):
        return None
    if not other.pooled:
        return "the pool of its shards"
    return "a pool of more of its campaign's shards" if other.seals != pool.seals else None  # a re-pool: refused


def _with_supersessions(found: LedgerFile) -> LedgerFile:
    """Check every ``supersedes``: an earlier entry of the same candidate and duration that the new one replaces.

    It replaces an entry of an earlier seal of the same bundle, or, as a
    pool, an entry of one of its shards or of a pool of fewer of them
    (:func:`replaces`). A line that names a line it cannot replace is
    broken; so is a line replaced twice.
    """
    lines = list(found.lines)
    superseded: dict[int, int] = {}
    for position, line in enumerate(lines):
        entry, record = line.entry, line.record
        if entry is None or record is None:
            continue
        wrong = []
        for seq in record.get("supersedes", []) if isinstance(record.get("supersedes", []), list) else ():
            older = lines[seq].entry if isinstance(seq, int) and 0 <= seq < line.seq else None
            if older is None:
                wrong.append(f"supersedes line {seq + 1 if isinstance(seq, int) else seq!r}, which is not an entry "
                             "before it")
            elif replaces(entry, older) is None:
                wrong.append(f"supersedes line {seq + 1}, which is not an earlier state of the same bundle's "
                             f"{entry.candidate} at {entry.duration} s, nor of a campaign it pools")
            elif seq in superseded:
                wrong.append(f"supersedes line {seq + 1}, which line {superseded[seq] + 1} already supersedes")
            else:
                superseded[seq] = line.seq
        if wrong:
            lines[position] = LedgerLine(line.number, line.raw, line.terminated, line.record, line.entry,
                                         (*line.problems, *wrong))
    return LedgerFile(found.path, tuple(lines), found.notes, superseded)


# -- appending --------------------------------------------------------------------------------------------------


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        raise files.write_error(exc, lock, "cannot open the ledger's lock file") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@dataclass(frozen=True)
class Added:
    """What :func:`add_bundle` appended, and what it had to say about the file first."""

    entries: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def _ledger_target(path: Path) -> None:
    """Refuse, in one line, a ledger path that cannot be a ledger file: a directory, or in no directory."""
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a ledger file (give the file with --ledger FILE)")
    if not path.parent.is_dir():
        raise UsageError(f"{path}: the ledger's directory {path.parent} does not exist")


def _move_fragment(found: LedgerFile, fragment: LedgerLine) -> str:
    """Append the fragment's bytes to ``<ledger>.fragments``, then cut them from the ledger; the note that says so."""
    path = found.path
    store = path.with_name(path.name + FRAGMENTS)
    record = {"ledger": path.name, "line": fragment.number, "size": len(fragment.raw),
              "sha256": hashlib.sha256(fragment.raw).hexdigest(), "text": fragment.raw.decode("utf-8", "replace"),
              "moved_at": files.now()}
    files.append_line(store, files.json_line(record, store))
    os.truncate(path, path.stat().st_size - len(fragment.raw))
    return (f"{path}: line {fragment.number} was what a crash left of an unfinished append ({len(fragment.raw)} bytes,"
            f" not an entry); moved to {store}")


def _lines(found: Sequence[LedgerLine]) -> str:
    return ", ".join(str(line.number) for line in found)


def _campaign(ref: LedgerEntry, entries: Sequence[LedgerLine], superseded: dict[int, int],
              stored_path: Path) -> list[LedgerLine]:
    """The live entries a shard or pool replaces; UsageError when a pool in the ledger already holds its campaign."""
    key = ref.campaign_key
    if key is None:
        return []
    keys = [(line, line.entry.campaign_key) for line in entries if line.entry is not None]
    holders = [(line, other) for line, other in keys if other is not None and other.folds(key)]
    if holders:
        live = [line for line, _ in holders if line.seq not in superseded] or [line for line, _ in holders]
        if ref.bundle.shard is not None:
            what = f"{ref.bundle.shard.label} of a campaign whose pool is in the ledger"
        elif any(other.seals == key.seals for _, other in holders):
            what = "a second pool of the same shards as a pool in the ledger"
        else:
            what = "a pool of fewer shards of a campaign pooled over more of them in the ledger"
        held = f"line {live[0].number} holds" if len(live) == 1 else f"lines {_lines(live)} hold"
        raise UsageError(f"{stored_path}: {what} ({held} the campaign, spec {key.spec_id[:12]}); one campaign is "
                         "entered once, nothing appended")
    disagree = [line for line, other in keys if other is not None and key.disagrees(other)]
    if disagree:
        raise UsageError(f"{stored_path}: pools shards that lines {_lines(disagree)} pool differently (they share a "
                         "shard, and neither holds the other's): two accounts of one campaign, nothing appended")
    return [line for line, other in keys if other is not None and line.seq not in superseded and key.folds(other)]


def _identity(ref: LedgerEntry, lines: Sequence[LedgerLine], superseded: dict[int, int],
              stored_path: Path) -> dict[tuple[str, str], list[int]]:
    """Which earlier entries each new entry replaces; UsageError when the bundle's state is already entered.

    ``ref`` is one of the new entries (they share the bundle): a bundle is
    known by its seals, and a shard or pool also by its campaign's key.
    """
    seal, earlier_seals = ref.bundle.final_sha256, ref.bundle.seals[:-1]
    entries = [line for line in lines if line.entry is not None]
    known = [line for line in entries if line.entry is not None and line.entry.bundle.final_sha256 == seal]
    if known:
        raise UsageError(f"{stored_path}: already in the ledger (lines {_lines(known)}, "
                         f"final.json {seal[:12]}); a bundle is entered once, by its content, whatever its path")
    later = [line for line in entries if line.entry is not None and seal in line.entry.bundle.seals[:-1]]
    if later:
        raise UsageError(f"{stored_path}: an earlier state of a bundle whose later state is in the ledger (lines "
                         f"{_lines(later)}); it was resumed since, nothing appended")
    replaced: dict[tuple[str, str], list[int]] = {}
    for line in entries:
        entry = line.entry
        if entry is not None and entry.bundle.final_sha256 in earlier_seals and line.seq not in superseded:
            replaced.setdefault((entry.candidate, entry.duration), []).append(line.seq)
    for line in _campaign(ref, entries, superseded, stored_path):
        assert line.entry is not None
        replaced.setdefault((line.entry.candidate, line.entry.duration), []).append(line.seq)
    return replaced


def add_bundle(bundle: str | Path, ledger: str | Path) -> Added:
    """Verify ``bundle`` and append one entry per candidate and duration to ``ledger``, atomically.

    Raises
    ------
    EvidenceError
        The bundle does not verify (the problems are named), or the ledger has a broken line.
    UsageError
        The bundle is DIAGNOSTIC, or this state of it is already in the ledger, or a later one is,
        or a pool in the ledger already holds its campaign (or pools its shards differently);
        or ``ledger`` is a directory, or in a directory that does not exist.
    """
    from h3bench.ledger.entries import entries_of  # stats and the spec load only when a bundle is read
    from h3bench.session.stored import open_verified

    path = Path(ledger)
    _ledger_target(path)
    stored = open_verified(bundle)
    typed = entries_of(stored)
    new = [entry.to_dict() for entry in typed]
    notes: list[str] = []
    with _locked(path):
        found = read_ledger(path) if path.exists() else LedgerFile(path, ())
        fragment = found.fragment
        if fragment is not None and not [p for line in found.lines[:-1] for p in line.problems]:
            notes.append(_move_fragment(found, fragment))
            found = read_ledger(path)
        if found.problems:
            raise EvidenceError(f"{path}: the ledger does not verify, nothing appended: " + "; ".join(found.problems),
                                path=str(path))
        replaced = _identity(typed[0], found.lines, found.superseded_by, stored.path) if typed else {}
        lines = found.lines
        prefix = b"\n" if lines and not lines[-1].terminated else b""  # a complete last entry gets its newline
        if prefix:
            notes.append(f"{path}: line {lines[-1].number} had no newline; it is kept, and now ends with one")
        prev = str(lines[-1].record["hash"]) if lines and lines[-1].record else GENESIS
        added_at, chained = files.now(), []
        for offset, entry in enumerate(new):
            full = {**entry, "seq": len(lines) + offset, "prev": prev, "added_at": added_at,
                    "written_by": f"h3bench {h3bench.__version__}"}
            older = replaced.get((entry["candidate"], entry["duration"]), [])
            if older:
                full["supersedes"] = older
            full["hash"] = prev = entry_hash(full)
            chained.append(full)
        files.append_line(path, prefix + b"".join(files.json_line(entry, path) for entry in chained))
    return Added(tuple(chained), tuple(notes))


# -- verifying --------------------------------------------------------------------------------------------------


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


def _derived_problems(line: str, entry: dict[str, Any], derived: list[dict[str, Any]]) -> list[str]:
    same = [d for d in derived if (d["candidate"], d["duration"]) == (entry.get("candidate"), entry.get("duration"))]
    if not same:
        return [f"{line}: its bundle has no candidate {entry.get('candidate')!r} at {entry.get('duration')} s"]
    differ = _differ(same[0], entry, (*_NOT_DERIVED, "bundle"))
    # The bundle's identity too (its seals, its shard or pooled shards), not where it was when it was entered.
    differ += [f"bundle.{k}" for k in _differ(same[0]["bundle"], entry["bundle"], ("path", "name"))]
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
