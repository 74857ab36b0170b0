"""Which stage moved: paired per-part effects, their stated level measured, and candidates that change one stage.

Block data are drawn from the simulator's own latency model
(:meth:`h3bench.sim.profile.SimProfile.plan` at ``time_scale`` 1, i.e. the
950PR recipe's seconds, with its 2 % per-stage request jitter), its
``/metrics`` values from :func:`h3bench.sim.metrics.observations`, plus a
lognormal factor per stage and server process (1 %), the process-to-process
noise the error-rate tests use. Two candidates change one stage each: the
VAE decode 30 % faster, the DiT step 10 % faster. Through
:func:`h3bench.verdict.stage_effects.stage_effects` itself, over 1000 seeded
campaigns of the default ``ABBAABBA`` with three measured requests per block:
the changed stage's interval excludes 1 in at least 99 % of them, and each unchanged
stage's includes 1 in 95 % of them (within 3.5 Monte-Carlo SE), which is the
level the module states. The level itself is measured on 20 000 vectorised
A/A campaigns through :func:`h3bench.verdict.stage_effects.paired_bounds`. A few
blocks on real simulator servers check the whole path: scrapes, parts,
effects. Run with ``-s`` to print the rates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from h3bench.errors import UsageError
from h3bench.h3 import STAGE_PREFIX, expected_shape, frame_count
from h3bench.run import server_metrics as sm
from h3bench.run.client import GenerationRequest, Reference, VideoClient
from h3bench.run.phases import RequestPhases
from h3bench.run.server_metrics import HistogramDelta, RequestMetrics
from h3bench.sim.metrics import RequestTiming, observations
from h3bench.sim.profile import SimProfile, StagePlan
from h3bench.stats import speed as stats
from h3bench.stats.intervals import error_levels
from h3bench.verdict.stage_effects import (
    ATTRIBUTION_LEVEL,
    DIT_PER_FORWARD,
    E2E,
    MUX,
    BlockParts,
    paired_bounds,
    request_parts,
    request_parts_from_record,
    stage_effects,
)
from tests_unit.sim_server import FAST, SIZE, SimServer, make_reference

# Its module fixtures run once: every test of the module on one xdist worker.
pytestmark = pytest.mark.xdist_group("stage-effects")

P = STAGE_PREFIX
ORDER = "ABBAABBA"
DURATION = 5.0
FRAMES = frame_count(DURATION)
BASELINE = SimProfile(time_scale=1.0)
CANDIDATES = {
    "vae30": SimProfile(time_scale=1.0, decode_s=(5.12 * 0.7, 13.34 * 0.7)),
    "dit10": SimProfile(time_scale=1.0, step_s=(14.9 * 0.9, 119.33 * 0.9)),
}
STAGES = ("encode_prompt", "_encode_local_media", "diffuse", "decode")
# The parts each candidate changes (those that hold its stage) and those it leaves alone.
MOVES = {
    "vae30": ({"profiler:decode", "profiler:video_vae.decode_latent", "profiler:audio_vae.decode_latent"},
              {"profiler:encode_prompt", "profiler:_encode_local_media", "profiler:diffuse", DIT_PER_FORWARD,
               sm.DIFFUSION_FORWARD_S}),
    "dit10": ({"profiler:diffuse", DIT_PER_FORWARD, sm.DIFFUSION_FORWARD_S, sm.DIFFUSION_EXEC_S,
               sm.DIFFUSION_EXEC_PER_STEP_S, E2E},
              {"profiler:encode_prompt", "profiler:_encode_local_media", "profiler:decode",
               "profiler:video_vae.decode_latent", "profiler:audio_vae.decode_latent"}),
}
CAMPAIGNS = 1_000  # per candidate through stage_effects(): SE 0.69 % at 95 %
S = 20_000  # vectorised A/A campaigns: SE 0.15 % at 5 %


def se(rate: float, n: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-4) / n)


def lognormal(rng: np.random.Generator, cv: float) -> float:
    sigma2 = math.log1p(cv * cv)
    return float(rng.lognormal(-sigma2 / 2, math.sqrt(sigma2)))


def simulated_request(plan: StagePlan, process: dict[str, float], rng: np.random.Generator) -> dict[str, float]:
    """One request's parts as a server of that plan reports them: profiler keys, /metrics, the client's E2E."""
    encode = plan.encode_prompt_s * process["encode_prompt"]
    media = plan.encode_media_s * process["_encode_local_media"]
    diffuse = sum(plan.step_s) * process["diffuse"]
    video, audio = (x * process["decode"] for x in (plan.video_decode_s, plan.audio_decode_s))
    durations = {P + "encode_prompt": encode, P + "_encode_local_media": media, P + "diffuse": diffuse,
                 P + "decode": video + audio, P + "video_vae.decode_latent": video,
                 P + "audio_vae.decode_latent": audio}
    decoded = plan.preprocess_s + encode + media + diffuse + video + audio
    timing = RequestTiming(0.0, 0.0, decoded, decoded + plan.post_decode_s, durations, len(plan.step_s) + 1)
    histograms = {name: HistogramDelta(value, 1) for name, value in observations(timing).items()}
    histograms[sm.NUM_INFERENCE_STEPS] = HistogramDelta(timing.steps, 1)
    upload, download = 0.05 * lognormal(rng, 0.1), 0.02 * lognormal(rng, 0.1)
    e2e = decoded + plan.post_decode_s + plan.mux_s + upload + download
    return request_parts(e2e_s=e2e, stage_durations=durations, metrics=RequestMetrics(True, "", histograms),
                         phases=RequestPhases(upload, e2e - upload - download, download), requested_steps=50,
                         inference_time_s=e2e - upload - download)


def campaign(candidate: SimProfile, seed: int, *, order: str = ORDER, requests: int = 3,
             process_cv: float = 0.01) -> list[BlockParts]:
    rng = np.random.default_rng(seed)
    blocks = []
    for letter in order:
        profile = BASELINE if letter == "A" else candidate
        process = {stage: lognormal(rng, process_cv) for stage in STAGES}
        parts = tuple(simulated_request(profile.plan(FRAMES, rng, num_inference_steps=50), process, rng)
                      for _ in range(requests))
        blocks.append(BlockParts(letter, parts))
    return blocks


VIDEO_S = expected_shape(DURATION).video_duration_s


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_one_stage_moves_and_the_others_stay(name: str) -> None:
    changed, unchanged = MOVES[name]
    moved = {part: 0 for part in changed | unchanged}
    for seed in range(CAMPAIGNS):
        effects = stage_effects(campaign(CANDIDATES[name], seed), video_duration_s=VIDEO_S)
        for part in moved:
            moved[part] += bool(effects.part(part).moved)
    rates = {part: count / CAMPAIGNS for part, count in moved.items()}
    print(f"\n{name}: share of campaigns whose interval excludes 1: "
          + ", ".join(f"{p} {r:.1%}" for p, r in sorted(rates.items())))
    for part in changed:  # power: measured 100 % (VAE) and 99.8 % (DiT step)
        assert rates[part] >= 0.99, (part, rates[part])
    for part in unchanged:  # the stated level: an unchanged part's interval excludes 1 in 5 %
        assert abs(rates[part] - 2 * ATTRIBUTION_LEVEL) <= 3.5 * se(2 * ATTRIBUTION_LEVEL, CAMPAIGNS), (part, rates[part])


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_the_changed_stage_is_where_the_candidate_says(name: str) -> None:
    """One campaign (seed 0): the ratio of the changed stage is the candidate's, and the unchanged stages' include 1."""
    effects = stage_effects(campaign(CANDIDATES[name], 0), video_duration_s=VIDEO_S)
    changed, unchanged = MOVES[name]
    target = 0.7 if name == "vae30" else 0.9
    stage = "profiler:decode" if name == "vae30" else DIT_PER_FORWARD
    effect = effects.part(stage)
    assert effect.ratio_low is not None and effect.ratio_high is not None
    assert effect.ratio_low < target < effect.ratio_high < 1.0
    # The difference is candidate minus baseline, in seconds: the pairs' mean of block-median differences.
    paired = [b.median(stage) for b in campaign(CANDIDATES[name], 0)]
    expected = np.mean([paired[i + (ORDER[i] == "A")] - paired[i + (ORDER[i] == "B")] for i in range(0, 8, 2)])
    assert effect.difference_s == pytest.approx(expected) and effect.difference_high_s < 0
    assert all(effects.part(part).moved for part in changed)
    assert not any(effects.part(part).moved for part in unchanged), [
        (p, effects.part(p).ratio_low, effects.part(p).ratio_high) for p in unchanged if effects.part(p).moved]


def test_the_e2e_part_is_the_speed_estimate() -> None:
    blocks = campaign(CANDIDATES["dit10"], 3)
    effects = stage_effects(blocks, video_duration_s=VIDEO_S)
    speed = stats.speed_report([stats.BlockSamples(b.role, tuple(r[E2E] for r in b.requests)) for b in blocks],
                               margin=0.02, levels=error_levels(2, 1))
    assert effects.part(E2E).ratio == pytest.approx(speed.estimate.geomean, rel=1e-12)
    assert effects.part(E2E).k == speed.estimate.k == 4


def test_the_attribution_level_is_what_the_statement_says() -> None:
    """A/A through paired_bounds: each part's interval excludes 1 (or the difference 0) in 5 %; m parts, 1-0.95^m."""
    rng = np.random.default_rng(2031)
    m = 12
    # Log block medians: process noise 1 %, the median of three requests at 2 %, for m independent parts.
    logs = rng.normal(0, 0.01, (S, m, len(ORDER))) + np.median(rng.normal(0, 0.02, (S, m, len(ORDER), 3)), -1)
    _, low, high, _, dlow, dhigh = paired_bounds(100.0 * np.exp(logs), ORDER)
    ratio_out = (low > 1) | (high < 1)
    diff_out = (dlow > 0) | (dhigh < 0)
    rate, family = ratio_out[:, 0].mean(), ratio_out.any(-1).mean()
    print(f"\nA/A: one part's ratio excludes 1 in {rate:.2%}, its difference excludes 0 in "
          f"{diff_out[:, 0].mean():.2%}; one of {m} independent parts in {family:.2%}")
    assert abs(rate - 2 * ATTRIBUTION_LEVEL) <= 3.5 * se(0.05, S)
    assert abs(diff_out[:, 0].mean() - 2 * ATTRIBUTION_LEVEL) <= 3.5 * se(0.05, S)
    expected = 1 - (1 - 2 * ATTRIBUTION_LEVEL) ** m
    assert abs(family - expected) <= 3.5 * se(expected, S)


