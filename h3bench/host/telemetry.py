"""Device telemetry: npu-smi sampled during every block, and the blocks whose telemetry stands out.

While a block's server runs, a :class:`Sampler` thread reads ``npu-smi``
every ``protocol.telemetry_interval_s`` (:class:`h3bench.host.devices.NpuSmiCheck`)
and the bundle gets one ``telemetry.jsonl`` line per reserved chip and
sample, with exactly the keys of :data:`TELEMETRY_KEYS`.

The same image, commit and config has given 4.77 s against 2.69 s diffuse
p50 on two nodes (vllm-omni issue 7309), so node noise must be visible next
to code effects. :func:`outlier_notes` names a block whose telemetry is far
from the other blocks of its arm at the same duration: a note in the
verdict and summary, never a FAIL. Each block is summarised by the median
over its busy samples (chips with AICore utilisation above 0, so that the
idle part of a startup does not count) of AICore utilisation, temperature
and power, and by its peak HBM use over all samples. A block is an outlier in one of them when
it lies further from the median of the other blocks than both
:data:`OUTLIER_MADS` scaled MADs of those blocks and the metric's floor in
:data:`OUTLIER_FLOORS` (which keeps identical blocks, whose MAD is 0, from
flagging a one-degree difference). It needs at least
:data:`MIN_BLOCKS` blocks of the arm. How often a steady node raises a note
and how often a hot block is named is measured in tests_unit/host/test_telemetry.py.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import H3BenchError
from h3bench.evidence import files
from h3bench.evidence.layout import TELEMETRY

if TYPE_CHECKING:
    from h3bench.host.npusmi import NpuDevice

__all__ = [
    "MIN_BLOCKS",
    "OUTLIER_FLOORS",
    "OUTLIER_MADS",
    "TELEMETRY_KEYS",
    "BlockTelemetry",
    "Sampler",
    "block_telemetry",
    "outlier_notes",
    "read_telemetry",
    "telemetry_records",
]

TELEMETRY_KEYS = ("t", "block", "npu_id", "chip_id", "hbm_used_mb", "hbm_total_mb", "aicore_pct", "temperature_c",
                  "power_w", "health")
MIN_BLOCKS = 3
OUTLIER_MADS = 4.0
# Smallest difference from the other blocks that counts, per summary metric (absolute; power relative).
OUTLIER_FLOORS = {"aicore_pct": 15.0, "temperature_c": 8.0, "power_w": 0.15, "hbm_used_mb": 0.10}
_RELATIVE = ("power_w", "hbm_used_mb")
_UNITS = {"aicore_pct": "% AICore", "temperature_c": " °C", "power_w": " W", "hbm_used_mb": " MB HBM"}


def telemetry_records(t: float, block: str, devices: Iterable[NpuDevice]) -> list[dict[str, Any]]:
    """One ``telemetry.jsonl`` record per chip of one sample taken at unix time ``t``."""
    return [
        {"t": t, "block": block, "npu_id": d.npu_id, "chip_id": d.chip_id, "hbm_used_mb": d.hbm_used_mb,
         "hbm_total_mb": d.hbm_total_mb, "aicore_pct": d.aicore_pct, "temperature_c": d.temperature_c,
         "power_w": d.power_w, "health": d.health}
        for d in devices
    ]


class Sampler:
    """Calls ``sample`` every ``interval_s`` in a daemon thread, and once more at :meth:`stop`.

    The last sample is taken when the server is about to stop, so a block
    shorter than the interval still has one. A sample that raises an h3bench
    error is recorded in :attr:`errors` and sampling goes on. :meth:`stop`
    waits for a sample in progress, so every line is written before the
    block's own record.
    """

    def __init__(self, sample: Callable[[], None], interval_s: float, *, name: str = "telemetry") -> None:
        if not interval_s > 0:
            raise ValueError(f"the sampling interval must be > 0 s, got {interval_s!r}")
        self.sample = sample
        self.interval_s = interval_s
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _take(self) -> None:
        try:
            self.sample()
        except H3BenchError as exc:
            self.errors.append(f"a telemetry sample failed: {exc}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End sampling with a last sample; returns once the thread is gone. Stopping twice is safe."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._take()


def read_telemetry(bundle: Path) -> list[dict[str, Any]]:
    """The telemetry records of a bundle, in order (none when it has no telemetry)."""
    return [record for _, record in files.iter_jsonl(bundle / TELEMETRY)]


@dataclass(frozen=True)
class BlockTelemetry:
    """One block's telemetry in a few numbers (None where no sample had the value)."""

    block: str
    samples: int
    aicore_pct: float | None
    temperature_c: float | None
    power_w: float | None
    hbm_used_mb: float | None
    unhealthy: tuple[str, ...]  # "NPU n chip c: Warning", once each


def _median(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def block_telemetry(records: Iterable[Mapping[str, Any]]) -> dict[str, BlockTelemetry]:
    """Summarise the records of each block (see the module docstring)."""
    by_block: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_block.setdefault(str(record.get("block")), []).append(record)
    out = {}
    for block, rows in by_block.items():
        unhealthy = dict.fromkeys(f"NPU {r['npu_id']} chip {r['chip_id']}: {r['health']}"
                                  for r in rows if r.get("health") != "OK")
        hbm = [r["hbm_used_mb"] for r in rows if r.get("hbm_used_mb") is not None]
        busy = [r for r in rows if (r.get("aicore_pct") or 0) > 0]
        out[block] = BlockTelemetry(
            block, len({r.get("t") for r in rows}),
            _median(r.get("aicore_pct") for r in busy), _median(r.get("temperature_c") for r in busy),
            _median(r.get("power_w") for r in busy), max(hbm) if hbm else None, tuple(unhealthy),
        )
    return out


def _outlier(metric: str, value: float, others: Sequence[float]) -> str | None:
    centre = statistics.median(others)
    mad = statistics.median(abs(v - centre) for v in others) * 1.4826
    floor = OUTLIER_FLOORS[metric] * (abs(centre) if metric in _RELATIVE else 1.0)
    if abs(value - centre) <= max(OUTLIER_MADS * mad, floor):
        return None
    unit = _UNITS[metric]
    return f"{metric.split('_')[0]} {value:.1f}{unit} against {centre:.1f}{unit} in the others"


def outlier_notes(arm: str, blocks: Sequence[BlockTelemetry]) -> list[str]:
    """Notes naming each block of ``arm`` whose telemetry stands out against its other blocks, and unhealthy chips."""
    notes = [f"block {b.block}: device health during the block: {', '.join(b.unhealthy)}" for b in blocks if b.unhealthy]
    if len(blocks) < MIN_BLOCKS:
        return notes
    for block in blocks:
        found = []
        for metric in OUTLIER_FLOORS:
            value = getattr(block, metric)
            others = [v for b in blocks if b is not block and (v := getattr(b, metric)) is not None]
            if value is not None and len(others) >= MIN_BLOCKS - 1 and (text := _outlier(metric, value, others)):
                found.append(text)
        if found:
            notes.append(f"block {block.block}: telemetry is an outlier among the {arm} blocks ({'; '.join(found)}); "
                         "node noise may have moved its latency")
    return notes
