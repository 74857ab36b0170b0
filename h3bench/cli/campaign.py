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
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from h3bench.outcome import Outcome
from h3bench.session import options
from h3bench.session.settings import Settings

if TYPE_CHECKING:  # the live campaign loads only when one runs
    from h3bench.course.cases import Block

__all__ = ["EXIT_INTERRUPTED", "configure_plan", "configure_run", "run_campaign", "run_plan", "verbose_flag"]

CATEGORIES = ("perf", "lifecycle", "quality")

EXIT_INTERRUPTED = 130  # as a shell reports a command ended by Ctrl-C
_EXIT: dict[Outcome, int] = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 3}


def configure_settings(parser: argparse.ArgumentParser, *, resume: bool = False) -> None:
    """The session options that ``run`` and ``plan`` share with the pytest plugin (:mod:`h3bench.session.options`)."""
    offered = [o for o in options.CAMPAIGN if resume or o.flag != "--resume"]
    options.add_options(parser.add_argument, offered, required=("--runspec",))


def settings_from(args: argparse.Namespace) -> Settings:
    return options.resolve(options.reader(args), here=Path.cwd(), command=("h3bench", *sys.argv[1:]))


def configure_run(parser: argparse.ArgumentParser) -> None:
    configure_settings(parser, resume=True)
    _add_markexpr(parser)
    verbose_flag(parser)


def verbose_flag(parser: argparse.ArgumentParser) -> None:
    """``-v``: the summary with every reason, as ``pytest -v`` prints it, instead of one screen."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every reason of every verdict, not only the one-screen summary")


def run_campaign(args: argparse.Namespace) -> int:
    """Run, judge, seal and summarise one campaign; the exit code is its verdict (130 if interrupted)."""
    from h3bench import interrupts
    from h3bench.errors import NothingToResume
    from h3bench.run.failures import interrupt_name
    from h3bench.run.progress import Progress
    from h3bench.session.campaign import start_campaign
    from h3bench.session.revalidation import judge_all

    with interrupts.installed():
        settings = settings_from(args)
        try:
            campaign = start_campaign(settings, Progress.on(sys.stderr, interval_s=settings.progress_interval_s))
        except NothingToResume as exc:
            print(f"h3bench: {exc}")
            return 0
        if args.markexpr:
            campaign.select_blocks(_selects(args.markexpr))
        for line in campaign.header():
            print(line, flush=True)
        interrupted = None
        try:
            campaign.run_selected(lambda line: print(line, flush=True))
            judge_all(campaign.results)
        except KeyboardInterrupt as exc:
            interrupted = f"interrupted by {interrupt_name(exc)}"
        finally:
            document = campaign.finish(interrupted)
        for line in [*campaign.summary(verbose=args.verbose), *campaign.ending()]:
            print(line)
        if campaign.interrupted:
            return EXIT_INTERRUPTED
        return _EXIT[document.outcome] if document is not None else _EXIT[Outcome.INCONCLUSIVE]


def _add_markexpr(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", dest="markexpr", default="", metavar="MARKEXPR",
                        help="only the workloads that this pytest marker expression selects, e.g. ref2va_15s")


def _selects(markexpr: str) -> Callable[[Block], bool]:
    """The blocks that ``pytest -m MARKEXPR`` would run: those of the workloads it selects, for any test category."""
    from _pytest.mark.expression import Expression

    from h3bench.h3 import workload_marker

    expression = Expression.compile(markexpr) if markexpr else None

    def selects(block: Block) -> bool:
        def carries(category: str) -> Callable[..., bool]:
            return lambda name, /, **_: name in (workload_marker(block.duration), category)

        return expression is None or any(expression.evaluate(carries(c)) for c in CATEGORIES)

    return selects


def configure_plan(parser: argparse.ArgumentParser) -> None:
    configure_settings(parser)
    _add_markexpr(parser)
    parser.add_argument("--history", type=Path, action="append", default=[], metavar="DIR",
                        help="more directories of earlier bundles to estimate from (the evidence dir always counts)")
    parser.add_argument("--shards", type=int, default=None, metavar="N",
                        help="the campaign over N hosts: each host's wall time and the campaign's device-hours")
    parser.add_argument("--from-bundle", type=Path, default=None, metavar="BUNDLE", dest="from_bundle",
                        help="price every server start as this stored bundle measured it, phase by phase "
                             "(its lifecycle's startup_phases), not from the hints")


def run_plan(args: argparse.Namespace) -> int:
    """Print the plan; exit 0 when nothing stands in the way, 1 when a problem was found."""
    from h3bench.plan.estimate import make_plan
    from h3bench.plan.summary import plan_lines
    from h3bench.runspec import load_runspec

    settings = settings_from(args)
    assert settings.runspec is not None
    spec = load_runspec(settings.runspec)
    plan = make_plan(spec, arms=settings.arm, selects=_selects(args.markexpr),
                     history=[settings.evidence_root, *args.history], lpips_dir=settings.lpips_dir,
                     lock_path=settings.device_lock, anchored=settings.baseline_evidence is not None,
                     evidence_root=settings.evidence_root, startup_bundle=args.from_bundle)
    for line in plan_lines(plan):
        print(line)
    if spec.bisect is not None:  # a bisection: its range, and what the search costs (simulated at the hints)
        from h3bench.bisect.plan import plan_lines as bisect_lines

        for line in bisect_lines(spec):
            print(line)
    if args.shards:
        from h3bench.plan.summary import shard_lines

        if plan.race is not None:
            print("the race over several hosts is not priced yet; the sequential design's:")
        for line in shard_lines(plan.spec, args.shards, [settings.evidence_root, *args.history]):
            print(line)
    return 1 if plan.problems else 0

