"""Evidence bundles: one append-only directory per campaign run.

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

Nothing in a bundle is ever rewritten (REFERENCE §8: keep the raw samples; issue 5:
a newer validator writes a new result beside the frozen old one). Write-once files
are staged in a temporary file in the same directory, flushed and fsynced, then
given their name with ``os.link``, which, unlike ``os.replace``, refuses to replace
an existing name; the directory is fsynced after. A crash at any point leaves the
name either absent or complete. JSONL records are appended as one complete line
with ``O_APPEND`` and fsynced; a reader ignores an unterminated last line, so a
line is either wholly there or not.

The writer keeps a running SHA-256 of every file it writes, so ``final.json``
records what the run wrote, not what happened to be on disk at close, and
:func:`verify` catches a change made at any time after the write.
"""

from __future__ import annotations

import enum
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import secrets
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import h3bench
from h3bench.errors import EvidenceError

__all__ = [
    "DEFAULT_ROOT",
    "FORMAT",
    "SAMPLE_KINDS",
    "Bundle",
    "VerifyReport",
    "environment",
    "verify",
]

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

_TMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Names that callers choose (log names, validator versions) become file names.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_OUTPUT_NAME = re.compile(r"([0-9a-f]{64})\.mp4")

_PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- helpers


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_json(value: Any, where: str, at: str = "$") -> None:
    """Refuse anything that would not read back as the same value from strict JSON.

    ``json.dumps`` would otherwise turn ``{1: x}`` into ``{"1": x}`` and write NaN as a
    bare token that other JSON readers reject. Tuples are accepted and read back as lists.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EvidenceError(f"{where}: {at} is {value!r}; JSON has no NaN or infinity (use null)", path=where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise EvidenceError(f"{where}: {at} has the key {key!r}; JSON keys must be strings", path=where)
            _check_json(item, where, f"{at}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_json(item, where, f"{at}[{index}]")
        return
    raise EvidenceError(f"{where}: {at} is a {type(value).__name__}, not a JSON value", path=where)


def _json_document(value: Any, where: Path) -> bytes:
    _check_json(value, str(where))
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def _json_line(value: Any, where: Path) -> bytes:
    if not isinstance(value, dict):
        raise EvidenceError(f"{where}: a record must be a dict, not {type(value).__name__}", path=str(where))
    _check_json(value, str(where))
    # ensure_ascii escapes every newline and separator, so the record is exactly one line.
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")


def _safe_name(name: str, what: str, bundle: Path) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise EvidenceError(
            f"{bundle}: {what} {name!r} is not a safe file name (letters, digits and ._+-, at most 128, "
            "not starting with a dot)",
            path=str(bundle),
        )
    return name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Digest:
    """A running SHA-256 and byte count."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0

    def update(self, data: bytes) -> None:
        self._sha.update(data)
        self.size += len(data)

    @property
    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.hexdigest, "size": self.size}


def _hash_file(path: Path) -> _Digest:
    digest = _Digest()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _stage(directory: Path, chunks: Iterable[bytes]) -> tuple[Path, _Digest]:
    """Write ``chunks`` to a new temporary file in ``directory``, fsynced, and hash them."""
    tmp = directory / f"{_TMP_PREFIX}{secrets.token_hex(8)}"
    digest = _Digest()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            for chunk in chunks:
                _write_all(fd, chunk)
                digest.update(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, digest


def _commit(tmp: Path, target: Path) -> bool:
    """Give the staged ``tmp`` the name ``target``; False when the name is taken.

    ``os.link`` is atomic and never replaces an existing name. ``tmp`` is removed either way.
    """
    try:
        os.link(tmp, target)
        created = True
    except FileExistsError:
        created = False
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)
    return created


