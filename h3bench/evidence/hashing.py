"""SHA-256 of files and streams: the one hasher behind every pin and every evidence hash."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = ["CHUNK", "Digest", "sha256_file", "sha256_stream"]

CHUNK = 1 << 20


class Digest:
    """A running SHA-256 and byte count."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        self._sha.update(data)
        self.size += len(data)

    @property
    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.hexdigest, "size": self.size}


def sha256_stream(handle: BinaryIO, progress: Callable[[int], None] | None = None) -> Digest:
    """Hash what is left of an open binary stream, in chunks read into one reused buffer.

    ``progress`` is called with the size of each chunk once it is hashed.
    """
    digest = Digest()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while n := handle.readinto(view):  # type: ignore[attr-defined]
        digest.update(view[:n])
        if progress is not None:
            progress(n)
    return digest


def sha256_file(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None) -> Digest:
    """Hash a whole file, in chunks (a multi-GB input never sits in memory)."""
    with open(path, "rb", buffering=0) as handle:
        return sha256_stream(handle, progress)
