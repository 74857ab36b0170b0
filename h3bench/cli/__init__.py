"""The ``h3bench`` command line.

    h3bench probe FILE [--json]
    h3bench compare BASELINE CANDIDATE [--json] [--expect-seconds S]
                    [--no-lpips] [--lpips-dir DIR] [--lpips-device DEV]
    h3bench verify BUNDLE [--json] [--expect SHA256]
                                     re-hash an evidence bundle (against the run's anchor)
    h3bench validate BUNDLE [--json] [--lossless] [--lpips-dir DIR] [--lpips-device DEV]
                                     re-run the gates; the result goes beside the old ones
    h3bench plan --runspec FILE [--arm ARM] [-m MARKEXPR] [--history DIR]
                                     what a campaign will run and cost, before anything runs
    h3bench run --runspec FILE [--arm ARM] [--evidence-dir DIR] [--resume BUNDLE] ...
                                     a whole campaign without pytest (see h3bench.cli.campaign)
    h3bench report BUNDLE [--out DIR] [--step-summary FILE [--artifact-url URL]] [--lpips-dir DIR] ...
                                     report.html and summary.md of a bundle that verifies
    h3bench pool BUNDLE... --out DIR [--look]
                                     the fan-in of a campaign over several hosts (see h3bench.cli.pool)
    h3bench ledger add BUNDLE | show | verify [--bundles DIR] [--ledger FILE]
                                     the hash-chained ledger of candidates (see h3bench.ledger.chain)
    h3bench bisect --runspec FILE [--evidence-dir DIR] [--resume DIR] [--on speed|quality] [--size RATIO]
                   [--ledger FILE]
                                     from a regression to its culprit commit (see h3bench.cli.bisect)
    h3bench history DIR... [--html FILE] [--json]
                                     baseline medians across campaigns, with flagged steps
    h3bench export BUNDLE [--format bmf|github-benchmark|json] [--out FILE]
                                     a verified bundle's results for dashboards (see h3bench.report.export)
    h3bench sim ...                  (every argument goes to h3bench.sim.main)
    h3bench sim fit BUNDLE... --out PROFILE.toml

``report`` writes ``report.html`` (self-contained) and ``summary.md``, by
default into ``<bundle's parent>/reports/<bundle name>/``, and prints both
paths; a bundle that does not verify is refused (exit 2).

Exit codes: ``compare`` and ``validate`` exit with their verdict, 0 PASS,
1 FAIL and 3 INCONCLUSIVE; ``verify`` and ``ledger verify`` exit 0 for an
intact bundle or ledger and 1 otherwise; ``history`` exits 1 while a flagged
regression is ongoing. Usage errors, paths that cannot be read and refused
configuration (UsageError, RunSpecError, WeightIntegrityError) exit 2; any
other H3BenchError exits 1. Errors are one line on stderr, never a traceback.

JSON output is strict JSON: non-finite floats (PSNR of identical inputs is
``inf``) are the strings ``"inf"``, ``"-inf"``, ``"nan"``, and fractions are
strings such as ``"24/1"``.

Subcommands live in :data:`SUBCOMMANDS`: each is a small ``configure``
function that adds its arguments and a ``run`` function that returns the
exit code. Add a subcommand by adding an entry.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _numpy_without_blas_workers() -> None:
    """Import numpy with its OpenBLAS on the calling thread, unless the caller chose a thread count.

    At load, OpenBLAS starts a worker per core, and each spins for about
    0.1 s of CPU before it sleeps: on two cores, a tenth of a second taken
    from the decoders of ``compare``. No command makes a BLAS call large
    enough to use them (decoding, the metric kernels and torch's LPIPS do not
    go through numpy's BLAS). The variable is read once, at load, so it is
    removed again and child processes see the caller's environment.
    """
    if "OPENBLAS_NUM_THREADS" in os.environ or "numpy" in sys.modules:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


_numpy_without_blas_workers()

from h3bench import __version__, media, quality  # noqa: E402
from h3bench.cli import bisect as cli_bisect  # noqa: E402
from h3bench.cli import campaign as cli_campaign  # noqa: E402
from h3bench.cli import export as cli_export  # noqa: E402
from h3bench.cli import ledger as cli_ledger  # noqa: E402
from h3bench.cli import pool as cli_pool  # noqa: E402
from h3bench.errors import H3BenchError, RunSpecError, UsageError, WeightIntegrityError  # noqa: E402
from h3bench.h3 import expected_shape  # noqa: E402
from h3bench.outcome import Outcome  # noqa: E402
from h3bench.quality import QualityReport, compare, format_value, json_safe, require_readable  # noqa: E402
from h3bench.quality.checks import FIELD_DESCRIPTIONS  # noqa: E402

__all__ = ["EXIT_CODES", "SUBCOMMANDS", "Passthrough", "Subcommand", "build_parser", "exit_code", "main"]

EXIT_CODES: dict[Outcome, int] = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 3}
EXIT_USAGE = 2
EXIT_ERROR = 1
_USAGE_ERRORS = (UsageError, RunSpecError, WeightIntegrityError)


@dataclass(frozen=True)
class Subcommand:
    """A subcommand parsed by argparse: ``configure`` adds arguments, ``run`` returns the exit code."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Passthrough:
    """A subcommand that parses its own arguments: ``run`` gets everything after its name."""

    help: str
    run: Callable[[list[str]], int]


def exit_code(error: H3BenchError) -> int:
    """The exit code for an error that reached the command line."""
    return EXIT_USAGE if isinstance(error, _USAGE_ERRORS) else EXIT_ERROR


# ---------------------------------------------------------------------------
# probe


def _configure_probe(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the media file to describe")
    parser.add_argument("--json", action="store_true", dest="json", help="print JSON instead of a table")


def _seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g} s"


def _run_probe(args: argparse.Namespace) -> int:
    info = media.probe(require_readable(args.file))
    if args.json:
        print(json.dumps(json_safe(info), indent=2, allow_nan=False))
        return 0
    rows = [("file", f"{info.path} ({info.size_bytes} bytes)")]
    video, sound = info.video, info.audio
    rows.append(
        (
            "video",
            "none"
            if video is None
            else f"{video.codec} {video.width}x{video.height} {video.pix_fmt}, "
            f"{format_value(video.avg_frame_rate)} FPS, "
            f"{video.frames} frames decoded ({video.declared_frames} declared), "
            f"{_seconds_text(video.duration_s)} declared, starts at {video.start_time_s:.6g} s",
        )
    )
    rows.append(
        (
            "audio",
            "none"
            if sound is None
            else f"{sound.codec} {sound.sample_rate} Hz, {sound.channels} ch, "
            f"{sound.samples} samples decoded, {_seconds_text(sound.duration_s)} declared, "
            f"starts at {sound.start_time_s:.6g} s",
        )
    )
    for key, text in rows:
        print(f"{key:<6} {text}")
    return 0


# ---------------------------------------------------------------------------
# compare


def _expect_seconds(text: str) -> float:
    try:
        seconds = float(text)
        expected_shape(seconds)
    except (ValueError, UsageError) as exc:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: {exc}") from exc
    return seconds


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="the baseline arm's MP4")
    parser.add_argument("candidate", help="the candidate arm's MP4")
    parser.add_argument("--json", action="store_true", dest="json", help="print the report as JSON")
    parser.add_argument(
        "--expect-seconds",
        type=_expect_seconds,
        dest="expect_seconds",
        metavar="S",
        help="also check both files against H3's output for S seconds (4 to 15)",
    )
    parser.add_argument(
        "--no-lpips",
        action="store_false",
        dest="measure_lpips",
        help="skip LPIPS; the verdict is then at best INCONCLUSIVE",
    )
    _configure_lpips(parser)


