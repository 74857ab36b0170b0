"""The first checks of any file: it can be read, it decodes, and it has the streams a check needs."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from h3bench import media
from h3bench.errors import MediaDecodeError, UsageError
from h3bench.quality.checks import Check, Status, blocked_by, not_measured, passes_if

__all__ = ["Probed", "decodable_check", "probe_file", "require_readable", "stream_check"]


def require_readable(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as a string if it names a readable regular file, else raise UsageError.

    A file that exists but does not decode is not a usage error: it fails the
    ``decodable`` check instead.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not a media file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return path


@dataclass(frozen=True)
class Probed:
    """One file's probe, or why it does not decode."""

    role: str
    path: str
    info: media.MediaInfo | None
    error: str | None

    @property
    def video(self) -> media.VideoInfo | None:
        return self.info.video if self.info is not None else None

    @property
    def audio(self) -> media.AudioInfo | None:
        return self.info.audio if self.info is not None else None


def probe_file(role: str, path: str | os.PathLike[str]) -> Probed:
    path = require_readable(path)
    try:
        return Probed(role, path, media.probe(path), None)
    except MediaDecodeError as exc:
        return Probed(role, path, None, str(exc))


def _per_file(files: Sequence[Probed], has: Callable[[Probed], bool]) -> str:
    if len(files) == 1:
        return "yes" if has(files[0]) else "no"
    return ", ".join(f"{f.role} {'yes' if has(f) else 'no'}" for f in files)


def decodable_check(files: Sequence[Probed]) -> Check:
    """Every file decodes. A broken baseline beside a sound candidate is not the candidate's failure.

    It invalidates the comparison instead: the check is not measured, so the
    verdict is INCONCLUSIVE, and the reason names the baseline.
    """
    errors = [f.error for f in files if f.error is not None]
    detail = "; ".join(errors) if errors else "every file probes and decodes"
    value = _per_file(files, lambda f: f.error is None)
    broken = [f for f in files if f.error is not None]
    if broken and all(f.role == "baseline" for f in broken):
        return Check("decodable", Status.NOT_MEASURED, value, "every file decodes",
                     f"the baseline is broken, which invalidates the comparison (not the candidate's failure): {detail}")
    return passes_if(not errors, "decodable", value, "every file decodes", detail)


def stream_check(files: Sequence[Probed], decodable: Check, kind: str) -> Check:
    name, threshold = f"has_{kind}", "present in every file"
    reason = blocked_by([decodable])
    if reason:
        return not_measured(name, threshold, reason)
    missing = [f"{f.path} ({f.role})" for f in files if getattr(f.info, kind) is None]
    detail = f"no {kind} stream in {', '.join(missing)}" if missing else f"{kind} stream present in every file"
    return passes_if(not missing, name, _per_file(files, lambda f: getattr(f.info, kind) is not None), threshold, detail)
