"""Writing a bundle: :meth:`Bundle.create` makes one, :meth:`Bundle.resume` continues one, :meth:`Bundle.close` seals it.

What a bundle holds, and where, is :mod:`h3bench.evidence.layout`; reading one
is :class:`~h3bench.evidence.reader.BundleReader`, which a :class:`Bundle`
also is. Only a campaign holds a writer.

A bundle is written by one process at a time: :meth:`Bundle.create` and
:meth:`Bundle.resume` hold its :class:`~h3bench.evidence.lock.WriterLock`
until :meth:`Bundle.close` (or until the process dies: the kernel releases
it), and a second writer is refused at once, naming the first one's pid.

Nothing in a bundle is ever rewritten: the raw samples are kept, and a newer
validator writes a new result beside the frozen old one. How each write is made
atomic is in :mod:`h3bench.evidence.files`.

The writer keeps a running SHA-256 of every file it writes, so ``final.json``
(:mod:`h3bench.evidence.seal`) records what the run wrote, not what happened
to be on disk at close, and :func:`~h3bench.evidence.verify.verify` catches a
change made at any time after the write.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import h3bench
from h3bench import interrupts
from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.evidence.hashing import Digest
from h3bench.evidence.layout import (
    ADDENDA,
    CONTRACTS,
    DEFAULT_ROOT,
    FINAL,
    FORMAT,
    LIFECYCLE,
    LOGS,
    MANIFEST,
    METRICS,
    OUTPUTS,
    PROFILES,
    QUALITY,
    RESUME,
    SAMPLE_KINDS,
    SAMPLES,
    SERVERS,
    TELEMETRY,
    VERDICT,
    PathLike,
    planned_path,
)
from h3bench.evidence.lock import WriterLock
from h3bench.evidence.reader import BundleReader
from h3bench.evidence.scrub import Scrubber
from h3bench.evidence.seal import killed_record, outcome_of, seal_record, write_seal

__all__ = ["Bundle"]


class _State(enum.Enum):
    WRITING = "writing"  # made by Bundle.create and not yet closed
    SEALED = "sealed"  # closed, or opened from disk: only new write-once files, as addenda


class Bundle(BundleReader):
    """One evidence bundle, written: made by :meth:`create`, continued by :meth:`resume`, or opened to add to.

    A created bundle accepts appends and new files until :meth:`close` seals it with
    ``final.json``. A sealed bundle (closed, or opened from disk by :meth:`open`) still
    accepts a verdict and new quality results; each is recorded with its hash in
    ``addenda.jsonl``. Every attempt to rewrite a file raises
    :class:`~h3bench.errors.EvidenceError`.
    """

    def __init__(self, path: Path, spec_id: str, state: _State, segment: str = "",
                 lock: WriterLock | None = None, manifest: dict[str, Any] | None = None) -> None:
        super().__init__(path, spec_id, manifest)
        self._state = state
        self.segment = segment  # "" for the first run, "resume-<n>/" for a resume
        # relpath -> running digest of what this writer wrote (WRITING only).
        self._written: dict[str, Digest] = {}
        self._telemetry_lock = threading.Lock()  # telemetry comes from the sampler's thread
        self._lock = lock  # the writer lock, held while WRITING

    # ---- lifecycle

    @classmethod
    def create(
        cls,
        root: PathLike | None = None,
        *,
        spec_id: str,
        spec: Mapping[str, Any],
        inputs: Mapping[str, Any],
        source: Mapping[str, Any],
        model: Mapping[str, Any],
        name: str | None = None,
        started_at: str | None = None,
        session: str | None = None,
        extra: Mapping[str, Any] | None = None,
        arms: Mapping[str, Any] | None = None,
        lpips_weights: Mapping[str, Any] | None = None,
        environment: Mapping[str, Any] | None = None,
    ) -> Bundle:
        """Make a new bundle directory under ``root`` and write its manifest.

        Parameters
        ----------
        root
            Parent directory of bundles; default ``./h3bench-evidence``.
        spec_id
            The frozen RunSpec's id, the SHA-256 of its canonical JSON.
        spec
            The RunSpec as plain JSON data; copied into the manifest.
        inputs, source, model
            Input hashes, source identity (engine commit, image digest) and model identity.
        name
            Used in the directory name; default ``spec["name"]``, else ``"run"``.
        started_at, session
            When the run started (default: now) and the run's own id; with them a
            caller knows the bundle's path before it exists
            (:func:`~h3bench.evidence.layout.planned_path`) and can find it again
            (:meth:`~h3bench.evidence.reader.BundleReader.locate`).
        extra
            More sections of the manifest, such as the run's kind and the host's
            evidence (:mod:`h3bench.course.preflight`).
        arms
            Each arm's launch as built from the spec: its argv (placeholders
            unsubstituted) and environment.
        lpips_weights
            Which pinned files the LPIPS weights come from (their paths and SHA-256).
        environment
            The host and interpreter of the run (:func:`h3bench.host.environment.environment`).
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
            "environment": dict(environment) if environment is not None else None,
            "inputs": dict(inputs),
            "source": dict(source),
            "model": dict(model),
            "session": session,
            "arms": dict(arms or {}),
            **(extra or {}),
            "lpips_weights": dict(lpips_weights) if lpips_weights is not None else None,
        }
        # No secret is recorded (evidence.scrub); serialize before creating anything, so bad input leaves no empty bundle.
        document = files.json_document(Scrubber().record(manifest), root_path / MANIFEST)
        label = name if name is not None else spec.get("name", "run")
        path = cls._make_dir(root_path, planned_path(root_path, str(label), spec_id, started_at).name)
        lock = WriterLock.acquire(path, session)
        try:
            for sub in (OUTPUTS, LOGS, QUALITY):
                (path / sub).mkdir()
            files.fsync_dir(path)
        except OSError as exc:
            lock.release()
            raise files.write_error(exc, path, "cannot create the bundle's directories") from exc
        bundle = cls(path, spec_id, _State.WRITING, lock=lock)
        bundle._write_once(MANIFEST, [document])
        return bundle

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
            except OSError as exc:
                raise files.write_error(exc, path, "cannot create the bundle directory") from exc
            files.fsync_dir(root)
            return path
        raise EvidenceError(f"{root}: too many bundles named {base}", path=str(root))

    @classmethod
    def open(cls, path: PathLike) -> Bundle:
        """Open an existing, sealed bundle to add a verdict or quality results to it (as addenda)."""
        bundle_path, spec_id, manifest = cls.read_manifest(path)
        return cls(bundle_path, spec_id, _State.SEALED, manifest=manifest)

    @classmethod
    def resume(cls, path: PathLike, record: Mapping[str, Any], *, lock: WriterLock | None = None) -> Bundle:
        """Start a new segment of an interrupted run; ``record`` (what the resume found, and the environment it
        runs in) goes in its resume.json, with the SHA-256 of every earlier segment's final.json.

        ``lock``: the bundle's writer lock, taken by the caller (else taken here);
        BundleBusyError when another process writes the bundle. A last segment
        that never closed (the run was killed) is sealed first, with the hashes
        its files have now: ``final.json`` says so (outcome ``killed``).
        """
        bundle = cls.open(path)
        bundle._lock = lock if lock is not None and lock.held else WriterLock.acquire(bundle.path)
        try:
            last = bundle.segments()[-1]
            if not (bundle.path / last / FINAL).is_file():  # the run was killed: sealed with its files as they are
                write_seal(bundle.path, last + FINAL, killed_record(bundle.path, last, bundle.segments()))
            segment = f"resume-{len(bundle.segments())}/"
            try:
                for sub in ("", LOGS, QUALITY):
                    (bundle.path / segment / sub).mkdir(parents=True, exist_ok=sub != "")
                files.fsync_dir(bundle.path)
            except OSError as exc:
                raise files.write_error(exc, bundle.path / segment, "cannot create the resume's segment") from exc
            # The new segment's seal lists resume.json, which pins every earlier seal: the last final.json pins all.
            sealed = {s + FINAL: sha for s, sha in bundle.seals()}
            bundle._state, bundle.segment = _State.WRITING, segment
            document = {"resumed_at": files.now(), **record, "sealed_before": sealed}
            bundle._write_once(segment + RESUME, [files.json_document(document, bundle.path / segment / RESUME)])
        except BaseException:
            bundle._release()
            raise
        return bundle

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(
        self, error: str | None = None, *, interrupted: str | None = None) -> None:
        """Seal the bundle: write ``final.json`` with the end time, outcome and file hashes.

        Safe to call twice; a no-op on a bundle that is already sealed. The
        outcome is ``completed``; ``aborted`` with ``error`` (an exception in
        the writer); or ``interrupted`` with the reason (Ctrl-C, a signal, an
        internal error, a session stopped before its blocks had run).
        """
        if self._state is not _State.WRITING:
            return
        final = seal_record(outcome_of(error, interrupted), {rel: d.to_dict() for rel, d in self._written.items()},
                            error=error, interrupted=interrupted)
        write_seal(self.path, self.segment + FINAL, final)
        self._state = _State.SEALED
        self._release()

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
        """Append one server process's lifecycle record, once it has been stopped."""
        self._append(LIFECYCLE, event)

    def append_server(self, event: dict[str, Any]) -> None:
        """Append a server process's launch (block, pid, port, marker)."""
        self._append(SERVERS, event)

    def append_telemetry(self, records: list[dict[str, Any]]) -> None:
        """Append one telemetry sample (a record per chip, :mod:`h3bench.host.telemetry`) in one write."""
        relpath = self.segment + TELEMETRY
        self._require_writing(relpath)
        path = self.path / relpath
        data = b"".join(files.json_line(record, path) for record in records)
        with self._telemetry_lock:  # the sampler's thread writes beside the main thread
            files.append_line(path, data)
            self._written.setdefault(relpath, Digest()).update(data)

    def store_output(self, src: PathLike, *, move: bool = False) -> tuple[str, str]:
        """Copy an MP4 into ``outputs/<sha256>.mp4``; the same bytes twice are stored once.

        Returns ``(sha256, relpath)``. With ``move``, ``src`` is removed once stored.
        """
        self._require_writing(OUTPUTS)
        src_path = Path(src)
        try:
            with interrupts.deferred():  # the output and its record, both or neither
                tmp, digest = files.stage(self.path / OUTPUTS, files.read_chunks(src_path))
                relpath = f"{OUTPUTS}/{digest.hexdigest}.mp4"
                if files.commit(tmp, self.path / relpath):
                    self._written[relpath] = digest
            if move:
                src_path.unlink()
        except OSError as exc:
            raise EvidenceError(f"{self.path / OUTPUTS}: cannot store {src_path} ({exc})", path=str(src_path)) from exc
        return digest.hexdigest, relpath

    def store_log(self, src: PathLike, name: str) -> str:
        """Copy a server log into ``logs/<name>`` (e.g. ``candidate-5s-block2.log``); returns the relpath."""
        relpath = f"{self.segment}{LOGS}/{files.safe_name(name, 'log name', self.path)}"
        self._require_writing(relpath)
        src_path = Path(src)
        if not src_path.is_file():
            raise EvidenceError(f"{src_path}: no such log file to store as {relpath}", path=str(src_path))
        self._write_once(relpath, files.read_chunks(src_path))
        return relpath

    def store_profile(self, src: PathLike, name: str) -> tuple[str, dict[str, Any]]:
        """Copy a profiler trace into ``profiles/<name>`` (``<block>/<file>``); its relpath, SHA-256 and size."""
        parts = [files.safe_name(part, "profile name", self.path) for part in name.split("/")]
        relpath = f"{self.segment}{PROFILES}/" + "/".join(parts)
        self._require_writing(relpath)
        (self.path / relpath).parent.mkdir(parents=True, exist_ok=True)
        self._write_once(relpath, files.read_chunks(Path(src)))
        return relpath, self._written[relpath].to_dict()

    def store_scrape(self, block_id: str, index: int, text: str) -> str:
        """Write one raw ``GET /metrics`` of a block's server to ``metrics/<block>/<NN>.prom``; returns the relpath."""
        block = files.safe_name(block_id, "block id", self.path)
        relpath = f"{self.segment}{METRICS}/{block}/{index:02d}.prom"
        self._require_writing(relpath)
        (self.path / relpath).parent.mkdir(parents=True, exist_ok=True)
        self._write_once(relpath, [text.encode("utf-8")])
        return relpath

    def store_contract(self, data: bytes, suffix: str) -> tuple[str, str]:
        """Write a contract file as ``contracts/<sha256>.<suffix>``, once per content in a segment.

        Returns ``(sha256, relpath)``; the same content again is not written twice.
        """
        digest = Digest()
        digest.update(data)
        name = files.safe_name(f"{digest.hexdigest}.{suffix}", "contract file", self.path)
        relpath = f"{self.segment}{CONTRACTS}/{name}"
        self._require_writing(relpath)
        if relpath not in self._written:
            (self.path / relpath).parent.mkdir(parents=True, exist_ok=True)
            self._write_once(relpath, [data])
        return digest.hexdigest, relpath

    def write_verdict(self, verdict: dict[str, Any]) -> None:
        """Write ``verdict.json`` (of this segment), once."""
        relpath = self.segment + VERDICT
        self._write_once(relpath, [files.json_document(verdict, self.path / relpath)])

    def write_quality(self, validator_version: str, result: dict[str, Any]) -> str:
        """Write ``quality/<validator_version>.json``; an existing version is never overwritten.

        Returns the relpath. Re-validating with a newer validator adds a file beside the old one.
        """
        segment = self.segment if self._state is _State.WRITING else ""  # addenda go to the top level
        relpath = f"{segment}{QUALITY}/{files.safe_name(validator_version, 'validator version', self.path)}.json"
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

    def _append(self, name: str, record: dict[str, Any]) -> None:
        relpath = self.segment + name
        self._require_writing(relpath)
        line = files.json_line(record, self.path / relpath)
        with interrupts.deferred():  # the line and its hash, both or neither
            files.append_line(self.path / relpath, line)
            self._written.setdefault(relpath, Digest()).update(line)

    def _write_once(self, relpath: str, chunks: Iterable[bytes]) -> None:
        target = self.path / relpath
        if target.exists():
            raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
        with interrupts.deferred():  # the file and its record, both or neither
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
