"""The ledger: an append-only, hash-chained JSONL file of every candidate any campaign tried.

Each line is one entry (:class:`h3bench.ledger.entries.LedgerEntry`) plus its place in the chain::

    seq         0, 1, 2, ... (the line's index)
    prev        the hash of the line before (64 zeros for the first)
    supersedes  the seqs of earlier entries this one replaces (absent or empty: none)
    hash        SHA-256 of the entry's canonical JSON (sorted keys, no spaces, ASCII), without "hash"

Changing any line breaks its own hash; rewriting its hash too breaks the
``prev`` of the next line; rewriting the last line whole is caught by
:func:`h3bench.ledger.verify.verify_ledger`, which derives every entry again
from its bundle; a line whose fields are missing or of the wrong type is
named with the field.
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

Reading never drops a line. A last line without its newline that is a
complete, hash-valid entry is an entry (the next ``add`` writes the newline
before its own lines). A last line without its newline that is not a JSON
object is what a crash left of an append: it is reported, and the next
``add`` moves its bytes to ``<ledger>.fragments`` (appended, with the line's
number and SHA-256) before appending. Any other line that does not parse, or
breaks the chain, is reported by ``show`` and ``verify`` and stops ``add``.


This module is the chain and its reading; :mod:`h3bench.ledger.append`
appends a bundle's entries (:func:`~h3bench.ledger.append.add_bundle`) and
:mod:`h3bench.ledger.verify` checks the entries against their bundles.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import EvidenceError, UsageError

if TYPE_CHECKING:
    from h3bench.ledger.entries import LedgerEntry

__all__ = ["CHAIN_FIELDS", "FRAGMENTS", "GENESIS", "LedgerFile", "LedgerLine", "entry_hash", "read_ledger", "replaces"]

GENESIS = "0" * 64
FRAGMENTS = ".fragments"  # beside the ledger: what crashes left of appends, moved out by the next add
CHAIN_FIELDS = ("seq", "prev", "hash")  # each line's place in the chain


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
