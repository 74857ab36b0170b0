"""SIGTERM, SIGHUP and Ctrl-C end a campaign the same way: cleanly, and said so.

``timeout``, a cancelled CI job, a closed SSH terminal and a batch scheduler
end a process with SIGTERM or SIGHUP, not Ctrl-C. While :func:`installed`,
the first of these signals raises :class:`SignalInterrupt` (a
``KeyboardInterrupt``, so pytest treats it as Ctrl-C): the running server is
stopped through its normal path with the shared shutdown budget, the
interrupted block is recorded as incomplete, and the bundle is sealed as
interrupted, naming the signal. A second signal during that shutdown does not
wait: it SIGKILLs every live server tree at once, and the bundle is still
sealed.

What the harness cannot clean up (it was SIGKILLed, or the OOM killer took
it) the server's parent-death signal does (:func:`h3bench.server.proctree.die_with_parent`),
and a resume sweeps what is left.

An evidence write and its record (a JSONL line and the running hash that
``final.json`` lists) happen together or not at all: inside :func:`deferred`
a signal waits until the write is complete.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["SIGNALS", "SignalInterrupt", "deferred", "installed", "on_second_signal", "received"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C; ``signame`` names it."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


_received: list[str] = []  # the signals of this process's run, in order
_second: list[Callable[[], None]] = []  # what a second signal does (the server module kills live trees)
_deferring = 0  # inside deferred()
_pending: list[int] = []  # a signal that arrived while deferring


def on_second_signal(action: Callable[[], None]) -> None:
    """Run ``action`` when a second signal arrives during the shutdown that the first began."""
    _second.append(action)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal that arrives inside waits until the block is done (a write and its record)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            _handle(_pending.pop(0), None)


def received() -> str | None:
    """The first signal that interrupted the run, or None."""
    return _received[0] if _received else None


def _handle(signum: int, _frame: FrameType | None) -> None:
    if _deferring:
        _pending.append(signum)
        return
    name = signal.Signals(signum).name
    _received.append(name)
    if len(_received) > 1:
        for action in _second:  # a second signal: no more waiting for a graceful stop
            action()
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SignalInterrupt(name)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Handle the signals while the block is entered (in the main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {sig: signal.signal(sig, _handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
