"""Running one campaign of a bisection: its derived spec run (or resumed) into a sealed bundle, pair by pair.

Every campaign is run by :func:`h3bench.session.campaign.start_campaign`, the
machinery ``h3bench run`` uses: fresh servers, the same seeds, every gate,
the device lock, SIGTERM and ``--resume`` as there. Its blocks are selected
one AB/BA pair at a time (:meth:`h3bench.session.campaign.Campaign.select_blocks`),
each pair's matched outputs judged at once, and the caller's ``done``
decides after each pair whether another is needed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.bisect.observe import pair_log_ratios
from h3bench.bisect.specs import duration_of
from h3bench.errors import EvidenceError, NothingToResume
from h3bench.evidence import BundleReader
from h3bench.outcome import Outcome
from h3bench.runspec import BASELINE, RunSpec, load_runspec
from h3bench.session.results import Results
from h3bench.session.revalidation import judge_all
from h3bench.session.settings import DEFAULT_LOCK_PATH, Settings

__all__ = ["Done", "Options", "bundle_of", "run_campaign"]

# After each pair: the campaign's results, the candidate's name and the pairs run; True when no more are needed.
Done = Callable[[Results, str, int], bool]


@dataclass(frozen=True)
class Options:
    """How this process runs the bisection's campaigns (the campaign options ``h3bench run`` takes)."""

    evidence_root: Path = Path("h3bench-evidence")
    resume: Path | None = None
    lpips_dir: Path | None = None
    lpips_device: str = "cpu"
    allow_unpinned: bool = False
    device_lock: Path | None = None
    progress_interval_s: float = 60.0
    ledger: Path | None = None
    on: str | None = None  # what regressed, when not the spec's [bisect] on
    size: float | None = None  # the change to find as a ratio (--size), when not the spec's [bisect] size


def bundle_of(root: Path, spec_id: str) -> Path | None:
    """The bundle under ``root`` of the campaign whose spec is ``spec_id``; None when none was started."""
    for manifest in sorted(root.glob("*/manifest.json")):
        try:
            if BundleReader.open(manifest.parent).spec_id == spec_id:
                return manifest.parent
        except EvidenceError:
            continue
    return None


def run_campaign(path: Path, bundles: Path, options: Options, done: Done, say: Callable[[str], None]) -> Path:
    """Run (or resume) the campaign of the spec file ``path`` into a sealed bundle under ``bundles``; its path.

    A campaign already completed is not run again. KeyboardInterrupt is raised after sealing the bundle as
    interrupted.
    """
    from h3bench.run.progress import Progress
    from h3bench.session.campaign import start_campaign

    derived = load_runspec(path)
    existing = bundle_of(bundles, derived.spec_id)
    if existing is not None:
        reader = BundleReader.open(existing)
        if reader.is_complete and (reader.final() or {}).get("outcome") == "completed":
            return existing
    settings = Settings(path, evidence_root=bundles, resume=existing,
                        lpips_dir=options.lpips_dir, lpips_device=options.lpips_device,
                        allow_unpinned=options.allow_unpinned,
                        progress_interval_s=options.progress_interval_s,
                        device_lock=options.device_lock or DEFAULT_LOCK_PATH)
    try:
        campaign = start_campaign(settings, Progress.on(sys.stderr, interval_s=options.progress_interval_s))
    except NothingToResume:
        assert existing is not None
        return existing
    interrupted = None
    try:
        _pairs(campaign, derived, done, say)
        judge_all(campaign.results)
    except KeyboardInterrupt as exc:
        from h3bench.run.failures import interrupt_name

        interrupted = f"interrupted by {interrupt_name(exc)}"
        raise
    finally:
        campaign.finish(interrupted)
    return campaign.bundle.path


def _pairs(campaign: Any, spec: RunSpec, done: Done, say: Callable[[str], None]) -> None:
    """Run the campaign's AB/BA pairs one at a time, each pair's gates judged at once, until ``done`` or a stop.

    A failed gate stops the candidate there (the campaign's own stop rule), so an output that breaks ends
    the campaign as broken after one pair, whatever its speed.
    """
    name = next(n for n in spec.arms if n != BASELINE)
    series = campaign.schedule.series(duration_of(spec), name)
    results = campaign.results
    matched = list(campaign.schedule.cases("matched_pair"))
    for pairs in range(1, len(series) // 2 + 1):
        wanted = {b.id for b in series[: 2 * pairs]}
        campaign.select_blocks(lambda block, wanted=wanted: block.id in wanted or block.kind == "controls")
        campaign.run_selected(lambda line: say(f"  {line}"))
        for case in matched:
            if case.id not in results.judge.pairs and results.available(case.baseline) and \
                    results.available(case.candidate):
                results.judge.compare(case)
        if results.stopped(name) is not None or len(pair_log_ratios(results, spec, name)) < pairs or any(
                p.outcome is Outcome.FAIL for p in results.judge.pairs_of(name, duration_of(spec))):
            return
        if done(results, name, pairs):
            return
