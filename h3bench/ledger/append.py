"""Appending a bundle to the ledger: verified, one entry per candidate and duration, chained, under a lock.

:func:`add_bundle` refuses what the ledger already holds: the same state of
a bundle (by its seal, whatever its path), an earlier state of a bundle
whose later state is entered, and a shard or pool of a campaign that a pool
in the ledger already holds (:mod:`h3bench.ledger.chain` says how an entry
supersedes another). What a crash left of an earlier append is moved to
``<ledger>.fragments`` first.

Appends are made under an exclusive ``flock`` on ``<ledger>.lock``, so two
writers cannot both extend the same tail: the second one reads the first
one's lines, checks the chain and duplicates again, and appends after them.
All the entries of one bundle are written in one ``O_APPEND`` write and
fsynced (:func:`h3bench.evidence.files.append_line`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h3bench
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import files
from h3bench.ledger.chain import FRAGMENTS, GENESIS, LedgerFile, LedgerLine, entry_hash, read_ledger, replaces

if TYPE_CHECKING:
    from h3bench.ledger.entries import LedgerEntry

__all__ = ["Added", "add_bundle"]


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


def _refuse_campaign(ref: LedgerEntry, entries: Sequence[LedgerLine], superseded: dict[int, int],
                     stored_path: Path) -> None:
    """UsageError when a pool in the ledger already holds the campaign of this shard or pool, or pools it otherwise."""
    key = ref.campaign_key
    if key is None:
        return
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


def _refuse_entered(ref: LedgerEntry, lines: Sequence[LedgerLine], superseded: dict[int, int],
                    stored_path: Path) -> None:
    """UsageError when the bundle's state, a later state of it, or its campaign is already entered.

    ``ref`` is one of the new entries (they share the bundle): a bundle is
    known by its seals, and a shard or pool also by its campaign's key.
    """
    seal = ref.bundle.final_sha256
    entries = [line for line in lines if line.entry is not None]
    known = [line for line in entries if line.entry is not None and line.entry.bundle.final_sha256 == seal]
    if known:
        raise UsageError(f"{stored_path}: already in the ledger (lines {_lines(known)}, "
                         f"final.json {seal[:12]}); a bundle is entered once, by its content, whatever its path")
    later = [line for line in entries if line.entry is not None and seal in line.entry.bundle.seals[:-1]]
    if later:
        raise UsageError(f"{stored_path}: an earlier state of a bundle whose later state is in the ledger (lines "
                         f"{_lines(later)}); it was resumed since, nothing appended")
    _refuse_campaign(ref, entries, superseded, stored_path)


def _replaced(entry: LedgerEntry, found: LedgerFile) -> list[int]:
    """The live lines ``entry`` replaces: what the chain says an entry may supersede (:func:`chain.replaces`)."""
    return [line.seq for line in found.lines if line.entry is not None and line.seq not in found.superseded_by
            and replaces(entry, line.entry) is not None]


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
        if typed:
            _refuse_entered(typed[0], found.lines, found.superseded_by, stored.path)
        lines = found.lines
        prefix = b"\n" if lines and not lines[-1].terminated else b""  # a complete last entry gets its newline
        if prefix:
            notes.append(f"{path}: line {lines[-1].number} had no newline; it is kept, and now ends with one")
        prev = str(lines[-1].record["hash"]) if lines and lines[-1].record else GENESIS
        added_at, chained = files.now(), []
        for offset, (typed_entry, entry) in enumerate(zip(typed, new, strict=True)):
            full = {**entry, "seq": len(lines) + offset, "prev": prev, "added_at": added_at,
                    "written_by": f"h3bench {h3bench.__version__}"}
            older = _replaced(typed_entry, found)
            if older:
                full["supersedes"] = older
            full["hash"] = prev = entry_hash(full)
            chained.append(full)
        files.append_line(path, prefix + b"".join(files.json_line(entry, path) for entry in chained))
    return Added(tuple(chained), tuple(notes))
