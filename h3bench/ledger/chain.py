"""The ledger: an append-only, hash-chained JSONL file of every candidate any campaign tried.

Each line is one entry (:class:`h3bench.ledger.entries.LedgerEntry`) plus its place in the chain::

    seq     0, 1, 2, ... (the line's index)
    prev    the hash of the line before (64 zeros for the first)
    hash    SHA-256 of the entry's canonical JSON (sorted keys, no spaces, ASCII), without "hash"

Changing any line breaks its own hash; rewriting its hash too breaks the
``prev`` of the next line; rewriting the last line whole is caught by
:func:`verify_ledger`, which derives every entry again from its bundle.
Rejected and inconclusive candidates are kept like accepted ones; nothing
is ever removed or rewritten.

Appends are made under an exclusive ``flock`` on ``<ledger>.lock``, so two
writers cannot both extend the same tail: the second one reads the first
one's lines, checks the chain and duplicates again, and appends after them.
All the entries of one bundle are written in one ``O_APPEND`` write and
fsynced (:func:`h3bench.evidence.files.append_line`); an append that a crash
left unfinished (a last line with no newline) is no entry, and the next
``add`` drops it and says so. Adding a bundle whose ``final.json`` is
already in the ledger is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h3bench
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import files

__all__ = ["GENESIS", "Added", "LedgerReport", "add_bundle", "entry_hash", "read_ledger",
           "verify_ledger"]

GENESIS = "0" * 64
_CHAIN = ("seq", "prev", "hash")
# Not derived from the bundle: when and by which h3bench the entry was written, and where the bundle was then.
_NOT_DERIVED = (*_CHAIN, "added_at", "written_by")


def entry_hash(entry: dict[str, Any]) -> str:
    """SHA-256 of the entry's canonical JSON, without its own ``hash``."""
    body = {key: value for key, value in entry.items() if key != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                          .encode("ascii")).hexdigest()


