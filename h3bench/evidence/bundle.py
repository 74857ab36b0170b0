"""The bundle: one append-only directory per campaign run, written by :meth:`Bundle.create`.

Layout of a bundle (``<root>/<UTC timestamp>-<spec name>-<spec id[:12]>/``)::

    manifest.json            written at creation: spec id and spec, h3bench version,
                             environment, start time, inputs, source and model identity
    samples.jsonl            one line per request; ``kind`` is warmup | measured | audit
    lifecycle.jsonl          one line per server process
    outputs/<sha256>.mp4     the returned MP4s, named by their content hash
    logs/<name>              server logs, copied in at the end of each block
    verdict.json             written once
    quality/<version>.json   one result per validator version, beside the older ones
    final.json               written once at close: end time, outcome, and the SHA-256
                             and size of every file the run wrote
    addenda.jsonl            one line per file added after close (re-validation),
                             with its SHA-256 and size

Nothing in a bundle is ever rewritten: the raw samples are kept, and a newer
validator writes a new result beside the frozen old one. How each write is made
atomic is in :mod:`h3bench.evidence.files`.

The writer keeps a running SHA-256 of every file it writes, so ``final.json``
records what the run wrote, not what happened to be on disk at close, and
:func:`verify` catches a change made at any time after the write.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import h3bench
from h3bench.environment import environment
from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.hashing import Digest

__all__ = ["DEFAULT_ROOT", "FORMAT", "SAMPLE_KINDS", "Bundle"]

FORMAT = "h3bench-evidence/1"
DEFAULT_ROOT = "h3bench-evidence"
SAMPLE_KINDS = ("warmup", "measured", "audit")

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
LIFECYCLE = "lifecycle.jsonl"
VERDICT = "verdict.json"
FINAL = "final.json"
ADDENDA = "addenda.jsonl"
OUTPUTS = "outputs"
LOGS = "logs"
QUALITY = "quality"

OUTPUT_NAME = re.compile(r"([0-9a-f]{64})\.mp4")

_PathLike = str | os.PathLike[str]


class _State(enum.Enum):
    WRITING = "writing"  # made by Bundle.create and not yet closed
    SEALED = "sealed"  # closed, or opened from disk: only new write-once files, as addenda


class Bundle:
    """One evidence bundle: written by :meth:`create`, read by :meth:`open`.

    A created bundle accepts appends and new files until :meth:`close` seals it with
    ``final.json``. A sealed bundle (closed, or opened from disk) still accepts a
    verdict and new quality results; each is recorded with its hash in ``addenda.jsonl``.
    Every attempt to rewrite a file raises :class:`~h3bench.errors.EvidenceError`.
    """

    def __init__(self, path: Path, spec_id: str, state: _State) -> None:
        self.path = path
        self.spec_id = spec_id
        self._state = state
        # relpath -> running digest of what this writer wrote (WRITING only).
        self._written: dict[str, Digest] = {}
        self._manifest: dict[str, Any] | None = None

    # ---- lifecycle

    @classmethod
    def create(
        cls,
        root: _PathLike | None = None,
        *,
        spec_id: str,
        spec: Mapping[str, Any],
        inputs: Mapping[str, Any],
        source: Mapping[str, Any],
        model: Mapping[str, Any],
        name: str | None = None,
        started_at: str | None = None,
        session: str | None = None,
        lpips_weights: Mapping[str, Any] | None = None,
    ) -> Bundle:
        """Make a new bundle directory under ``root`` and write its manifest.

        Parameters
        ----------
        root
            Parent directory of bundles; default ``./h3bench-evidence``.
        spec_id
            The frozen RunSpec's id, the SHA-256 of its canonical JSON (issue 4).
        spec
            The RunSpec as plain JSON data; copied into the manifest.
        inputs, source, model
            Input hashes, source identity (engine commit, image digest) and model identity.
        name
            Used in the directory name; default ``spec["name"]``, else ``"run"``.
        started_at, session
            When the run started (default: now) and the run's own id; with them a
            caller knows the bundle's path before it exists (:meth:`planned_path`)
            and can find it again (:meth:`locate`).
        lpips_weights
            Which pinned files the LPIPS weights come from (their paths and SHA-256).
        """
        root_path = Path(root) if root is not None else Path.cwd() / DEFAULT_ROOT
        if not isinstance(spec_id, str) or not files.SHA256_HEX.fullmatch(spec_id):
            raise EvidenceError(f"spec id {spec_id!r} is not a SHA-256 hex digest", path=str(root_path))
        started_at = started_at or files.now()
        manifest = {
            "format": FORMAT,
            "spec_id": spec_id,
            "spec": dict(spec),
            "h3bench_version": h3bench.__version__,
            "started_at": started_at,
            "environment": environment(),
            "inputs": dict(inputs),
            "source": dict(source),
            "model": dict(model),
            "session": session,
            "lpips_weights": dict(lpips_weights) if lpips_weights is not None else None,
        }
        # Serialize before creating anything, so bad input leaves no empty bundle behind.
        document = files.json_document(manifest, root_path / MANIFEST)
        label = name if name is not None else spec.get("name", "run")
        path = cls._make_dir(root_path, cls.planned_path(root_path, str(label), spec_id, started_at).name)
        for sub in (OUTPUTS, LOGS, QUALITY):
            (path / sub).mkdir()
        files.fsync_dir(path)
        bundle = cls(path, spec_id, _State.WRITING)
        bundle._write_once(MANIFEST, [document])
        return bundle

    @staticmethod
    def planned_path(root: _PathLike, label: str, spec_id: str, started_at: str) -> Path:
        """``<root>/<UTC start>-<label>-<spec id[:12]>``: where :meth:`create` puts the bundle unless that name is taken."""
        label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "run"
        stamp = started_at[:19].replace("-", "").replace(":", "") + "Z"
        return Path(root) / f"{stamp}-{label}-{spec_id[:12]}"

    @classmethod
    def locate(cls, planned: Path, session: str) -> Path | None:
        """The bundle that run ``session`` created at ``planned`` (or, if that name was taken, beside it)."""
        for path in [planned, *sorted(planned.parent.glob(f"{planned.name}-*"))]:
            manifest = path / MANIFEST
            if manifest.is_file() and files.read_json(manifest).get("session") == session:
                return path
        return None

    @staticmethod
    def _make_dir(root: Path, base: str) -> Path:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvidenceError(f"{root}: cannot create the evidence root ({exc})", path=str(root)) from exc
        # Two runs of one spec in the same second get -2, -3, ...: a bundle directory is never reused.
        for attempt in range(1, 1000):
            path = root / (base if attempt == 1 else f"{base}-{attempt}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            files.fsync_dir(root)
            return path
        raise EvidenceError(f"{root}: too many bundles named {base}", path=str(root))

    @classmethod
    def open(cls, path: _PathLike) -> Bundle:
        """Open an existing bundle for reading (and for adding a verdict or quality results)."""
        bundle_path = Path(path)
        if not (bundle_path / MANIFEST).is_file():
            raise EvidenceError(f"{bundle_path}: not an evidence bundle (no {MANIFEST})", path=str(bundle_path))
        manifest = files.read_json(bundle_path / MANIFEST)
        spec_id = manifest.get("spec_id") if isinstance(manifest, dict) else None
        if not isinstance(spec_id, str):
            raise EvidenceError(f"{bundle_path / MANIFEST}: no spec_id", path=str(bundle_path / MANIFEST))
        bundle = cls(bundle_path, spec_id, _State.SEALED)
        bundle._manifest = manifest
        return bundle

    def close(self, error: str | None = None, *, interrupted: str | None = None) -> None:
        """Seal the bundle: write ``final.json`` with the end time, outcome and file hashes.

        Safe to call twice; a no-op on a bundle that is already sealed. The
        outcome is ``completed``; ``aborted`` with ``error`` (an exception in
        the writer); or ``interrupted`` with the reason (Ctrl-C, a signal, an
        internal error, a session stopped before its blocks had run).
        """
        if self._state is not _State.WRITING:
            return
        outcome = "aborted" if error is not None else "interrupted" if interrupted is not None else "completed"
        final = {
            "ended_at": files.now(),
            "outcome": outcome,
            "error": error,
            "interrupted": interrupted,
            "files": {rel: digest.to_dict() for rel, digest in sorted(self._written.items())},
        }
        self._write_once(FINAL, [files.json_document(final, self.path / FINAL)])
        self._state = _State.SEALED

    def __enter__(self) -> Bundle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(None if exc is None else f"{type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        return f"<Bundle {self.path} {self._state.value}>"

    # ---- writing

    def append_sample(self, sample: dict[str, Any]) -> None:
        """Append one request's record; ``sample["kind"]`` must be one of :data:`SAMPLE_KINDS`."""
        if not isinstance(sample, dict) or sample.get("kind") not in SAMPLE_KINDS:
            got = sample.get("kind") if isinstance(sample, dict) else type(sample).__name__
            raise EvidenceError(
                f"{self.path / SAMPLES}: a sample needs kind in {SAMPLE_KINDS}, got {got!r}",
                path=str(self.path / SAMPLES),
            )
        self._append(SAMPLES, sample)

    def append_lifecycle(self, event: dict[str, Any]) -> None:
        """Append one server process's lifecycle record."""
        self._append(LIFECYCLE, event)

    def store_output(self, src: _PathLike, *, move: bool = False) -> tuple[str, str]:
        """Copy an MP4 into ``outputs/<sha256>.mp4``; the same bytes twice are stored once.

        Returns ``(sha256, relpath)``. With ``move``, ``src`` is removed once stored.
        """
        self._require_writing(OUTPUTS)
        src_path = Path(src)
        try:
            tmp, digest = files.stage(self.path / OUTPUTS, files.read_chunks(src_path))
            relpath = f"{OUTPUTS}/{digest.hexdigest}.mp4"
            if files.commit(tmp, self.path / relpath):
                self._written[relpath] = digest
            if move:
                src_path.unlink()
        except OSError as exc:
            raise EvidenceError(f"{self.path / OUTPUTS}: cannot store {src_path} ({exc})", path=str(src_path)) from exc
        return digest.hexdigest, relpath

    def store_log(self, src: _PathLike, name: str) -> str:
        """Copy a server log into ``logs/<name>`` (e.g. ``candidate-5s-block2.log``); returns the relpath."""
        relpath = f"{LOGS}/{files.safe_name(name, 'log name', self.path)}"
        self._require_writing(relpath)
        src_path = Path(src)
        if not src_path.is_file():
            raise EvidenceError(f"{src_path}: no such log file to store as {relpath}", path=str(src_path))
        self._write_once(relpath, files.read_chunks(src_path))
        return relpath

    def write_verdict(self, verdict: dict[str, Any]) -> None:
        """Write ``verdict.json``, once."""
        self._write_once(VERDICT, [files.json_document(verdict, self.path / VERDICT)])

    def write_quality(self, validator_version: str, result: dict[str, Any]) -> str:
        """Write ``quality/<validator_version>.json``; an existing version is never overwritten.

        Returns the relpath. Re-validating with a newer validator adds a file beside the old one.
        """
        relpath = f"{QUALITY}/{files.safe_name(validator_version, 'validator version', self.path)}.json"
        document = {"validator_version": validator_version, "written_at": files.now(), "result": result}
        self._write_once(relpath, [files.json_document(document, self.path / relpath)])
        return relpath

    def _require_writing(self, relpath: str) -> None:
        if self._state is not _State.WRITING:
            raise EvidenceError(
                f"{self.path / relpath}: the bundle is sealed ({FINAL} or opened from disk); "
                "only a verdict and new quality results can still be added",
                path=str(self.path / relpath),
            )

    def _append(self, relpath: str, record: dict[str, Any]) -> None:
        self._require_writing(relpath)
        line = files.json_line(record, self.path / relpath)
        files.append_line(self.path / relpath, line)
        self._written.setdefault(relpath, Digest()).update(line)

    def _write_once(self, relpath: str, chunks: Iterable[bytes]) -> None:
        target = self.path / relpath
        if target.exists():
            raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
        try:
            tmp, digest = files.stage(target.parent, chunks)
            created = files.commit(tmp, target)
        except OSError as exc:
            raise EvidenceError(f"{target}: write failed, nothing written ({exc})", path=str(target)) from exc
        if not created:
            raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
        if self._state is _State.WRITING:
            self._written[relpath] = digest
        else:
            self._append_addendum(relpath, digest)

    def _append_addendum(self, relpath: str, digest: Digest) -> None:
        path = self.path / ADDENDA
        files.append_line(path, files.json_line({"path": relpath, **digest.to_dict(), "written_at": files.now()}, path))

    # ---- reading

    @property
    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            self._manifest = files.read_json(self.path / MANIFEST)
        return self._manifest

    @property
    def is_complete(self) -> bool:
        """Whether the run closed (``final.json`` exists)."""
        return (self.path / FINAL).is_file()

    def samples(self, kind: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield the sample records in order, optionally only those of one ``kind``."""
        for _, record in files.iter_jsonl(self.path / SAMPLES):
            if kind is None or record.get("kind") == kind:
                yield record

    def lifecycle(self) -> Iterator[dict[str, Any]]:
        """Yield the lifecycle records in order."""
        for _, record in files.iter_jsonl(self.path / LIFECYCLE):
            yield record

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

    def read_verdict(self) -> dict[str, Any] | None:
        """The verdict, or None when none has been written yet."""
        path = self.path / VERDICT
        return files.read_json(path) if path.is_file() else None

    def quality_versions(self) -> tuple[str, ...]:
        """The validator versions with a stored result, sorted by name."""
        return tuple(sorted(p.stem for p in (self.path / QUALITY).glob("*.json")))

    def read_quality(self, validator_version: str) -> dict[str, Any]:
        """The result that ``validator_version`` wrote."""
        path = self.path / QUALITY / f"{files.safe_name(validator_version, 'validator version', self.path)}.json"
        document = files.read_json(path)
        if not isinstance(document, dict) or "result" not in document:
            raise EvidenceError(f"{path}: not a quality result (no 'result')", path=str(path))
        return document["result"]
