"""``h3bench pool BUNDLE... --out DIR [--look]``: the fan-in of a campaign over several hosts.

Verifies every shard bundle, refuses what cannot be pooled (with the reason),
writes one new sealed bundle under ``--out`` with the pooled verdict, prints
the summary with a line per host, and exits with the verdict (0 PASS, 1 FAIL,
3 INCONCLUSIVE). With ``--look`` it also writes ``looks-round-<R>.json`` under
``--out``, the file the next round's shards take with ``--looks``, prints for
each candidate and duration whether it continues or stops, ends with
``continue: true`` or ``continue: false``, and exits 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from h3bench.cli.campaign import verbose_flag
from h3bench.outcome import Outcome

__all__ = ["configure_pool", "run_pool"]

_EXIT = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 3}


def configure_pool(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundles", nargs="+", metavar="BUNDLE", help="the shard bundles (every round so far)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the pooled bundle (and look file) go")
    parser.add_argument("--look", action="store_true",
                        help="a look of the sequential design: also write the look file the next round's shards "
                             "take with --looks, and print whether each candidate and duration continues")
    verbose_flag(parser)


def run_pool(args: argparse.Namespace) -> int:
    from h3bench.pool import next_window, pool_bundles, window_lines, write_window
    from h3bench.pool.fanin import pooled_results
    from h3bench.report.screen import campaign_summary
    from h3bench.runspec import parse_runspec

    out = Path(args.out)
    pooled = pool_bundles(args.bundles, out, progress=lambda line: print(line, flush=True))
    document = pooled.document
    from h3bench.evidence import BundleReader

    bundle = BundleReader.open(pooled.path)
    spec = parse_runspec(bundle.manifest.spec, source=f"{pooled.path}/manifest.json")
    for line in campaign_summary(spec, document, bundle=pooled.path, verbose=args.verbose):
        print(line)
    if document.pool is not None:
        for name, durations in document.pool.series.items():
            for key, found in durations.items():
                print(f"{name} at {key}: {found.interaction.describe()}")
                for host in found.hosts:
                    print(f"  host {host.describe()}")
    print(f"pooled bundle: {pooled.path}")
    print(f"final.json SHA-256 {pooled.anchor}")
    if not args.look:
        return _EXIT[document.outcome]
    assert document.pool is not None
    shards = document.pool.shards
    results = pooled_results(bundle, spec, lossless=any(d.lossless_enabled for c in document.candidates.values()
                                                        for d in c.durations.values()))
    window = next_window(spec, results, shards=shards[0].count, round_done=max(s.round for s in shards))
    path = write_window(window, out / f"looks-round-{window.round}.json")
    for line in window_lines(window):
        print(line)
    print(f"look file: {path}")
    return 0
