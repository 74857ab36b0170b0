"""The checkpoint staged before the blocks: where every server start reads it fastest, the same for every arm.

An H3 start on a 950PR spent 31 min 50 s loading weights from network storage
(the recipe); staging the weights on local disk or in a warm page cache cut
start-ups by 55-65 % elsewhere (sglang #40230). Two modes:

``copy``
    the checkpoint's files into ``target``/<its directory name> on local disk; the
    servers read the copy. Refused before anything is written when ``target``'s file
    system has less free space than the checkpoint (``shutil.disk_usage``); a copy
    already there whose identity matches is kept.
``page_cache``
    every file read once, after ``posix_fadvise(WILLNEED)``, so that the first start
    finds it in memory. Refused when the host's available memory is less than the checkpoint.

Either way the source's identity is verified once first (:mod:`h3bench.host.checkpoint`,
its hashes cached), and a copy is verified again after it is written. The simulator
has no checkpoint on disk: staging then reads nothing, and its servers are told
(``$H3BENCH_WEIGHTS_STAGED``) so that their simulated weight load is the staged one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from h3bench.errors import UsageError, WeightIntegrityError
from h3bench.host.checkpoint import CheckpointIdentity, content_identity

__all__ = ["STAGED_ENV", "Staged", "available_memory", "stage_checkpoint", "staged_path"]

STAGED_ENV = "H3BENCH_WEIGHTS_STAGED"  # every server learns the staging mode (the simulator shortens its load)
_CHUNK = 16 * 1024 * 1024
_UNPINNED = "UNPINNED"


@dataclass(frozen=True)
class Staged:
    """What staging did, as the bundle's manifest keeps it (``host.staging``)."""

    mode: str  # "copy" or "page_cache"
    source: str
    path: str  # what the servers read
    identity: str | None  # verified; None where there are no files (the simulator)
    bytes: int
    seconds: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def staged_path(model: str, mode: str, target: str | None) -> str:
    """The checkpoint path the servers read: a copy's, else the model's own."""
    if mode == "copy" and target is not None and Path(model).is_dir():
        return str(Path(target) / Path(model).resolve().name)
    return model


def available_memory() -> int:
    """Bytes the kernel says can be used without swapping (``MemAvailable``); 0 when it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _verified(path: Path, expected: str, progress: Callable[[str], None] | None) -> CheckpointIdentity:
    found = content_identity(path, progress=progress)
    if expected not in (_UNPINNED, found.identity):
        raise WeightIntegrityError(f"checkpoint {path} has identity {found.identity}, but the spec pins {expected}; "
                                   "staging copies only the checkpoint the spec names", path=str(path),
                                   expected_sha256=expected, actual_sha256=found.identity)
    return found


def _existing_dir(path: Path) -> Path:
    """``path`` or its nearest existing parent: where its free space is measured."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _copy(source: Path, files: CheckpointIdentity, dest: Path) -> None:
    """Copy into a temporary sibling, then rename: a copy cut short is never taken for a staged checkpoint."""
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for item in files.files:
        out = partial / item.name
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / item.name, out)
    if dest.exists():
        shutil.rmtree(dest)
    partial.rename(dest)


def _warm(source: Path, files: CheckpointIdentity) -> None:
    """Read every file once, telling the kernel first that it will be needed."""
    for item in files.files:
        fd = os.open(source / item.name, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            while os.read(fd, _CHUNK):
                pass
        finally:
            os.close(fd)


def stage_checkpoint(model: str, identity: str, mode: str, target: str | None, *,
                     progress: Callable[[str], None] | None = None) -> Staged:
    """Stage the checkpoint at ``model`` (verified against ``identity``) by ``mode``; what it did.

    Raises
    ------
    UsageError
        The target has less free space (``copy``), or the host less available memory
        (``page_cache``), than the checkpoint: nothing is written.
    WeightIntegrityError
        The source, or the copy, is not the checkpoint the spec pins.
    """
    source = Path(model)
    t0 = time.monotonic()
    if not source.is_dir():
        return Staged(mode, model, model, None, 0, 0.0, f"{model} is not a directory here: no files to stage")
    files = _verified(source, identity, progress)
    if mode == "page_cache":
        free = available_memory()
        if free < files.total_bytes:
            raise UsageError(f"staging {source} in the page cache needs {files.total_bytes / 1e9:.2f} GB of memory, "
                             f"but the host has {free / 1e9:.2f} GB available; stage a copy on local disk instead "
                             "([staging] mode = \"copy\")")
        _warm(source, files)
        return Staged(mode, model, model, files.identity, files.total_bytes, time.monotonic() - t0)
    assert target is not None, "a copy needs its target (the spec requires it)"
    dest = Path(staged_path(model, mode, target))
    if dest.is_dir() and content_identity(dest, progress=progress).identity == files.identity:
        return Staged(mode, model, str(dest), files.identity, files.total_bytes, time.monotonic() - t0,
                      "a verified copy was already there")
    free = shutil.disk_usage(_existing_dir(dest.parent)).free
    if free < files.total_bytes:
        raise UsageError(f"staging target {target} has {free / 1e9:.2f} GB free, but the checkpoint {source} needs "
                         f"{files.total_bytes / 1e9:.2f} GB; free space there or choose another [staging] target")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _copy(source, files, dest)
    copied = content_identity(dest, progress=progress)
    if copied.identity != files.identity:
        raise WeightIntegrityError(f"the staged copy {dest} has identity {copied.identity}, not the source's "
                                   f"{files.identity}", path=str(dest), expected_sha256=files.identity,
                                   actual_sha256=copied.identity)
    return Staged(mode, model, str(dest), files.identity, files.total_bytes, time.monotonic() - t0)
