"""Whole bisections simulated through the search's own code: how often the culprit claimed is wrong, and what it costs.

One row per simulated search, every step vectorised over the rows:

1. **verify**: good against bad, latencies drawn by
   :func:`h3bench.plan.designsim.draw_samples` (lognormal request noise and a
   lognormal offset per server process) and judged by
   :func:`h3bench.stats.sequential.judge_series` at the verify campaign's own
   boundaries (the ones :func:`h3bench.verdict.looks.boundaries_of` gives the
   live verify). Not FAIL ("slower"): not reproduced, the search stops. Else
   its pairs give the :class:`~h3bench.bisect.probe.Step`;
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

Device time is priced as :mod:`h3bench.plan.devicetime` prices a campaign
(:class:`~h3bench.plan.devicetime.ArmCost`: start, stop, warmup, measured
and audit requests of a block, on the arm's devices), plus an image pull or
build the first time each commit runs. With several hosts, a round's
probes run at once and the round's wall time is its longest probe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from h3bench.bisect import posterior
from h3bench.bisect.choice import ProbeCosts, choose, expected_pairs
from h3bench.bisect.probe import ProbeTest, between_flags
from h3bench.bisect.search import CONFIRMS, SearchRule, eligible, named_group, threshold_after
from h3bench.bisect.specs import Kind, campaign_spec, duration_of, table_of
from h3bench.errors import UsageError
from h3bench.plan.designsim import LatencyModel, draw_samples
from h3bench.plan.devicetime import ArmCost
from h3bench.runspec import BASELINE, RunSpec
from h3bench.runspec.design import budget_of
from h3bench.stats import intervals
from h3bench.stats.blockstat import BlockBudget, block_log_statistics
from h3bench.stats.intervals import FAIL
from h3bench.stats.sequential import Boundaries, judge_series, series_order
from h3bench.verdict.looks import boundaries_of

__all__ = ["Scenario", "Setup", "SimulatedSearches", "setup_of", "simulate_searches", "simulated_campaign",
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
    first: np.ndarray  # the named group's first and last commit index; -1: none named
    last: np.ndarray
    mass: np.ndarray  # its posterior mass when the search stopped
    confirmed: np.ndarray  # the confirm campaign said "slower": the claim
    probes: np.ndarray
    device_s: np.ndarray  # verify, probes and confirm, on the devices
    wall_s: np.ndarray
    between: np.ndarray  # a probe measured a level between no change and the step

    def correct(self, culprit: int | None = None) -> np.ndarray:
        """A claim whose group holds the culprit (by default the scenario's first)."""
        k = self.scenario.culprits[0] if culprit is None else culprit
        return self.confirmed & (self.first <= k) & (k <= self.last)

    @property
    def wrong(self) -> np.ndarray:
        """A claim whose group holds none of the scenario's culprits."""
        inside = np.zeros_like(self.confirmed)
        for k in self.scenario.culprits:
            inside |= (self.first <= k) & (k <= self.last)
        return self.confirmed & ~inside


def setup_of(spec: RunSpec, *, hosts: int = 1) -> Setup:
    """What the live bisection of ``spec`` runs with: its blocks, its verify's and confirm's own boundaries
    (:func:`h3bench.verdict.looks.boundaries_of` of the campaigns :mod:`h3bench.bisect.specs` derives), its probe
    test and rules, and its costs from the hints (a block at the cheaper duration; ``[bisect].image_s``)."""
    table = table_of(spec)
    n = len(table.range)
    duration = duration_of(spec)
    lossless = spec.gates.lossless

    def bounds(kind: Kind, control: int, candidate: int) -> Boundaries:
        return boundaries_of(campaign_spec(spec, kind, control, candidate), duration, lossless)

    hints = spec.hints
    if hints is None or f"{duration:g}" not in hints.e2e_s.get(BASELINE, {}):
        raise UsageError(f"{spec.name}: pricing a bisection needs [hints] e2e_s.baseline at {duration:g} s")
    devices = max(1, len(getattr(spec.arms[BASELINE], "device_ids", ()) or spec.hardware.device_ids))
    good = ArmCost(hints.e2e_s[BASELINE][f"{duration:g}"], hints.of("startup_s", BASELINE),
                   hints.of("shutdown_s", BASELINE), hints.of("compile_s", BASELINE), devices)
    budget_s = math.inf if table.budget_device_h is None else table.budget_device_h * 3600.0
    return Setup(budget_of(spec), bounds("verify", 0, n), bounds("confirm", n - 1, n),
                 ProbeTest(table.level, table.min_pairs, table.max_pairs), SearchRule(table.posterior, budget_s),
                 good, table.image_s, hosts)


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
    """A campaign of ``log_level`` (candidate) against ``base``: slower (FAIL), its pairs and its paired log ratios."""
    order = series_order(b.max_pairs)
    samples = draw_samples(rng, len(log_level), order, setup.budget, 1.0, model)
    is_b = np.array([c == "B" for c in order])
    samples = samples * np.exp(np.where(is_b, log_level[:, None], base[:, None]))[..., None]
    found = judge_series(samples, order, setup.budget, b)
    x = intervals.paired_log_ratios(block_log_statistics(samples, setup.budget), order)
    return found.code == FAIL, found.pairs.astype(int), x


def simulate_searches(setup: Setup, scenario: Scenario, *, model: LatencyModel | None = None, n: int = 2000,
                      seed: int = 0) -> SimulatedSearches:
    """Simulate ``n`` bisections of ``scenario`` (see the module docstring)."""
    model = model or LatencyModel()
    rng = np.random.default_rng(seed)
    levels = np.asarray(scenario.levels, dtype=float)
    size, n_commits = n, scenario.n
    rows = np.arange(size)
    devices = setup.good.devices
    zero = np.zeros(size)
    # 1. verify: good (A) against bad (B); its pairs are the first evidence, at the bad endpoint.
    reproduced, v_pairs, v_x = simulated_campaign(rng, setup, setup.verify, np.full(size, levels[-1]), zero, model)
    wall = v_pairs * (setup.block_s(0.0) + setup.block_s(levels[-1])) + 2 * setup.image_s
    spent = wall * devices
    prior = posterior.log_prior(n_commits)
    evidence = posterior.Evidence.empty((size, n_commits)).add(
        n_commits - 1, np.where(np.arange(v_x.shape[-1]) < v_pairs[:, None], v_x, np.nan))
    # 2. probes, then 3. the confirm; a confirm that fails sends its search back to probing at a higher posterior.
    test = setup.test
    skipped = np.zeros((size, n_commits), bool)
    pulled = np.zeros((size, n_commits), bool)
    pulled[:, -1] = True
    probes = np.zeros(size, int)
    between = np.zeros(size, bool)
    commit_block = setup.block_s(levels)
    does_not_start = scenario.does_not_start
    first, last, mass = (np.full(size, -1), np.full(size, -1), np.zeros(size))
    confirmed = np.zeros(size, bool)
    searching = reproduced.copy()
    for failed in range(CONFIRMS):
        threshold = threshold_after(setup.rule.posterior, failed)
        active = searching.copy()
        for _ in range(setup.rule.max_probes):
            # Only the searches still running are computed on: their rows are taken out, worked on, put back.
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            ev = posterior.Evidence(evidence.count[idx], evidence.total[idx], evidence.squares[idx])
            log_post = ev.log_posterior(prior)
            named, _, _ = named_group(log_post, skipped[idx], threshold)
            going = (named < 0) & (spent[idx] < setup.rule.budget_device_s) & (probes[idx] < setup.rule.max_probes)
            step, spread = ev.step(log_post)
            costs = ProbeCosts(float(setup.block_s(0.0)), commit_block, np.where(pulled[idx], 0.0, setup.image_s))
            chosen = choose(posterior.probabilities(log_post), eligible(skipped[idx]),
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
                fails = run & does_not_start[jj]
                measured = run & ~fails
                x = simulated_log_ratios(rng, idx.size, test.max_pairs, setup.budget, levels[jj], model)
                found = test.run(ev, prior, jj, x)
                used = np.where(np.arange(test.max_pairs) < found.pairs[:, None], x, np.nan)
                ev = ev.add(jj, used, measured)
                between[idx] |= measured & between_flags(x, found.pairs, step, found.decision)
                image = np.where(pulled[idx, jj], 0.0, setup.image_s)
                seconds = np.where(fails, setup.block_s(0.0) + setup.good.startup_s,
                                   found.pairs * (setup.block_s(0.0) + commit_block[jj])) + image
                seconds = np.where(run, seconds, 0.0)
                skipped[idx[sub], jj] |= fails
                pulled[idx[sub], jj] |= run
                spent[idx] += seconds * devices
                round_wall = np.maximum(round_wall, seconds)
                probes[idx] += run
            evidence.count[idx], evidence.total[idx], evidence.squares[idx] = ev.count, ev.total, ev.squares
            wall[idx] += round_wall
        got_first, got_last, got_mass = named_group(evidence.log_posterior(prior), skipped, threshold)
        first, last, mass = (np.where(searching, a, b) for a, b in ((got_first, first), (got_last, last),
                                                                   (got_mass, mass)))
        # The confirm: the group's parent against its last commit.
        named = searching & (first >= 0)
        parent = np.where(named, first - 1, -1)
        base = np.where(parent >= 0, levels[np.maximum(parent, 0)], 0.0)
        slower, c_pairs, _ = simulated_campaign(rng, setup, setup.confirm, levels[np.maximum(last, 0)], base, model)
        c_seconds = np.where(named, c_pairs * (setup.block_s(base) + commit_block[np.maximum(last, 0)]), 0.0)
        c_seconds += np.where(named & (parent >= 0) & ~pulled[rows, np.maximum(parent, 0)], setup.image_s, 0.0)
        pulled[rows, np.maximum(parent, 0)] |= named & (parent >= 0)
        wall += c_seconds
        spent += c_seconds * devices
        confirmed |= named & slower
        searching = named & ~slower & (spent < setup.rule.budget_device_s)
    first = np.where(reproduced, first, -1)
    last = np.where(reproduced, last, -1)
    return SimulatedSearches(scenario, reproduced, first, last, mass, confirmed, probes, spent, wall, between)