def part_block(role: str, *values: dict[str, float]) -> BlockParts:
    return BlockParts(role, tuple(values))


def test_a_zero_part_has_no_ratio_but_a_difference() -> None:
    blocks = [part_block(letter, {E2E: 10.0 + i, "pre": 0.0}) for i, letter in enumerate(ORDER)]
    effect = stage_effects(blocks, video_duration_s=5.0).part("pre")
    assert effect.ratio is None and "not positive" in effect.note
    assert (effect.difference_s, effect.difference_low_s, effect.difference_high_s) == (0.0, 0.0, 0.0)
    assert effect.moved is False


def test_a_part_missing_in_a_block_gets_no_estimate() -> None:
    blocks = [part_block(letter, {E2E: 10.0, **({"m": 1.0} if i > 1 else {})}) for i, letter in enumerate(ORDER)]
    effect = stage_effects(blocks, video_duration_s=5.0).part("m")
    assert effect.ratio is None and effect.difference_s is None and effect.moved is None
    assert effect.note == "not measured in 2 of the 8 paired blocks: no estimate"


def test_too_few_pairs_and_bad_pairs() -> None:
    one_pair = [part_block("A", {E2E: 10.0}), part_block("B", {E2E: 9.0}), part_block("B", {E2E: 9.0})]
    effect = stage_effects(one_pair, video_duration_s=5.0).part(E2E)
    assert effect.k == 1 and effect.ratio is None and effect.note.startswith("n too small")
    assert effect.candidate_median_s == 9.0  # the unpaired third block still counts in its arm
    with pytest.raises(UsageError, match="blocks 1 and 2 are AA"):
        stage_effects([part_block("A", {E2E: 1.0})] * 2, video_duration_s=5.0)
    with pytest.raises(UsageError, match="duration"):
        stage_effects(one_pair, video_duration_s=0.0)
    with pytest.raises(UsageError, match="level"):
        stage_effects(one_pair, video_duration_s=5.0, level=0.5)


