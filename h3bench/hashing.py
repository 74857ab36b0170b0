"""SHA-256 of files and streams: the one hasher behind every pin and every evidence hash."""

from __future__ import annotations

import hashlib
import os
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


def sha256_stream(handle: BinaryIO) -> Digest:
    """Hash what is left of an open binary stream, in chunks."""
    digest = Digest()
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
    return digest


def sha256_file(path: str | os.PathLike[str]) -> Digest:
    """Hash a whole file, in chunks (a multi-GB input never sits in memory)."""
    with open(path, "rb") as handle:
        return sha256_stream(handle)