def _print_report(report: QualityReport) -> None:
    print(f"baseline   {report.baseline}")
    print(f"candidate  {report.candidate}")
    rows = [("CHECK", "STATUS", "VALUE", "THRESHOLD", "DETAIL")]
    rows += [(c.name, c.status.value, format_value(c.value), c.threshold or "-", c.detail) for c in report.checks]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[4])
    names = {
        "failing": [c.name for c in report.failing()],
        "not measured": [c.name for c in report.not_measured()],
    }
    for check in report.checks:  # a cosine above 1 looks like a bug; it is float32 rounding, as upstream's
        if check.name in FIELD_DESCRIPTIONS and isinstance(check.value, float) and check.value > 1:
            print(f"note: {check.name} {format_value(check.value)} is above 1: {FIELD_DESCRIPTIONS[check.name]}")
    reasons = "; ".join(f"{label}: {', '.join(found)}" for label, found in names.items() if found)
    print(f"verdict: {report.verdict}" + (f" ({reasons})" if reasons else ""))


def _run_compare(args: argparse.Namespace) -> int:
    from h3bench.run.progress import Progress

    # A 15 s pair with LPIPS takes minutes on a busy CPU: frames done on stderr, stdout stays the report.
    progress = Progress.on(sys.stderr, interval_s=10.0)
    with progress.step("compare", unit="frames") as step:
        report = compare(
            args.baseline,
            args.candidate,
            expect_seconds=args.expect_seconds,
            lpips_dir=args.h3_lpips_dir,
            lpips_device=args.h3_lpips_device,
            measure_lpips=args.measure_lpips,
            on_frames=step.advance,
        )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        _print_report(report)
    return EXIT_CODES[report.verdict]


