"""The profiler, /metrics and the client's E2E checked against each other; each disagreement named.

Each rule is tested where it holds and where it breaks, on constructed
accounts of one request; hypothesis checks that any consistent nesting of
the three accounts passes every rule and that moving one stage beyond the
tolerance trips exactly the rules that see it. Then real simulator servers:
a healthy one agrees with itself, and one that leaves a stage out of its
profiler, one that under-reports ``diffusion_forward_s``, one that muxes
slowly and one that configures other steps are each named. The live faults
are 0.45 s or more against a tolerance of 0.25 s, so a busy machine's late
wake-ups (which move time between adjacent simulated stages) cannot decide
the outcome.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from h3bench.h3 import STAGE_PREFIX
from h3bench.run import server_metrics as sm
from h3bench.run.client import GenerationRequest, Reference, VideoClient
from h3bench.run.phases import RequestPhases
from h3bench.run.server_metrics import HistogramDelta, RequestMetrics
from h3bench.verdict.reconcile import Reconciliation, Tolerance, block_findings, reconcile, stage_seconds
from tests_unit.sim_server import FAST, SIZE, SimServer, make_reference

P = STAGE_PREFIX


def accounts(*, encode: float = 1.0, media: float = 8.0, diffuse: float = 700.0, decode: float = 5.0,
             unkeyed: float = 0.4, post: float = 0.001, outside: float = 0.3, forward: float | None = None,
             steps: float = 50, drop: str | None = None, exec_count: float = 1) -> dict:
    """One request's three accounts, consistent unless told otherwise: (stage_durations, metrics, e2e)."""
    stages = {P + "encode_prompt": encode, P + "_encode_local_media": media, P + "diffuse": diffuse,
              P + "video_vae.decode_latent": decode * 0.95, P + "audio_vae.decode_latent": decode * 0.05,
              P + "decode": decode, "stage_0_gen_ms": 99_999.0}  # upstream's merged timing, in ms: ignored
    exec_s = encode + media + diffuse + decode + unkeyed
    served = exec_s + post
    if drop is not None:
        del stages[P + drop]
    histograms = {
        sm.DIFFUSION_EXEC_S: HistogramDelta(exec_s, exec_count),
        sm.DIFFUSION_FORWARD_S: HistogramDelta(diffuse if forward is None else forward, 1),
        sm.E2E_REQUEST_LATENCY_S: HistogramDelta(served, 1),
        sm.NUM_INFERENCE_STEPS: HistogramDelta(steps, 1),
    }
    return {"stage_durations": stages, "metrics": RequestMetrics(True, "", histograms),
            "e2e_s": served + outside, "inference_time_s": served + outside * 0.9, "requested_steps": 50}


def names(result: Reconciliation) -> set[str]:
    return {c.name for c in result.checks if c.ok is False}


def test_consistent_accounts_agree() -> None:
    result = reconcile(**accounts())
    assert result.ok and result.findings == ()
    assert all(c.ok for c in result.checks), [c.detail for c in result.checks]


@pytest.mark.parametrize(("change", "check", "words"), [
    pytest.param({"drop": "_encode_local_media"}, "profiler covers the engine", "profiler misses 8.4000 s",
                 id="profiler-misses-a-stage"),
    pytest.param({"unkeyed": -30.0}, "profiler covers the engine", "exceed the server's",
                 id="profiler-over-reports"),
    pytest.param({"outside": 40.0}, "client vs server", "the client waited 40.0000 s that the server does not count",
                 id="client-waits-on-what-the-server-does-not-count"),
    pytest.param({"outside": -40.0}, "client vs server", "more than the client waited", id="server-counts-more"),
    pytest.param({"forward": 350.0}, "forward is diffuse", "falls 350.0000 s short", id="forward-under-reported"),
    pytest.param({"steps": 30}, "DiT steps", "configured 30 steps for a request of 50 steps (49 DiT forwards",
                 id="other-steps"),
    pytest.param({"exec_count": 2}, "one observation", "another request ran", id="two-requests-in-the-window"),
    pytest.param({"exec_count": 0}, "one observation", "observed no vllm_omni:diffusion_exec_s", id="not-observed"),
])
def test_each_disagreement_is_named(change: dict, check: str, words: str) -> None:
    result = reconcile(**accounts(**change))
    assert check in names(result)
    assert any(words in finding for finding in result.findings), result.findings


