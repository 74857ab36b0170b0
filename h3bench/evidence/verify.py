"""Verifying a bundle: every file re-hashed against what the run recorded that it wrote."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.evidence.hashing import Digest, sha256_file
from h3bench.evidence.layout import (
    ADDENDA,
    FINAL,
    LIFECYCLE,
    MANIFEST,
    OUTPUT_NAME,
    OUTPUTS,
    RESUME,
    SAMPLES,
    SERVERS,
    TELEMETRY,
    WRITER_LOCK,
)
from h3bench.evidence.manifest import Manifest
from h3bench.evidence.reader import segments_of

__all__ = ["VerifyReport", "final_sha256", "require_verified", "verify"]

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``problems`` has one human-readable line per finding."""

    path: str
    complete: bool  # every segment's final.json was there
    outcome: str | None  # the last segment's: "completed", "interrupted", "killed" or "aborted"
    files_checked: int  # files whose hash was compared
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "complete": self.complete,
            "outcome": self.outcome,
            "files_checked": self.files_checked,
            "problems": list(self.problems),
        }


def _listing(value: Any, source: str, problems: list[str]) -> dict[str, tuple[str, int]]:
    """Validate ``{relpath: {"sha256", "size"}}`` entries, dropping (and reporting) bad ones."""
    listed: dict[str, tuple[str, int]] = {}
    if not isinstance(value, dict):
        problems.append(f"{source}: no file list")
        return listed
    for rel, entry in value.items():
        parts = Path(rel).parts
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        size = entry.get("size") if isinstance(entry, dict) else None
        if Path(rel).is_absolute() or ".." in parts or not parts:
            problems.append(f"{source}: listed path {rel!r} is outside the bundle")
        elif not (isinstance(sha, str) and files.SHA256_HEX.fullmatch(sha) and isinstance(size, int)):
            problems.append(f"{source}: entry for {rel} has no valid sha256 and size")
        else:
            listed[rel] = (sha, size)
    return listed


def final_sha256(path: _PathLike) -> str | None:
    """SHA-256 of the last segment's ``final.json``: the anchor a run prints, for ``verify --expect``."""
    final = Path(path) / segments_of(Path(path))[-1] / FINAL
    return sha256_file(final).hexdigest if final.is_file() else None