def _append_line(path: Path, line: bytes) -> None:
    """Append one complete line with O_APPEND and fsync it; on failure the file is left as it was."""
    created = not path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot open for append ({exc})", path=str(path)) from exc
    try:
        end = os.fstat(fd).st_size
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:
            # Drop only our own partial bytes, so the file still ends on a complete line.
            os.ftruncate(fd, end)
            raise EvidenceError(f"{path}: append failed, line not written ({exc})", path=str(path)) from exc
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record); an unterminated last line is an unfinished append and is skipped."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    with f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                return
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise EvidenceError(f"{path}: line {number} is not JSON ({exc})", path=str(path)) from exc
            if not isinstance(record, dict):
                raise EvidenceError(f"{path}: line {number} is not a JSON object", path=str(path))
            yield number, record


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise EvidenceError(f"{path}: no such file", path=str(path)) from exc
    except ValueError as exc:
        raise EvidenceError(f"{path}: not valid JSON ({exc})", path=str(path)) from exc


# --------------------------------------------------------------------------- environment


def _cpu_model() -> str:
    """The CPU model from /proc/cpuinfo; aarch64 hosts (Kunpeng) give only implementer and part."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    if "model name" in fields:
        return fields["model name"]
    if "cpu implementer" in fields:
        return f"implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    return platform.processor() or "unknown"


def _packages() -> dict[str, str]:
    packages: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        # The first distribution on sys.path is the one that imports.
        if name and name not in packages:
            packages[name] = dist.version
    return dict(sorted(packages.items(), key=lambda item: item[0].lower()))


def environment() -> dict[str, Any]:
    """Describe the host and interpreter the way a reviewer needs to repeat a run (REFERENCE §8)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "packages": _packages(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(affinity(0)) if affinity else None,
        "argv": list(sys.argv),
    }


