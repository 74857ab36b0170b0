"""Run an iterator a few items ahead of its consumer, on a background thread.

Decoding (PyAV) and the metric kernels release the GIL for most of their
time, so a file decodes while the frames before it are scored.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Prefetch", "prefetch"]

_T = TypeVar("_T")
_POLL_S = 0.05  # how often a producer blocked on a full buffer looks for the consumer's stop


class Prefetch(Generic[_T]):
    """``items``, produced on a background thread from construction on, at most ``depth`` ahead.

    The thread starts at once, not at the first ``next``: several files given
    to several ``Prefetch`` start decoding together, and a file's decoding
    overlaps whatever the consumer does before it asks for the first frame.
    Errors are re-raised in the consumer. :meth:`close` (or the end, or the
    object being collected) stops the thread and closes ``items`` (and the
    files behind it).
    """

    def __init__(self, items: Iterator[_T], depth: int, *, name: str = "h3bench-prefetch") -> None:
        # The thread's function holds no reference to self, so an abandoned Prefetch is still collected.
        self._buffer: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=_produce, args=(items, self._buffer, self._stop), name=name,
                                        daemon=True)
        self._thread.start()

    def __iter__(self) -> Prefetch[_T]:
        return self

    def __next__(self) -> _T:
        if self._finished:
            raise StopIteration
        done, payload = self._buffer.get()
        if not done:
            return payload
        self.close()
        if payload is not None:
            raise payload
        raise StopIteration

    def close(self) -> None:
        """Stop the producer and wait for it (it closes ``items``); safe to call more than once."""
        self._finished = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __del__(self) -> None:
        self._stop.set()  # the thread ends on its own; joining here could block the collector


def _produce(items: Iterator[Any], buffer: queue.Queue[tuple[bool, Any]], stop: threading.Event) -> None:
    def put(done: bool, payload: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put((done, payload), timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

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


def prefetch(items: Iterator[_T], depth: int, *, name: str = "h3bench-prefetch") -> Prefetch[_T]:
    """:class:`Prefetch` of ``items``: started now, at most ``depth`` ahead of the consumer."""
    return Prefetch(items, depth, name=name)
