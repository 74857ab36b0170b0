"""The bisection's log in lines: one per verify, probe or confirm as it is taken, and the summary at its end.

Both are read from the records of ``bisect-log.jsonl``
(:mod:`h3bench.bisect.log`), so a resumed or fanned-in bisection prints
what a single run would have.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from h3bench.bisect.segments import asked, claims, size_of
from h3bench.bisect.specs import engine
from h3bench.runspec import RunSpec
from h3bench.runspec.bisection import Bisect
from h3bench.stats import intervals

__all__ = ["open_lines", "record_line", "segment_lines", "summary_lines"]


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
    size, source = asked(table, records)
    if size is not None or any(r["event"] == "verify" for r in records):
        out.append(f"  the change to find: {math.exp(size_of(table, records)) - 1:.1%} or more, either way ({source})")
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
    out += [f"  {line}" for line in segment_lines(spec, records)]
    out += [f"  {line}" for line in open_lines(spec, records)]
    out.append(f"bisection: {outcome}")
    return out


def segment_lines(spec: RunSpec, records: list[dict[str, Any]]) -> list[str]:
    """How many changes the search looked for, which parts of the range it left open at what size, and what
    looking for more would cost (the device-hours a searched segment took here, on average)."""
    stops = [r for r in records if r["event"] == "stop"]
    if not stops:
        return []
    segments = [g for r in records if r["event"] == "segments" for g in r["segments"]]
    searched = 1 + sum(1 for r in segments if r["searched"])
    claims = sum(1 for r in records if r["event"] == "confirm" and r["claim"])
    spent = max((float(r.get("spent_device_s", 0.0)) for r in records), default=0.0)
    out = [f"looked for {searched} change(s), one per segment searched (the whole range, then each segment a claim "
           f"left whose measured ends differ by half the size asked): {claims} confirmed"]
    for r in segments:
        a, b = engine(spec, int(r["lo"]) + 1).commit, engine(spec, int(r["hi"]) + 1).commit
        what = "searched" if r["searched"] else "not searched"
        line = (f"after {a} up to {b}: {what}; its ends differ by {math.exp(float(r['difference'])) - 1:+.1%} "
                f"(the size asked {math.exp(float(r['size'])) - 1:.1%})")
        if not r["searched"] and float(r["open_to"]) >= float(r["size"]):
            line += (f"; a change up to {math.exp(float(r['open_to'])) - 1:.1%} is left open there: looking for it "
                     f"would cost about {spent / searched / 3600:.1f} device-h")
        out.append(line)
    return out


def _ratio(records: list[dict[str, Any]]) -> float | None:
    """The ratio every pair of these records measured together (None without a pair)."""
    x = [v for r in records for v in r.get("log_ratios") or ()]
    return intervals.geometric_mean_of_logs(x) if x else None


def open_lines(spec: RunSpec, records: list[dict[str, Any]]) -> list[str]:
    """Where a probe measured a level between no change and the step: which part of the range holds another
    change that this search did not look for, and about how large it is.

    After the named culprit, the level moved away from the culprit's own (its probes', else the verify's step)
    somewhere after it up to the probe; before it, away from the good engine's, up to the probe.
    """
    # The whole range's search: its records come before the first segments a claim left.
    whole = records[:next((i for i, r in enumerate(records) if r["event"] == "segments"), len(records))]
    named = [r["named"] for r in whole if r["event"] == "stop" and r["named"] is not None]
    found = [first + 1 for first, _ in claims(records)]  # each claim's first position
    out = []
    for r in records:
        if r["event"] != "probe" or not r.get("between") or (ratio := _ratio([r])) is None:
            continue
        j = int(r["position"])
        level, since = 1.0, 0
        if named and j > int(named[-1][1]):
            since = int(named[-1][1])
            culprit = [p for p in records if p["event"] in ("probe", "verify") and int(p["position"]) == since]
            verify = [p for p in records if p["event"] == "verify" and p.get("step")]
            level = _ratio(culprit) or (float(verify[-1]["step"]["ratio"]) if verify else 1.0)
        if any(since < p <= j for p in found):
            continue  # a claim lies in that part of the range: the change that level showed was found
        start = engine(spec, since).commit
        out.append(f"a level between no change and the step at {r['commit']} (ratio {ratio:.4f}, {r['pairs']} "
                   f"pair(s)): another change of about {ratio / level - 1:+.1%} lies after {start} up to "
                   f"{r['commit']}, which this search did not look for")
    return out
