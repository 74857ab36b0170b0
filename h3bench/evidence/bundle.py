"""The bundle: one append-only directory per campaign run, written by :meth:`Bundle.create`.

Layout of a bundle (``<root>/<UTC timestamp>-<spec name>-<spec id[:12]>/``)::

    manifest.json            written at creation: spec id and spec, h3bench version,
                             environment, start time, inputs, source and model identity
    samples.jsonl            one line per request; ``kind`` is warmup | measured | audit | profile,
                             ``phase`` formal | heldout | profile (absent: formal)
    servers.jsonl            one line per server process when it is launched (what a
                             resume must stop if the run is killed)
    lifecycle.jsonl          one line per server process, when it has been stopped
    telemetry.jsonl          one line per reserved NPU chip and npu-smi sample during each block
    outputs/<sha256>.mp4     the returned MP4s, named by their content hash
    logs/<name>              server logs, copied in at the end of each block
    profiles/<block>/...     profiler traces of the profiled request (h3bench.run.profiling)
    metrics/<block>/NN.prom  the server's raw GET /metrics, once when it is ready (00) and after each
                             request (h3bench.run.server_metrics; the deltas are in samples.jsonl)
    contracts/<sha256>.<ext> the engine's contract, once per distinct content: its /openapi.json and,
                             for vllm arms, its ``vllm serve --help=all`` (h3bench.run.contract)
    verdict.json             written once
    quality/<version>.json   one result per validator version, beside the older ones
    final.json               written once at close: end time, outcome, and the SHA-256
                             and size of every file the run wrote
    addenda.jsonl            one line per file added after close (re-validation),
                             with its SHA-256 and size
    resume-<n>/              one segment per resume of an interrupted run: its own
                             resume.json (with the SHA-256 of every earlier final.json,
                             so the last seal pins every segment), samples, servers,
                             lifecycle, logs, quality, verdict and final.json; outputs
                             go to the shared outputs/
    .writer.lock             not evidence: the lock that the one process writing the
                             bundle holds (:class:`WriterLock`), with its pid

Readers see every segment in order (:meth:`Bundle.segments`);
:meth:`Bundle.by_segment` also says which segment each record came from.

A bundle's identity is its content, not its path: the SHA-256 of its last
``final.json`` (:meth:`Bundle.seals`), which through the resume records pins
every segment before it. A copy is the same bundle; a bundle that was resumed
is a later state of the same bundle, whose earlier seals it still holds.

A bundle is written by one process at a time: :meth:`Bundle.create` and
:meth:`Bundle.resume` hold its :class:`WriterLock` until :meth:`Bundle.close`
(or until the process dies: the kernel releases it), and a second writer is
refused at once, naming the first one's pid.

Nothing in a bundle is ever rewritten: the raw samples are kept, and a newer
validator writes a new result beside the frozen old one. How each write is made
atomic is in :mod:`h3bench.evidence.files`.

The writer keeps a running SHA-256 of every file it writes, so ``final.json``
records what the run wrote, not what happened to be on disk at close, and
:func:`verify` catches a change made at any time after the write.
"""

from __future__ import annotations

import enum
import fcntl
import json
import os
import re
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import h3bench
from h3bench import interrupts
from h3bench.errors import BundleBusyError, EvidenceError
from h3bench.evidence import files
from h3bench.evidence.hashing import Digest, sha256_file
from h3bench.evidence.scrub import Scrubber

__all__ = ["DEFAULT_ROOT", "FORMAT", "LIFECYCLE", "SAMPLES", "SAMPLE_KINDS", "SERVERS", "WRITER_LOCK", "Bundle",
           "WriterLock", "segments_of"]

FORMAT = "h3bench-evidence/1"
DEFAULT_ROOT = "h3bench-evidence"
SAMPLE_KINDS = ("warmup", "measured", "audit", "profile")

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SERVERS = "servers.jsonl"
LIFECYCLE = "lifecycle.jsonl"
RESUME = "resume.json"
TELEMETRY = "telemetry.jsonl"
VERDICT = "verdict.json"
FINAL = "final.json"
ADDENDA = "addenda.jsonl"
OUTPUTS = "outputs"
LOGS = "logs"
QUALITY = "quality"
PROFILES = "profiles"
METRICS = "metrics"
CONTRACTS = "contracts"
WRITER_LOCK = ".writer.lock"  # not evidence: who writes the bundle now (verify and the seals ignore it)

