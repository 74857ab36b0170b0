"""The content identity of a checkpoint directory: every file's SHA-256, and one hash over them all.

A checkpoint is tens of GB, so its files are hashed in parallel threads
(hashlib releases the GIL on large updates), the hashing shows its progress,
and each file's hash is cached on (path, size, mtime_ns, inode): a repeat
run reads nothing. The identity is ``sha256:`` and the SHA-256 of the sorted
manifest, one line ``<sha256>  <size>  <relative path>`` per file, so it
changes with any file's bytes, name or presence. Directories of version
control and download tools (``.git``, ``.cache``) are not checkpoint content
and are left out. ``benchmarks/bench_checkpoint.py`` measures the throughput
against ``sha256sum`` over the same files.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from h3bench.errors import UsageError
from h3bench.evidence.hashing import sha256_file

__all__ = ["CACHE_ENV", "CheckpointFile", "CheckpointIdentity", "content_identity", "default_cache"]

CACHE_ENV = "H3BENCH_HASH_CACHE"
SKIPPED_DIRS = frozenset({".git", ".cache"})
_PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class CheckpointFile:
    name: str  # relative to the checkpoint directory, with "/"
    size: int
    sha256: str


@dataclass(frozen=True)
class CheckpointIdentity:
    """A checkpoint's identity, its files, and how much of it came from the cache."""

    identity: str  # "sha256:<hex>" of the manifest
    files: tuple[CheckpointFile, ...]
    total_bytes: int
    hashed_bytes: int  # read this time; the rest came from the cache

    @property
    def manifest(self) -> str:
        return _manifest(self.files)


def _manifest(files: tuple[CheckpointFile, ...]) -> str:
    return "".join(f"{f.sha256}  {f.size}  {f.name}\n" for f in files)


def default_cache() -> Path:
    """``$H3BENCH_HASH_CACHE``, else ``$XDG_CACHE_HOME/h3bench/file-hashes.json`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "h3bench" / "file-hashes.json"


def _files(root: Path) -> list[tuple[str, Path, os.stat_result]]:
    found = []
    for directory, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in names:
            path = Path(directory) / name
            st = path.stat()  # a symlink (a Hugging Face snapshot) counts as the file it points at
            found.append((path.relative_to(root).as_posix(), path, st))
    return sorted(found, key=lambda item: item[0])


def _key(path: Path, st: os.stat_result) -> str:
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


def _load(cache: Path) -> dict[str, str]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(cache: Path, entries: dict[str, str]) -> None:
    """Write the cache atomically; a cache that cannot be written only costs the next run its time."""
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".file-hashes-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(entries, handle, sort_keys=True)
        os.replace(tmp, cache)


class _Progress:
    """Bytes hashed so far, shown every few seconds as one line."""

    def __init__(self, root: Path, total: int, show: Callable[[str], None] | None) -> None:
        self.root, self.total, self.show = root, total, show
        self.done = 0
        self.t0 = self.last = time.monotonic()
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if self.show is None or now - self.last < _PROGRESS_EVERY_S:
                return
            self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        self.show(f"h3bench: hashing checkpoint {self.root}: {self.done / 1e9:.1f} of {self.total / 1e9:.1f} GB "
                  f"({self.done / max(self.total, 1):.0%}), {rate / 1e9:.2f} GB/s")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def content_identity(
    root: str | os.PathLike[str],
    *,
    cache: Path | None = None,
    workers: int | None = None,
    progress: Callable[[str], None] | None = _stderr,
) -> CheckpointIdentity:
    """Hash every file under ``root`` (in parallel, cached) into one identity.

    Parameters
    ----------
    cache
        The hash cache file (default :func:`default_cache`).
    workers
        Hashing threads; default ``min(8, cpu count)``.
    progress
        Receives a progress line every few seconds while files are read; None is silent.
    """
    root_path = Path(root)
    if not root_path.is_dir():
        raise UsageError(f"checkpoint {root_path} is not a directory; its content identity needs the files")
    cache_path = cache if cache is not None else default_cache()
    entries = _load(cache_path)
    listing = _files(root_path)
    todo = [(name, path, st) for name, path, st in listing if _key(path, st) not in entries]
    meter = _Progress(root_path, sum(st.st_size for _, _, st in todo), progress)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        digests = dict(zip((name for name, _, _ in todo),
                           pool.map(lambda item: sha256_file(item[1], meter.add).hexdigest, todo), strict=True))
    for name, path, st in todo:
        entries[_key(path, st)] = digests[name]
    if todo:
        _save(cache_path, entries)
    files = tuple(CheckpointFile(name, st.st_size, entries[_key(path, st)]) for name, path, st in listing)
    return CheckpointIdentity(
        identity="sha256:" + hashlib.sha256(_manifest(files).encode("utf-8")).hexdigest(),
        files=files,
        total_bytes=sum(f.size for f in files),
        hashed_bytes=meter.done,
    )
