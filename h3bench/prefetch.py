"""Run a generator a few items ahead of its consumer, on a background thread.

Decoding (PyAV) and the metric kernels release the GIL for most of their
time, so a file decodes while the frames before it are scored.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any, TypeVar

__all__ = ["prefetch"]

_T = TypeVar("_T")


def prefetch(items: Iterator[_T], depth: int, *, name: str = "h3bench-prefetch") -> Generator[_T, None, None]:
    """Yield ``items`` as a background thread produces them, at most ``depth`` ahead.

    Errors are re-raised in the consumer; closing the consumer stops the
    thread and closes ``items`` (and the files behind it).
    """
    buffer: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(done: bool, payload: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put((done, payload), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(False, item):
                    return
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(True, exc)
            return
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        put(True, None)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            done, payload = buffer.get()
            if done:
                if payload is not None:
                    raise payload
                return
            yield payload
    finally:
        stop.set()
        thread.join()