def test_real_time_factor_per_arm() -> None:
    blocks = [part_block("A", {E2E: 745.43, "server:generation": 740.0}),
              part_block("B", {E2E: 400.40}), part_block("B", {E2E: 410.0}), part_block("A", {E2E: 750.0})]
    rtf = {r.arm: r for r in stage_effects(blocks, video_duration_s=124 / 24).rtf}
    assert rtf["A"].rtf_e2e == pytest.approx((745.43 + 750.0) / 2 / (124 / 24))
    assert rtf["A"].rtf_server == pytest.approx(740.0 / (124 / 24))
    assert rtf["B"].rtf_server is None and rtf["B"].n == 2


def test_parts_of_a_request() -> None:
    """Upstream's benchmark takes the largest *_gen_ms stage as the generation time; profiler keys only as stages."""
    durations = {P + "diffuse": 700.0, P + "decode": 5.0, "stage_0_gen_ms": 740_000.0}
    parts = request_parts(e2e_s=745.0, stage_durations=durations, requested_steps=50, inference_time_s=744.0,
                          metrics=RequestMetrics(False, "no /metrics"),
                          phases=RequestPhases(0.5, 744.0, 0.5, None, None))
    assert parts == {E2E: 745.0, "profiler:diffuse": 700.0, "profiler:decode": 5.0, DIT_PER_FORWARD: 700.0 / 49,
                     MUX: 40.0, "server:generation": 740.0, "client:upload": 0.5, "client:download": 0.5,
                     "client:server_wait": 744.0}


