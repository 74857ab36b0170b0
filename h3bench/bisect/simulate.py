"""Whole bisections simulated through the search's own code: how often the culprit claimed is wrong, and what it costs.

One row per simulated search, every step vectorised over the rows:

1. **verify**: good against bad, latencies drawn by
   :func:`h3bench.course.designsim.draw_samples` (lognormal request noise and a
   lognormal offset per server process) and judged by
   :func:`h3bench.stats.sequential.judge_series` at the verify campaign's own
   boundaries (the ones :func:`h3bench.course.looks.boundaries_of` gives the
   live verify). Not FAIL ("slower"): not reproduced, the search stops; where a
   size is asked, a look whose upper bound excludes a change of that size stops
   the verify there (:func:`h3bench.bisect.search.futile_at`, the live verify's
   futility stop). Else its pairs give the :class:`~h3bench.bisect.probe.Step`;
2. **probes**: the next commit by :func:`h3bench.bisect.choice.choose`, its
   pairs drawn at that commit's true level, the test run by
   :meth:`h3bench.bisect.probe.ProbeTest.run`, the posterior updated by
   :func:`h3bench.bisect.posterior.update`; a commit that does not start costs a
   good block and a failed start and is skipped; until
   :func:`h3bench.bisect.search.named_group` names a group, the budget is spent, or
   no probe is worth running;
3. **confirm**: the named group's parent against its last commit, judged like
   the verify; FAIL ("slower") makes the claim; a confirm that does not
   confirm sends the search back to its probes at a higher posterior
   (:func:`h3bench.bisect.search.threshold_after`), up to
   :data:`~h3bench.bisect.search.CONFIRMS` confirms.

Device time is priced as :mod:`h3bench.course.devicetime` prices a campaign
(:class:`~h3bench.course.devicetime.ArmCost`: start, stop, warmup, measured
and audit requests of a block, on the arm's devices), plus an image pull or
build the first time each commit runs. With several hosts, a round's
probes run at once and the round's wall time is its longest probe.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from h3bench.bisect import posterior
from h3bench.bisect.choice import ProbeCosts, choose, expected_pairs
from h3bench.bisect.probe import ProbeTest, between_flags
from h3bench.bisect.search import (
    CONFIRMS,
    MAX_SEGMENTS,
    SearchRule,
    differs,
    eligible,
    futile_at,
    named_group,
    segment_probes,
    settled,
    threshold_after,
    top_up,
)
from h3bench.bisect.specs import Kind, campaign_spec, duration_of, table_of
from h3bench.course.design import budget_of
from h3bench.course.designsim import LatencyModel, draw_samples
from h3bench.course.devicetime import ArmCost
from h3bench.course.looks import boundaries_of
from h3bench.errors import UsageError
from h3bench.runspec import BASELINE, RunSpec
from h3bench.stats import intervals
from h3bench.stats.blockstat import BlockBudget, block_log_statistics
from h3bench.stats.intervals import FAIL, PASS
from h3bench.stats.sequential import Boundaries, judge_series, series_order

__all__ = ["Scenario", "Setup", "SimulatedSearches", "campaign_bounds", "setup_of", "simulate_searches", "simulated_campaign",
           "simulated_log_ratios", "step_range"]


@dataclass(frozen=True)
class Scenario:
    """A range's truth: each commit's log latency level against the good endpoint, and which ones do not start."""

    name: str
    levels: tuple[float, ...]  # c_1 … c_N, the last the bad endpoint
    skipped: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if len(self.levels) < 2:
            raise UsageError("a range needs at least two commits")
        if self.skipped and len(self.skipped) != len(self.levels):
            raise UsageError(f"skipped must name every commit of the range ({len(self.levels)})")

    @property
    def n(self) -> int:
        return len(self.levels)

    @property
    def does_not_start(self) -> np.ndarray:
        return np.asarray(self.skipped or (False,) * self.n, dtype=bool)

    @property
    def culprits(self) -> tuple[int, ...]:
        """Every commit whose level differs from its parent's (0-based; the good endpoint's level is 0)."""
        lv = np.concatenate([[0.0], self.levels])
        return tuple(int(i) for i in np.flatnonzero(np.abs(np.diff(lv)) > 1e-12))


def step_range(n: int, culprit: int, ratio: float, *, skipped: tuple[int, ...] = (), name: str = "") -> Scenario:
    """``n`` commits, one step of ``ratio`` at index ``culprit``; ``skipped`` commits do not start."""
    levels = tuple(math.log(ratio) if i >= culprit else 0.0 for i in range(n))
    return Scenario(name or f"{ratio:g} at {culprit}", levels, tuple(i in skipped for i in range(n)))


@dataclass(frozen=True)
class Setup:
    """What a bisection runs with: the blocks, the verify's and the confirm's boundaries, the probe test, the costs."""

    budget: BlockBudget
    verify: Boundaries
    confirm: Boundaries
    test: ProbeTest
    rule: SearchRule
    good: ArmCost  # a good block's costs (its request time sets every commit's, by its level)
    image_s: float = 0.0  # pulling or building one commit's image, once per commit
    hosts: int = 1
    size: float | None = None  # the change to find (log ratio); None: half the verified step

    def block_s(self, log_level: np.ndarray | float) -> np.ndarray:
        """Seconds of one block of a commit at ``log_level`` against the good endpoint."""
        g = self.good
        return np.asarray(g.startup_s + g.shutdown_s + g.compile_s
                          + self.budget.requests * g.request_s * np.exp(np.asarray(log_level, dtype=float)))


@dataclass(frozen=True)
class SimulatedSearches:
    """``(n,)`` arrays, one per simulated search."""

    scenario: Scenario
    reproduced: np.ndarray  # the verify campaign said "slower"
    futile: np.ndarray  # the verify stopped early: its upper bound excludes a change of the size asked
    first: np.ndarray  # the named group's first and last commit index; -1: none named
    last: np.ndarray
    mass: np.ndarray  # its posterior mass when the search stopped
    confirmed: np.ndarray  # the confirm campaign said "slower": the claim
    probes: np.ndarray
    device_s: np.ndarray  # verify, probes and confirm, on the devices
    wall_s: np.ndarray
    between: np.ndarray  # a probe measured a level between no change and the step
    claims: np.ndarray  # (n, MAX_SEGMENTS, 2): each segment's confirmed group, first and last; -1: none
    looked: np.ndarray  # segments searched: the whole range, then those the claims left open

    def correct(self, culprit: int | None = None) -> np.ndarray:
        """A claim of the whole range whose group holds the culprit (by default the scenario's first)."""
        k = self.scenario.culprits[0] if culprit is None else culprit
        return self.confirmed & (self.first <= k) & (k <= self.last)

    def named(self, culprit: int) -> np.ndarray:
        """Some claim, of any segment, whose group holds ``culprit``."""
        return np.asarray(((self.claims[..., 0] <= culprit) & (culprit <= self.claims[..., 1])).any(-1))

    @property
    def wrong(self) -> np.ndarray:
        """Some claim, of any segment, whose group holds none of the scenario's culprits."""
        inside = np.zeros(self.claims.shape[:2], bool)
        for k in self.scenario.culprits:
            inside |= (self.claims[..., 0] <= k) & (k <= self.claims[..., 1])
        return np.asarray(((self.claims[..., 0] >= 0) & ~inside).any(-1))


def campaign_bounds(spec: RunSpec, kind: Kind, control: int, candidate: int) -> Boundaries:
    """The boundaries of a campaign the live bisection of ``spec`` derives (:mod:`h3bench.bisect.specs`), as its
    course has them (:func:`h3bench.course.looks.boundaries_of`)."""
    return boundaries_of(campaign_spec(spec, kind, control, candidate), duration_of(spec), spec.gates.lossless)


def setup_of(spec: RunSpec, *, hosts: int = 1) -> Setup:
    """What the live bisection of ``spec`` runs with: its blocks, its verify's and confirm's own boundaries
    (:func:`h3bench.course.looks.boundaries_of` of the campaigns :mod:`h3bench.bisect.specs` derives), its probe
    test and rules, and its costs from the hints (a block at the cheaper duration; ``[bisect].image_s``)."""
    table = table_of(spec)
    n = len(table.range)
    duration = duration_of(spec)
    hints = spec.hints
    if hints is None or f"{duration:g}" not in hints.e2e_s.get(BASELINE, {}):
        raise UsageError(f"{spec.name}: pricing a bisection needs [hints] e2e_s.baseline at {duration:g} s")
    devices = max(1, len(getattr(spec.arms[BASELINE], "device_ids", ()) or spec.hardware.device_ids))
    good = ArmCost(hints.e2e_s[BASELINE][f"{duration:g}"], hints.of("startup_s", BASELINE),
                   hints.of("shutdown_s", BASELINE), hints.of("compile_s", BASELINE), devices)
    budget_s = math.inf if table.budget_device_h is None else table.budget_device_h * 3600.0
    return Setup(budget_of(spec), campaign_bounds(spec, "verify", 0, n), campaign_bounds(spec, "confirm", n - 1, n),
                 ProbeTest(table.level, table.min_pairs, table.max_pairs), SearchRule(table.posterior, budget_s),
                 good, table.image_s, hosts, None if table.size is None else math.log(table.size))


def simulated_log_ratios(rng: np.random.Generator, n: int, pairs: int, budget: BlockBudget, log_level: np.ndarray,
                model: LatencyModel, base: np.ndarray | None = None) -> np.ndarray:
    """``(n, pairs)`` paired log ratios of blocks of ``log_level`` (B) against ``base`` (A; default the good endpoint)."""
    order = series_order(pairs)
    samples = draw_samples(rng, n, order, budget, 1.0, model)
    is_b = np.array([c == "B" for c in order])
    shift = np.where(is_b, np.asarray(log_level)[:, None], 0.0 if base is None else np.asarray(base)[:, None])
    return intervals.paired_log_ratios(block_log_statistics(samples * np.exp(shift)[..., None], budget), order)


def simulated_campaign(rng: np.random.Generator, setup: Setup, b: Boundaries, log_level: np.ndarray, base: np.ndarray,
              model: LatencyModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A campaign of ``log_level`` (candidate) against ``base``: its code (FAIL: slower, PASS: faster), its pairs
    and its paired log ratios."""
    order = series_order(b.max_pairs)
    samples = draw_samples(rng, len(log_level), order, setup.budget, 1.0, model)
    is_b = np.array([c == "B" for c in order])
    samples = samples * np.exp(np.where(is_b, log_level[:, None], base[:, None]))[..., None]
    found = judge_series(samples, order, setup.budget, b)
    x = intervals.paired_log_ratios(block_log_statistics(samples, setup.budget), order)
    return found.code, found.pairs.astype(int), x


FUTILE = -2  # a campaign's code where its futility stop ended it (never PASS, FAIL or INCONCLUSIVE's value)


def futility(code: np.ndarray, pairs: np.ndarray, log_ratios: np.ndarray, b: Boundaries, size: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """A verify's code and pairs with its futility stop (:func:`h3bench.bisect.search.futile_at`): the first look
    whose upper bound excludes the size asked ends it (code :data:`FUTILE`), unless its own look there said
    "slower" first."""
    at, _ = futile_at(log_ratios, b, size)
    futile = (at > 0) & ((at < pairs) | ((at == pairs) & (code != FAIL)))
    return np.where(futile, FUTILE, code), np.where(futile, at, pairs)


def simulate_searches(setup: Setup, scenario: Scenario, *, model: LatencyModel | None = None, n: int = 2000,
                      seed: int = 0) -> SimulatedSearches:
    """Simulate ``n`` bisections of ``scenario`` (see the module docstring)."""
    model = model or LatencyModel()
    rng = np.random.default_rng(seed)
    levels = np.asarray(scenario.levels, dtype=float)
    n_commits = scenario.n
    # 1. verify: good (A) against bad (B); its pairs are the first evidence, at the bad endpoint.
    code, v_pairs, v_x = simulated_campaign(rng, setup, setup.verify, np.full(n, levels[-1]), np.zeros(n), model)
    if setup.size is not None:  # the verify's futility stop: no change of the size asked
        code, v_pairs = futility(code, v_pairs, v_x, setup.verify, setup.size)
    reproduced, futile = code == FAIL, code == FUTILE
    run = _Run(setup, scenario, model, rng, levels, n)
    run.wall += v_pairs * (setup.block_s(0.0) + setup.block_s(levels[-1])) + 2 * setup.image_s
    run.spent += run.wall * setup.good.devices
    run.evidence = run.evidence.add(n_commits - 1, np.where(np.arange(v_x.shape[-1]) < v_pairs[:, None], v_x, np.nan))
    run.pulled[:, -1] = True
    step, _ = run.evidence.step(posterior.log_prior(n_commits) + run.evidence.log_likelihood())
    size = np.full(n, setup.size) if setup.size is not None else np.abs(step) / 2
    # 2. the whole range, then every segment a claim leaves whose measured ends differ (search.differs).
    queue: list[list[tuple[int, int]]] = [[(-1, n_commits - 1)] if r else [] for r in reproduced]
    claims = np.full((n, MAX_SEGMENTS, 2), -1)
    looked = np.zeros(n, int)
    for wave in range(MAX_SEGMENTS):
        todo = np.array([bool(q) for q in queue])
        if not todo.any():
            break
        lo = np.array([q[0][0] if q else -1 for q in queue])
        hi = np.array([q[0][1] if q else n_commits - 1 for q in queue])
        for q in queue:
            if q:
                q.pop(0)
        looked += todo
        first, last, confirmed = run.segment(todo, lo, hi, size, wave == 0)
        if wave == 0:
            top = (first.copy(), last.copy(), confirmed.copy())
        claims[confirmed, wave] = np.stack([first, last], -1)[confirmed]
        for a, b in ((lo, first - 1), (last, hi)):
            opens, _, bound = differs(run.evidence, a, b, size)
            # Ends too loosely measured to tell: the one with fewer pairs gets up to a probe's worth more
            # (search.top_up), pair by pair until settled (search.settled).
            unclear = confirmed & ~opens & (np.nan_to_num(bound) >= size)
            run.top_up(unclear, top_up(run.evidence, a, b), functools.partial(settled, a=a, b=b, size=size))
            opens, _, _ = differs(run.evidence, a, b, size)
            for r in np.flatnonzero(confirmed & opens):
                queue[r].append((int(a[r]), int(b[r])))
    first, last, confirmed = top if reproduced.any() else (np.full(n, -1), np.full(n, -1), np.zeros(n, bool))
    first = np.where(reproduced, first, -1)
    last = np.where(reproduced, last, -1)
    return SimulatedSearches(scenario, reproduced, futile, first, last, run.mass, confirmed, run.probes, run.spent, run.wall,
                             run.between, claims, looked)


class _Run:
    """The simulated searches' arrays, one row per search, and one segment's search over them."""

    def __init__(self, setup: Setup, scenario: Scenario, model: LatencyModel, rng: np.random.Generator,
                 levels: np.ndarray, n: int) -> None:
        self.setup, self.model, self.rng, self.levels = setup, model, rng, levels
        commits = scenario.n
        self.prior = posterior.log_prior(commits)
        self.evidence = posterior.Evidence.empty((n, commits))
        self.skipped = np.zeros((n, commits), bool)
        self.pulled = np.zeros((n, commits), bool)
        self.probes, self.between, self.mass = np.zeros(n, int), np.zeros(n, bool), np.zeros(n)
        self.spent, self.wall = np.zeros(n), np.zeros(n)
        self.commit_block = setup.block_s(levels)
        self.does_not_start = scenario.does_not_start

    def top_up(self, rows: np.ndarray, commit: np.ndarray, done: Callable[[posterior.Evidence], np.ndarray]
               ) -> None:
        """Up to ``max_pairs`` more pairs at ``commit`` (measured before, so its image is on the host) in ``rows``,
        one at a time until ``done`` (:func:`h3bench.bisect.search.settled`) holds."""
        setup = self.setup
        x = simulated_log_ratios(self.rng, rows.size, setup.test.max_pairs, setup.budget, self.levels[commit],
                                 self.model)
        going, pairs = rows.copy(), np.zeros(rows.size, int)
        for k in range(setup.test.max_pairs):
            self.evidence = self.evidence.add(commit, x[:, k : k + 1], going)
            pairs += going
            going &= ~done(self.evidence)
        seconds = pairs * (setup.block_s(0.0) + self.commit_block[commit])
        self.spent += seconds * setup.good.devices
        self.wall += seconds
        self.probes += rows

    def segment(self, searching: np.ndarray, lo: np.ndarray, hi: np.ndarray, size: np.ndarray, whole: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Probes, then the confirm, in the segment ``(lo, hi]`` of each searching row; the named group and the
        claim. A confirm that fails sends its search back to probing at a higher posterior."""
        setup, levels, test = self.setup, self.levels, self.setup.test
        n = searching.size
        rows = np.arange(n)
        devices = setup.good.devices
        prior = posterior.segment_prior(self.prior, lo, hi)
        # The direction the segment's ends show: the confirm must say the same (slower, or faster: an undo).
        direction = np.sign(np.nan_to_num(differs(self.evidence, lo, hi, 0.0)[1], nan=1.0))
        direction = np.where(whole | (direction == 0), 1.0, direction)
        first, last = np.full(n, -1), np.full(n, -1)
        confirmed = np.zeros(n, bool)
        probes = np.zeros(n, int)
        for failed in range(CONFIRMS):
            threshold = threshold_after(setup.rule.posterior, failed)
            active = searching.copy()
            for _ in range(setup.rule.max_probes):
                # Only the searches still running are computed on: their rows are taken out, worked on, put back.
                idx = np.flatnonzero(active)
                if idx.size == 0:
                    break
                ev = posterior.Evidence(self.evidence.count[idx], self.evidence.total[idx],
                                        self.evidence.squares[idx]).within(
                    lo[idx], hi[idx])
                p_idx = prior[idx]
                log_post = ev.log_posterior(p_idx)
                named, _, _ = named_group(log_post, self.skipped[idx], threshold)
                going = (named < 0) & (self.spent[idx] < setup.rule.budget_device_s) & (
                    probes[idx] < setup.rule.max_probes)
                step, spread = ev.step(log_post)
                going &= whole | (np.abs(step) >= size[idx] / 2)  # search.FADED: the segment's step is not there
                going &= whole | (probes[idx] < segment_probes(lo[idx], hi[idx]))
                costs = ProbeCosts(float(setup.block_s(0.0)), self.commit_block,
                                   np.where(self.pulled[idx], 0.0, setup.image_s))
                chosen = choose(posterior.probabilities(log_post), eligible(self.skipped[idx], lo[idx], hi[idx]),
                                costs.probe_s(expected_pairs(test, step, spread)), test.level, setup.hosts)
                going &= chosen[:, 0] >= 0
                active[idx] = going
                sub = np.arange(idx.size)
                round_wall = np.zeros(idx.size)
                for h in range(setup.hosts):  # a round's probes run at once; each judged with what was known before
                    j = chosen[:, h]
                    run = going & (j >= 0)
                    if not run.any():
                        continue
                    jj = np.where(run, j, 0)
                    fails = run & self.does_not_start[jj]
                    measured = run & ~fails
                    x = simulated_log_ratios(self.rng, idx.size, test.max_pairs, setup.budget, levels[jj], self.model)
                    found = test.run(ev, p_idx, jj, x)
                    used = np.where(np.arange(test.max_pairs) < found.pairs[:, None], x, np.nan)
                    ev = ev.add(jj, used, measured)
                    self.evidence = _add_rows(self.evidence, idx, jj, used, measured)
                    if whole:
                        self.between[idx] |= measured & between_flags(x, found.pairs, step, found.decision)
                    image = np.where(self.pulled[idx, jj], 0.0, setup.image_s)
                    seconds = np.where(fails, setup.block_s(0.0) + setup.good.startup_s,
                                       found.pairs * (setup.block_s(0.0) + self.commit_block[jj])) + image
                    seconds = np.where(run, seconds, 0.0)
                    self.skipped[idx[sub], jj] |= fails
                    self.pulled[idx[sub], jj] |= run
                    self.spent[idx] += seconds * devices
                    round_wall = np.maximum(round_wall, seconds)
                    self.probes[idx] += run
                    probes[idx] += run
                self.wall[idx] += round_wall
            log_post = self.evidence.within(lo, hi).log_posterior(prior)
            got_first, got_last, got_mass = named_group(log_post, self.skipped, threshold)
            first, last = np.where(searching, got_first, first), np.where(searching, got_last, last)
            if whole:
                self.mass = np.where(searching, got_mass, self.mass)
            # The confirm: the group's parent against its last commit.
            named = searching & (first >= 0)
            parent = np.where(named, first - 1, -1)
            base = np.where(parent >= 0, levels[np.maximum(parent, 0)], 0.0)
            code, c_pairs, _ = simulated_campaign(self.rng, setup, setup.confirm, levels[np.maximum(last, 0)], base,
                                                  self.model)
            c_seconds = np.where(named, c_pairs * (setup.block_s(base) + self.commit_block[np.maximum(last, 0)]), 0.0)
            c_seconds += np.where(named & (parent >= 0) & ~self.pulled[rows, np.maximum(parent, 0)], setup.image_s, 0.0)
            self.pulled[rows, np.maximum(parent, 0)] |= named & (parent >= 0)
            self.wall += c_seconds
            self.spent += c_seconds * devices
            shown = np.where(direction > 0, code == FAIL, code == PASS)
            confirmed |= named & shown
            searching = named & ~shown & (self.spent < setup.rule.budget_device_s)
        return first, last, confirmed


def _add_rows(evidence: posterior.Evidence, idx: np.ndarray, commit: np.ndarray, log_ratios: np.ndarray,
              where: np.ndarray) -> posterior.Evidence:
    """``evidence`` with the pairs of rows ``idx`` added (the other rows as they were)."""
    part = posterior.Evidence(evidence.count[idx], evidence.total[idx], evidence.squares[idx]).add(
        commit, log_ratios, where)
    count, total, squares = evidence.count.copy(), evidence.total.copy(), evidence.squares.copy()
    count[idx], total[idx], squares[idx] = part.count, part.total, part.squares
    return posterior.Evidence(count, total, squares)