# ---------------------------------------------------------------------------
# sim


def _run_sim(argv: list[str]) -> int:
    if argv[:1] == ["fit"]:  # a profile from evidence, not a server
        from h3bench.cli.simfit import run_fit

        return run_fit(argv[1:])
    # The simulator pulls in FastAPI and uvicorn; load it only when asked for.
    from h3bench import sim

    return sim.main(argv)


def _configure_bundle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="an evidence bundle directory")
    parser.add_argument("--json", action="store_true", dest="json", help="print JSON")


def _bundle_dir(path: str) -> Path:
    if not Path(path).is_dir():
        raise UsageError(f"{path}: not an evidence bundle directory")
    return Path(path)


def _configure_verify(parser: argparse.ArgumentParser) -> None:
    _configure_bundle(parser)
    parser.add_argument("--expect", metavar="SHA256",
                        help="the final.json SHA-256 the run printed (its terminal summary, or machine_info)")


def _run_verify(args: argparse.Namespace) -> int:
    from h3bench.evidence import verify

    if args.expect is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", args.expect):
        raise UsageError(f"--expect {args.expect}: not a SHA-256 (64 hexadecimal digits)")
    report = verify(_bundle_dir(args.bundle), expect_final_sha256=args.expect)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        print(f"{args.bundle}: {'OK' if report.ok else 'PROBLEMS'} ({report.files_checked} files checked)")
        for problem in report.problems:
            print(f"  {problem}")
    return 0 if report.ok else 1


def _configure_lpips(parser: argparse.ArgumentParser) -> None:
    from h3bench.session import options

    options.add_options(parser.add_argument, options.LPIPS)


def _configure_validate(parser: argparse.ArgumentParser) -> None:
    _configure_bundle(parser)
    parser.add_argument("--lossless", action="store_true",
                        help="also run the lossless test against the baseline's own variability")
    cli_campaign.verbose_flag(parser)
    _configure_lpips(parser)


def _run_validate(args: argparse.Namespace) -> int:
    from h3bench.evidence import Bundle
    from h3bench.report.screen import campaign_summary
    from h3bench.session.results import Results
    from h3bench.session.revalidation import validate, write_quality
    from h3bench.session.settings import Settings
    from h3bench.verdict.assemble import document as verdict_document

    path = _bundle_dir(args.bundle)
    settings = Settings.for_bundle(path, lossless=args.lossless, lpips_dir=args.h3_lpips_dir,
                                   lpips_device=args.h3_lpips_device)
    results = Results.from_bundle(path, settings)
    outcome = validate(results)
    written = write_quality(results.judge, Bundle.open(path))
    document = verdict_document(results)
    if args.json:
        print(json.dumps({"written": written, "verdict": str(outcome), "candidates": document.to_dict()["candidates"]},
                         indent=2, allow_nan=False))
    else:
        print(f"validated with {quality.VALIDATOR_VERSION}: {written}")
        for line in campaign_summary(results.spec, document, bundle=path, verbose=args.verbose,
                                     profiles=list(results.bundle.samples("profile"))):
            print(line)
    return EXIT_CODES[outcome]


def _configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="an evidence bundle directory, or a bisection's directory")
    parser.add_argument("--out", metavar="DIR",
                        help="directory for report.html and summary.md (default: <bundle's parent>/reports/<bundle name>)")
    parser.add_argument("--step-summary", metavar="FILE",
                        help="also append summary.md to FILE (a CI job summary, e.g. $GITHUB_STEP_SUMMARY), cut to "
                             "GitHub's 1 MiB with a last line naming --artifact-url")
    parser.add_argument("--artifact-url", metavar="URL", default="the run's artifacts",
                        help="where the whole report is, for the line that says a job summary was cut")
    _configure_lpips(parser)  # only for the worst pair's per-frame LPIPS curve