def test_profiler_beyond_e2e_and_decode_shorter_than_its_vae() -> None:
    base = accounts()
    stages = dict(base["stage_durations"])
    stages[P + "decode"] = 1.0  # the VAE calls inside it took 5 s
    assert "VAE inside decode" in names(reconcile(**{**base, "stage_durations": stages}))
    result = reconcile(**{**base, "e2e_s": 100.0, "metrics": None, "inference_time_s": None})
    assert "profiler within E2E" in names(result)
    assert "more than the client's E2E" in result.findings[0]


def test_without_metrics_it_falls_back_to_inference_time_and_notes_the_rest() -> None:
    base = accounts(drop="_encode_local_media")
    result = reconcile(**{**base, "metrics": RequestMetrics(False, "the server has no /metrics (HTTP 404)")})
    checks = {c.name: c for c in result.checks}
    assert checks["profiler covers the engine"].ok is False and "inference_time_s" in checks[
        "profiler covers the engine"].finding
    assert checks["forward is diffuse"].ok is None and checks["DiT steps"].ok is None
    assert checks["one observation"].ok is None and "HTTP 404" in checks["one observation"].detail
    bare = reconcile(e2e_s=1.0, stage_durations={}, metrics=None, requested_steps=None)
    assert bare.ok and all(c.ok is None for c in bare.checks)  # nothing to compare is not a disagreement


def test_the_client_check_quotes_upload_and_download() -> None:
    result = reconcile(**accounts(outside=40.0), phases=RequestPhases(upload_s=0.5, server_wait_s=None,
                                                                       download_s=1.5))
    finding = next(f for f in result.findings if f.startswith("the client waited"))
    assert "upload 0.5000 s, download 1.5000 s, the rest 38.0000 s" in finding


def test_tolerance_is_the_larger_of_absolute_and_relative() -> None:
    tol = Tolerance(relative=0.01, absolute_s=0.05)
    assert tol.of(1.0) == 0.05 and tol.of(700.0) == 7.0
    # 5 s unkeyed in a 714 s exec passes at 1 % (7.14 s) and fails at 0.5 % (3.57 s).
    assert reconcile(**accounts(unkeyed=5.0)).ok
    assert not reconcile(**accounts(unkeyed=5.0), tolerance=Tolerance(relative=0.005)).ok


def test_stage_seconds_reads_only_profiler_keys() -> None:
    assert stage_seconds({P + "diffuse": 2.0, "Other.diffuse": 1.0, "queue_wait_ms": 5.0, ".x": 1.0}) == {"diffuse": 3.0}


seconds = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)


@given(encode=seconds, media=seconds, diffuse=seconds, decode=seconds, outside=st.floats(0.0, 0.04),
       unkeyed=st.floats(0.0, 0.04))
def test_any_consistent_nesting_agrees(encode: float, media: float, diffuse: float, decode: float, outside: float,
                                       unkeyed: float) -> None:
    result = reconcile(**accounts(encode=encode, media=media, diffuse=diffuse, decode=decode, outside=outside,
                                  unkeyed=unkeyed))
    assert result.ok, result.findings


@given(media=st.floats(1.0, 1000.0), diffuse=seconds)
def test_a_dropped_stage_beyond_the_tolerance_is_always_named(media: float, diffuse: float) -> None:
    result = reconcile(**accounts(media=media, diffuse=diffuse, drop="_encode_local_media", outside=0.01))
    tol = Tolerance().of(1.0 + media + diffuse + 5.0 + 0.4)
    assert ("profiler covers the engine" in names(result)) == (media + 0.4 > tol)  # the 0.4 s unkeyed adds to it
    assert names(result) <= {"profiler covers the engine"}