def read_ledger(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The ledger's entries, and whether its last line is unterminated (an unfinished append, not an entry)."""
    entries = [record for _, record in files.iter_jsonl(path)]
    unterminated = False
    if path.is_file() and path.stat().st_size:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            unterminated = f.read(1) != b"\n"
    return entries, unterminated


def chain_problems(entries: Sequence[dict[str, Any]]) -> list[str]:
    """Every break in the chain: a wrong sequence number, a ``prev`` that is not the last hash, a wrong hash."""
    problems, prev = [], GENESIS
    for index, entry in enumerate(entries):
        line = f"line {index + 1}"
        if entry.get("seq") != index:
            problems.append(f"{line}: seq is {entry.get('seq')!r}, expected {index}")
        if entry.get("prev") != prev:
            problems.append(f"{line}: prev does not match the hash of the line before (a line was changed, "
                            "removed or inserted)")
        if entry.get("hash") != entry_hash(entry):
            problems.append(f"{line}: hash does not match its content (the line was changed)")
        prev = str(entry.get("hash"))
    return problems


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EvidenceError(f"{lock}: cannot open the ledger's lock file ({exc})", path=str(lock)) from exc
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


def add_bundle(bundle: str | Path, ledger: str | Path) -> Added:
    """Verify ``bundle`` and append one entry per candidate and duration to ``ledger``, atomically.

    Raises
    ------
    EvidenceError
        The bundle does not verify (the problems are named), or the ledger's chain is broken.
    UsageError
        The bundle is DIAGNOSTIC, or its ``final.json`` is already in the ledger.
    """
    from h3bench.ledger.entries import entries_of  # stats and the spec load only when a bundle is read
    from h3bench.session.stored import open_verified

    stored = open_verified(bundle)
    new = [entry.to_dict() for entry in entries_of(stored)]
    path = Path(ledger)
    if not path.parent.is_dir():
        raise UsageError(f"{path}: the ledger's directory {path.parent} does not exist")
    notes: list[str] = []
    with _locked(path):
        entries, unterminated = read_ledger(path)
        problems = chain_problems(entries)
        if problems:
            raise EvidenceError(f"{path}: the ledger does not verify, nothing appended: " + "; ".join(problems),
                                path=str(path))
        if unterminated:
            complete = path.read_bytes().rfind(b"\n") + 1
            os.truncate(path, complete)
            notes.append(f"{path}: dropped an unfinished last line (an append that a crash cut short; no entry)")
        known = [e for e in entries if e.get("bundle", {}).get("final_sha256") == stored.final_sha256]
        if known:
            raise UsageError(f"{stored.path}: already in the ledger (lines {', '.join(str(e['seq'] + 1) for e in known)},"
                             f" final.json {stored.final_sha256[:12]}); a bundle is entered once")
        prev, added_at, chained = entries[-1]["hash"] if entries else GENESIS, files.now(), []
        for offset, entry in enumerate(new):
            full = {**entry, "seq": len(entries) + offset, "prev": prev, "added_at": added_at,
                    "written_by": f"h3bench {h3bench.__version__}"}
            full["hash"] = prev = entry_hash(full)
            chained.append(full)
        files.append_line(path, b"".join(files.json_line(entry, path) for entry in chained))
    return Added(tuple(chained), tuple(notes))


@dataclass(frozen=True)
class LedgerReport:
    """What :func:`verify_ledger` found: the entries, problems, and bundles it could not find to check."""

    path: str
    entries: int
    bundles_checked: int  # bundles found, verified and derived again
    problems: tuple[str, ...]  # each names its line; any one makes the ledger fail
    not_found: tuple[str, ...]  # entries whose bundle is neither at its recorded path nor under --bundles

    @property
    def ok(self) -> bool:
        return not self.problems


def _bundle_index(dirs: Sequence[Path]) -> dict[str, Path]:
    """final.json SHA-256 → bundle directory, for every bundle under ``dirs`` (moved bundles are found by it)."""
    index: dict[str, Path] = {}
    for root in dirs:
        for manifest in sorted(root.rglob("manifest.json")):
            final = manifest.parent / "final.json"
            if final.is_file():
                index.setdefault(hashlib.sha256(final.read_bytes()).hexdigest(), manifest.parent)
    return index


def _locate(reference: dict[str, Any], index: dict[str, Path]) -> Path | None:
    recorded = Path(str(reference.get("path", "")))
    final = recorded / "final.json"
    if final.is_file() and hashlib.sha256(final.read_bytes()).hexdigest() == reference.get("final_sha256"):
        return recorded
    found = index.get(str(reference.get("final_sha256")))
    if found is None and final.is_file():
        return recorded  # there, but its final.json changed: checked below, and reported
    return found


def _derived_problems(line: str, entry: dict[str, Any], derived: list[dict[str, Any]]) -> list[str]:
    same = [d for d in derived if (d["candidate"], d["duration"]) == (entry.get("candidate"), entry.get("duration"))]
    if not same:
        return [f"{line}: its bundle has no candidate {entry.get('candidate')!r} at {entry.get('duration')} s"]
    # An entry written before a field existed is compared on the fields it has (the chain pins what it holds).
    expected = {k: v for k, v in same[0].items() if k != "bundle" and k in entry}
    found = {k: v for k, v in entry.items() if k not in _NOT_DERIVED and k != "bundle"}
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    return [f"{line}: differs from what its bundle says: {', '.join(differ)}"] if differ else []


def verify_ledger(ledger: str | Path, bundle_dirs: Sequence[str | Path] = ()) -> LedgerReport:
    """Re-check the chain, and every referenced bundle that can be found (at its recorded path or under ``bundle_dirs``).

    A found bundle is verified (:func:`h3bench.session.stored.open_verified`), its
    ``final.json`` hash compared with the entry's, and the entry derived again
    from it and compared field by field (the entry's format permitting).
    """
    from h3bench.ledger.entries import entries_of  # stats and the spec load only when a bundle is read
    from h3bench.session.stored import open_verified

    path = Path(ledger)
    if not path.is_file():
        raise UsageError(f"{path}: no such ledger file")
    entries, unterminated = read_ledger(path)
    problems = chain_problems(entries)
    if unterminated:
        problems.append(f"line {len(entries) + 1}: unterminated (an unfinished append; not an entry)")
    index = _bundle_index([Path(d) for d in bundle_dirs])
    derived: dict[str, list[dict[str, Any]]] = {}
    not_found: list[str] = []
    for number, entry in enumerate(entries, start=1):
        reference = entry.get("bundle") or {}
        where = _locate(reference, index)
        if where is None:
            not_found.append(f"line {number}: {reference.get('path')} (give --bundles DIR if it moved)")
            continue
        key = str(where)
        if key not in derived:
            try:
                stored = open_verified(where)
                derived[key] = [] if stored.final_sha256 != reference.get("final_sha256") else [
                    entry.to_dict() for entry in entries_of(stored)]
                if not derived[key]:
                    problems.append(f"line {number}: {where}/final.json changed (sha256 {stored.final_sha256}, "
                                    f"recorded {reference.get('final_sha256')})")
            except (EvidenceError, UsageError) as exc:
                derived[key] = []
                problems.append(f"line {number}: {exc}")
        if derived[key]:
            problems += _derived_problems(f"line {number}", entry, derived[key])
    return LedgerReport(str(path), len(entries), len(derived), tuple(problems), tuple(not_found))
