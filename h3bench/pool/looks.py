"""Looks across hosts: the pooled decision of each series, and the next round's windows for the shards.

``h3bench pool --look`` pools every shard of the rounds so far (the pairs
every shard has finished), takes each series' decision at every planned look
those pairs reach (:meth:`h3bench.session.results.Results.decision`, the one
a single host takes), and writes the look file that the next round's shards
take with ``--looks``: the course's next round
(:meth:`h3bench.course.course.Course.next_window`). A series that stopped
gets no more pairs, one that continues gets the pairs up to its next look,
rounded up to whole AB/BA units on every shard
(:func:`h3bench.course.shards.round_up`), a dearer duration run in order of
cost starts once the cheaper one passed, and the control blocks a
continuing series' lossless test needs run with the pair they precede. A
round may run pairs past a look inside it (the price of running the hosts at
once); it never runs a block that an earlier look made unnecessary.
"""

from __future__ import annotations

import json
from pathlib import Path

from h3bench.course.course import Course
from h3bench.course.shards import Window
from h3bench.evidence import files
from h3bench.runspec import RunSpec
from h3bench.session.results import Results

__all__ = ["next_window", "runs_anything", "window_lines", "write_window"]


def next_window(spec: RunSpec, results: Results, *, shards: int, round_done: int) -> Window:
    """The next round's windows from the pooled results of rounds 1..``round_done``."""
    course = Course.of(spec, lossless=results.lossless_on, shards=shards)
    return course.next_window(results, spec.spec_id, round_done)


def runs_anything(window: Window) -> bool:
    """Whether the round has a pair or a control block to run (else every series stopped or waits for nothing)."""
    return any(w.action == "continue" and w.through > w.done for found in window.series.values()
               for w in found.values()) or any(window.controls.values())


def window_lines(window: Window) -> list[str]:
    """What the look decided, per duration and series, and whether a round follows."""
    lines = []
    for key, found in window.series.items():
        for series, w in found.items():
            if w.action == "stop":
                lines.append(f"{series} at {key}: stop ({w.outcome}) after {w.done} pairs: {w.reason}")
            elif w.through > w.done:
                lines.append(f"{series} at {key}: continue, round {window.round} runs pairs {w.done + 1}-{w.through}:"
                             f" {w.reason}")
            else:
                lines.append(f"{series} at {key}: continue, nothing in round {window.round}: {w.reason}")
    for key, positions in window.controls.items():
        if positions:
            lines.append(f"controls at {key}: round {window.round} runs control block(s) "
                         f"{', '.join(map(str, positions))} (the lossless test of a series that may pass needs them)")
    more = runs_anything(window)
    lines.append(f"continue: {'true' if more else 'false'}")
    return lines


def write_window(window: Window, path: Path) -> Path:
    """Write the look file (atomically: a round's shards never read half of one)."""
    data = {**window.to_dict(), "continue": runs_anything(window)}
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
    return path
