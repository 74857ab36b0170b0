"""The bisection's log in lines: one per verify, probe or confirm as it is taken, and the summary at its end.

Both are read from the records of ``bisect-log.jsonl``
(:mod:`h3bench.bisect.log`), so a resumed or fanned-in bisection prints
what a single run would have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from h3bench.bisect.specs import engine
from h3bench.runspec import RunSpec
from h3bench.runspec.bisection import Bisect
from h3bench.stats import intervals

__all__ = ["record_line", "summary_lines"]


def record_line(record: dict[str, Any]) -> str:
    event = record["event"]
    head = f"h3bench bisect: {event}"
    if event == "probe":
        head += f" {record['number']}"
    text = f"{head}: {record['commit']}: {record['status']}"
    if record["status"] == "measured":
        ratio = intervals.geometric_mean_of_logs(record["log_ratios"])
        text += f", {record['pairs']} pair(s), ratio {ratio:.4f}"
    if event == "probe" and record["status"] == "measured":
        text += f", {record['decision']} (log LR {record['log_lr']:+.2f})"
    if record.get("reason"):
        text += f" ({record['reason']})"
    if event == "verify":
        text += f"; {record['why']}"
    if event == "confirm":
        text += "; the claim holds" if record["claim"] else "; not confirmed: no claim"
    return text


def summary_lines(spec: RunSpec, table: Bisect, directory: Path, records: list[dict[str, Any]],
                  outcome: str) -> list[str]:
    """What the search did and found, from its log's ``records``; ``outcome`` is the bisection's."""
    out = [f"bisection of {spec.name} ({len(table.range)} commits after {table.good.commit}, "
           f"on {table.on}): {directory}"]
    for r in records:
        if r["event"] in ("verify", "probe", "confirm"):
            out.append("  " + record_line(r).removeprefix("h3bench bisect: "))
            if r["event"] == "probe":
                probs = np.asarray(r["posterior"])
                k = int(np.argmax(probs))
                out.append(f"    posterior: {engine(spec, k + 1).commit} {probs[k]:.3f}; "
                           f"{r['spent_device_s'] / 3600:.2f} device-h spent")
        elif r["event"] == "stop":
            top = ", ".join(f"{t['commit']} {t['mass']:.3f}" for t in r["top"])
            out.append(f"  stopped: {r['reason']}; top three: {top}")
            for position, why in r["skipped"].items():
                out.append(f"  skipped {engine(spec, int(position)).commit}: {why} (never counted as slow)")
            if r["named"] is not None and r["named"][0] != r["named"][1]:
                names = [engine(spec, p).commit for p in range(r["named"][0], r["named"][1] + 1)]
                out.append(f"  the culprit is one of {', '.join(names)}: no probe can split them")
    between = [r for r in records if r["event"] == "probe" and r.get("between")]
    if between:
        out.append("  a level between no change and the step at " + ", ".join(r["commit"] for r in between) +
                   ": the range may hold more than one change")
    out.append(f"bisection: {outcome}")
    return out