# --------------------------------------------------------------------------- the bundle


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
        self._written: dict[str, _Digest] = {}
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
        """
        root_path = Path(root) if root is not None else Path.cwd() / DEFAULT_ROOT
        if not isinstance(spec_id, str) or not _SHA256_HEX.fullmatch(spec_id):
            raise EvidenceError(f"spec id {spec_id!r} is not a SHA-256 hex digest", path=str(root_path))
        started_at = _now()
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
        }
        # Serialize before creating anything, so bad input leaves no empty bundle behind.
        document = _json_document(manifest, root_path / MANIFEST)
        label = name if name is not None else spec.get("name", "run")
        label = re.sub(r"[^A-Za-z0-9._-]+", "_", str(label)).strip("._") or "run"
        stamp = started_at[:19].replace("-", "").replace(":", "") + "Z"
        path = cls._make_dir(root_path, f"{stamp}-{label}-{spec_id[:12]}")
        for sub in (OUTPUTS, LOGS, QUALITY):
            (path / sub).mkdir()
        _fsync_dir(path)
        bundle = cls(path, spec_id, _State.WRITING)
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
            _fsync_dir(root)
            return path
        raise EvidenceError(f"{root}: too many bundles named {base}", path=str(root))

    @classmethod
    def open(cls, path: _PathLike) -> Bundle:
        """Open an existing bundle for reading (and for adding a verdict or quality results)."""
        bundle_path = Path(path)
        if not (bundle_path / MANIFEST).is_file():
            raise EvidenceError(f"{bundle_path}: not an evidence bundle (no {MANIFEST})", path=str(bundle_path))
        manifest = _read_json(bundle_path / MANIFEST)
        spec_id = manifest.get("spec_id") if isinstance(manifest, dict) else None
        if not isinstance(spec_id, str):
            raise EvidenceError(f"{bundle_path / MANIFEST}: no spec_id", path=str(bundle_path / MANIFEST))
        bundle = cls(bundle_path, spec_id, _State.SEALED)
        bundle._manifest = manifest
        return bundle

    def close(self, error: str | None = None) -> None:
        """Seal the bundle: write ``final.json`` with the end time, outcome and file hashes.

        Safe to call twice; a no-op on a bundle that is already sealed. ``error`` marks
        the run as aborted and says why.
        """
        if self._state is not _State.WRITING:
            return
        final = {
            "ended_at": _now(),
            "outcome": "aborted" if error is not None else "completed",
            "error": error,
            "files": {rel: digest.to_dict() for rel, digest in sorted(self._written.items())},
        }
        self._write_once(FINAL, [_json_document(final, self.path / FINAL)])
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
            tmp, digest = _stage(self.path / OUTPUTS, _read_chunks(src_path))
            relpath = f"{OUTPUTS}/{digest.hexdigest}.mp4"
            if _commit(tmp, self.path / relpath):
                self._written[relpath] = digest
            if move:
                src_path.unlink()
        except OSError as exc:
            raise EvidenceError(f"{self.path / OUTPUTS}: cannot store {src_path} ({exc})", path=str(src_path)) from exc
        return digest.hexdigest, relpath

    def store_log(self, src: _PathLike, name: str) -> str:
        """Copy a server log into ``logs/<name>`` (e.g. ``candidate-5s-block2.log``); returns the relpath."""
        relpath = f"{LOGS}/{_safe_name(name, 'log name', self.path)}"
        self._require_writing(relpath)
        src_path = Path(src)
        if not src_path.is_file():
            raise EvidenceError(f"{src_path}: no such log file to store as {relpath}", path=str(src_path))
        self._write_once(relpath, _read_chunks(src_path))
        return relpath

    def write_verdict(self, verdict: dict[str, Any]) -> None:
        """Write ``verdict.json``, once."""
        self._write_once(VERDICT, [_json_document(verdict, self.path / VERDICT)])

    def write_quality(self, validator_version: str, result: dict[str, Any]) -> str:
        """Write ``quality/<validator_version>.json``; an existing version is never overwritten.

        Returns the relpath. Re-validating with a newer validator adds a file beside the old one.
        """
        relpath = f"{QUALITY}/{_safe_name(validator_version, 'validator version', self.path)}.json"
        document = {"validator_version": validator_version, "written_at": _now(), "result": result}
        self._write_once(relpath, [_json_document(document, self.path / relpath)])
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
        line = _json_line(record, self.path / relpath)
        _append_line(self.path / relpath, line)
        self._written.setdefault(relpath, _Digest()).update(line)

    def _write_once(self, relpath: str, chunks: Iterable[bytes]) -> None:
        target = self.path / relpath
        if target.exists():
            raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
        try:
            tmp, digest = _stage(target.parent, chunks)
            created = _commit(tmp, target)
        except OSError as exc:
            raise EvidenceError(f"{target}: write failed, nothing written ({exc})", path=str(target)) from exc
        if not created:
            raise EvidenceError(f"{target}: already written; evidence is never rewritten", path=str(target))
        if self._state is _State.WRITING:
            self._written[relpath] = digest
        else:
            self._append_addendum(relpath, digest)

    def _append_addendum(self, relpath: str, digest: _Digest) -> None:
        path = self.path / ADDENDA
        _append_line(path, _json_line({"path": relpath, **digest.to_dict(), "written_at": _now()}, path))

    # ---- reading

    @property
    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            self._manifest = _read_json(self.path / MANIFEST)
        return self._manifest

    @property
    def is_complete(self) -> bool:
        """Whether the run closed (``final.json`` exists)."""
        return (self.path / FINAL).is_file()

    def samples(self, kind: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield the sample records in order, optionally only those of one ``kind``."""
        for _, record in _iter_jsonl(self.path / SAMPLES):
            if kind is None or record.get("kind") == kind:
                yield record

    def lifecycle(self) -> Iterator[dict[str, Any]]:
        """Yield the lifecycle records in order."""
        for _, record in _iter_jsonl(self.path / LIFECYCLE):
            yield record

    def outputs(self) -> tuple[str, ...]:
        """The SHA-256 of every stored output, sorted."""
        return tuple(
            sorted(m.group(1) for p in (self.path / OUTPUTS).glob("*.mp4") if (m := _OUTPUT_NAME.fullmatch(p.name)))
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
        return _read_json(path) if path.is_file() else None

    def quality_versions(self) -> tuple[str, ...]:
        """The validator versions with a stored result, sorted by name."""
        return tuple(sorted(p.stem for p in (self.path / QUALITY).glob("*.json")))

    def read_quality(self, validator_version: str) -> dict[str, Any]:
        """The result that ``validator_version`` wrote."""
        path = self.path / QUALITY / f"{_safe_name(validator_version, 'validator version', self.path)}.json"
        document = _read_json(path)
        if not isinstance(document, dict) or "result" not in document:
            raise EvidenceError(f"{path}: not a quality result (no 'result')", path=str(path))
        return document["result"]


# --------------------------------------------------------------------------- verify


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``problems`` has one human-readable line per finding."""

    path: str
    complete: bool  # final.json was there
    outcome: str | None  # "completed" or "aborted" from final.json
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
        elif not (isinstance(sha, str) and _SHA256_HEX.fullmatch(sha) and isinstance(size, int)):
            problems.append(f"{source}: entry for {rel} has no valid sha256 and size")
        else:
            listed[rel] = (sha, size)
    return listed


def verify(path: _PathLike) -> VerifyReport:
    """Re-hash a bundle and name every file that changed, went missing or appeared unlisted.

    Files are checked against ``final.json`` and ``addenda.jsonl``. A bundle without
    ``final.json`` (an interrupted run) is reported as incomplete; its outputs, which
    are named by their hash, and its addenda are still checked, and its JSONL files
    are still parsed.
    """
    root = Path(path)
    if not root.is_dir():
        raise EvidenceError(f"{root}: no such bundle directory", path=str(root))
    problems: list[str] = []
    hashes: dict[str, _Digest] = {}

    def digest_of(rel: str) -> _Digest:
        if rel not in hashes:
            hashes[rel] = _hash_file(root / rel)
        return hashes[rel]

    present = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())

    try:
        manifest = _read_json(root / MANIFEST)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("spec_id"), str):
            problems.append(f"{MANIFEST}: no spec_id")
    except EvidenceError as exc:
        problems.append(f"{MANIFEST}: {exc}")

    final: Any = None
    if (root / FINAL).is_file():
        try:
            final = _read_json(root / FINAL)
        except EvidenceError as exc:
            problems.append(f"{FINAL}: {exc}")
            final = {}
    else:
        problems.append(f"incomplete: no {FINAL} (the run did not close); only outputs and addenda were verified")
    complete = final is not None
    listed = _listing(final.get("files") if isinstance(final, dict) else None, FINAL, problems) if complete else {}

    addenda: dict[str, tuple[str, int]] = {}
    try:
        for number, record in _iter_jsonl(root / ADDENDA):
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
        if name.startswith(_TMP_PREFIX):
            problems.append(f"{rel}: leftover temporary file from an interrupted write")
            continue
        if rel.startswith(f"{OUTPUTS}/"):
            match = _OUTPUT_NAME.fullmatch(name) if rel.count("/") == 1 else None
            if match is None:
                problems.append(f"{rel}: output not named <sha256>.mp4")
            # A listed output was checked above; an unlisted one can still be checked against its name.
            elif rel not in expected and digest_of(rel).hexdigest != match.group(1):
                problems.append(f"{rel}: changed (content sha256 {digest_of(rel).hexdigest} differs from its name)")
        if complete and rel not in expected and rel not in (FINAL, ADDENDA):
            problems.append(f"{rel}: not listed in {FINAL} or {ADDENDA}")

    for rel in (SAMPLES, LIFECYCLE, ADDENDA):
        if rel in present:
            problems.extend(_jsonl_problems(root / rel, rel))

    return VerifyReport(
        path=str(root),
        complete=complete,
        outcome=final.get("outcome") if isinstance(final, dict) else None,
        files_checked=len(hashes),
        problems=tuple(problems),
    )


def _jsonl_problems(path: Path, rel: str) -> list[str]:
    problems: list[str] = []
    try:
        for _ in _iter_jsonl(path):
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
