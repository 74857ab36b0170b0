"""One campaign over several hosts: which AB/BA pairs a shard runs, and in which round.

A campaign of N shards runs on N hosts at once, each shard one host. The
unit of the split is the **AB/BA unit**: two adjacent pairs, AB then BA
(positions 1-4, 5-8, ... of a series). Unit ``u`` (0-based) of every series
at every duration goes to shard ``u mod N + 1``, so

- every pair is measured on one host (its ratio never mixes two hosts'
  levels: host is a blocking factor, nested above the pairs);
- every shard runs the same order pattern, ABBA ABBA ..., which cancels a
  linear drift within its host as the whole campaign's order does;
- pair indices stay global: shard 2 of 3 runs positions 5-8, 17-20, ... and
  its block ids are the campaign's, so the shards' bundles never name one
  block twice and the fan-in (:mod:`h3bench.pool`) is their union.

Lossless control blocks go with the pair they precede (the sequential
design: the round's look file lists the ones that run,
:mod:`h3bench.course.course`) or round-robin over the shards in round 1 (the
fixed design's controls). A sharded campaign's lossless test is judged within
hosts (:mod:`h3bench.pool.fanin`).

**Rounds.** With the sequential design a look pools the pairs every shard
has finished (``h3bench pool --look``), and the next round of shards runs
only what that look left to run. A :class:`Window` says, per duration and
series, which global pairs a round runs: those after ``done`` and up to
``through``. Round 1 (no look yet) runs each series up to its first look,
rounded up to whole units on every shard; a dearer duration run in order of
cost waits for a PASS at the cheaper one. The look file that ``h3bench pool
--look`` writes (:func:`read_window`) gives the next round's windows: a
series that stopped gets none, so no round runs a block an earlier look made
unnecessary.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h3bench.course.design import looks_of, run_order
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence.codec import from_json, to_json
from h3bench.evidence.manifest import Manifest
from h3bench.runspec.spec import RunSpec

__all__ = ["LOOKS_FORMAT", "SeriesWindow", "Shard", "ShardHost", "ShardRun", "Window", "check_shards", "read_window",
           "round_up", "unit_shard"]

LOOKS_FORMAT = "h3bench-looks/1"
_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise UsageError(f"shard {self.index}/{self.count}: the index must be between 1 and {self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/3"`` → shard 2 of 3; a bad value is refused with a one-line message."""
        found = _SHARD.fullmatch(text)
        if found is None:
            raise UsageError(f"--shard {text!r}: write it as I/N, e.g. 2/3 (shard 2 of 3)")
        return cls(int(found.group(1)), int(found.group(2)))

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def runs_pair(self, pair: int) -> bool:
        """Whether this shard runs global pair ``pair`` (0-based)."""
        return unit_shard(pair, self.count) == self.index


@dataclass(frozen=True)
class ShardHost:
    """The host that ran a shard (:func:`h3bench.host.inventory.host_identity`): the pool tells hosts apart by it."""

    name: str
    hostname: str | None = None
    machine_id: str | None = None
    device_serials: tuple[str, ...] = ()
    bus_ids: tuple[str, ...] = ()
    driver: dict[str, str] | None = None
    cann: dict[str, str] | None = None


