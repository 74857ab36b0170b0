"""A campaign's course: which blocks still run, decided by one rule for the live run, the pool's rounds and the plan.

The live run (:meth:`h3bench.session.results.Results.not_needed`, one
campaign), ``h3bench pool --look`` (:meth:`Course.next_window`) and the
plan's simulation (:meth:`Course.walk`, thousands of campaigns at once)
all ask this object; the live run asks the same array functions with one
campaign, as :func:`h3bench.stats.sequential.decide` calls
:func:`~h3bench.stats.sequential.judge_series`. A run hands the course its
blocks (:class:`RunView`), never a verdict: the course takes each series'
look decision itself (:meth:`Course.decision`, :mod:`h3bench.course.looks`).

The rule
--------
Durations run in the design's order (:func:`h3bench.course.design.run_order`).
At each, the series' AB/BA pairs run in **windows**, each ending at a point
where the series is judged: on one host after every planned look; over N
hosts at the end of a round, the next look rounded up to whole AB/BA units
on every shard (:func:`h3bench.course.shards.round_up`, so a round may run
pairs past a look inside it). Then:

1. **The gate on the dearer duration**: in order of cost, a series runs a
   duration only after a speed PASS at every cheaper one. The lossless
   verdict does not gate: it is judged over every output after the blocks
   have run, so a lossless FAIL at the cheaper duration still lets the
   dearer one run (and the candidate's verdict is FAIL).
2. **The look**: a series runs its next window until a look stops it
   (PASS, FAIL, futility, the audit, the last look); the windows are fixed
   in advance, so a look decides exactly what the next window holds.
3. **Controls** (a sequential lossless campaign): PASS is first allowed at
   look ``f`` (:meth:`Course.first_pass`), where the candidate's lossless
   test has ``f`` candidate processes and needs
   :func:`h3bench.quality.lossless_design.baseline_needed` baseline ones.
   Before a window in which a series may PASS, control blocks run for what
   the ``A`` blocks up to that window's end would leave short, counting only
   the series that still run. So a candidate whose rival
   stopped early gets its controls before the look that needs them, and a
   speed PASS always finds its lossless test able to decide. The schedule
   lists the most that can be needed (one series running alone), all
   before the pairs of round ``f``; the fixed design runs its control
   blocks first, whenever its duration runs.

**The baseline processes of a series' lossless test** are counted by one
rule (:meth:`Course.baseline_processes`), the judge's
(:meth:`h3bench.course.schedule.Schedule.lossless_processes`): every block of
the duration that runs the series' control arm. For a series against the
baseline, the control blocks and the ``A`` blocks of every series against
the baseline; for the final combination against a distinct original
baseline, that series' own ``A`` blocks, which no control block makes up for.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h3bench.course import looks
from h3bench.course.design import Design, run_order, series_of
from h3bench.course.shards import SeriesWindow, Shard, Window, round_up, unit_shard
from h3bench.outcome import Outcome
from h3bench.quality import lossless_design
from h3bench.runspec.arms import BASELINE
from h3bench.runspec.spec import RunSpec
from h3bench.stats.intervals import PASS
from h3bench.stats.sequential import REASONS, Boundaries, LookDecision, SeriesBlock

__all__ = ["Course", "RunView", "Walk"]


class RunView(typing.Protocol):
    """What the course reads of a run (live or pooled): what ran, per duration and series; never a decision."""

    def series_blocks(self, duration: float, series: str) -> Sequence[SeriesBlock]:
        """The series' blocks in its order, up to the first that did not run or finish
        (:func:`h3bench.run.records.series_blocks`); none where the course does not decide (a shard's round)."""

    def pairs_run(self, duration: float, series: str) -> int:
        """The pairs of the series that ran: its highest pair run, plus one."""

    def baseline_run(self, duration: float, series: str) -> int:
        """The control processes of the series' lossless test that ran at the duration (:meth:`Course.baseline_processes`)."""

    def controls_run(self, duration: float) -> tuple[int, ...]:
        """The positions of the duration's control blocks that ran."""

    def halted(self, series: str) -> tuple[str, str] | None:
        """The outcome and reason of a stop rule that stopped the series (a failed block, interference); None."""


@dataclass(frozen=True)
class Walk:
    """What ran in simulated (or replayed) campaigns: ``(n, series, durations)`` and ``(n, durations)`` arrays."""

    reached: np.ndarray  # the series ran the duration (the gate let it)
    pairs: np.ndarray  # AB/BA pairs run (0 where not reached)
    controls: np.ndarray  # control blocks run per duration
    baseline: np.ndarray  # (n, series, durations): control processes of each series' lossless test



@dataclass(frozen=True)
class Course:
    """The rule of one campaign design: ``n_series`` series, lossless on or off, on one host or ``shards``."""

    design: Design
    n_series: int
    lossless: bool
    shards: int | None = None
    series: tuple[str, ...] = ()  # the series' names (a spec's); positions otherwise
    durations: tuple[float, ...] = ()  # in run order (a spec's); positions otherwise
    control_arms: tuple[str, ...] = ()  # each series' control arm (a spec's); the baseline for every one otherwise

    @classmethod
    def of(cls, spec: RunSpec, *, lossless: bool | None = None, shards: int | None = None) -> Course:
        """The course of a spec's campaign (``lossless``: the lossless test is on; default: the spec's gate).

        Made anew at each call: whoever asks it often holds it (a run's
        :class:`~h3bench.session.results.Results`, a :class:`~h3bench.course.schedule.Schedule`).
        """
        on = spec.gates.lossless if lossless is None else lossless
        found = series_of(spec)
        return cls(Design.of(spec), len(found), on, shards, tuple(s.name for s in found), run_order(spec),
                   tuple(s.control for s in found))

    # -- each duration's parameters (d: its index in run order) -----------------------------------------------------

    def boundaries(self, d: int) -> Boundaries:
        """The duration's looks and their levels (:meth:`h3bench.course.design.Design.boundaries`)."""
        return looks.boundaries(self.design, d, self.n_series, self.lossless)

    def first_pass(self, d: int) -> int:
        """Pairs of the first look at which PASS is allowed (the boundaries' first look with a PASS level)."""
        looks = self.design.looks[d]
        return next((n for n in looks if n >= self.design.pass_from(d, self.lossless)), looks[-1])

    @property
    def runs_controls(self) -> bool:
        """Whether the sequential control rule applies (a lossless sequential campaign)."""
        return self.lossless and self.design.sequential

    def control_slots(self, d: int) -> int:
        """Control blocks the schedule lists at the duration: the most that can run (see the module docstring)."""
        if not self.design.sequential:
            return self.design.fixed_controls
        if not self.lossless:
            return 0
        f = self.first_pass(d)
        return max(0, self._needed(d, f) - f)

    def controls_before(self, d: int) -> int:
        """The round (1-based pair) the duration's control blocks are listed before: ``f``, or the first pair."""
        return self.first_pass(d) if self.runs_controls else 1

    def _needed(self, d: int, candidate: int) -> int:
        return lossless_design.baseline_needed(max(1, candidate), self.design.lossless_alpha(d))

    @functools.cached_property
    def _needed_table(self) -> tuple[np.ndarray, ...]:
        """Per duration: the baseline processes a PASS after ``k`` pairs needs, indexed by ``k`` (0 before ``f``)."""
        out = []
        for d in range(self.design.n_durations):
            last = self.design.looks[d][-1]
            f = self.first_pass(d) if self.runs_controls else last + 1
            out.append(np.array([self._needed(d, k) if k >= f else 0 for k in range(last + 1)]))
        return tuple(out)

    def windows(self, d: int) -> tuple[int, ...]:
        """The pair counts at which the series of the duration are judged: its looks, or the ends of the rounds."""
        looks = self.design.looks[d]
        if self.shards is None:
            return looks
        ends = [round_up(looks[0], self.shards, looks[-1])]
        while ends[-1] < looks[-1]:
            target = next(n for n in looks if n > ends[-1])
            ends.append(round_up(target, self.shards, looks[-1]))
        return tuple(ends)

    def window_end(self, d: int, pairs: int) -> int:
        """Where the window after ``pairs`` pairs ends (the last look's pairs when none is left)."""
        return next((w for w in self.windows(d) if w > pairs), self.design.looks[d][-1])

    # -- the rule, on arrays with leading campaign axes ----------------------------------------------------------------

    @functools.cached_property
    def _same_control(self) -> np.ndarray:
        """``(series, series)``: whether two series have one control arm (so each one's A blocks count for both)."""
        arms = self.control_arms or (BASELINE,) * self.n_series
        return np.array([[a == b for b in arms] for a in arms])

    @functools.cached_property
    def _against_baseline(self) -> np.ndarray:
        """``(series,)``: the series whose control is the baseline, the arm the control blocks run."""
        return np.array([arm == BASELINE for arm in (self.control_arms or (BASELINE,) * self.n_series)])

    def baseline_processes(self, pairs: np.ndarray, controls: np.ndarray | int) -> np.ndarray:
        """``(..., series)``: the control processes of each series' lossless test, from the pairs each series ran
        ``(..., series)`` (one ``A`` block each) and the control blocks run ``(...)``: the one rule (module docstring)."""
        pairs = np.asarray(pairs)
        return pairs @ self._same_control.T.astype(pairs.dtype) + np.asarray(controls)[..., None] * self._against_baseline

    def reached(self, d: int, earlier: np.ndarray) -> np.ndarray:
        """``(..., series)``: whether each series runs the duration; ``earlier`` ``(..., series, d)`` speed codes."""
        shape = earlier.shape[:-1]
        if not self.design.in_order_of_cost or d == 0:
            return np.ones(shape, bool)
        return (np.asarray(earlier)[..., :d] == PASS).all(-1)

    def controls_needed(self, d: int, running: np.ndarray, through: np.ndarray, pairs: np.ndarray,
                        baseline: np.ndarray, ran: np.ndarray) -> np.ndarray:
        """``(...)`` control blocks to run now, before the window in which the ``running`` series reach ``through``.

        ``pairs`` are the pairs each series has run, ``baseline`` the
        control processes of each series' lossless test so far
        (:meth:`baseline_processes`), both ``(..., series)``; ``ran`` the
        controls so far, ``(...)``. Control blocks run the baseline, so only
        the series against the baseline are made up for.
        """
        running = np.asarray(running, bool)
        if not self.runs_controls:
            return np.zeros(running.shape[:-1], np.int64)
        table = self._needed_table[d]
        helped = running & self._against_baseline
        ends = np.where(helped, np.asarray(through), 0)
        need = table[np.clip(ends, 0, len(table) - 1)]
        coming = np.where(helped, ends - np.asarray(pairs), 0).sum(-1, keepdims=True)  # their A blocks to come
        short = np.where(helped, need - (np.asarray(baseline) + coming), 0).max(-1)
        return np.clip(short, 0, self.control_slots(d) - np.asarray(ran))

    def walk(self, stop: np.ndarray, code: np.ndarray) -> Walk:
        """Every campaign's course from its series' decisions: ``stop`` the pairs of the look that stops each series
        (:attr:`h3bench.stats.sequential.SeriesOutcomes.pairs`) and ``code`` its speed outcome, ``(n, series, durations)``.
        """
        stop, code = np.asarray(stop), np.asarray(code)
        n, _, n_durations = stop.shape
        ends = [np.array(self.windows(d)) for d in range(n_durations)]
        last = [np.searchsorted(e, stop[..., d]) for d, e in enumerate(ends)]  # window (0-based) holding the stop
        reached = np.zeros(stop.shape, bool)
        start = np.zeros(stop.shape, np.int64)  # the round (0-based) each series starts each duration
        for d in range(n_durations):
            reached[..., d] = self.reached(d, code)
            if d == 0:
                continue
            if self.shards is None:  # one host: a duration's blocks after every cheaper duration's
                start[..., d] = start[..., d - 1] + len(ends[d - 1])
            elif self.design.in_order_of_cost:  # the pool: a series starts once its cheaper duration passed
                start[..., d] = start[..., d - 1] + last[d - 1] + 1
        pairs = np.zeros(stop.shape, np.int64)
        controls = np.zeros((n, n_durations), np.int64)
        rounds = int((start + np.array([len(e) for e in ends])).max(initial=0))
        if not self.design.sequential:  # the fixed design's controls run first, whenever their duration runs
            controls[:] = np.where(reached.any(1), self.design.fixed_controls, 0)
        for k in range(rounds):
            for d, e in enumerate(ends):
                index = k - start[..., d]
                running = reached[..., d] & (index >= 0) & (index <= last[d])
                through = np.where(running, e[np.clip(index, 0, len(e) - 1)], pairs[..., d])
                baseline = self.baseline_processes(pairs[..., d], controls[:, d])
                controls[:, d] += self.controls_needed(d, running, through, pairs[..., d], baseline, controls[:, d])
                pairs[..., d] = through
        baseline = np.stack([self.baseline_processes(pairs[..., d], controls[:, d]) for d in range(n_durations)], -1)
        return Walk(reached, pairs, controls, baseline)

    # -- the live run and the pool: one campaign, read through a RunView ------------------------------------------------

    def _index(self, duration: float) -> int:
        return self.durations.index(duration)

    def decision(self, view: RunView, duration: float, series: str) -> LookDecision | None:
        """The series' look decision from the blocks the run hands over (None before its first complete pair)."""
        return looks.decision(self.design, self._index(duration), self.n_series, self.lossless,
                              view.series_blocks(duration, series))

    def _gate(self, view: RunView, duration: float, series: str) -> tuple[bool | None, str]:
        """Whether the series runs the duration (None: a cheaper duration has not decided yet), and why not."""
        d = self._index(duration)
        if not self.design.in_order_of_cost:
            return True, ""
        for cheaper in self.durations[:d]:
            found = self.decision(view, cheaper, series)
            if found is None or not found.stop:
                return None, f"waits for a PASS at {cheaper:g} s"
            if found.outcome is not Outcome.PASS:
                return False, (f"{series} did not pass {cheaper:g} s ({found.outcome} at look {found.look}), and a "
                               "dearer duration runs only after a PASS")
        return True, ""

    def why_not(self, view: RunView, duration: float, series: str | None) -> str | None:
        """Why a block of one host's run need not run now: None when it runs (or cannot be known yet).

        ``series`` None asks about a control block of the duration: it runs
        while :meth:`controls_needed` says so, once every series that still
        runs there has reached the round the controls precede.
        """
        if series is not None:
            gate, why = self._gate(view, duration, series)
            if gate is False:
                return f"not run: {why}"
            found = self.decision(view, duration, series)
            if found is not None and found.stop:
                return (f"not run: {series} stopped at {duration:g} s, look {found.look} ({found.pairs} pairs): "
                        f"{REASONS[found.reason_code]}")
            return None
        d = self._index(duration)
        gates = [self._gate(view, duration, s)[0] for s in self.series]
        if None in gates:
            return None  # a cheaper duration decides first
        running = np.array([bool(g) and view.halted(s) is None
                            and not ((found := self.decision(view, duration, s)) is not None and found.stop)
                            for s, g in zip(self.series, gates, strict=True)])
        if not running.any():
            return "not run: no series at this duration still runs"
        if not self.design.sequential:
            return None
        pairs = np.array([view.pairs_run(duration, s) for s in self.series])
        f = self.controls_before(d)
        if (pairs[running] < f - 1).any():
            return None  # the controls precede round f: decided once every running series reaches it
        through = np.array([self.window_end(d, int(p)) if r else p for p, r in zip(pairs, running, strict=True)])
        ran = len(view.controls_run(duration))
        baseline = np.array([view.baseline_run(duration, s) for s in self.series])
        if self.controls_needed(d, running[None], through[None], pairs[None], baseline[None], np.array([ran]))[0] > 0:
            return None
        return "not run: every series that may pass here has the baseline processes its lossless test needs"

    # -- rounds over several hosts ----------------------------------------------------------------------------------------

    def first_window(self, spec_id: str) -> Window:
        """Round 1 of a sharded campaign: each series up to its first window's end (a dearer duration waits)."""
        shards = self._shards()
        series: dict[str, dict[str, SeriesWindow]] = {}
        controls: dict[str, tuple[int, ...]] = {}
        for d, duration in enumerate(self.durations):
            waits = self.design.in_order_of_cost and d > 0
            through = 0 if waits else self.windows(d)[0]
            series[f"{duration:g}s"] = {s: SeriesWindow(0, through) for s in self.series}
            running = np.full((1, self.n_series), not waits)
            nothing = np.zeros((1, self.n_series), np.int64)
            count = self._round_controls(d, running, np.full((1, self.n_series), through), nothing, nothing, 0,
                                         first=True)
            controls[f"{duration:g}s"] = tuple(range(1, count + 1))
        return Window(1, shards, spec_id, series, controls=controls)

    def next_window(self, view: RunView, spec_id: str, round_done: int) -> Window:
        """The next round's windows and controls from the pooled results of rounds 1..``round_done``.

        A series that stopped gets no more pairs, one that continues gets
        the pairs up to its next window's end, and a dearer duration run in
        order of cost starts once the cheaper one passed.
        """
        shards = self._shards()
        series: dict[str, dict[str, SeriesWindow]] = {}
        controls: dict[str, tuple[int, ...]] = {}
        for d, duration in enumerate(self.durations):
            key = f"{duration:g}s"
            series[key] = {}
            for name in self.series:
                done = view.pairs_run(duration, name)
                found = self.decision(view, duration, name)
                gate, why = self._gate(view, duration, name)
                halted = view.halted(name)
                if halted is not None:
                    series[key][name] = SeriesWindow(done, done, "stop", *halted)
                elif found is not None and found.stop:
                    series[key][name] = SeriesWindow(done, done, "stop", str(found.outcome), found.reason)
                elif gate is False:
                    series[key][name] = SeriesWindow(0, 0, "stop", "INCONCLUSIVE", why)
                elif gate is None:
                    series[key][name] = SeriesWindow(0, 0, "continue", "INCONCLUSIVE", why)
                else:
                    through = self.window_end(d, done)
                    reason = found.reason if found is not None else f"to the first look ({self.windows(d)[0]} pairs)"
                    series[key][name] = SeriesWindow(done, through, "continue", "INCONCLUSIVE", reason)
            windows = [series[key][name] for name in self.series]
            running = np.array([[w.action == "continue" and w.through > w.done for w in windows]])
            ran = view.controls_run(duration)
            baseline = np.array([[view.baseline_run(duration, name) for name in self.series]])
            count = self._round_controls(d, running, np.array([[w.through for w in windows]]),
                                         np.array([[w.done for w in windows]]), baseline, len(ran), first=False)
            start = max(ran, default=0)
            controls[key] = tuple(range(start + 1, start + count + 1))
        return Window(round_done + 1, shards, spec_id, series, controls=controls)

    def _round_controls(self, d: int, running: np.ndarray, through: np.ndarray, pairs: np.ndarray,
                        baseline: np.ndarray, ran: int, *, first: bool) -> int:
        if not self.design.sequential:  # the fixed design's controls: all in round 1, when the duration runs
            return self.design.fixed_controls if first and running.any() else 0
        return int(self.controls_needed(d, running, through, pairs, baseline, np.array([ran]))[0])

    def _shards(self) -> int:
        if self.shards is None:
            raise ValueError("rounds are for a campaign over several hosts: make the course with shards")
        return self.shards

    def shard_runs(self, duration: float, series: str | None, pair: int, position: int, shard: Shard,
                   window: Window) -> bool:
        """Whether ``shard`` runs a block in ``window``'s round: a pair with its AB/BA unit, a control as listed.

        ``pair`` is the block's 0-based pair (a control's: the pair it
        precedes), ``position`` a control's place among the duration's.
        """
        if series is None:
            if self.design.sequential:
                precedes = self.controls_before(self._index(duration)) - 1
            else:  # the fixed design's controls go round-robin over the shards
                precedes = 2 * (position - 1)
            listed = window.controls.get(f"{duration:g}s", ())
            return position in listed and unit_shard(precedes, shard.count) == shard.index
        found = window.of(duration, series)
        return found is not None and shard.runs_pair(pair) and found.runs(pair)

