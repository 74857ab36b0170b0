"""What a ``final.json`` lists: one place for the seal at close and the seal of a run that was killed.

A segment's ``final.json`` is written once and listed in no other file. It
says when and how the run ended (``completed``, ``interrupted`` with the
reason, ``aborted`` with the error, or ``killed``) and the SHA-256 and size
of every file the segment wrote. :meth:`h3bench.evidence.bundle.Bundle.close`
lists what the writer wrote, from its running hashes (:func:`seal_record`); a
segment whose run died before it could close is sealed by the next resume
with its files as they are then (:func:`killed_record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.evidence.hashing import sha256_file
from h3bench.evidence.layout import ADDENDA, FINAL, OUTPUTS, WRITER_LOCK

__all__ = ["KILLED", "killed_record", "outcome_of", "seal_record", "write_seal"]

KILLED = "the run ended without closing its bundle (killed, the host went down, or its disk was full)"


def outcome_of(error: str | None, interrupted: str | None) -> str:
    """``aborted`` with an error in the writer, ``interrupted`` with a reason, else ``completed``."""
    return "aborted" if error is not None else "interrupted" if interrupted is not None else "completed"


def seal_record(outcome: str, listed: Mapping[str, dict[str, Any]], *, error: str | None = None,
                interrupted: str | None = None, sealed_by: str | None = None) -> dict[str, Any]:
    """A ``final.json``: the end time, the outcome and why, and ``listed``, each file's SHA-256 and size by relpath."""
    record: dict[str, Any] = {"ended_at": files.now(), "outcome": outcome, "error": error, "interrupted": interrupted}
    if sealed_by is not None:
        record["sealed_by"] = sealed_by
    return {**record, "files": dict(sorted(listed.items()))}


def killed_record(path: Path, segment: str, segments: list[str]) -> dict[str, Any]:
    """The seal of ``segment``, whose run was killed before it closed: its files as they are now.

    Its own files, and the outputs it stored (they live in the shared
    ``outputs/``): every file no earlier seal lists and no other segment holds.
    """
    listed: set[str] = set()
    for other in segments:
        if (path / other / FINAL).is_file():
            listed.update(files.read_json(path / other / FINAL).get("files", {}))
    others = [s for s in segments if s and s != segment]
    present = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    mine = [rel for rel in present if rel not in listed and rel not in (ADDENDA, WRITER_LOCK)
            and not any(rel.startswith(other) for other in others)
            and (rel.startswith((segment, f"{OUTPUTS}/")))]
    return seal_record("killed", {rel: sha256_file(path / rel).to_dict() for rel in mine}, interrupted=KILLED,
                       sealed_by="resume: the hashes are those the files had when the resume began")


def write_seal(path: Path, relpath: str, document: dict[str, Any]) -> None:
    """Write a ``final.json`` once; EvidenceError if that segment is already sealed."""
    target = path / relpath
    tmp, _ = files.stage(target.parent, [files.json_document(document, target)])
    if not files.commit(tmp, target):
        raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
