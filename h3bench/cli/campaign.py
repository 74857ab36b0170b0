"""``h3bench run`` and ``h3bench plan``: a whole campaign without pytest, and what it will cost.

``plan`` prints the schedule, the server starts, the estimated time and disk,
and every problem found before launch (:mod:`h3bench.plan.estimate`); it runs nothing.
``run`` runs every block of the spec (or of ``--arm``) in schedule order, timed by
the client's own E2E, then every quality comparison and the lossless
judgement, then seals the bundle and prints the summary that pytest prints.
SIGTERM, SIGHUP and Ctrl-C end it as they end a pytest session
(:mod:`h3bench.interrupts`): the bundle is sealed as interrupted and
``--resume`` continues it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from h3bench.outcome import Outcome
from h3bench.session.settings import ARMS, Settings

if TYPE_CHECKING:  # the live campaign loads only when one runs
    from h3bench.runspec.schedule import Block
    from h3bench.session.runner import Campaign

__all__ = ["EXIT_INTERRUPTED", "configure_plan", "configure_run", "run_campaign", "run_plan"]

CATEGORIES = ("perf", "lifecycle", "quality")

EXIT_INTERRUPTED = 130  # as a shell reports a command ended by Ctrl-C
_EXIT: dict[Outcome, int] = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 3}


def configure_settings(parser: argparse.ArgumentParser) -> None:
    """The session options that ``run`` shares with the pytest plugin (and ``plan``)."""
    parser.add_argument("--runspec", required=True, type=Path, help="the frozen RunSpec (TOML) of the campaign")
    parser.add_argument("--arm", choices=ARMS, default="all", help="which arms' blocks to run (default all)")
    parser.add_argument("--evidence-dir", type=Path, default=Path("h3bench-evidence"), dest="evidence_dir",
                        help="directory that receives the evidence bundle (default h3bench-evidence/)")
    parser.add_argument("--baseline-evidence", type=Path, dest="baseline_evidence",
                        help="a stored bundle for a candidate-only run, which runs the anchored order against it")
    parser.add_argument("--lossless", action="store_true", help="judge against the baseline's own variability")
    parser.add_argument("--lpips-dir", type=Path, dest="lpips_dir", help="directory with the LPIPS weights")
    parser.add_argument("--lpips-device", default="cpu", dest="lpips_device", help="torch device for LPIPS")
    parser.add_argument("--allow-unpinned", action="store_true", dest="allow_unpinned",
                        help="run a RunSpec with UNPINNED or TODO fields anyway, as a DIAGNOSTIC run")
    parser.add_argument("--allow-underpowered", action="store_true", dest="allow_underpowered",
                        help="run a RunSpec whose design cannot reach its verdict anyway, as a DIAGNOSTIC run")


def settings_from(args: argparse.Namespace, *, resume: Path | None = None) -> Settings:
    return Settings(
        runspec=args.runspec,
        arm=args.arm,
        evidence_root=args.evidence_dir.absolute(),
        baseline_evidence=args.baseline_evidence,
        lossless=args.lossless,
        lpips_dir=args.lpips_dir,
        lpips_device=args.lpips_device,
        resume=resume,
        allow_unpinned=args.allow_unpinned,
        allow_underpowered=args.allow_underpowered,
    )


def configure_run(parser: argparse.ArgumentParser) -> None:
    configure_settings(parser)
    parser.add_argument("--resume", type=Path, metavar="BUNDLE",
                        help="continue this interrupted bundle: finished blocks are kept, the rest run again")


def _judge(campaign: Campaign) -> None:
    """Every matched pair whose outputs exist, then the lossless judgement."""
    from h3bench.runspec.schedule import CandidateWorkload, MatchedPair

    for pair in campaign.schedule.cases("matched_pair"):
        assert isinstance(pair, MatchedPair)
        if campaign.available(pair.baseline) and campaign.available(pair.candidate):
            campaign.compare(pair)
    if campaign.lossless_enabled:
        for case in campaign.schedule.cases("candidate_workload"):
            assert isinstance(case, CandidateWorkload)
            campaign.lossless(case)


def run_campaign(args: argparse.Namespace) -> int:
    """Run, judge, seal and summarise one campaign; the exit code is its verdict (130 if interrupted)."""
    from h3bench import interrupts
    from h3bench.run.block import interrupt_name
    from h3bench.session.runner import Campaign

    with interrupts.installed():
        campaign = Campaign.from_settings(settings_from(args, resume=args.resume))
        for line in [*campaign.report_header(), *(campaign.resumed.log_lines() if campaign.resumed else [])]:
            print(line, flush=True)
        interrupted = None
        try:
            campaign.run_selected(lambda line: print(line, flush=True))
            _judge(campaign)
        except KeyboardInterrupt as exc:
            interrupted = f"interrupted by {interrupt_name(exc)}"
        finally:
            campaign.finish(interrupted)
        for line in campaign.summary_lines():
            print(line)
        if interrupted:
            print(f"the bundle is sealed as INTERRUPTED: {interrupted}")
            return EXIT_INTERRUPTED
        return _EXIT[campaign.outcome()]


def configure_plan(parser: argparse.ArgumentParser) -> None:
    configure_settings(parser)
    parser.add_argument("-m", dest="markexpr", default="", metavar="MARKEXPR",
                        help="only the workloads that this pytest marker expression selects, e.g. ref2va_15s")
    parser.add_argument("--history", type=Path, action="append", default=[], metavar="DIR",
                        help="more directories of earlier bundles to estimate from (the evidence dir always counts)")


def run_plan(args: argparse.Namespace) -> int:
    """Print the plan; exit 0 when nothing stands in the way, 1 when a problem was found."""
    from _pytest.mark.expression import Expression

    from h3bench.h3 import workload_marker
    from h3bench.plan.estimate import make_plan, plan_lines
    from h3bench.runspec import load_runspec

    spec = load_runspec(args.runspec)
    expression = Expression.compile(args.markexpr) if args.markexpr else None

    def selects(block: Block) -> bool:
        def carries(category: str) -> Callable[..., bool]:
            return lambda name, /, **_: name in (workload_marker(block.duration), category)

        return expression is None or any(expression.evaluate(carries(c)) for c in CATEGORIES)

    plan = make_plan(spec, arms=args.arm, selects=selects, history=[args.evidence_dir, *args.history],
                     lpips_dir=args.lpips_dir, anchored=args.baseline_evidence is not None)
    for line in plan_lines(plan):
        print(line)
    return 1 if plan.problems else 0

