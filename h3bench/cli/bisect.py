"""``h3bench bisect``: from a regression to its culprit engine commit (:mod:`h3bench.bisect`).

    h3bench bisect --runspec FILE [--evidence-dir DIR] [--resume DIR] [--on speed|quality] [--ledger FILE]
        the whole search on this host: verify, probes, stop, confirm; the bisection's directory under DIR
    h3bench bisect --runspec FILE --resume DIR --next N
        several hosts: choose what runs next (a round of up to N probes at once) and print it as
        ``steps=[...]`` (JSON, one step per host: verify, probe:K or confirm); nothing left prints ``steps=[]``
    h3bench bisect --runspec FILE --resume DIR --run STEP
        run one chosen step here, into its own sealed bundle under DIR/bundles
    h3bench bisect --runspec FILE --resume DIR --take BUNDLE...
        verify the steps' bundles and append what they showed to the log (each bundle once, by its seal)

Exit codes: 0 a culprit confirmed by its campaign (the claim), 3 no claim (not
reproduced, not confirmed, or the budget spent first), 130 interrupted (run
it again with ``--resume DIR``), 2 usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from h3bench.session import options

__all__ = ["configure_bisect", "run_bisect"]

EXIT_INTERRUPTED = 130


def _hosts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid host count {text!r}: a whole number of at least 1")
    return value


def configure_bisect(parser: argparse.ArgumentParser) -> None:
    offered = [o for o in options.CAMPAIGN if o.flag in ("--runspec", "--evidence-dir", "--lpips-dir",
                                                         "--lpips-device", "--allow-unpinned", "--progress-interval")]
    options.add_options(parser.add_argument, offered, required=("--runspec",))
    parser.add_argument("--resume", dest="bisection", type=Path, metavar="DIR",
                        help="continue the bisection in DIR (its log, specs and bundles); nothing done is done again")
    parser.add_argument("--on", choices=("speed", "quality"), default=None,
                        help="what regressed: the E2E step or the quality gates (default: the spec's [bisect] on)")
    parser.add_argument("--ledger", type=Path, metavar="FILE",
                        help="enter the confirmed claim (the confirm campaign's bundle) into this ledger")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--next", type=_hosts, metavar="N", help="choose the next round for N hosts and print it")
    steps.add_argument("--run", metavar="STEP", help="run one chosen step here: verify, probe:K or confirm")
    steps.add_argument("--take", nargs="+", type=Path, metavar="BUNDLE",
                       help="append what the steps' sealed bundles showed")


def run_bisect(args: argparse.Namespace) -> int:
    from h3bench import interrupts
    from h3bench.bisect.runner import Bisection, Options, parse_step
    from h3bench.errors import UsageError

    settings = options.resolve(options.reader(args), here=Path.cwd(), command=("h3bench", *sys.argv[1:]))
    assert settings.runspec is not None
    if (args.next or args.run or args.take) and args.bisection is None:
        raise UsageError("--next, --run and --take continue a bisection: give its directory with --resume DIR")
    chosen = Options(settings.evidence_root, args.bisection, settings.lpips_dir, settings.lpips_device,
                     settings.allow_unpinned, None, settings.progress_interval_s, args.ledger, args.on)
    with interrupts.installed():
        bisection = Bisection.open(settings.runspec, chosen)
        print(f"bisection: {bisection.directory}", flush=True)
        try:
            if args.next:
                steps = [f"{kind}:{number}" if kind == "probe" else kind
                         for kind, _, number in bisection.next_round(args.next)]
                print(f"steps={json.dumps(steps)}")
                return 0
            if args.run:
                kind, number = parse_step(args.run)
                step = bisection.find_step(kind, number)
                print(f"bundle: {bisection.run_step(*step)}")
                return 0
            if args.take:
                for bundle in args.take:
                    record = bisection.take_bundle(bundle)
                    print(f"{bundle}: {'already in the log' if record is None else record['event'] + ' taken'}")
                return 0
            return bisection.run()
        except KeyboardInterrupt as exc:
            from h3bench.run.block import interrupt_name

            print(f"h3bench bisect: interrupted by {interrupt_name(exc)}; the campaign that ran is sealed as "
                  f"interrupted. Continue with: h3bench bisect --runspec {settings.runspec} --resume "
                  f"{bisection.directory}", flush=True)
            return EXIT_INTERRUPTED