OUTPUT_NAME = re.compile(r"([0-9a-f]{64})\.mp4")

_PathLike = str | os.PathLike[str]


def segments_of(path: Path) -> list[str]:
    """The segments of the bundle at ``path``, in order: ``""`` and each ``"resume-<n>/"``."""
    resumes = [p.name for p in path.glob("resume-*") if p.is_dir() and p.name[7:].isdigit()]
    return ["", *(f"{name}/" for name in sorted(resumes, key=lambda name: int(name[7:])))]


class WriterLock:
    """The one process that writes a bundle: an exclusive ``flock`` on ``<bundle>/.writer.lock``.

    The lock file holds the writer's pid, host, run id and start, so a second
    writer is refused naming the first. ``flock`` belongs to the open file, so
    the kernel releases it when the writer exits, even by SIGKILL: a killed
    run never leaves a bundle locked. The descriptor is not inherited by
    child processes (servers), so none of them can keep it.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, bundle: Path, session: str | None = None) -> WriterLock:
        """Take the lock of the bundle at ``bundle`` now; BundleBusyError naming the holder when another has it."""
        path = bundle / WRITER_LOCK
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise files.write_error(exc, path, "cannot open the bundle's writer lock") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise _busy(bundle, holder) from None
            if _same_file(fd, path):
                break
            os.close(fd)  # the last holder removed that file as it let go: lock the one that is there now
        record = {"pid": os.getpid(), "host": socket.gethostname(), "session": session, "since": files.now()}
        os.ftruncate(fd, 0)
        files.write_all(fd, (json.dumps(record) + "\n").encode())
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let another writer in; safe to call twice.

        The file goes first, while the lock is still held: whoever opened it
        meanwhile sees that it is no longer the lock file and opens the new one.
        """
        if self._fd is not None:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _busy(bundle: Path, holder: dict[str, Any]) -> BundleBusyError:
    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    who = (f"pid {pid} on {holder.get('host', 'this host')}, run {holder.get('session')}, since {holder.get('since')}"
           if pid is not None else "a process that has not written its pid yet")
    return BundleBusyError(f"{bundle}: another campaign is writing this bundle ({who}); a bundle is written by one "
                           "campaign at a time: wait until it ends (or stop it), then --resume", path=str(bundle),
                           pid=pid)


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file says of its holder; empty when it is not (yet) readable."""
    try:
        data = os.pread(fd, 4096, 0)
        found = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


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

    def __init__(self, path: Path, spec_id: str, state: _State, segment: str = "",
                 lock: WriterLock | None = None) -> None:
        self.path = path
        self.spec_id = spec_id
        self._state = state
        self.segment = segment  # "" for the first run, "resume-<n>/" for a resume
        # relpath -> running digest of what this writer wrote (WRITING only).
        self._written: dict[str, Digest] = {}
        self._manifest: dict[str, Any] | None = None
        self._telemetry_lock = threading.Lock()  # telemetry comes from the sampler's thread
        self._lock = lock  # the writer lock, held while WRITING

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
            caller knows the bundle's path before it exists (:meth:`planned_path`)
            and can find it again (:meth:`locate`).
        extra
            More sections of the manifest, such as the run's kind and the host's
            evidence (:mod:`h3bench.plan.preflight`).
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
        path = cls._make_dir(root_path, cls.planned_path(root_path, str(label), spec_id, started_at).name)
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
    def planned_path(root: _PathLike, label: str, spec_id: str, started_at: str) -> Path:
        """``<root>/<UTC start>-<label>-<spec id[:12]>``: where :meth:`create` puts the bundle unless that name is taken."""
        label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "run"
        stamp = started_at[:19].replace("-", "").replace(":", "") + "Z"
        return Path(root) / f"{stamp}-{label}-{spec_id[:12]}"

    @classmethod
    def locate(cls, planned: Path, session: str) -> Path | None:
        """The bundle that run ``session`` wrote at ``planned`` (or, if that name was taken, beside it)."""
        for path in [planned, *sorted(planned.parent.glob(f"{planned.name}-*"))]:
            if (path / MANIFEST).is_file() and session in cls.open(path).sessions():
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
            except OSError as exc:
                raise files.write_error(exc, path, "cannot create the bundle directory") from exc
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

    def segments(self) -> list[str]:
        """The runs this bundle holds, in order: ``""`` (the first) and each ``"resume-<n>/"``."""
        return segments_of(self.path)

    @classmethod
    def resume(cls, path: _PathLike, record: Mapping[str, Any], *, lock: WriterLock | None = None) -> Bundle:
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
            if not (bundle.path / last / FINAL).is_file():
                bundle._seal_killed(last)
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

    def _listed(self) -> set[str]:
        listed: set[str] = set()
        for segment in self.segments():
            final = self.path / segment / FINAL
            if final.is_file():
                listed.update(files.read_json(final).get("files", {}))
        return listed

    def _seal_killed(self, segment: str) -> None:
        """Seal a segment whose run was killed before it could: its files as they are now."""
        listed = self._listed()
        others = [s for s in self.segments() if s and s != segment]
        present = sorted(p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file())
        # The segment's own files, and the outputs it stored (they live in the shared outputs/).
        mine = [rel for rel in present if rel not in listed and rel not in (ADDENDA, WRITER_LOCK)
                and not any(rel.startswith(other) for other in others)
                and (rel.startswith((segment, f"{OUTPUTS}/")))]
        final = {
            "ended_at": files.now(),
            "outcome": "killed",
            "error": None,
            "interrupted": "the run ended without closing its bundle (killed, the host went down, or its disk was full)",
            "sealed_by": "resume: the hashes are those the files had when the resume began",
            "files": {rel: sha256_file(self.path / rel).to_dict() for rel in mine},
        }
        self._write_once_sealed(segment + FINAL, final)

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
        outcome = "aborted" if error is not None else "interrupted" if interrupted is not None else "completed"
        final = {
            "ended_at": files.now(),
            "outcome": outcome,
            "error": error,
            "interrupted": interrupted,
            "files": {rel: digest.to_dict() for rel, digest in sorted(self._written.items())},
        }
        self._write_once_sealed(self.segment + FINAL, final)
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

    def store_output(self, src: _PathLike, *, move: bool = False) -> tuple[str, str]:
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

    def store_log(self, src: _PathLike, name: str) -> str:
        """Copy a server log into ``logs/<name>`` (e.g. ``candidate-5s-block2.log``); returns the relpath."""
        relpath = f"{self.segment}{LOGS}/{files.safe_name(name, 'log name', self.path)}"
        self._require_writing(relpath)
        src_path = Path(src)
        if not src_path.is_file():
            raise EvidenceError(f"{src_path}: no such log file to store as {relpath}", path=str(src_path))
        self._write_once(relpath, files.read_chunks(src_path))
        return relpath

    def store_profile(self, src: _PathLike, name: str) -> tuple[str, dict[str, Any]]:
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

    def _write_once_sealed(self, relpath: str, document: dict[str, Any]) -> None:
        """A final.json: written once, listed in no other file."""
        tmp, _ = files.stage((self.path / relpath).parent, [files.json_document(document, self.path / relpath)])
        if not files.commit(tmp, self.path / relpath):
            raise EvidenceError(f"{self.path / relpath}: already written; evidence is never rewritten",
                                path=str(self.path / relpath))

    def _append_addendum(self, relpath: str, digest: Digest) -> None:
        path = self.path / ADDENDA
        files.append_line(path, files.json_line({"path": relpath, **digest.to_dict(), "written_at": files.now()}, path))

    # ---- reading

    @property
    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            self._manifest = files.read_json(self.path / MANIFEST)
        return self._manifest

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
        found = [self.manifest.get("session")]
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
