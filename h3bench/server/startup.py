"""A server's start-up by phase, read from its own log as it starts: spawn, device init, weights, compile, ready.

vLLM-Omni's diffusion workers log each step of their start (vllm-omni's
``diffusion/worker/diffusion_worker.py``, ``diffusion/worker/diffusion_model_runner.py``
and ``diffusion/model_loader/diffusers_loader.py``)::

    Worker 0: Initialized device and distributed environment.
    Loading weights took 1843.20 seconds
    Model loading took 3.9712 GiB and 1851.402113 seconds
    Model runner: Platform npu:0 does not support torch inductor, skipping torch.compile.
    Worker 0: Initialization complete.

and, where the platform supports inductor (a GPU), ``Model runner: transformer configured for lazy
regional torch.compile with dynamic=False; ...``: the compile then happens in the first request. vLLM's
own stages compile and capture graphs at start-up (``torch.compile takes 42.18 s in total``,
``Graph capturing finished in 18 secs, took 0.96 GiB``). ``enforce_eager`` logs none of these: no compile.

Durations the engine logs are taken as logged (the slowest worker's). The rest is timed here:
:class:`LogWatch` stamps each new line of the log with the seconds since launch while the harness
waits for readiness, so spawn is launch → the first line, and device init the first line → the last
worker's "Initialized device" line. Only the message is matched: vLLM's prefix varies by version and
worker, and ANSI colour codes are removed first.
"""

from __future__ import annotations