def test_block_record_counts_each_disagreement() -> None:
    bad, good = reconcile(**accounts(drop="_encode_local_media")), reconcile(**accounts())
    lines = block_findings([bad, good, bad])
    assert len(lines) == 1 and lines[0].startswith("profiler covers the engine: in 2 of 3 request(s), e.g. the server")
    assert block_findings([good, good]) == ()


# -- real simulator servers -------------------------------------------------------------

LIVE = Tolerance(relative=0.01, absolute_s=0.25)
# Stages large enough that rendering fits inside them, and every fault at least 0.45 s.
BASE = [*FAST, "--workers", "1", "--process-seed", "5", "--media-encode-s", "2000,2000", "--step-s", "40,40"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reconcile-sim")


@pytest.fixture(scope="module")
def reference(logs: Path) -> Reference:
    return Reference(make_reference(logs), "video/mp4")


def live(logs: Path, reference: Reference, tmp: Path, *flags: str, api: str = "sync") -> Iterator[Reconciliation]:
    """Reconcile each of two requests (the first warms the server) on a simulator with ``flags``."""
    request = GenerationRequest(prompt="a red fox crosses the snow", duration_s=4.0, size=SIZE, seed=0,
                                num_inference_steps=50, references=(reference,))
    with SimServer(logs, *BASE, *flags) as server, VideoClient(server.wait_ready().url) as client:
        for index in range(2):
            before = sm.scrape(server.url)
            send = client.generate_sync if api == "sync" else client.generate_async
            result = send(request, tmp / f"out{index}.mp4")
            delta = sm.metrics_delta(before, sm.scrape(server.url))
            yield reconcile(e2e_s=result.e2e_s, stage_durations=result.stage_durations, metrics=delta,
                            requested_steps=50, inference_time_s=result.inference_time_s, phases=result.phases,
                            tolerance=LIVE)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_healthy_simulator_agrees_with_itself(logs: Path, reference: Reference, tmp_path: Path, api: str) -> None:
    for result in live(logs, reference, tmp_path, api=api):
        assert result.ok, result.findings
        assert all(c.ok for c in result.checks), [c.detail for c in result.checks if not c.ok]


@pytest.mark.slow
def test_a_simulator_whose_profiler_misses_a_stage_is_named(logs: Path, reference: Reference, tmp_path: Path) -> None:
    flags = ["--underreport-stage", "_encode_local_media", "--underreport-factor", "0", "--mux-s", "2000,2000",
             "--steps", "20"]
    for result in live(logs, reference, tmp_path, *flags):
        assert names(result) == {"profiler covers the engine", "client vs server", "DiT steps"}, result.findings
        profiler, client, steps = result.findings
        assert "the server's profiler misses" in profiler and "vllm_omni:diffusion_exec_s" in profiler
        assert client.startswith("the client waited") and "server vllm_omni:e2e_request_latency_s" in client
        assert "configured 21 steps for a request of 50 steps" in steps


@pytest.mark.slow
def test_a_simulator_that_under_reports_forward_is_named(logs: Path, reference: Reference, tmp_path: Path) -> None:
    for result in live(logs, reference, tmp_path, "--underreport-stage", "vllm_omni:diffusion_forward_s"):
        assert names(result) == {"forward is diffuse"}, result.findings
        assert "falls" in result.findings[0] and "short of the profiler's diffuse" in result.findings[0]


def test_the_simulator_refuses_an_unknown_stage_to_under_report() -> None:
    from h3bench.errors import RunSpecError
    from h3bench.sim.profile import parse_profile

    with pytest.raises(RunSpecError, match="underreport_stage must be one of encode_prompt, _encode_local_media"):
        parse_profile({"underreport_stage": "vae"}, source="test")
    assert parse_profile({"underreport_stage": "decode", "underreport_factor": 0.0}, source="t").underreport_factor == 0
    with pytest.raises(RunSpecError, match="underreport_factor"):
        parse_profile({"underreport_stage": "decode", "underreport_factor": 1.0}, source="test")
