"""``h3bench ledger add|show|verify`` and ``h3bench history``: what a team keeps across campaigns."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench.errors import UsageError

if TYPE_CHECKING:
    from h3bench.ledger.entries import LedgerEntry

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


def _outcome_text(value: Any) -> str:
    return "not run" if value is None else str(getattr(value, "outcome", value))


def ledger_table(lines: Sequence[tuple[int, LedgerEntry]]) -> list[str]:
    """The ledger as text: one table per hardware kind, entries in ledger order, reasons under each line."""
    header = ("#", "DATE", "SPEC", "CANDIDATE", "DUR", "SOURCE", "EFFECT (B/A, bounds)", "QUALITY", "LOSSLESS",
              "HELD-OUT", "VERDICT", "VALIDATOR")
    from h3bench.report.terminal import part_ratio_text
    from h3bench.session.stored import contract_changes

    out: list[str] = []
    for kind in sorted({e.hardware for _, e in lines}):
        group = [(seq, e) for seq, e in lines if e.hardware == kind]
        rows = [header]
        notes: dict[int, list[str]] = {}
        # The last entry with a contract, and the last one of the bundle before its bundle.
        latest: tuple[int, LedgerEntry] | None = None
        before: tuple[int, LedgerEntry] | None = None
        for seq, e in group:
            found = notes.setdefault(seq, [])
            if e.stages is not None:
                moved = [f"{p.part} {part_ratio_text(p)}" for p in e.stages.parts if p.moved and p.part != "e2e"]
                found.append(f"stages (attribution, not the verdict): interval excludes 1: {', '.join(moved) or 'none'}")
            if e.contract is None:
                continue
            if latest is not None and latest[1].bundle.final_sha256 != e.bundle.final_sha256:
                before = latest
            if before is not None and before[1].contract is not None:
                changed = contract_changes(before[1].contract, e.contract, arms=("baseline", e.candidate))
                found += [f"contract changed since line {before[0] + 1}: {change}" for change in changed]
            latest = (seq, e)
        for seq, e in group:
            rows.append((str(seq), e.bundle.started_at[:10], e.spec_id[:12],
                         e.candidate + (" (final)" if e.final_combination else ""), f"{e.duration}s",
                         str((e.source or {}).get("kind", "-")), e.effect.text(), _outcome_text(e.quality),
                         _outcome_text(e.lossless), _outcome_text(e.heldout), e.word,
                         ",".join(e.harness.get("validator_versions") or ["-"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        out.append(f"== hardware {kind}: {len(group)} entries")
        for index, row in enumerate(rows):
            out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
            entry = group[index - 1][1] if index else None
            if entry is not None and entry.hypothesis:
                out.append(f"      hypothesis: {entry.hypothesis}")
            for reason in entry.reasons if entry is not None else ():
                out.append(f"      - {reason}")
            out += [f"      {note}" for note in (notes.get(group[index - 1][0], []) if index else [])]
    return out


def run_ledger(args: argparse.Namespace) -> int:
    # Imported here: the ledger's imports (evidence bundles, environment) would cost every h3bench command 50 ms.
    from h3bench.ledger.chain import add_bundle, read_ledger, verify_ledger
    from h3bench.ledger.entries import WORDS, LedgerEntry
    from h3bench.outcome import Outcome

    path = Path(args.ledger)
    if args.action == "add":
        added = add_bundle(args.bundle, path)
        for note in added.notes:
            print(note)
        for entry in added.entries:
            word = WORDS[Outcome(entry["verdict"])]
            print(f"{path}: line {entry['seq'] + 1}: {entry['candidate']} {entry['duration']} s {word}")
        return 0
    if args.action == "show":
        if not path.is_file():
            raise UsageError(f"{path}: no such ledger file")
        entries, _ = read_ledger(path)
        typed = [(e.get("seq", i), LedgerEntry.from_dict(e, where=f"{path}: line {i + 1}")) for i, e in enumerate(entries)]
        print(json.dumps(entries, indent=2) if args.json else "\n".join(ledger_table(typed)))
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
