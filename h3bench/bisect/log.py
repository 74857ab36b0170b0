"""The bisection log: an append-only, hash-chained JSONL file of everything the search did, in order.

Each line is one record with its place in the chain, as the ledger's
(:mod:`h3bench.ledger.chain`, whose hash it uses)::

    seq     0, 1, 2, ...
    prev    the hash of the line before (64 zeros for the first)
    hash    SHA-256 of the record's canonical JSON without "hash"

Events, in the order a search writes them: ``start`` (the spec, the range,
the rules), ``verify`` (its campaign bundle and seal, whether the step
reproduced, the step with its bounds, the pairs), ``round`` (the probes
chosen to run at once, one per host), per probe ``probe`` (commit, bundle
and seal, pairs and their log ratios, the test's decision and likelihood
ratio, the posterior after the update, the device time it held and the
total so far; or the reason it was skipped or broken), ``stop`` (why, the
top three with their mass), ``confirming`` and ``confirm`` (the claim or
not; after one that does not confirm, the search goes on), ``ledger`` and
``end``.
A campaign's record is appended only after its bundle is sealed; a resume
reads the log, never runs a campaign whose record it holds, and takes a
bundle by its seal once (:meth:`BisectionLog.has_seal`): nothing lost,
nothing counted twice.

A crash in the middle of an append leaves a last line without its newline;
reading reports it and the next append removes it first (it held a record
that was not yet written, so the campaign it described is taken again from
its sealed bundle). Any other broken line, or a broken chain, is refused
with the line named.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.ledger.chain import GENESIS, entry_hash

__all__ = ["LOG_NAME", "BisectionLog"]

LOG_NAME = "bisect-log.jsonl"


@dataclass
class BisectionLog:
    """The log at ``path``: its verified records, and appends that extend the chain."""

    path: Path

    def read(self) -> list[dict[str, Any]]:
        """Every record, the chain checked; EvidenceError naming the first broken line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise EvidenceError(f"{self.path}: cannot read the bisection log ({exc.strerror})", path=str(self.path)) \
                from exc
        # The piece after the last newline is empty, or what a crash left of an append: never a record.
        lines = data.split(b"\n")[:-1]
        records: list[dict[str, Any]] = []
        prev = GENESIS
        for number, raw in enumerate(lines, start=1):
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise EvidenceError(f"{self.path}: line {number} is not JSON ({exc})", path=str(self.path)) from exc
            if not isinstance(record, dict):
                raise EvidenceError(f"{self.path}: line {number} is not a JSON object", path=str(self.path))
            problems = []
            if record.get("seq") != number - 1:
                problems.append(f"seq is {record.get('seq')!r}, expected {number - 1}")
            if record.get("prev") != prev:
                problems.append("prev does not match the line before (a line was changed, removed or inserted)")
            if record.get("hash") != entry_hash(record):
                problems.append("hash does not match its content (the line was changed)")
            if problems:
                raise EvidenceError(f"{self.path}: line {number}: {'; '.join(problems)}", path=str(self.path))
            records.append(record)
            prev = str(record["hash"])
        return records

    @property
    def torn(self) -> bool:
        """The file ends in an unfinished append (bytes after the last newline)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        return bool(data) and not data.endswith(b"\n")

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record of ``event`` after the chain's tail; the record as written."""
        records = self.read()
        if self.torn:  # drop what a crash left of an append: it was never a record
            size = self.path.stat().st_size
            tail = self.path.read_bytes().rsplit(b"\n", 1)[-1]
            os.truncate(self.path, size - len(tail))
        record = {"seq": len(records), "prev": records[-1]["hash"] if records else GENESIS, "event": event,
                  "at": files.now(), **fields}
        record["hash"] = entry_hash(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.append_line(self.path, files.json_line(record, self.path))
        return record

    def has_seal(self, sha256: str) -> bool:
        """Whether a campaign bundle with this ``final.json`` SHA-256 is already taken."""
        return any(r.get("final_sha256") == sha256 for r in self.read())