def verify(path: _PathLike, expect_final_sha256: str | None = None) -> VerifyReport:
    """Re-hash a bundle and name every file that changed, went missing or appeared unlisted.

    ``final.json`` holds the hashes of everything else, so whoever rewrites it
    can forge them all; with ``expect_final_sha256`` (the anchor the run printed
    and put in pytest-benchmark's ``machine_info``) that is caught too.

    Files are checked against every segment's ``final.json`` and ``addenda.jsonl``;
    each file is listed exactly once. A segment without ``final.json`` (a run that
    is still going, or was killed) is reported as incomplete; its outputs, which
    are named by their hash, and the addenda are still checked, and its JSONL files
    are still parsed.
    """
    root = Path(path)
    if not root.is_dir():
        raise EvidenceError(f"{root}: no such bundle directory", path=str(root))
    problems: list[str] = []
    hashes: dict[str, Digest] = {}

    def digest_of(rel: str) -> Digest:
        if rel not in hashes:
            hashes[rel] = sha256_file(root / rel)
        return hashes[rel]

    # The writer's lock is not evidence: it says who writes the bundle now.
    present = sorted(kept for p in root.rglob("*") if (p.is_file() or p.is_symlink())
                     and (kept := p.relative_to(root).as_posix()) != WRITER_LOCK)

    try:
        Manifest.from_record(files.read_json(root / MANIFEST), root / MANIFEST)
    except EvidenceError as exc:
        problems.append(f"{MANIFEST}: {exc}")

    segments = segments_of(root)
    listed: dict[str, tuple[str, int]] = {}
    final: Any = None
    complete = True
    for segment in segments:
        name = segment + FINAL
        if not (root / name).is_file():
            complete, final = False, None
            problems.append(f"incomplete: no {name} (the run did not close); only outputs and addenda were verified")
            continue
        try:
            final = files.read_json(root / name)
        except EvidenceError as exc:
            problems.append(f"{name}: {exc}")
            final = {}
        for path, value in _listing(final.get("files") if isinstance(final, dict) else None, name, problems).items():
            if path in listed:
                problems.append(f"{path}: listed twice ({name})")
            listed[path] = value
    finals = {segment + FINAL for segment in segments}
    problems += _seal_chain_problems(root, segments)
    if expect_final_sha256 is not None:
        found = final_sha256(root)
        if found != expect_final_sha256.lower():
            problems.append(f"{segments[-1] + FINAL}: SHA-256 {found or 'absent'}, but the run's anchor is "
                            f"{expect_final_sha256} (final.json was rewritten)")

    addenda: dict[str, tuple[str, int]] = {}
    try:
        for number, record in files.iter_jsonl(root / ADDENDA):
            rel = record.get("path")
            entry = _listing({rel: record} if isinstance(rel, str) else None, f"{ADDENDA} line {number}", problems)
            for rel_, value in entry.items():
                if rel_ in listed or rel_ in addenda:
                    problems.append(f"{rel_}: listed twice ({ADDENDA} line {number})")
                addenda[rel_] = value
    except EvidenceError:
        pass  # a malformed line is reported with the other JSONL files below

    expected = {**listed, **addenda}
    for rel, (sha, size) in sorted(expected.items()):
        if not (root / rel).is_file():
            problems.append(f"{rel}: missing")
            continue
        digest = digest_of(rel)
        if (digest.hexdigest, digest.size) != (sha, size):
            problems.append(
                f"{rel}: changed (sha256 {digest.hexdigest}, {digest.size} bytes; recorded {sha}, {size} bytes)"
            )

    for rel in present:
        name = Path(rel).name
        if name.startswith(files.TMP_PREFIX):
            problems.append(f"{rel}: leftover temporary file from an interrupted write")
            continue
        if rel.startswith(f"{OUTPUTS}/"):
            match = OUTPUT_NAME.fullmatch(name) if rel.count("/") == 1 else None
            if match is None:
                problems.append(f"{rel}: output not named <sha256>.mp4")
            # A listed output was checked above; an unlisted one can still be checked against its name.
            elif rel not in expected and digest_of(rel).hexdigest != match.group(1):
                problems.append(f"{rel}: changed (content sha256 {digest_of(rel).hexdigest} differs from its name)")
        if complete and rel not in expected and rel not in finals and rel != ADDENDA:
            problems.append(f"{rel}: not listed in {FINAL} or {ADDENDA}")

    for rel in [ADDENDA, *(s + name for s in segments for name in (SAMPLES, SERVERS, LIFECYCLE, TELEMETRY))]:
        if rel in present:
            problems.extend(_jsonl_problems(root / rel, rel))

    return VerifyReport(
        path=str(root),
        complete=complete,
        outcome=final.get("outcome") if isinstance(final, dict) else None,
        files_checked=len(hashes),
        problems=tuple(problems),
    )


def _seal_chain_problems(root: Path, segments: list[str]) -> list[str]:
    """Each resume recorded the SHA-256 of every final.json before it: an earlier seal rewritten since is named.

    The last final.json lists its segment's resume.json, so it pins every seal
    before it, and with them every file: the last seal is the bundle's identity.
    """
    problems = []
    for segment in segments[1:]:
        record = root / segment / RESUME
        if not record.is_file():
            continue
        try:
            sealed = files.read_json(record).get("sealed_before")
        except (EvidenceError, AttributeError):
            continue  # reported with the segment's own files
        if not isinstance(sealed, dict):
            continue  # written before resumes recorded the seals
        for rel, sha in sealed.items():
            path = root / rel
            found = sha256_file(path).hexdigest if path.is_file() else None
            if found != sha:
                problems.append(f"{rel}: {'missing' if found is None else f'sha256 {found}'}, but {segment}{RESUME} "
                                f"recorded {sha} when the resume sealed it (an earlier seal was rewritten)")
    return problems


def _jsonl_problems(path: Path, rel: str) -> list[str]:
    problems: list[str] = []
    try:
        for _ in files.iter_jsonl(path):
            pass
    except EvidenceError as exc:
        problems.append(str(exc))
    if _unterminated(path):
        problems.append(f"{rel}: unterminated last line (an append that did not finish); readers ignore it")
    return problems


def _unterminated(path: Path) -> bool:
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def require_verified(path: _PathLike, purpose: str) -> VerifyReport:
    """Verify the bundle at ``path`` before ``purpose`` reads it; EvidenceError naming every problem otherwise.

    Every reader of a stored bundle (validate, report, history, ledger, a
    candidate-only run's baseline) goes through here: numbers from a bundle
    that does not verify are never printed, judged or written back.
    """
    report = verify(path)
    if not report.ok:
        raise EvidenceError(f"{path} does not verify, so {purpose}: {'; '.join(report.problems)}", path=str(path))
    return report