import enum
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["CompileWhere", "LogWatch", "StartupPhases", "compile_differs", "compile_where", "startup_phases", "typical"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_DEVICE_INIT = re.compile(r"Worker \d+: Initialized device and distributed environment")
_WEIGHTS = re.compile(rf"Loading weights took {_NUMBER} seconds")
_MODEL = re.compile(rf"Model loading took {_NUMBER} GiB(?: memory)? and {_NUMBER} seconds")
_TORCH_COMPILE = re.compile(rf"torch\.compile takes {_NUMBER} s in total")
_GRAPHS = re.compile(rf"Graph capturing finished in {_NUMBER} secs")
_LAZY = re.compile(r"configured for lazy \S+ torch\.compile")
_SKIPPED = re.compile(r"does not support torch inductor, skipping torch\.compile")


class CompileWhere(str, enum.Enum):
    """Where the engine compiles, as its log says: nowhere, in the first request, or at start-up."""

    NONE = "none"
    FIRST_REQUEST = "first request"
    STARTUP = "start-up"
    UNKNOWN = "unknown"  # the log says nothing of it (not a vLLM-Omni log, or an older one)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StartupPhases:
    """One server's start-up by phase, seconds; None where its log does not show the phase.

    ``ready_s`` is launch → the first 200 from ``/health``; ``other_s`` what the named phases
    leave of it (imports, the API server, the engine's own set-up).
    """

    ready_s: float | None = None
    spawn_s: float | None = None  # launch → the server's first log line
    device_init_s: float | None = None  # first line → the last worker's "Initialized device ..."
    weight_load_s: float | None = None  # "Loading weights took" (the slowest worker)
    model_load_s: float | None = None  # "Model loading took ... seconds": weights and building the pipeline
    compile_s: float | None = None  # start-up torch.compile and graph capture; None when none was logged
    compile: CompileWhere = CompileWhere.UNKNOWN
    weights_gib: float | None = None  # "Model loading took X GiB" (per device)

    @property
    def other_s(self) -> float | None:
        """``ready_s`` less the named phases (the model load counts once: it holds the weight load)."""
        if self.ready_s is None:
            return None
        load = self.model_load_s if self.model_load_s is not None else self.weight_load_s
        named = [self.spawn_s, self.device_init_s, load, self.compile_s]
        return max(0.0, self.ready_s - sum(x for x in named if x is not None))

    def describe(self) -> str:
        """One line: ``ready 1851.2 s = spawn 3.1 + device init 9.0 + weights 1843.2 + ...; compile: none``."""
        parts = [(name, value) for name, value in (
            ("spawn", self.spawn_s), ("device init", self.device_init_s), ("weights", self.weight_load_s),
            ("model load", self.model_load_s), ("compile", self.compile_s)) if value is not None]
        ready = "ready ?" if self.ready_s is None else f"ready {self.ready_s:.1f} s"
        body = ", ".join(f"{name} {value:.1f}" for name, value in parts)
        return f"{ready}" + (f" ({body})" if body else "") + f"; compile: {self.compile}"


def compile_where(log_text: str) -> CompileWhere:
    """Where the engine compiles, from its log; a start-up compile wins over a lazy one, and both over a skip."""
    text = _ANSI.sub("", log_text)
    if _TORCH_COMPILE.search(text) or _GRAPHS.search(text):
        return CompileWhere.STARTUP
    if _LAZY.search(text):
        return CompileWhere.FIRST_REQUEST
    if _SKIPPED.search(text):
        return CompileWhere.NONE
    return CompileWhere.UNKNOWN


def _most(pattern: re.Pattern[str], lines: Iterable[str], group: int = 1) -> float | None:
    found = [float(m[group]) for line in lines if (m := pattern.search(line))]
    return max(found) if found else None


def startup_phases(stamped: Iterable[tuple[float, str]], ready_s: float | None) -> StartupPhases:
    """The phases of one start from its log lines, each with the seconds since launch it was first seen at."""
    lines = [(t, _ANSI.sub("", text)) for t, text in stamped]
    texts = [text for _, text in lines]
    first = lines[0][0] if lines else None
    device = [t for t, text in lines if _DEVICE_INIT.search(text)]
    compiled = [x for x in (_most(_TORCH_COMPILE, texts), _most(_GRAPHS, texts)) if x is not None]
    return StartupPhases(
        ready_s=ready_s,
        spawn_s=first,
        device_init_s=max(device) - first if device and first is not None else None,
        weight_load_s=_most(_WEIGHTS, texts),
        model_load_s=_most(_MODEL, texts, 2),
        compile_s=sum(compiled) if compiled else None,
        compile=compile_where("\n".join(texts)),
        weights_gib=_most(_MODEL, texts, 1),
    )


def compile_differs(by_arm: Mapping[str, Iterable[StartupPhases | None]]) -> str | None:
    """A note when the arms' servers compiled in different places, as their logs say; None when they agree.

    A block whose log says nothing of compilation (UNKNOWN, or no phases: an older line) is left out.
    """
    seen = {arm: sorted({str(p.compile) for p in phases if p is not None and p.compile is not CompileWhere.UNKNOWN})
            for arm, phases in by_arm.items()}
    if len({tuple(where) for where in seen.values() if where}) <= 1:
        return None
    arms = "; ".join(f"{arm} {' and '.join(where) or 'unknown'}" for arm, where in seen.items())
    return (f"the arms' engines compile in different places (their server logs): {arms}; a warmup or "
            "start-up difference is partly the compiler's")


def typical(phases: Iterable[StartupPhases]) -> StartupPhases | None:
    """The median of each phase over several starts, and the commonest compile place; None for no start."""
    found = list(phases)
    if not found:
        return None
    values: dict[str, object] = {}
    for item in fields(StartupPhases):
        if item.name == "compile":
            values["compile"] = Counter(p.compile for p in found).most_common(1)[0][0]
            continue
        seen = [getattr(p, item.name) for p in found if getattr(p, item.name) is not None]
        values[item.name] = statistics.median(seen) if seen else None
    return StartupPhases(**values)  # type: ignore[arg-type]


class LogWatch:
    """Stamps each new complete line of a log with the time it was first seen; poll it while the server starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[tuple[float, str]] = []
        self._offset = 0
        self._partial = b""

    def poll(self, seconds: float) -> None:
        """Read what the log gained since the last poll; its complete lines are stamped ``seconds``."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        self.lines += [(seconds, line.decode("utf-8", "replace")) for line in complete if line.strip()]

    def phases(self, ready_s: float | None) -> StartupPhases:
        return startup_phases(self.lines, ready_s)
