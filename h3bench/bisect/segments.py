"""Every change in a range: after a claim, the segments of the range it leaves, searched in turn, from the log.

The search first looks at the whole range (culprits ``0 … N-1``, the good engine its base, level 0). A
confirmed claim, group ``first … last`` of the segment ``(lo, hi]``, leaves two segments that may hold
another change: ``(lo, first - 1]`` (from the segment's base up to the claim's parent) and
``(last, hi]`` (from the claim up to the segment's end). Each is searched like the range, its base's level
its own pairs' (:meth:`h3bench.bisect.posterior.Evidence.within`), when its measured ends differ by at
least half the size asked and by two standard errors (:func:`h3bench.bisect.search.differs`); when its ends
are too loosely measured to tell (two standard errors leave a change of the size open), the end with fewer
pairs first gets a probe of up to ``max_pairs`` pairs (:func:`h3bench.bisect.search.top_up`), which stops
once two standard errors exclude the size there (:func:`~h3bench.bisect.search.settled`). A segment whose ends
show a faster level looks for a change in that direction: its confirm must say "faster". At most
:data:`~h3bench.bisect.search.MAX_SEGMENTS` segments are searched.

The log says it all: a ``claimed`` record after each claim, a ``round`` with ``top_up`` for the probes of
the ends, and a ``segments`` record with each segment decided (searched or not, its ends' difference, the
largest change left open there). :mod:`h3bench.bisect.simulate` runs the same rules on its rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from h3bench.bisect.posterior import Evidence
from h3bench.bisect.search import CONFIRMS, MAX_SEGMENTS, differs, settled, top_up
from h3bench.errors import UsageError
from h3bench.runspec.bisection import Bisect

__all__ = ["after_claim", "asked", "claims", "course", "current", "is_top_up", "size_of", "top_up_settled"]

Records = Sequence[dict[str, Any]]


def asked(table: Bisect, records: Records, size: float | None = None) -> tuple[float | None, str]:
    """The change to find as a ratio, and who asked for it: ``size`` (``--size``), else ``[bisect] size``,
    else none (half the step the verify measures; :func:`size_of`). Once a start record fixed it, its own
    (a log written before it held one: the spec's), and another ``size`` is refused."""
    start = next((r for r in records if r["event"] == "start"), None)
    if start is None or "size_from" not in start:
        fixed = (size, "--size") if size is not None and start is None else (table.size, "[bisect] size")
        found = fixed if fixed[0] is not None else (None, "half the verified step")
    else:
        found = start["size"], str(start["size_from"])
    if start is not None and size is not None and (found[0] is None or not math.isclose(size, found[0])):
        what = "half the step its verify measures" if found[0] is None else f"a change of {found[0]:g} ({found[1]})"
        raise UsageError(f"the bisection looks for {what}; --size {size:g} asks for another: start a new one, or "
                         "resume it without --size")
    return found


def size_of(table: Bisect, records: Records) -> float:
    """The change to find, as a log ratio: the size asked (``--size`` or ``[bisect] size``), else half the
    verified step."""
    size, _ = asked(table, records)
    if size is not None:
        return math.log(size)
    verify = [r for r in records if r["event"] == "verify"]
    step = (verify[-1].get("step") if verify else None) or {}
    return abs(math.log(float(step.get("ratio", 1.10)))) / 2


def course(records: Records, n: int) -> tuple[list[tuple[int, int, int]], int, int]:
    """Every segment to search (base, end, direction: 1 slower, -1 faster), how many are done, and the seq
    after which the current one's records start.

    One ends with a claim, with its last confirm that does not confirm, or with a stop that names nothing.
    """
    todo = [(-1, n - 1, 1)]
    todo += [(int(g["lo"]), int(g["hi"]), int(g["direction"])) for r in records if r["event"] == "segments"
             for g in r["segments"] if g["searched"]]
    done, confirms, since = 0, 0, 0
    for r in records:
        confirms += r["event"] == "confirm"
        if (r["event"] == "confirm" and (r["claim"] or confirms >= CONFIRMS)) or (
                r["event"] == "stop" and r["named"] is None):
            done, confirms, since = done + 1, 0, int(r.get("seq", since))
    return todo, done, since


def current(records: Records, n: int) -> tuple[int, int, int]:
    """The segment searched now (the last one once all are done)."""
    todo, done, _ = course(records, n)
    return todo[min(done, len(todo) - 1)]


def claims(records: Records) -> list[tuple[int, int]]:
    """Each confirmed claim's group, first and last culprit index, in the order they were found."""
    out, stop = [], None
    for r in records:
        if r["event"] == "stop":
            stop = r
        elif r["event"] == "confirm" and r["claim"] and stop is not None:
            out.append((int(stop["named"][0]) - 1, int(stop["named"][1]) - 1))
    return out


def is_top_up(records: Records, number: int) -> bool:
    """Whether probe ``number`` measures a segment's end (``max_pairs`` pairs, no test), not a search's."""
    return any(r["event"] == "round" and r.get("top_up") and any(int(p["number"]) == number for p in r["probes"])
               for r in records)


def top_up_settled(records: Records, number: int, evidence: Evidence, size: float) -> bool:
    """Whether the top-up probe ``number`` may stop: its segment's ends, with its pairs so far in ``evidence``,
    are settled (:func:`h3bench.bisect.search.settled`). A round written before it named the segments: never."""
    for r in records:
        if r["event"] == "round" and r.get("top_up") and "segments" in r:
            for probe, (a, b) in zip(r["probes"], r["segments"], strict=True):
                if int(probe["number"]) == number:
                    return bool(settled(evidence, a, b, size))
    return False


def after_claim(records: Records, evidence: Evidence, size: float
                ) -> tuple[int, list[tuple[int, int, int]], list[dict[str, Any]]] | None:
    """The first claim whose segments are not decided yet: its number, the ends to measure more (culprit
    indices, each with its segment's ``lo`` and ``hi``; none once they were), and else its segments decided.
    None when every claim's are."""
    decided = {int(r["claim"]) for r in records if r["event"] == "segments"}
    claimed = [r for r in records if r["event"] == "claimed" and int(r["number"]) not in decided]
    if not claimed:
        return None
    claim = claimed[0]
    topped = any(r["event"] == "round" and r.get("top_up") == claim["number"] for r in records)
    candidates = [(a, b) for a, b in ((int(claim["lo"]), int(claim["first"]) - 1),
                                      (int(claim["last"]), int(claim["hi"]))) if b > a]
    found = [tuple(float(v) for v in differs(evidence, a, b, size)) for a, b in candidates]
    unclear = [(int(top_up(evidence, a, b)), a, b) for (a, b), (searched, _, bound) in
               zip(candidates, found, strict=True) if not searched and bound >= size]
    if unclear and not topped:
        return int(claim["number"]), unclear, []
    opened = sum(1 for r in records if r["event"] == "segments" for g in r["segments"] if g["searched"]) + 1
    out = []
    for (a, b), (searched, diff, bound) in zip(candidates, found, strict=True):
        chosen = bool(searched) and opened < MAX_SEGMENTS
        opened += chosen
        out.append({"lo": a, "hi": b, "searched": chosen, "difference": diff, "open_to": bound, "size": size,
                    "direction": 1 if not diff < 0 else -1})
    return int(claim["number"]), [], out
