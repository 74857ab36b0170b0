"""The simulator's engine terms: where it compiles, a cold card's faster first requests, the worker-to-server handoff.

Each term is tested on and off through :meth:`SimProfile.plan` (what the API process decides and
every worker sleeps) and live, through a server's answers. vLLM-Omni 0.30.0 compiles nothing in the
diffusion path on NPU (its NPU platform does not support inductor, so ``diffusion_model_runner.py``
skips torch.compile): that is the default. The 950PR's first request on an idle card ran denoise
9.9 % faster than steady requests, and its single-card stage table spends 5.3 % of E2E in the handoff.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from h3bench.h3 import STAGE_PREFIX
from h3bench.run.client import mux_and_transfer_s, parse_stage_durations
from h3bench.sim.profile import SimProfile
from tests_unit.sim_server import SimServer, files, form, make_reference

FRAMES = 124  # 5 s


def plan(nth: int | None = None, warmed: float | None = None, **fields: object):
    return SimProfile(time_scale=1.0, jitter_cv=0.0, **fields).plan(FRAMES, np.random.default_rng(0), nth=nth,
                                                                    warmed=warmed)


@pytest.mark.parametrize(("where", "first_extra"), [("none", 0.0), ("first_request", 30.0), ("startup", 0.0)])
def test_compile_is_paid_where_the_profile_puts_it(where: str, first_extra: float) -> None:
    steady = plan(compile=where)
    first = plan(1, compile=where)
    assert first.step_s[0] - steady.step_s[0] == pytest.approx(first_extra)
    assert first.step_s[1:] == steady.step_s[1:] and plan(2, compile=where) == steady
    # "startup" is slept in every worker's start-up instead (tests_unit/server/test_startup.py).


def test_the_default_compiles_nothing_as_vllm_omni_0_30_on_npu() -> None:
    assert SimProfile().compile == "none" and plan(1) == plan()


def test_a_cold_card_is_faster_on_its_first_requests_and_decays_to_steady() -> None:
    steady = sum(plan(thermal_boost=0.099).step_s)
    by_request = [sum(plan(n, thermal_boost=0.099, thermal_decay=2.0).step_s) / steady for n in range(1, 12)]
    assert by_request[0] == pytest.approx(0.901)
    assert by_request[1] == pytest.approx(1 - 0.099 * math.exp(-0.5))
    assert by_request == sorted(by_request) and by_request[-1] == pytest.approx(1.0, abs=0.001)
    # Only the DiT heats: every other stage is the steady request's.
    assert plan(1, thermal_boost=0.099).video_decode_s == plan().video_decode_s
    assert [sum(plan(n).step_s) for n in (1, 2, 5)] == [steady] * 3  # off: every request is steady


def test_a_card_heats_by_the_work_it_ran_so_a_short_warmup_leaves_it_cold() -> None:
    """The first measured request after a 2-step warmup (one of 49 forwards) is nearly as cold as a first request;
    after a full warmup it is at the second request's factor. Without the term both are steady."""
    steady = sum(plan(thermal_boost=0.1).step_s)
    after_short = sum(plan(2, thermal_boost=0.1, warmed=1 / 49).step_s) / steady
    after_full = sum(plan(2, thermal_boost=0.1).step_s) / steady
    assert after_short == pytest.approx(1 - 0.1 * math.exp(-1 / 49)) and after_short < 0.905
    assert after_full == pytest.approx(1 - 0.1 * math.exp(-1.0))
    assert sum(plan(2, warmed=1 / 49).step_s) == sum(plan().step_s)


def test_a_first_request_compile_is_paid_by_the_first_request_that_runs_a_forward() -> None:
    short = SimProfile(time_scale=1.0, jitter_cv=0.0, compile="first_request")
    warmup = short.plan(FRAMES, np.random.default_rng(0), num_inference_steps=2, nth=1)
    after = short.plan(FRAMES, np.random.default_rng(0), nth=2, warmed=1 / 49)
    assert len(warmup.step_s) == 1 and warmup.step_s[0] - after.step_s[0] == pytest.approx(30.0)
    # A request without a forward compiles nothing: the next one still pays it.
    assert short.plan(FRAMES, np.random.default_rng(0), num_inference_steps=1, nth=1).step_s == ()
    unwarmed = short.plan(FRAMES, np.random.default_rng(0), nth=2, warmed=0.0)
    assert unwarmed.step_s[0] - after.step_s[0] == pytest.approx(30.0)


def test_the_handoff_is_its_share_of_e2e_and_nothing_without_it() -> None:
    with_handoff = plan(handoff_share=0.053)
    assert with_handoff.handoff_s / with_handoff.total_s == pytest.approx(0.053)
    assert with_handoff.total_s - with_handoff.handoff_s == pytest.approx(plan().total_s)
    assert plan().handoff_s == 0.0


def _two_requests(log_dir: Path, reference: Path, *flags: str, first_steps: int = 50) -> list[tuple[float, float]]:
    """(diffuse seconds, E2E less the profiler's stages) of a server's first two 4 s requests (the first at
    ``first_steps`` inference steps)."""
    out = []
    with SimServer(log_dir, "--time-scale", "0.002", "--jitter-cv", "0", "--workers", "1", *flags) as sim, \
            sim.wait_ready().http() as client:
        for seed, steps in (("0", first_steps), ("1", 50)):
            data = form(4.0, seed=seed, num_inference_steps=str(steps))
            response = client.post("/v1/videos/sync", data=data, files=files(reference))
            assert response.status_code == 200, response.text
            stages = parse_stage_durations(response.headers.get("x-stage-durations"))
            e2e = float(response.headers["x-inference-time-s"])
            out.append((stages[STAGE_PREFIX + "diffuse"], mux_and_transfer_s(e2e, stages) or 0.0))
    return out


def test_the_terms_change_what_a_client_measures_and_without_them_nothing_does(tmp_path: Path) -> None:
    reference = make_reference(tmp_path)
    on = _two_requests(tmp_path, reference, "--thermal-boost", "0.3", "--handoff-share", "0.25")
    off = _two_requests(tmp_path, reference)
    # Cold card: the first request's DiT at 0.7 of the second's 1 - 0.3/e; off, the two are alike.
    assert on[0][0] / on[1][0] < 0.85 and 0.92 < off[0][0] / off[1][0] < 1.08
    # The handoff (a quarter of E2E: about 0.4 s here) is outside every profiler stage, so in the remainder.
    planned = plan(handoff_share=0.25).handoff_s * 0.002
    assert on[1][1] - off[1][1] > planned / 2


def test_a_short_first_request_costs_its_steps_and_leaves_the_card_cold(tmp_path: Path) -> None:
    """Live: a 2-step first request runs one DiT forward of 49, and the full request after it is as cold as a
    first request (thermal 0.3: its DiT at 0.7 of steady, against 1 - 0.3/e after a full one)."""
    reference = make_reference(tmp_path)
    short = _two_requests(tmp_path, reference, "--thermal-boost", "0.3", first_steps=2)
    full = _two_requests(tmp_path, reference, "--thermal-boost", "0.3")
    assert short[0][0] < full[0][0] / 10
    assert short[1][0] / full[1][0] < 0.85