def test_parts_of_a_samples_record() -> None:
    """The samples.jsonl shape proposed for the runner: the Sample's fields plus server_metrics and phases."""
    metrics = RequestMetrics(True, "", {sm.DIFFUSION_EXEC_S: HistogramDelta(730.0, 1),
                                        sm.VAE_DECODE_S: HistogramDelta(0.0, 0)})
    phases = RequestPhases(0.5, 744.0, 0.5, 0.2, 1.0)
    record = {"block_id": "5s-c-1A-baseline", "kind": "measured", "e2e_s": 745.0, "inference_time_s": 744.0,
              "stage_durations": {P + "diffuse": 700.0}, "server_metrics": metrics.to_dict(),
              "phases": phases.to_dict()}
    parts = request_parts_from_record(record, requested_steps=50)
    assert parts == request_parts(e2e_s=745.0, stage_durations={P + "diffuse": 700.0}, metrics=metrics,
                                  phases=phases, requested_steps=50, inference_time_s=744.0)
    assert parts[sm.DIFFUSION_EXEC_S] == 730.0 and sm.VAE_DECODE_S not in parts and parts["client:queue"] == 0.2
    bare = request_parts_from_record({"e2e_s": 2.0, "stage_durations": {}}, requested_steps=50)
    assert bare == {E2E: 2.0}  # a sample from before /metrics was scraped
    with pytest.raises(UsageError, match="no E2E"):
        request_parts_from_record({"request_id": "x", "e2e_s": None}, requested_steps=50)


# -- real simulator servers -------------------------------------------------------------------

LIVE = [*FAST, "--workers", "1", "--step-s", "10,10", "--decode-s", "600,600", "--jitter-cv", "0"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, SimServer], Reference]]:
    logs = tmp_path_factory.mktemp("effects-sim")
    with (SimServer(logs, *LIVE, "--process-seed", "1") as a,
          SimServer(logs, *LIVE, "--process-seed", "2", "--decode-s", "420,420") as b):
        yield {"A": a.wait_ready(), "B": b.wait_ready()}, Reference(make_reference(logs), "video/mp4")


@pytest.mark.slow
def test_a_few_blocks_on_real_servers(servers: tuple[dict[str, SimServer], Reference], tmp_path: Path) -> None:
    """Blocks alternate between a baseline and a VAE-30 %-faster simulator: scraped, split, reconciled, attributed."""
    by_role, reference = servers
    request = GenerationRequest(prompt="a fox", duration_s=4.0, size=SIZE, references=(reference,))
    blocks = []
    for letter in ORDER:
        server = by_role[letter]
        with VideoClient(server.url) as client:
            client.generate_sync(request, tmp_path / "warmup.mp4")
            before, parts = sm.scrape(server.url), []
            for _ in range(2):
                result = client.generate_sync(request, tmp_path / "out.mp4")
                after = sm.scrape(server.url)
                parts.append(request_parts(e2e_s=result.e2e_s, stage_durations=result.stage_durations,
                                           metrics=sm.metrics_delta(before, after), phases=result.phases,
                                           requested_steps=50, inference_time_s=result.inference_time_s))
                before = after
        blocks.append(BlockParts(letter, tuple(parts)))
    effects = stage_effects(blocks, video_duration_s=expected_shape(4.0).video_duration_s)
    decode, diffuse = effects.part("profiler:decode"), effects.part("profiler:diffuse")
    assert decode.ratio is not None and 0.6 < decode.ratio < 0.8 and decode.moved
    assert diffuse.ratio is not None and 0.9 < diffuse.ratio < 1.1
    assert effects.part(sm.DIFFUSION_FORWARD_S).ratio == diffuse.ratio  # /metrics derives it from the profiler
    sources = {p.source for p in effects.parts}
    assert sources == {"client", "profiler", "metrics", "server", "derived"}
    assert {r.arm for r in effects.rtf} == {"A", "B"}
    assert effects.to_dict()["parts"]["profiler:decode"]["moved"] is True
