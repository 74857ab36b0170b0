"""Shards of whole AB/BA units, the host × arm statistics, and the pooled verdict's error rates."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.course.schedule import Schedule, spec_blocks
from h3bench.course.shards import SeriesWindow, Shard, Window, check_shards, read_window, round_up, unit_shard
from h3bench.errors import UsageError
from h3bench.runspec import load_runspec
from h3bench.session import options
from h3bench.stats import hosts
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.intervals import INCONCLUSIVE, PASS, error_levels
from h3bench.stats.sequential import FIRST_LOOKS, boundaries
from tests_unit.hostsim import alternating, simulate_pooled

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "fixtures" / "runspecs" / "sim.toml"


def test_a_shard_is_written_i_of_n_and_a_bad_one_is_refused_in_one_line() -> None:
    assert Shard.parse("2/3") == Shard(2, 3)
    for bad in ("3", "0/3", "4/3", "a/b"):
        with pytest.raises(UsageError, match="shard"):
            Shard.parse(bad)
    parser = argparse.ArgumentParser()
    options.add_options(parser.add_argument)
    assert parser.parse_args(["--shard", "1/2"]).h3_shard == Shard(1, 2)
    with pytest.raises(SystemExit):
        parser.parse_args(["--shard", "5/2"])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 24))
def test_units_cover_every_pair_once_and_each_shard_runs_abba(count: int, pairs: int) -> None:
    owners = [unit_shard(p, count) for p in range(pairs)]
    for pair in range(0, pairs - 1, 2):
        assert owners[pair] == owners[pair + 1]  # whole AB/BA units
    assert set(owners) <= set(range(1, count + 1))
    through = round_up(pairs, count, 10 ** 6)
    assert through % (2 * count) == 0 and through >= pairs


def _series_letters(schedule: Schedule) -> str:
    return "".join(b.letter for b in schedule.blocks if b.kind == "paired")


def test_the_shards_of_a_round_are_disjoint_whole_units_and_together_the_round() -> None:
    spec = load_runspec(SIM)
    shards = [Schedule(spec, shard=Shard(i, 3)) for i in (1, 2, 3)]
    ids = [b.id for s in shards for b in s.blocks]
    assert len(ids) == len(set(ids))
    paired = {b.id for b in spec_blocks(spec) if b.kind == "paired" and b.duration == 5 and b.pair < 6}
    assert {i for i in ids if "-baseline-" not in i or "clean" in i} >= paired  # round 1: up to 6 pairs at 5 s
    assert all(_series_letters(s) == "ABBA" for s in shards)
    assert not any(b.duration == 15 for s in shards for b in s.blocks)  # 15 s waits for a PASS at 5 s
    # A later round from a look file runs only its window: pairs 7-8 at 5 s, on shard 1.
    window = Window(2, 3, spec.spec_id, {"5s": {"clean": SeriesWindow(6, 8)}, "15s": {"clean": SeriesWindow(0, 0)}})
    later = Schedule(spec, shard=Shard(1, 3), window=window)
    assert [b.id for b in later.blocks if b.kind == "paired"] == [
        "5s-clean-13A-baseline", "5s-clean-14B-clean", "5s-clean-15B-clean", "5s-clean-16A-baseline"]
    assert Schedule(spec, shard=Shard(2, 3), window=window).blocks == ()


def test_more_shards_than_units_are_refused() -> None:
    spec = load_runspec(SIM)
    check_shards(spec, 4)  # 5 s: 8 pairs, 4 units (15 s has 3: a fourth shard runs 5 s only)
    with pytest.raises(UsageError, match="at most 4 shards"):
        check_shards(spec, 5)


def test_a_look_file_of_another_spec_or_shard_count_is_refused(tmp_path: Path) -> None:
    spec = load_runspec(SIM)
    path = tmp_path / "looks.json"
    path.write_text(json.dumps({**Window(2, 3, spec.spec_id, {"5s": {"clean": SeriesWindow(6, 8)}}).to_dict()}))
    assert read_window(path, spec_id=spec.spec_id, shards=3).of(5, "clean") == SeriesWindow(6, 8)
    with pytest.raises(UsageError, match="written for 3 shards"):
        read_window(path, spec_id=spec.spec_id, shards=2)
    with pytest.raises(UsageError, match="written for spec"):
        read_window(path, spec_id="0" * 64, shards=3)
    path.write_text("{}")
    with pytest.raises(UsageError, match="not a look file"):
        read_window(path, spec_id=spec.spec_id, shards=3)


def test_the_interaction_check_finds_an_effect_that_differs_by_host_and_not_one_that_does_not() -> None:
    rng = np.random.default_rng(7)
    same = {h: list(np.exp(np.log(0.9) + rng.normal(0, 0.01, 4))) for h in "abc"}
    differs = {**same, "c": list(np.exp(rng.normal(0, 0.01, 4)))}  # no effect on host c
    assert not hosts.interaction(same).disagree
    found = hosts.interaction(differs)
    assert found.disagree and found.p_value is not None and found.p_value < hosts.INTERACTION_LEVEL
    effects = hosts.host_effects(differs, 0.025, 0.025)
    assert [e.host for e in effects] == ["a", "b", "c"] and effects[2].ratio == pytest.approx(1.0, abs=0.03)
    # The hosts' interval decides where they disagree: wider, and here INCONCLUSIVE.
    labels = [i for i, h in enumerate(differs) for _ in differs[h]]
    logs = np.log([r for h in differs for r in differs[h]])
    codes, disagree = hosts.pooled_codes(np.array(PASS), logs, labels, 0.025, 0.025, 0.02)
    assert bool(disagree) and int(codes) == INCONCLUSIVE
    codes, disagree = hosts.pooled_codes(np.array(PASS), np.log([r for h in same for r in same[h]]), labels,
                                         0.025, 0.025, 0.02)
    assert not bool(disagree) and int(codes) == PASS


def test_a_host_whose_baseline_stands_out_is_named_and_two_hosts_name_none() -> None:
    levels = {"a": [1.00, 1.01, 0.99], "b": [1.0, 0.995, 1.005], "c": [1.05, 1.06, 1.055]}
    (found,) = hosts.baseline_outliers(levels)
    assert found.host == "c" and found.offset == pytest.approx(0.05, abs=0.01)
    assert hosts.baseline_outliers({"a": [1.0, 1.01, 0.99], "b": [1.0, 1.0, 1.01], "c": [1.0, 1.01, 0.995]}) == ()
    assert hosts.baseline_outliers({"a": levels["a"], "c": levels["c"]}) == ()


# -- error rates of the pooled verdict: simulated through the pool's own decision code --------------------------

BUDGET = BlockBudget(1, 2, True, True)  # the sim specs' block: 1 warmup, 2 measured, an audit that counts
LOOKS = boundaries(FIRST_LOOKS, error_levels(1, 1), 0.02)  # one duration's levels: 0.025 each side
FIXED = boundaries((8,), error_levels(1, 1), 0.02, futility_ratio=None)
HOSTS = {"offsets": alternating(2, 0.05), "interaction": alternating(2, 0.01)}


@pytest.mark.slow
@pytest.mark.parametrize("design", [LOOKS, FIXED], ids=["sequential", "fixed-8"])
def test_pooled_false_claims_stay_at_their_levels_with_host_offsets_and_an_interaction(design) -> None:
    faster = simulate_pooled(design, BUDGET, 0.98, hosts=2, seed=1, **HOSTS)
    slower = simulate_pooled(design, BUDGET, 1.02, hosts=2, seed=2, **HOSTS)
    assert faster.faster <= 0.025 and slower.slower <= 0.025, (faster, slower)


@pytest.mark.slow
@pytest.mark.parametrize("design", [LOOKS, FIXED], ids=["sequential", "fixed-8"])
def test_two_hosts_of_half_the_pairs_keep_the_one_host_power(design) -> None:
    from h3bench.course.designsim import LatencyModel

    for noise in (0.01, 0.02):
        model = LatencyModel(process_cv=noise)
        one = simulate_pooled(design, BUDGET, 0.90, seed=3, model=model)
        two = simulate_pooled(design, BUDGET, 0.90, hosts=2, seed=3, model=model, **HOSTS)
        assert abs(one.faster - two.faster) <= 0.02, (noise, one, two)
        # At a 1 % check the disagreements found by chance cost more than 2 points: the level is what keeps it.
    loose = simulate_pooled(FIXED, BUDGET, 0.90, hosts=2, seed=3, level=0.01, **HOSTS)
    assert simulate_pooled(FIXED, BUDGET, 0.90, seed=3).faster - loose.faster > 0.02
