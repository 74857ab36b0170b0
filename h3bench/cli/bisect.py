"""``h3bench bisect``: from a regression to its culprit engine commit (:mod:`h3bench.bisect`).

    h3bench bisect --runspec FILE [--evidence-dir DIR] [--resume DIR] [--on speed|quality] [--size RATIO] [--ledger FILE]
        the whole search on this host: verify, probes, stop, confirm; the bisection's directory under DIR
    h3bench bisect --runspec BASE --range FILE --image REPOSITORY [--launcher CMD] --write SPEC
        a bisect spec of BASE's engine configuration over the range (COMMIT DIGEST [NOTE] per line)
    h3bench bisect --runspec FILE [--resume DIR] --next N
        several hosts: choose what runs next (a round of up to N probes at once) and print it as
        ``steps=[...]`` (JSON, one step per host: verify, probe:K or confirm); nothing left prints ``steps=[]``.
        Without --resume it starts a bisection (its directory is printed as ``bisection: DIR``)
    h3bench bisect --runspec FILE --resume DIR --run STEP
        run one chosen step here, into its own sealed bundle under DIR/bundles
    h3bench bisect --runspec FILE --resume DIR --take BUNDLE...
        verify the steps' bundles and append what they showed to the log (each bundle once, by its seal)

Exit codes: 0 a culprit confirmed by its campaign (the claim; one per change
found), 3 no claim (not reproduced, not confirmed, or the budget spent first), 1
with ``--expect COMMIT[,COMMIT...]`` when the claims are not those commits, 130 interrupted (run it again with ``--resume
DIR``), 2 usage errors.
"""

from __future__ import annotations

import argparse
import json
import math
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


def _size(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 < value <= 4:  # NaN fails too
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: the change to find as a ratio above 1 and at most "
                                         "4 (1.05 for a 5 % change, in either direction)")
    return value


def configure_bisect(parser: argparse.ArgumentParser) -> None:
    offered = [o for o in options.CAMPAIGN if o.flag in ("--runspec", "--evidence-dir", "--lpips-dir",
                                                         "--lpips-device", "--allow-unpinned", "--progress-interval")]
    options.add_options(parser.add_argument, offered, required=("--runspec",))
    parser.add_argument("--resume", dest="bisection", type=Path, metavar="DIR",
                        help="continue the bisection in DIR (its log, specs and bundles); nothing done is done again")
    parser.add_argument("--on", choices=("speed", "quality"), default=None,
                        help="what regressed: the E2E step or the quality gates (default: the spec's [bisect] on)")
    parser.add_argument("--size", type=_size, metavar="RATIO",
                        help="the smallest change to find, as a ratio (1.05: 5 %%, slower or faster); fixed when the "
                             "bisection starts (default: the spec's [bisect] size, else half the step its verify "
                             "measures)")
    parser.add_argument("--ledger", type=Path, metavar="FILE",
                        help="enter the confirmed claim (the confirm campaign's bundle) into this ledger")
    parser.add_argument("--range", type=Path, metavar="FILE",
                        help="with --write: one engine per line, COMMIT DIGEST [NOTE], good first, bad last")
    parser.add_argument("--image", metavar="REPOSITORY", help="with --range: the repository the digests are of")
    parser.add_argument("--launcher", default="docker run --rm --init --network=host --ipc=host {image} vllm",
                        help="with --range: how one image's engine starts, {image} for REPOSITORY@DIGEST "
                             "(default: %(default)s; add the host's devices and mounts)")
    parser.add_argument("--image-s", type=float, default=600.0, metavar="SECONDS",
                        help="with --range: what pulling one image costs a host, the choice's hint (default 600)")
    parser.add_argument("--write", type=Path, metavar="SPEC",
                        help="write a bisect spec of the --runspec's engine configuration over --range, and stop")
    parser.add_argument("--expect", metavar="COMMIT[,COMMIT...]",
                        help="exit 1 unless the confirmed culprits are these commits, one per change (a check, such "
                             "as CI's on sim-bisect.toml)")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--next", type=_hosts, metavar="N", help="choose the next round for N hosts and print it")
    steps.add_argument("--run", metavar="STEP", help="run one chosen step here: verify, probe:K or confirm")
    steps.add_argument("--take", nargs="+", type=Path, metavar="BUNDLE",
                       help="append what the steps' sealed bundles showed")


def _write_range(base: Path, args: argparse.Namespace) -> int:
    import shlex

    from h3bench.bisect.specs import range_data, read_range, toml_text
    from h3bench.errors import UsageError
    from h3bench.runspec import load_runspec

    if args.write is None or args.range is None or not args.image:
        raise UsageError("a bisect spec from a range needs --range FILE, --image REPOSITORY and --write SPEC")
    data = range_data(load_runspec(base), read_range(args.range), image=args.image,
                      launcher=shlex.split(args.launcher), image_s=args.image_s)
    args.write.write_text(toml_text(data, header=f"A bisection of {base}'s engine configuration over {args.range}; "
                                                 "written by h3bench bisect --write"), encoding="utf-8")
    print(f"bisect spec: {args.write} ({len(data['bisect']['commits'])} commits between good and bad)")
    return 0


def run_bisect(args: argparse.Namespace) -> int:
    from h3bench import interrupts
    from h3bench.bisect.runner import Bisection, Options
    from h3bench.bisect.specs import parse_step
    from h3bench.errors import UsageError

    settings = options.resolve(options.reader(args), here=Path.cwd(), command=("h3bench", *sys.argv[1:]))
    assert settings.runspec is not None
    if args.write is not None or args.range is not None:
        return _write_range(settings.runspec, args)
    if (args.run or args.take) and args.bisection is None:
        raise UsageError("--run and --take continue a bisection: give its directory with --resume DIR")
    chosen = Options(settings.evidence_root, args.bisection, settings.lpips_dir, settings.lpips_device,
                     settings.allow_unpinned, settings.device_lock, settings.progress_interval_s, args.ledger, args.on,
                     args.size)
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
            code = bisection.run()
            if args.expect is not None:
                claimed, expected = bisection.claimed(), args.expect.split(",")
                if sorted(claimed) != sorted(expected):
                    print(f"h3bench bisect: expected the culprit(s) {args.expect}, the bisection claims "
                          f"{', '.join(claimed) or 'none'}", flush=True)
                    return 1
                print(f"h3bench bisect: the culprit(s) {args.expect}, as expected", flush=True)
            return code
        except KeyboardInterrupt as exc:
            from h3bench.run.failures import interrupt_name

            print(f"h3bench bisect: interrupted by {interrupt_name(exc)}; the campaign that ran is sealed as "
                  f"interrupted. Continue with: h3bench bisect --runspec {settings.runspec} --resume "
                  f"{bisection.directory}", flush=True)
            return EXIT_INTERRUPTED
