"""``h3bench export BUNDLE --format bmf|github-benchmark|json``: a verified bundle's results for dashboards.

The bundle is verified first (a bundle that does not verify is refused,
naming the files); the records come from its ``verdict.json`` and carry its
seal and spec id (:mod:`h3bench.report.export`). ``--out FILE`` writes them
atomically; without it they go to standard output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from h3bench.errors import UsageError

__all__ = ["FORMAT_NAMES", "configure_export", "run_export"]

# h3bench.report.export's writers, named here so that building the parser loads none of the verdict's modules.
FORMAT_NAMES = ("bmf", "github-benchmark", "json")


def configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="an evidence bundle directory")
    parser.add_argument("--format", dest="fmt", choices=FORMAT_NAMES, default="json",
                        help="bmf: Bencher Metric Format; github-benchmark: github-action-benchmark's "
                             "customSmallerIsBetter; json: h3bench's own (default)")
    parser.add_argument("--out", metavar="FILE", help="write there instead of standard output")


def run_export(args: argparse.Namespace) -> int:
    from h3bench.course.shards import ShardRun
    from h3bench.evidence.files import replace_atomic
    from h3bench.report.export import Provenance, export_of, write
    from h3bench.session.stored import open_verified

    stored = open_verified(args.bundle)
    document = stored.document()
    if document is None:
        raise UsageError(f"{args.bundle}: the bundle holds no verdict.json (the run ended before its verdict): "
                         "nothing to export")
    shard = ShardRun.of(stored.manifest, where=f"{stored.path}/manifest.json")
    provenance = Provenance(stored.path.name, stored.final_sha256, stored.spec_id, document.spec_name,
                            stored.hardware_kind, stored.started_at, stored.manifest.h3bench_version,
                            document.run, document.interrupted, shard.label if shard is not None else None)
    exported = export_of(document, provenance)
    text = write(exported, args.fmt)
    if args.out is None:
        sys.stdout.write(text)
    else:
        replace_atomic(Path(args.out), text.encode())
        print(f"{args.fmt}: {args.out} ({len(exported.records)} record(s), final.json SHA-256 "
              f"{stored.final_sha256})", file=sys.stderr)
    return 0