def _run_report(args: argparse.Namespace) -> int:
    from h3bench.bisect.report import is_bisection, write_bisect_report
    from h3bench.report.markdown import STEP_SUMMARY_BYTES, fit_summary

    if is_bisection(Path(args.bundle)):  # a bisection's directory: the posterior after each probe, the device time
        written: Any = write_bisect_report(Path(args.bundle), args.out)
    else:  # matplotlib and scikit-image load only for a report
        from h3bench.report import write_report

        written = write_report(_bundle_dir(args.bundle), args.out, lpips_dir=args.h3_lpips_dir,
                               lpips_device=args.h3_lpips_device)
    print(f"report: {written.html}")
    print(f"summary: {written.summary}")
    if args.step_summary:
        summary = Path(args.step_summary)
        room = STEP_SUMMARY_BYTES - (summary.stat().st_size if summary.is_file() else 0)
        with summary.open("a", encoding="utf-8") as out:
            out.write(fit_summary(Path(written.summary).read_text(encoding="utf-8"), max(0, room), args.artifact_url))
    return 0


SUBCOMMANDS: dict[str, Subcommand | Passthrough] = {
    "verify": Subcommand("re-hash an evidence bundle and name every file that changed or went missing",
                         _configure_verify, _run_verify),
    "validate": Subcommand("re-run the quality gates on a bundle's outputs; the result goes beside the old ones",
                           _configure_validate, _run_validate),
    "report": Subcommand("write a self-contained report.html and a summary.md of a bundle that verifies",
                         _configure_report, _run_report),
    "probe": Subcommand("describe a media file's streams (counts verified by decoding)", _configure_probe, _run_probe),
    "compare": Subcommand(
        "run every format check and quality gate of a candidate MP4 against its baseline",
        _configure_compare,
        _run_compare,
    ),
    "plan": Subcommand("print a campaign's blocks, server starts, estimated time and disk, and its problems",
                       cli_campaign.configure_plan, cli_campaign.run_plan),
    "run": Subcommand("run a whole campaign without pytest: blocks, quality, verdict, sealed bundle",
                      cli_campaign.configure_run, cli_campaign.run_campaign),
    "pool": Subcommand("pool the shard bundles of a campaign over several hosts into one sealed bundle and verdict",
                       cli_pool.configure_pool, cli_pool.run_pool),
    "ledger": Subcommand("the append-only, hash-chained ledger of candidates: add a bundle, show, verify",
                         cli_ledger.configure_ledger, cli_ledger.run_ledger),
    "bisect": Subcommand("search a regression's culprit among the engine commits of a spec's [bisect] range",
                         cli_bisect.configure_bisect, cli_bisect.run_bisect),
    "history": Subcommand("the baseline's E2E medians across campaigns, with flagged step changes",
                          cli_ledger.configure_history, cli_ledger.run_history),
    "export": Subcommand("a verified bundle's results as Bencher's BMF, github-action-benchmark's JSON or h3bench's",
                         cli_export.configure_export, cli_export.run_export),
    "sim": Passthrough("run the vLLM-Omni simulator server (arguments go to h3bench.sim)", _run_sim),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="h3bench", description="Benchmark and qualification suite for MiniMax-H3 Ref2VA on vLLM-Omni."
    )
    parser.add_argument("--version", action="version", version=f"h3bench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.help)
        if isinstance(command, Subcommand):
            command.configure(sub)
        else:
            sub.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the subcommand")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``h3bench`` command line and return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        command = SUBCOMMANDS.get(argv[0]) if argv else None
        if isinstance(command, Passthrough):
            # argparse would reject the subcommand's own options, so it never sees them.
            return command.run(argv[1:])
        args = build_parser().parse_args(argv)
        chosen = SUBCOMMANDS[args.command]
        assert isinstance(chosen, Subcommand)
        return chosen.run(args)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except H3BenchError as exc:
        print(f"h3bench: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except BrokenPipeError:
        # The reader went away (``h3bench probe --json | head``); silence the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:
        # A path the command could not read or write (a directory, read-only, a full disk): one line, no traceback.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"h3bench: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR


def console() -> int:
    """The ``h3bench`` executable: :func:`main`, then an exit without the interpreter's final garbage collection.

    That last collection finalises compiled code one object at a time (numba's
    and llvmlite's, when numba's is the SSIM kernel: 0.3 s after a ``compare``;
    torch's after LPIPS), for memory the ending process gives back anyway.
    Objects still close when their last reference goes (files flush); only
    reference cycles are left to the exit.
    """
    code = main()
    gc.freeze()
    return code

