"""Looks across hosts: the pooled decision of each series, and the next round's windows for the shards.

``h3bench pool --look`` pools every shard of the rounds so far (the pairs
every shard has finished), takes each series' decision at every planned look
those pairs reach (:meth:`h3bench.session.results.Results.decision`, the one
a single host takes), and writes the look file that the next round's shards
take with ``--looks``: a series that stopped gets no more pairs, one that
continues gets the pairs up to its next look, rounded up to whole AB/BA units
on every shard (:func:`h3bench.runspec.shards.round_up`), and a dearer
duration run in order of cost starts once the cheaper one passed. A round
may run pairs past a look inside it (the price of running the hosts at
once); it never runs a block that an earlier look made unnecessary.
"""

from __future__ import annotations

import json
from pathlib import Path

from h3bench.evidence import files
from h3bench.outcome import Outcome
from h3bench.runspec import RunSpec
from h3bench.runspec.schedule import in_order_of_cost, looks_of, run_order, series_of
from h3bench.runspec.shards import SeriesWindow, Window, round_up
from h3bench.session.results import Results

__all__ = ["next_window", "runs_anything", "window_lines", "write_window"]


def _done(results: Results, duration: float, series: str) -> int:
    """Global pairs of the series that have run (the highest pair index run, plus one)."""
    pairs = [r.block.pair for r in results.series(duration, series)]
    return max(pairs) + 1 if pairs else 0


def next_window(spec: RunSpec, results: Results, *, shards: int, round_done: int) -> Window:
    """The next round's windows from the pooled results of rounds 1..``round_done``."""
    windows: dict[str, dict[str, SeriesWindow]] = {}
    order = run_order(spec)
    for index, duration in enumerate(order):
        looks = looks_of(spec, duration)
        key = f"{duration:g}s"
        windows[key] = {}
        for series in series_of(spec):
            done = _done(results, duration, series.name)
            found = results.decision(duration, series.name)
            stopped = results.stopped(series.name)
            if stopped is not None:
                windows[key][series.name] = SeriesWindow(done, done, "stop", str(stopped.outcome), stopped.reason)
                continue
            if found is not None and found.stop:
                windows[key][series.name] = SeriesWindow(done, done, "stop", str(found.outcome), found.reason)
                continue
            gated = spec.protocol.design == "sequential" and in_order_of_cost(spec) and index > 0
            if gated and done == 0:
                earlier = [results.decision(d, series.name) for d in order[:index]]
                if any(e is not None and e.stop and e.outcome is not Outcome.PASS for e in earlier):
                    windows[key][series.name] = SeriesWindow(
                        0, 0, "stop", str(Outcome.INCONCLUSIVE),
                        f"did not pass {order[index - 1]:g} s: a dearer duration runs only after a PASS")
                    continue
                if not all(e is not None and e.stop and e.outcome is Outcome.PASS for e in earlier):
                    windows[key][series.name] = SeriesWindow(0, 0, "continue", str(Outcome.INCONCLUSIVE),
                                                             f"waits for a PASS at {order[index - 1]:g} s")
                    continue
            target = found.next_look if found is not None and found.next_look is not None else looks[0]
            through = round_up(max(target, done + 1), shards, looks[-1])
            reason = found.reason if found is not None else f"to the first look ({looks[0]} pairs)"
            windows[key][series.name] = SeriesWindow(done, through, "continue", str(Outcome.INCONCLUSIVE), reason)
    return Window(round_done + 1, shards, spec.spec_id, windows)


def runs_anything(window: Window) -> bool:
    """Whether the round has a pair to run (else every series stopped or waits for nothing)."""
    return any(w.action == "continue" and w.through > w.done for found in window.series.values()
               for w in found.values())


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
    more = runs_anything(window)
    lines.append(f"continue: {'true' if more else 'false'}")
    return lines


def write_window(window: Window, path: Path) -> Path:
    """Write the look file (atomically: a round's shards never read half of one)."""
    data = {**window.to_dict(), "continue": runs_anything(window)}
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
    return path