@dataclass(frozen=True)
class ShardRun:
    """The manifest's ``shard`` record: which shard of which round a bundle ran, its blocks, and its host.

    The runner writes it and the resume, the pool, the ledger and the verdict
    read it back through :mod:`h3bench.evidence.codec`, so a missing or
    malformed field is one :class:`~h3bench.errors.EvidenceError` naming it
    wherever it is read. ``round`` is 1 where a record predates the rounds.
    """

    index: int
    count: int
    host: ShardHost
    round: int = 1
    looks_sha256: str | None = None  # of the look file the round ran (None: round 1)
    blocks: tuple[str, ...] = ()  # the ids of the blocks the shard's round runs

    @property
    def shard(self) -> Shard:
        return Shard(self.index, self.count)

    @property
    def label(self) -> str:
        """``shard 1/2`` (``shard 1/2 of round 2`` after the first round)."""
        return f"shard {self.index}/{self.count}" + (f" of round {self.round}" if self.round != 1 else "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_json(self)
        return data

    @classmethod
    def of(cls, manifest: Manifest, *, where: str = "manifest.json") -> ShardRun | None:
        """The manifest's shard record; None for a bundle run without ``--shard``; EvidenceError when malformed."""
        found = manifest.shard
        if found is None:
            return None
        try:
            return from_json(cls, found, where="shard")
        except EvidenceError as exc:
            raise EvidenceError(f"{where}: {exc}", path=where) from None


def unit_shard(pair: int, count: int) -> int:
    """The shard (1-based) of global pair ``pair`` (0-based): whole AB/BA units, round-robin."""
    return (pair // 2) % count + 1


def check_shards(spec: RunSpec, shards: int) -> None:
    """Refuse more shards than the longest series has AB/BA units: a shard would have no pair to run at all.

    A duration with fewer units than shards leaves the last shards idle
    there (950pr-x4.toml's 15 s has 2 units: a third host runs 5 s only).
    """
    units = max(math.ceil(looks_of(spec, d)[-1] / 2) for d in run_order(spec))
    if shards > units:
        raise UsageError(f"--shard .../{shards}: {spec.name} has at most {units} AB/BA unit(s) of 2 pairs per "
                         f"duration, so at most {units} shards can each run whole pairs")


def round_up(pairs: int, count: int, cap: int) -> int:
    """``pairs`` rounded up to whole units on every one of ``count`` shards, at most ``cap``."""
    step = 2 * count
    return min(cap, math.ceil(pairs / step) * step) if pairs > 0 else 0


@dataclass(frozen=True)
class SeriesWindow:
    """What one round runs of one series at one duration: global pairs ``done + 1 .. through`` (1-based)."""

    done: int
    through: int
    action: str = "continue"  # or "stop": the look stopped the series (nothing more runs)
    outcome: str = "INCONCLUSIVE"
    reason: str = ""

    def runs(self, pair: int) -> bool:
        """Whether the round runs global pair ``pair`` (0-based)."""
        return self.action == "continue" and self.done <= pair < self.through


@dataclass(frozen=True)
class Window:
    """One round's windows by duration key (``"5s"``) and series, from a look file; ``round`` counts from 1.

    ``controls``: per duration key, the positions of the control blocks the
    round runs (:meth:`h3bench.course.course.Course.next_window`).
    """

    round: int
    shards: int
    spec_id: str
    series: Mapping[str, Mapping[str, SeriesWindow]] = field(default_factory=dict)
    sha256: str = ""  # of the look file it was read from
    controls: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def of(self, duration: float, series: str) -> SeriesWindow | None:
        return self.series.get(f"{duration:g}s", {}).get(series)

    def to_dict(self) -> dict[str, Any]:
        return {"format": LOOKS_FORMAT, "round": self.round, "shards": self.shards, "spec_id": self.spec_id,
                "series": {d: {s: vars(w) for s, w in found.items()} for d, found in self.series.items()},
                "controls": {d: list(found) for d, found in self.controls.items()}}


def read_window(path: Path, *, spec_id: str, shards: int) -> Window:
    """The next round's windows from the look file ``h3bench pool --look`` wrote; refused for another campaign."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--looks {path}: cannot be read as a look file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != LOOKS_FORMAT:
        raise UsageError(f"--looks {path}: not a look file of h3bench pool --look (format {LOOKS_FORMAT})")
    if data.get("spec_id") != spec_id:
        raise UsageError(f"--looks {path}: written for spec {str(data.get('spec_id'))[:12]}, this campaign's spec is "
                         f"{spec_id[:12]}")
    if data.get("shards") != shards:
        raise UsageError(f"--looks {path}: written for {data.get('shards')} shards, this run is one of {shards}")
    try:
        series = {d: {s: SeriesWindow(**w) for s, w in found.items()} for d, found in data["series"].items()}
        controls = {d: tuple(int(p) for p in found) for d, found in (data.get("controls") or {}).items()}
        return Window(int(data["round"]), shards, spec_id, series, hashlib.sha256(raw).hexdigest(), controls)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"--looks {path}: a series window is malformed ({exc})") from None
