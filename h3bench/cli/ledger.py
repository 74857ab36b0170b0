"""``h3bench ledger add|show|verify`` and ``h3bench history``: what a team keeps across campaigns."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from h3bench.errors import UsageError

DEFAULT_LEDGER = "h3bench-ledger.jsonl"

__all__ = ["configure_history", "configure_ledger", "ledger_table", "run_history", "run_ledger"]


def configure_ledger(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="verify a sealed bundle and append its candidates to the ledger")
    add.add_argument("bundle", help="an evidence bundle directory")
    show = actions.add_parser("show", help="print the ledger's table, grouped by hardware kind")
    show.add_argument("--json", action="store_true", dest="json", help="print the entries as JSON")
    check = actions.add_parser("verify", help="re-check the chain and every referenced bundle that can be found")
    check.add_argument("--bundles", action="append", default=[], metavar="DIR",
                       help="also look for moved bundles under DIR (repeatable)")
    for sub in (add, show, check):
        sub.add_argument("--ledger", default=DEFAULT_LEDGER, metavar="FILE",
                         help="the ledger file (default: ./%(default)s)")


def _effect_text(effect: dict[str, Any]) -> str:
    if effect.get("ratio") is None:
        return "-"
    if effect.get("ci_low") is None:
        return f"{effect['ratio']:.3f} (no CI)"
    return f"{effect['ratio']:.3f} [{effect['ci_low']:.3f}, {effect['ci_high']:.3f}]"


def _outcome_text(value: Any) -> str:
    from h3bench.ledger.entries import NOT_RUN

    return "not run" if value == NOT_RUN else str(value.get("verdict")) if isinstance(value, dict) else str(value)


def ledger_table(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The ledger as text: one table per hardware kind, entries in ledger order, reasons under each line."""
    header = ("#", "DATE", "SPEC", "CANDIDATE", "DUR", "SOURCE", "EFFECT (B/A, bounds)", "QUALITY", "LOSSLESS",
              "HELD-OUT", "VERDICT", "VALIDATOR")
    lines: list[str] = []
    for kind in sorted({str(e.get("hardware")) for e in entries}):
        group = [e for e in entries if str(e.get("hardware")) == kind]
        rows = [header]
        for e in group:
            source = e.get("source") or {}
            rows.append((str(e.get("seq")), str(e["bundle"].get("started_at", ""))[:10], str(e.get("spec_id"))[:12],
                         str(e.get("candidate")) + (" (final)" if e.get("final_combination") else ""),
                         f"{e.get('duration')}s", str(source.get("kind", "-")), _effect_text(e.get("effect") or {}),
                         _outcome_text(e.get("quality")), _outcome_text(e.get("lossless")),
                         _outcome_text(e.get("heldout")), str(e.get("verdict")),
                         ",".join(e.get("harness", {}).get("validator_versions") or ["-"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines.append(f"== hardware {kind}: {len(group)} entries")
        for index, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
            entry = group[index - 1] if index else None
            if entry is not None and entry.get("hypothesis"):
                lines.append(f"      hypothesis: {entry['hypothesis']}")
            for reason in (entry or {}).get("reasons", []):
                lines.append(f"      - {reason}")
    return lines


def run_ledger(args: argparse.Namespace) -> int:
    # Imported here: the ledger's imports (evidence bundles, environment) would cost every h3bench command 50 ms.
    from h3bench.ledger.chain import add_bundle, read_ledger, verify_ledger

    path = Path(args.ledger)
    if args.action == "add":
        added = add_bundle(args.bundle, path)
        for note in added.notes:
            print(note)
        for entry in added.entries:
            print(f"{path}: line {entry['seq'] + 1}: {entry['candidate']} {entry['duration']} s {entry['verdict']}")
        return 0
    if args.action == "show":
        if not path.is_file():
            raise UsageError(f"{path}: no such ledger file")
        entries, _ = read_ledger(path)
        print(json.dumps(entries, indent=2) if args.json else "\n".join(ledger_table(entries)))
        return 0
    report = verify_ledger(path, args.bundles)
    print(f"{path}: {'OK' if report.ok else 'PROBLEMS'} ({report.entries} entries, "
          f"{report.bundles_checked} bundles checked, {len(report.not_found)} entries' bundles not found)")
    for problem in report.problems:
        print(f"  {problem}")
    for missing in report.not_found:
        print(f"  not checked: {missing}")
    return 0 if report.ok else 1


def configure_history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="directories to search for evidence bundles")
    parser.add_argument("--html", metavar="FILE", help="also write the plot as a self-contained HTML page")
    parser.add_argument("--json", action="store_true", dest="json", help="print the series and steps as JSON")


def run_history(args: argparse.Namespace) -> int:
    from h3bench.ledger import history

    for directory in args.dirs:
        if not Path(directory).is_dir():
            raise UsageError(f"{directory}: not a directory")
    found = history.read_history([Path(d) for d in args.dirs])
    if args.json:
        print(json.dumps(history.history_json(found), indent=2))
    else:
        print("\n".join(history.history_lines(found)))
    if args.html:
        from h3bench.ledger.plot import write_history_page

        write_history_page(found, Path(args.html))
        print(f"plot: {args.html}")
    return 1 if any(series.ongoing_regression for series in found.series) else 0
