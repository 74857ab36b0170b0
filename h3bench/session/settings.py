"""A session's options, resolved once (by the pytest plugin or the CLI) into one frozen object.

The options are resolved before the spec is read
(:func:`h3bench.session.options.resolve`); a shard's round needs the spec,
so it is resolved once the spec is loaded (:meth:`Settings.with_round`), and
every reader of the settings takes it from there.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from h3bench.errors import UsageError
from h3bench.metrics.lpips_weights import DIR_ENV as LPIPS_DIR_ENV

if TYPE_CHECKING:  # the runspec package loads pydantic; a Settings without a shard never needs it
    from h3bench.course.shards import Shard, Window
    from h3bench.runspec import RunSpec

__all__ = ["ARMS", "DEFAULT_LOCK_PATH", "DEVICE_LOCK_ENV", "LPIPS_DIR_ENV", "Settings"]

# Blocks of campaigns with device checks never overlap on one host: each takes this file lock.
DEFAULT_LOCK_PATH = Path("/tmp/h3bench-devices.lock")
DEVICE_LOCK_ENV = "H3BENCH_DEVICE_LOCK"  # moves it (a test, or two hosts' worth of devices on one machine)

ARMS = ("baseline", "candidate", "all")


@dataclass(frozen=True)
class Settings:
    """Which spec and arms to run, where the evidence goes, and how the outputs are judged."""

    runspec: Path | None
    arm: str = "all"
    evidence_root: Path = Path("h3bench-evidence")
    baseline_evidence: Path | None = None
    lossless: bool = False
    lpips_dir: Path | None = None
    lpips_device: str = "cpu"
    resume: Path | None = None  # continue this interrupted bundle
    allow_unpinned: bool = False  # run a spec with UNPINNED or TODO fields, as a DIAGNOSTIC run
    allow_underpowered: bool = False  # run a spec whose design cannot reach its verdict, as a DIAGNOSTIC run
    progress_interval_s: float = 60.0  # without a terminal, a progress line this often during a long step
    device_lock: Path = DEFAULT_LOCK_PATH  # taken around each block of a spec with device checks (not the simulator)
    command: tuple[str, ...] = ()  # the command as typed: a refusal names the one to run instead
    shard: Shard | None = None  # one shard of a campaign over several hosts (h3bench.course.shards)
    looks: Path | None = None  # the look file of the previous round (h3bench pool --look)
    window: Window | None = None  # what the round runs, read from ``looks`` by with_round (None: round 1)
    report: bool = True  # write report.html and summary.md beside the bundle as the campaign ends (pytest)

    @classmethod
    def for_bundle(cls, bundle: Path, *, lossless: bool, lpips_dir: str | None, lpips_device: str) -> Settings:
        """Settings to re-validate a stored bundle: its own spec, every arm."""
        lpips = lpips_dir or os.environ.get(LPIPS_DIR_ENV)
        return cls(None, "all", bundle.parent, None, lossless, Path(lpips) if lpips else None, lpips_device)

    def with_round(self, spec: RunSpec) -> Settings:
        """The settings with the shard's round: from the look file of the previous round (round 1 without one).

        A resume takes the shard from its bundle's record (:func:`h3bench.run.resume.resumed_shard`).
        UsageError for ``--looks`` without ``--shard``, more shards than the
        spec has AB/BA units, a look file of another campaign, or a ``--shard``
        or ``--looks`` that is not the resumed bundle's.
        """
        from h3bench.course.shards import check_shards, read_window

        shard = self.shard
        if self.resume is not None:  # a resumed shard stays the shard its bundle ran
            from h3bench.run.resume import resumed_shard

            shard = resumed_shard(self.resume, shard, self.looks)
        if shard is None:
            if self.looks is not None:
                raise UsageError("--looks gives a round of a campaign over several hosts: add --shard I/N")
            return self
        check_shards(spec, shard.count)
        window = read_window(self.looks, spec_id=spec.spec_id, shards=shard.count) if self.looks is not None else None
        return dataclasses.replace(self, shard=shard, window=window)
