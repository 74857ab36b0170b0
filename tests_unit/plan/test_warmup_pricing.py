"""``h3bench plan`` prices a cheap warmup (``protocol.warmup_steps``): its share of a request, and what it saves.

On 950pr-x4.toml's hints (the 950PR recipe: 745.43 s and 5887.24 s per request, 14.90 s and 119.33 s per DiT
step, 4 devices per arm) a 2-step warmup runs 1 DiT forward instead of 49, so it saves 48 steps per baseline
block: 715.2 s at 5 s and 5727.84 s at 15 s, four times that in device time. Over the campaign the simulated
device time falls from 4.5 to 3.7 wall h without an effect and from 57.9 to 44.5 at a true 10 % (the plan's
2000 campaigns; the figures are the plan's, printed by ``h3bench plan``).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.course.devicetime import ArmCost
from h3bench.errors import UsageError
from h3bench.h3 import expected_shape
from h3bench.plan.estimate import make_plan, warmup_prices, warmup_share
from h3bench.plan.summary import plan_lines, warmup_line
from h3bench.runspec import RunSpec, load_runspec, parse_runspec
from h3bench.sim.profile import SimProfile
from h3bench.stats.blockstat import BlockBudget

SPECS = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
NPU = SPECS / "950pr-x4.toml"
NPU_SPEC = load_runspec(NPU)


def npu_spec(edit: Any = None) -> RunSpec:
    data = tomllib.loads(NPU.read_text(encoding="utf-8"))
    if edit is not None:
        data = copy.deepcopy(data)
        edit(data)
    return parse_runspec(data, source=NPU.name, spec_dir=SPECS)


def test_a_2_step_warmup_saves_48_dit_steps_per_block_on_the_950pr_costs() -> None:
    spec = load_runspec(NPU)
    assert warmup_share(spec, 5, "baseline", 2) == pytest.approx(1 - 14.90 * 48 / 745.43)
    prices = {p.duration: p for p in warmup_prices(spec)}
    assert prices[5].saved_s == pytest.approx(14.90 * 48) and prices[5].saved_device_s == pytest.approx(4 * 715.2)
    assert prices[15].saved_s == pytest.approx(119.33 * 48) and prices[15].steps == 2


def test_the_plan_prices_every_block_with_the_cheap_warmup_and_says_so() -> None:
    full = make_plan(load_runspec(NPU))
    cheap = make_plan(npu_spec(lambda d: d["protocol"].update(warmup_steps=2)))
    assert full.seconds is not None and cheap.seconds is not None
    # Each arm's own DiT steps (the candidate's: 7.91 s and 61.24 s), 48 fewer in every block.
    step = {"baseline": {5: 14.90, 15: 119.33}, "eqbsa_mxfp8": {5: 7.91, 15: 61.24}}
    assert full.seconds - cheap.seconds == pytest.approx(sum(48 * step[b.arm][b.duration] for b in full.blocks))
    # The simulated campaigns pay less for the same verdicts (the fallback re-runs nothing).
    for before, after in zip(full.device, cheap.device, strict=True):
        assert after.design.wall_h[0] < before.design.wall_h[0] and after.pass_rate == pytest.approx(before.pass_rate,
                                                                                                     abs=0.03)
    said = "\n".join(plan_lines(cheap))
    assert ("cheap warmup: 2 of 50 inference steps (protocol.warmup_steps), priced in every block; saved per block "
            "against a full warmup: 5 s: 4.1% of a request, 11 min 55 s (0.79 device-h), 15 s: 2.7% of a request, "
            "1 h 35 min (6.36 device-h)") in said
    assert "a 2-step warmup (protocol.warmup_steps = 2, upstream's dummy run) would save" in "\n".join(plan_lines(full))


def test_a_warmup_nothing_prices_is_priced_as_a_request_and_not_claimed() -> None:
    spec = npu_spec(lambda d: (d["hints"].pop("dit_step_s"), d["protocol"].update(warmup_steps=2)))
    assert warmup_share(spec, 5, "baseline", 2) is None and warmup_prices(spec) == ()
    plan = make_plan(spec)
    assert warmup_line(plan) is None and plan.seconds == make_plan(npu_spec(lambda d: d["hints"].pop(
        "dit_step_s"))).seconds


def test_a_simulator_arm_prices_the_warmup_from_its_profile() -> None:
    spec = load_runspec(SPECS / "sim.toml")
    share = warmup_share(spec, 5, "baseline", 2)
    profile = SimProfile(**{**spec.arms["baseline"].sim, "jitter_cv": 0.0})  # type: ignore[arg-type]
    whole = profile.plan(expected_shape(5).frames, np.random.default_rng(0), num_inference_steps=50)
    assert share is not None and share * whole.total_s == pytest.approx(whole.total_s - 48 * whole.step_s[0])


def test_a_warmup_share_outside_0_to_1_is_refused_and_prices_only_the_warmups() -> None:
    with pytest.raises(UsageError, match="a warmup a share of a request"):
        ArmCost(10.0, warmup_share=0.0)
    budget = BlockBudget(1, 2, True, True)
    cheap, full = ArmCost(10.0, 5.0, 1.0, warmup_share=0.1), ArmCost(10.0, 5.0, 1.0)
    assert full.block_s(budget) - cheap.block_s(budget) == pytest.approx(9.0)
    assert cheap.scaled(0.5).warmup_share == 0.1


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 49), st.integers(2, 49), st.sampled_from([5, 15]), st.sampled_from(["baseline", "eqbsa_mxfp8"]))
def test_a_warmup_of_more_steps_costs_more_and_a_full_one_a_request(a: int, b: int, duration: int, arm: str) -> None:
    share = {n: warmup_share(NPU_SPEC, duration, arm, n) for n in (a, b, 50)}
    assert share[50] == pytest.approx(1.0)
    low, high = sorted((a, b))
    assert 0 < share[low] <= share[high] <= 1  # type: ignore[operator]
