"""Progress of long waits: one live line on a terminal, one plain line a minute in a log.

On real hardware one 15 s request takes more than an hour and a server start
minutes, so the harness says what it is waiting for. While a step runs (a
server start, a request, a quality comparison) a background thread keeps one
line up to date: what is running, how long it has run, the server's own
progress percentage when its job API reports one, the ETA of the step (from
earlier samples of the same workload and arm) and of the whole campaign.

On a terminal the line is redrawn in place every half second and cleared when
the step ends, without breaking pytest's own output; without one (CI, a pipe)
nothing is animated: a plain line is printed every ``interval_s`` seconds
(``--progress-interval``, default 60), and only for steps that last that long.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Progress", "Step", "clock"]

_REFRESH_S = 0.5


def clock(seconds: float | None) -> str:
    """``1:02:03``, ``4:05``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(max(0, round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class Step:
    """What is running now; ``server_percent`` is set by whoever polls the server."""

    what: str
    started: float
    eta_s: float | None = None  # the step's expected length
    campaign_left_s: Callable[[], float | None] | None = None  # what is left after this step
    server_percent: int | None = None
    status: str = ""  # the campaign's own words on where it stands, last on the line
    unit: str = ""  # what ``done`` counts (frames of a quality comparison)
    done: int | None = None
    total: int | None = None  # None: not known in advance

    def advance(self, done: int, total: int | None) -> None:
        """``done`` of ``total`` units so far: the line shows the count, and the ETA follows the measured rate."""
        self.done, self.total = done, total

    def _eta(self, elapsed: float) -> float | None:
        if self.done and self.total:  # the rate measured in this step beats any earlier guess
            return elapsed / self.done * self.total
        return self.eta_s

    def line(self, now: float) -> str:
        elapsed = now - self.started
        parts = [f"h3bench {self.what}", clock(elapsed)]
        if self.done is not None:
            parts.append(f"{self.unit} {self.done}/{self.total}".strip() if self.total else
                         f"{self.unit} {self.done}".strip())
        if self.server_percent is not None:
            parts.append(f"server {self.server_percent}%")
        eta = self._eta(elapsed)
        if eta is not None:
            parts.append(f"ETA {clock(max(0.0, eta - elapsed))}")
        after = self.campaign_left_s() if self.campaign_left_s else None
        if after is not None:
            parts.append(f"campaign {clock(max(0.0, (eta or elapsed) - elapsed) + after)}")
        if self.status:
            parts.append(self.status)
        return " · ".join(parts)


class Progress:
    """Shows the current step: ``live(text)`` redraws one line on a terminal, ``line(text)`` prints one."""

    def __init__(
        self,
        *,
        live: Callable[[str], None] | None = None,
        clear: Callable[[], None] | None = None,
        line: Callable[[str], None] | None = None,
        interval_s: float = 60.0,
    ) -> None:
        self._live, self._clear, self._line = live, clear, line
        self.interval_s = interval_s
        self.current: Step | None = None

    @classmethod
    def on(cls, stream: TextIO, *, interval_s: float = 60.0, restore: Callable[[], str] = lambda: "",
           line: Callable[[str], None] | None = None) -> Progress:
        """Progress on ``stream`` (a command's stderr): a live line on a terminal, else a plain line per interval.

        ``restore`` gives the text the live line covered (what pytest had written on that line), put back when
        a step ends; ``line`` prints a plain line its own way.
        """
        if not stream.isatty():
            return cls(line=line or (lambda text: print(text, file=stream, flush=True)), interval_s=interval_s)
        width = shutil.get_terminal_size().columns - 1
        shown = [0]

        def live(text: str) -> None:
            text = text[:width]
            stream.write("\r" + text.ljust(shown[0]))
            stream.flush()
            shown[0] = len(text)

        def clear() -> None:
            if shown[0]:
                stream.write("\r" + " " * shown[0] + "\r" + restore())
                stream.flush()
                shown[0] = 0

        return cls(live=live, clear=clear, interval_s=interval_s)

    @property
    def animated(self) -> bool:
        return self._live is not None

    @contextlib.contextmanager
    def step(
        self, what: str, *, eta_s: float | None = None, campaign_left_s: Callable[[], float | None] | None = None,
        status: str = "", unit: str = "",
    ) -> Iterator[Step]:
        """Show ``what`` while the block runs; steps do not nest (an inner one replaces the outer line)."""
        step = Step(what, time.monotonic(), eta_s, campaign_left_s, status=status, unit=unit)
        outer, self.current = self.current, step
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(step, stop), name="h3bench-progress", daemon=True)
        if self._live is not None or self._line is not None:
            ticker.start()
        try:
            yield step
        finally:
            stop.set()
            if ticker.is_alive():
                ticker.join()
            if self._clear is not None:
                self._clear()
            self.current = outer

    def _tick(self, step: Step, stop: threading.Event) -> None:
        if self._live is not None:
            while not stop.wait(_REFRESH_S):
                self._live(step.line(time.monotonic()))
        elif self._line is not None:
            while not stop.wait(self.interval_s):
                self._line(step.line(time.monotonic()))
