"""``h3bench ledger add|show|verify`` and ``h3bench history``: what a team keeps across campaigns.

An entry whose bundle cannot be found (not at its recorded path, nor by its
seal under ``--bundles DIR``) is unverified: ``show`` marks its row, and
``verify`` fails on it unless ``--allow-missing`` is given, and then says
how many entries it did not verify.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
from collections.abc import Mapping, Sequence
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
    check = actions.add_parser("verify", help="re-check the chain and every referenced bundle; fail on one not found")
    check.add_argument("--allow-missing", action="store_true", dest="allow_missing",
                       help="pass although some entries' bundles are not found (they are counted as unverified)")
    for sub in (show, check):
        sub.add_argument("--bundles", action="append", default=[], metavar="DIR",
                         help="also look for moved bundles under DIR, by their seals (repeatable)")
    for sub in (add, show, check):
        sub.add_argument("--ledger", default=DEFAULT_LEDGER, metavar="FILE",
                         help="the ledger file (default: ./%(default)s)")


def _outcome_text(value: Any) -> str:
    return "not run" if value is None else str(getattr(value, "outcome", value))


def ledger_table(lines: Sequence[tuple[int, LedgerEntry]], marks: Mapping[int, Sequence[str]] | None = None) -> list[str]:
    """The ledger as text: one table per hardware kind, entries in ledger order, reasons under each line.

    ``marks``: per entry (its ``#``), what is wrong with its line or what replaced it, printed under it with ``!``.
    """
    marks = marks or {}
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
            if e.bundle.pooled:  # one campaign over several hosts: the shards it holds, by seal
                found.append("pool of " + ", ".join(f"{s.label} (host {s.host}, {s.final_sha256[:12]})"
                                                    for s in e.bundle.pooled))
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
            rows.append((f"{seq}!" if seq in marks else str(seq), e.bundle.started_at[:10], e.spec_id[:12],
                         e.candidate + (" (final)" if e.final_combination else ""), f"{e.duration}s",
                         str((e.source or {}).get("kind", "-")), e.effect.text(), _outcome_text(e.quality),
                         _outcome_text(e.lossless), _outcome_text(e.heldout), e.word,
                         ",".join(e.harness.get("validator_versions") or ["-"])))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        out.append(f"== hardware {kind}: {len(group)} entries")
        for index, row in enumerate(rows):
            out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
            seq, entry = group[index - 1] if index else (-1, None)
            for mark in marks.get(seq, ()):
                out.append(f"      ! {mark}")
            if entry is not None and entry.hypothesis:
                out.append(f"      hypothesis: {entry.hypothesis}")
            for reason in entry.reasons if entry is not None else ():
                out.append(f"      - {reason}")
            out += [f"      {note}" for note in (notes.get(group[index - 1][0], []) if index else [])]
    return out


def run_ledger(args: argparse.Namespace) -> int:
    # Imported here: the ledger's imports (evidence bundles, environment) would cost every h3bench command 50 ms.
    from h3bench.ledger.append import add_bundle
    from h3bench.ledger.entries import LedgerEntry

    path = Path(args.ledger)
    if args.action == "add":
        added = add_bundle(args.bundle, path)
        for note in added.notes:
            print(note)
        for entry in added.entries:
            typed = LedgerEntry.from_dict(entry, where=f"{path}: line {entry['seq'] + 1}")
            word = f"{typed.word} (a shard: not judged alone)" if typed.bundle.shard else typed.word
            replaces = entry.get("supersedes") or []
            also = f" (supersedes line {', '.join(str(s + 1) for s in replaces)})" if replaces else ""
            print(f"{path}: line {entry['seq'] + 1}: {entry['candidate']} {entry['duration']} s {word}{also}")
        return 0
    if args.action == "show":
        return _show(path, as_json=args.json, bundle_dirs=args.bundles)
    return _verify(path, args.bundles, allow_missing=args.allow_missing)


def _verify(path: Path, bundle_dirs: Sequence[str], *, allow_missing: bool) -> int:
    """Exit 0 only when nothing is wrong and every entry was checked against its bundle (or ``allow_missing``)."""
    from h3bench.ledger.verify import verify_ledger

    report = verify_ledger(path, bundle_dirs)
    missing = len(report.not_found)
    counts = (f"({report.entries} entries, {report.bundles_checked} bundles checked, {missing} entries' bundles not "
              "found)")
    if not report.ok:
        head = f"PROBLEMS {counts}"
    elif not missing:
        head = f"OK {counts}"
    elif allow_missing:
        head = (f"OK for what was checked, but {missing} of {report.entries} entries are UNVERIFIED: their bundles "
                f"were not found (--allow-missing) {counts}")
    else:
        head = (f"NOT VERIFIED: {missing} of {report.entries} entries are unverified, their bundles not found {counts};"
                " give --bundles DIR where they are, or --allow-missing to pass without them")
    print(f"{path}: {head}")
    for problem in report.problems:
        print(f"  {problem}")
    for line in report.not_found:
        print(f"  unverified: {line}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0 if report.ok and (allow_missing or not missing) else 1


def _show(path: Path, *, as_json: bool, bundle_dirs: Sequence[str] = ()) -> int:
    """The table (or JSON) of every entry, each broken line marked and listed; exit 1 when any line is broken.

    ``show`` checks every line and the chain as ``verify`` does, and whether
    each entry's bundle can be found (not its content): a tampered line, or
    one whose bundle is nowhere, is never printed as if it were evidence
    without its mark.
    """
    from h3bench.ledger.chain import read_ledger, replaces
    from h3bench.ledger.verify import unverified_entries

    found = read_ledger(path)
    unverified = unverified_entries(found, bundle_dirs)
    marks: dict[int, list[str]] = {}
    states: dict[int, dict[str, Any]] = {}  # the same marks for --json, beside each record
    for line in found.lines:
        marks.setdefault(line.seq, []).extend(f"BROKEN: line {line.number}: {p}" for p in line.problems)
        state: dict[str, Any] = {"line": line.number, "broken": list(line.problems), "unverified": None,
                                 "superseded_by": None, "superseded_as": None}
        if line.seq in unverified:
            state["unverified"] = unverified[line.seq]
            marks[line.seq].append(f"UNVERIFIED: {unverified[line.seq]}: nothing on this row was checked against "
                                   "evidence (h3bench ledger verify --bundles DIR finds a bundle that moved)")
        if line.seq in found.superseded_by:
            newer = found.lines[found.superseded_by[line.seq]].entry
            why = replaces(newer, line.entry) if newer is not None and line.entry is not None else None
            state.update(superseded_by=found.superseded_by[line.seq], superseded_as=why)
            marks[line.seq].append(f"superseded by #{found.superseded_by[line.seq]} ({why})")
        states[line.seq] = state
    typed = [(line.seq, line.entry) for line in found.lines if line.entry is not None]
    if as_json:  # each record as written, and under "show" what the table marks: one account, whichever is read
        print(json.dumps([{**line.record, "show": states[line.seq]} for line in found.lines
                          if line.record is not None], indent=2))
    else:
        table = ledger_table(typed, {seq: found for seq, found in marks.items() if found})
        untyped = [f"#{line.seq}! BROKEN, not an entry: line {line.number}: {'; '.join(line.problems)}"
                   for line in found.lines if line.entry is None]
        print("\n".join(table + untyped) if table or untyped else f"{path}: no entries")
    if unverified:
        print(f"h3bench: {path}: {len(unverified)} of {len(found.lines)} entries UNVERIFIED (their bundles were not "
              "found)", file=sys.stderr)
    if found.problems:
        print(f"h3bench: {path}: {len(found.problems)} problem(s); the lines marked ! are not evidence as they "
              "stand (h3bench ledger verify checks their bundles too)", file=sys.stderr)
        return 1
    return 0


def configure_history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="directories to search for evidence bundles")
    parser.add_argument("--html", metavar="FILE", help="also write the plot as a self-contained HTML page")
    parser.add_argument("--json", action="store_true", dest="json", help="print the series and steps as JSON")


def writable_file(path: Path, what: str) -> None:
    """Refuse, in one line and before any work, an output path that is a directory or in no directory."""
    if path.is_dir():
        raise UsageError(f"{path}: is a directory; {what} needs a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{path}: its directory {path.parent} does not exist; {what} cannot be written")


def output_error(exc: OSError, path: Path, what: str) -> UsageError:
    """A failed write of an output file as one line that names the path and the reason (read-only, full, ...)."""
    reason = "no space left on its file system" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else \
        (exc.strerror or str(exc))
    return UsageError(f"{path}: {what} cannot be written ({reason})")


def run_history(args: argparse.Namespace) -> int:
    from h3bench.ledger import history

    for directory in args.dirs:
        if not Path(directory).is_dir():
            raise UsageError(f"{directory}: not a directory")
    html = Path(args.html) if args.html else None
    if html is not None:
        writable_file(html, "the --html page")
    found = history.read_history([Path(d) for d in args.dirs])
    if args.json:
        print(json.dumps(history.history_json(found), indent=2))
    else:
        print("\n".join(history.history_lines(found)))
    if html is not None:
        from h3bench.ledger.plot import write_history_page

        try:
            write_history_page(found, html)
        except OSError as exc:
            raise output_error(exc, html, "the --html page") from exc
        print(f"plot: {html}")
    return 1 if any(series.ongoing_regression for series in found.series) else 0
