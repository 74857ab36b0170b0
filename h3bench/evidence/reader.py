"""Reading a bundle: every segment in order, and nothing that can write.

Report, ledger, pool, history, bisect and a stored bundle
(:mod:`h3bench.session.stored`) read bundles that other runs wrote: they take
a :class:`BundleReader`, which has no method that writes. Only a campaign
holds a writer (:class:`h3bench.evidence.bundle.Bundle`, a reader that can
also write).

A bundle's records are read across its segments (:func:`segments_of`): the
first run's and each resume's, in order; :meth:`BundleReader.by_segment` also
says which segment each record came from. A bundle's identity is its content,
not its path: the SHA-256 of its last ``final.json``
(:meth:`BundleReader.seals`), which through the resume records pins every
segment before it. A copy is the same bundle; a bundle that was resumed is a
later state of the same bundle, whose earlier seals it still holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.evidence.hashing import sha256_file
from h3bench.evidence.layout import (
    FINAL,
    LIFECYCLE,
    MANIFEST,
    OUTPUT_NAME,
    OUTPUTS,
    QUALITY,
    RESUME,
    SAMPLES,
    SERVERS,
    VERDICT,
    PathLike,
)
from h3bench.evidence.manifest import Manifest

__all__ = ["BundleReader", "segments_of"]


def segments_of(path: Path) -> list[str]:
    """The segments of the bundle at ``path``, in order: ``""`` and each ``"resume-<n>/"``."""
    resumes = [p.name for p in path.glob("resume-*") if p.is_dir() and p.name[7:].isdigit()]
    return ["", *(f"{name}/" for name in sorted(resumes, key=lambda name: int(name[7:])))]


class BundleReader:
    """One evidence bundle on disk, read: its manifest, records, outputs, verdicts and seals."""

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest  # read once, when the bundle is opened (or as its writer wrote it)
        self.spec_id = manifest.spec_id

    @classmethod
    def open(cls, path: PathLike) -> BundleReader:
        """Open an existing bundle for reading; EvidenceError when ``path`` holds no bundle or its manifest does not
        read (:meth:`Manifest.read <h3bench.evidence.manifest.Manifest.read>`)."""
        return BundleReader(Path(path), Manifest.read(Path(path)))

    @staticmethod
    def locate(planned: Path, session: str) -> Path | None:
        """The bundle that run ``session`` wrote at ``planned`` (or, if that name was taken, beside it)."""
        for path in [planned, *sorted(planned.parent.glob(f"{planned.name}-*"))]:
            if (path / MANIFEST).is_file() and session in BundleReader.open(path).sessions():
                return path
        return None

    def __repr__(self) -> str:
        return f"<BundleReader {self.path}>"

    def segments(self) -> list[str]:
        """The runs this bundle holds, in order: ``""`` (the first) and each ``"resume-<n>/"``."""
        return segments_of(self.path)

    def seals(self) -> list[tuple[str, str]]:
        """``(segment, SHA-256 of its final.json)`` of every sealed segment, in order; the last is the bundle's identity."""
        return [(s, sha256_file(self.path / s / FINAL).hexdigest) for s in self.segments()
                if (self.path / s / FINAL).is_file()]

    @property
    def is_complete(self) -> bool:
        """Whether the last run closed (its ``final.json`` exists)."""
        return (self.path / self.segments()[-1] / FINAL).is_file()

    def final(self) -> dict[str, Any] | None:
        """The last segment's ``final.json``, or None while it is open."""
        path = self.path / self.segments()[-1] / FINAL
        return files.read_json(path) if path.is_file() else None

    def by_segment(self, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(segment, record)`` for every line of one JSONL file (``"samples.jsonl"``, ...), segment by segment."""
        for segment in self.segments():
            for _, record in files.iter_jsonl(self.path / segment / name):
                yield segment, record

    def samples(self, kind: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield the sample records of every segment in order, optionally only those of one ``kind``."""
        for _, record in self.by_segment(SAMPLES):
            if kind is None or record.get("kind") == kind:
                yield record

    def lifecycle(self) -> Iterator[dict[str, Any]]:
        """Yield the lifecycle records of every segment in order."""
        for _, record in self.by_segment(LIFECYCLE):
            yield record

    def servers(self) -> Iterator[dict[str, Any]]:
        """Yield the server launches of every segment in order."""
        for _, record in self.by_segment(SERVERS):
            yield record

    def sessions(self) -> list[str]:
        """The id of every run that wrote into this bundle (its servers carry it in their environment)."""
        found = [self.manifest.session]
        found += [files.read_json(self.path / s / RESUME).get("session") for s in self.segments()[1:]
                  if (self.path / s / RESUME).is_file()]
        return [s for s in found if isinstance(s, str)]

    def outputs(self) -> tuple[str, ...]:
        """The SHA-256 of every stored output, sorted."""
        return tuple(
            sorted(m.group(1) for p in (self.path / OUTPUTS).glob("*.mp4") if (m := OUTPUT_NAME.fullmatch(p.name)))
        )

    def output_path(self, sha256: str) -> Path:
        """The stored MP4 with this hash."""
        path = self.path / OUTPUTS / f"{sha256}.mp4"
        if not path.is_file():
            raise EvidenceError(f"{path}: no stored output with SHA-256 {sha256}", path=str(path))
        return path

    def read_verdict(self, upto: str | None = None) -> dict[str, Any] | None:
        """The latest verdict (of the segments up to ``upto``, default all), or None when none was written."""
        segments = self.segments()
        if upto is not None:
            segments = segments[: segments.index(upto) + 1]
        paths = [self.path / s / VERDICT for s in segments if (self.path / s / VERDICT).is_file()]
        return files.read_json(paths[-1]) if paths else None

    def quality_versions(self) -> tuple[str, ...]:
        """The validator versions with a stored result in any segment, sorted by name."""
        return tuple(sorted({p.stem for s in self.segments() for p in (self.path / s / QUALITY).glob("*.json")}))

    def read_quality(self, validator_version: str) -> dict[str, Any]:
        """The latest result that ``validator_version`` wrote."""
        name = f"{files.safe_name(validator_version, 'validator version', self.path)}.json"
        candidates = [self.path / s / QUALITY / name for s in self.segments()]
        path = next((p for p in reversed(candidates) if p.is_file()), candidates[0])
        document = files.read_json(path)
        if not isinstance(document, dict) or "result" not in document:
            raise EvidenceError(f"{path}: not a quality result (no 'result')", path=str(path))
        return document["result"]
