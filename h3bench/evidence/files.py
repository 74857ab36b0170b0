"""The file primitives of an evidence bundle: write-once files, appended lines, strict JSON; and reading TOML.

Write-once files are staged in a temporary file in the same directory,
flushed and fsynced, then given their name with ``os.link``, which, unlike
``os.replace``, refuses to replace an existing name; the directory is fsynced
after. A crash at any point leaves the name either absent or complete. JSONL
records are appended as one complete line with ``O_APPEND`` and fsynced; a
reader ignores an unterminated last line, so a line is either wholly there or
not. :func:`read_toml` reads the TOML files a user or the package gives (a
RunSpec, pins, recipes), each failure a usage error that names the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import shutil
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from h3bench.errors import DiskFullError, EvidenceError, H3BenchError, UsageError
from h3bench.evidence.hashing import CHUNK, Digest

TMP_PREFIX = ".tmp-"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Names that callers choose (log names, validator versions) become file names.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def filesystem_of(path: Path) -> Path:
    """The mount point of the file system that holds ``path`` (or would hold it)."""
    here = Path(os.path.abspath(path))
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return here


def write_error(exc: OSError, path: Path, what: str) -> EvidenceError:
    """A failed write as the error that says what happened; a full file system is a :class:`DiskFullError`.

    A full disk is not this file's problem but the campaign's: every later
    write would fail too, so the caller stops rather than carrying on.
    """
    if exc.errno in _NO_SPACE:
        return DiskFullError(f"no space left on {filesystem_of(path)} (writing {path}): {what}", path=str(path))
    return EvidenceError(f"{path}: {what} ({exc})", path=str(path))


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_json(value: Any, where: str, at: str = "$") -> None:
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
            check_json(item, where, f"{at}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_json(item, where, f"{at}[{index}]")
        return
    raise EvidenceError(f"{where}: {at} is a {type(value).__name__}, not a JSON value", path=where)


def json_document(value: Any, where: Path) -> bytes:
    check_json(value, str(where))
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def json_line(value: Any, where: Path) -> bytes:
    if not isinstance(value, dict):
        raise EvidenceError(f"{where}: a record must be a dict, not {type(value).__name__}", path=str(where))
    check_json(value, str(where))
    # ensure_ascii escapes every newline and separator, so the record is exactly one line.
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")


def safe_name(name: str, what: str, bundle: Path) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise EvidenceError(
            f"{bundle}: {what} {name!r} is not a safe file name (letters, digits and ._+-, at most 128, "
            "not starting with a dot)",
            path=str(bundle),
        )
    return name


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def stage(directory: Path, chunks: Iterable[bytes]) -> tuple[Path, Digest]:
    """Write ``chunks`` to a new temporary file in ``directory``, fsynced, and hash them."""
    tmp = directory / f"{TMP_PREFIX}{secrets.token_hex(8)}"
    digest = Digest()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise write_error(exc, tmp, "the file could not be created, nothing written") from exc
        raise
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
                digest.update(chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in _NO_SPACE:
            raise write_error(exc, tmp, "write failed, nothing written") from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, digest


def commit(tmp: Path, target: Path) -> bool:
    """Give the staged ``tmp`` the name ``target``; False when the name is taken.

    ``os.link`` is atomic and never replaces an existing name. ``tmp`` is removed either way.
    """
    try:
        os.link(tmp, target)
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise write_error(exc, target, "the file could not be named, nothing written") from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(target.parent)
    return created


def replace_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` under ``path`` whole or not at all, replacing what was there.

    For files outside a bundle (reports, look files, exports): a reader never
    sees half a file, and a full disk leaves none. An OSError is the caller's
    to name (each names its output its own way).
    """
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{secrets.token_hex(4)}")
    try:
        with tmp.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: bytes) -> None:
    """Append one complete line with O_APPEND and fsync it; on failure the file is left as it was."""
    created = not path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise write_error(exc, path, "cannot open for append") from exc
    try:
        end = os.fstat(fd).st_size
        try:
            write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:
            # Drop only our own partial bytes, so the file still ends on a complete line (and a file this
            # append made, which holds nothing, goes again).
            os.ftruncate(fd, end)
            if created:
                path.unlink(missing_ok=True)
            raise write_error(exc, path, "append failed, line not written") from exc
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
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


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise EvidenceError(f"{path}: no such file", path=str(path)) from exc
    except ValueError as exc:
        raise EvidenceError(f"{path}: not valid JSON ({exc})", path=str(path)) from exc


def read_toml(
    path: Path,
    what: str,
    *,
    error: Callable[[str], H3BenchError] = UsageError,
    unreadable: str = "cannot read {what} {path}: {reason}",
    invalid: str = "{path}: TOML syntax error: {reason}",
) -> dict[str, Any]:
    """The top-level table of the TOML file ``path`` (``what`` it is, for the messages).

    A file that cannot be read (missing, unreadable, not UTF-8) raises
    ``error(unreadable)``, one that is not TOML ``error(invalid)``, each
    message formatted with ``what``, ``path`` and the ``reason``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise error(unreadable.format(what=what, path=path, reason=reason)) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(invalid.format(what=what, path=path, reason=exc)) from exc


# Beyond the outputs a bundle holds logs, JSONL records and the report: a margin, not a measurement.
SPACE_MARGIN = 1.5


def require_writable(root: Path, need_bytes: float) -> None:
    """Check that bundles can be made under ``root`` and that its file system has ``need_bytes`` (with a margin).

    Where ``root`` does not exist yet, its nearest existing ancestor is checked.

    Raises
    ------
    UsageError
        ``root`` cannot be created or written, or has too little space; one message that says which and where.
    """
    from h3bench.errors import UsageError

    # The directory itself is made by the first block: a session that runs nothing (--collect-only) writes nothing.
    existing = next(p for p in (root, *root.parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(existing))
        fd, probe = tempfile.mkstemp(prefix=".h3bench-write-check-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"the evidence directory {root} cannot be written ({exc.strerror or exc}); "
                         "choose another with --evidence-dir, nothing was started") from exc
    free = shutil.disk_usage(existing).free
    if free < need_bytes * SPACE_MARGIN:
        raise UsageError(f"the evidence directory {root} has {free / 1e6:.0f} MB free, but the plan estimates "
                         f"{need_bytes / 1e6:.0f} MB for this campaign's outputs ({need_bytes * SPACE_MARGIN / 1e6:.0f} "
                         "MB with the margin for logs and records); free some space or choose another --evidence-dir")
