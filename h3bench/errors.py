"""The one error tree of h3bench.

    H3BenchError
    ├── UsageError             a bad argument or option; the CLI exits 2
    │   └── BundleBusyError    a bundle another live campaign is writing (path=, pid=)
    ├── MediaDecodeError       a file that does not probe or decode (path=)
    ├── MediaShapeError        streams that cannot be compared (path=, detail=)
    ├── WeightIntegrityError   LPIPS weights missing, tampered or with wrong keys
    │                          (path=, expected_sha256=, actual_sha256=)
    ├── RunSpecError           a RunSpec that does not validate (field_path=)
    ├── ServerError
    │   ├── ServerStartError   exit before ready or no readiness in budget
    │   │                      (exit_code=, log_tail=, log_path=)
    │   ├── InterferenceError  port taken or a foreign process on the devices
    │   │                      (port=, holder=)
    │   ├── DeviceReportError  npu-smi output that h3bench cannot read
    │   │                      (line_number=, line=, layout=)
    │   ├── CleanupError       a worker, zombie or port survived the stop (survivors=)
    │   └── AttentionBackendError  the workers resolved another attention backend
    │                          than the arm expects (expected=, used=)
    ├── RequestError           a generation request that failed (status_code=, detail=)
    ├── EvidenceError          a bundle that is incomplete, altered or mismatched (path=)
    │   └── DiskFullError      a write that the file system refused for want of space (path=)
    └── NothingToResume        ``--resume`` of a bundle whose run completed (path=)

Context travels as keyword-only attributes, not only inside the message, so
callers (the pytest plugin, the CLI) can report it without parsing text.
Foreign exceptions are translated at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "AttentionBackendError",
    "BundleBusyError",
    "CleanupError",
    "DeviceReportError",
    "DiskFullError",
    "EvidenceError",
    "H3BenchError",
    "InterferenceError",
    "MediaDecodeError",
    "MediaShapeError",
    "NothingToResume",
    "RequestError",
    "RunSpecError",
    "ServerError",
    "ServerStartError",
    "UsageError",
    "WeightIntegrityError",
]


class H3BenchError(Exception):
    """Base of every error h3bench raises on purpose."""


class UsageError(H3BenchError):
    """A bad argument, option or path given by the user."""


class MediaDecodeError(H3BenchError):
    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class MediaShapeError(H3BenchError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class WeightIntegrityError(H3BenchError):
    def __init__(
        self,
        message: str,
        *,
        path: str,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256


class RunSpecError(H3BenchError):
    def __init__(self, message: str, *, field_path: str = "", source: str | None = None) -> None:
        super().__init__(message)
        self.field_path = field_path
        self.source = source


class ServerError(H3BenchError):
    """A server process that did not behave."""


class ServerStartError(ServerError):
    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        log_tail: str = "",
        log_path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.log_path = log_path


class InterferenceError(ServerError):
    def __init__(self, message: str, *, port: int | None = None, holder: str | None = None) -> None:
        super().__init__(message)
        self.port = port
        self.holder = holder


class DeviceReportError(ServerError):
    def __init__(self, message: str, *, line_number: int, line: str, layout: str) -> None:
        super().__init__(message)
        self.line_number = line_number
        self.line = line
        self.layout = layout


class CleanupError(ServerError):
    def __init__(self, message: str, *, survivors: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.survivors = survivors


class AttentionBackendError(ServerError):
    def __init__(self, message: str, *, expected: str, used: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.expected = expected
        self.used = used


class RequestError(H3BenchError):
    def __init__(self, message: str, *, status_code: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.detail = detail


class EvidenceError(H3BenchError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class DiskFullError(EvidenceError):
    """The file system holding ``path`` has no space (or quota) left: the campaign stops, nothing more can be kept."""


class BundleBusyError(UsageError):
    """Another live process writes the bundle (it holds the bundle's writer lock): one campaign at a time."""

    def __init__(self, message: str, *, path: str, pid: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid


class NothingToResume(H3BenchError):
    """``--resume`` of a bundle whose run completed: nothing is run and nothing is written."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
