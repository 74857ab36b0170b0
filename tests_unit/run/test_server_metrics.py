"""GET /metrics: upstream's families as the simulator serves them, parsed with prometheus_client, per-request deltas.

The simulator's families are checked against the table read from vLLM-Omni
0.30.0 (``vllm_omni/metrics/definitions.py``, ``modality.py``,
``prometheus.py``): every name, type, label set and bucket list, as the
parser reads them back from a real scrape. Servers without ``/metrics``
(the simulator with ``--no-metrics-endpoint``, a closed port, a server whose
``/metrics`` is not Prometheus text) give unavailable results, never errors.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from h3bench.h3 import STAGE_PREFIX
from h3bench.run import server_metrics as sm
from h3bench.run.client import GenerationRequest, Reference, VideoClient
from h3bench.run.server_metrics import HistogramDelta, RequestMetrics, Scrape
from h3bench.server.ports import find_free_port
from h3bench.sim.metrics import RequestTiming, observations
from tests_unit.sim_server import FAST, SIZE, SimServer, make_reference

MODEL = "MiniMaxAI/MiniMax-H3"


# -- parsing, without a server -------------------------------------------------------------


def exposition() -> str:
    registry = CollectorRegistry()
    h = Histogram("vllm_omni:diffusion_exec_s", "exec", labelnames=["model_name", "stage", "replica"],
                  buckets=sm.SECONDS_BUCKETS, registry=registry)
    Histogram("vllm_omni:vae_decode_s", "never observed", labelnames=["model_name", "stage", "replica"],
              registry=registry)
    c = Counter("vllm_omni:requests_success", "ok", labelnames=["model_name", "finished_reason"], registry=registry)
    other = Histogram("vllm:e2e_request_latency_seconds", "vLLM's own", registry=registry)
    h.labels(MODEL, "0", "0").observe(2.5)
    h.labels(MODEL, "0", "1").observe(1.5)  # a second replica: summed
    c.labels(MODEL, "stop").inc(3)
    other.observe(9.0)
    return generate_latest(registry).decode()


def test_parser_sums_label_sets_and_keeps_declared_families() -> None:
    histograms, counters = sm.parse_exposition(exposition())
    assert histograms["vllm_omni:diffusion_exec_s"] == HistogramDelta(4.0, 2.0)
    assert histograms["vllm_omni:vae_decode_s"] == HistogramDelta(0.0, 0.0)  # declared, not observed
    assert counters == {"vllm_omni:requests_success": 3.0}  # the family's name, without _total
    assert not any(name.startswith("vllm:") for name in histograms)  # other namespaces are left out


def test_parser_refuses_what_is_not_prometheus_text() -> None:
    with pytest.raises(ValueError):
        sm.parse_exposition("<html><body>not metrics</body></html>\n")


def scrape_of(histograms: dict[str, HistogramDelta], counters: dict[str, float]) -> Scrape:
    return Scrape("http://x/metrics", True, "", 200, "", histograms, counters)


def test_delta_of_one_request() -> None:
    before = scrape_of({sm.DIFFUSION_EXEC_S: HistogramDelta(10.0, 4)}, {sm.REQUESTS_SUCCESS: 4})
    after = scrape_of({sm.DIFFUSION_EXEC_S: HistogramDelta(12.5, 5), sm.DIFFUSION_FORWARD_S: HistogramDelta(2.0, 1)},
                      {sm.REQUESTS_SUCCESS: 5})
    delta = sm.metrics_delta(before, after)
    assert delta.available and delta.reason == ""
    assert delta.seconds(sm.DIFFUSION_EXEC_S) == 2.5
    assert delta.seconds(sm.DIFFUSION_FORWARD_S) == 2.0  # first series after the first scrape: counted from zero
    assert delta.counters == {sm.REQUESTS_SUCCESS: 1.0}
    assert delta.seconds(sm.VAE_DECODE_S) is None and delta.observations(sm.VAE_DECODE_S) is None


def test_delta_is_not_a_value_unless_exactly_one_observation() -> None:
    delta = RequestMetrics(True, "", {"a": HistogramDelta(0.0, 0.0), "b": HistogramDelta(3.0, 2.0),
                                      "c": HistogramDelta(1.0, 1.0)})
    assert (delta.seconds("a"), delta.seconds("b"), delta.seconds("c")) == (None, None, 1.0)


def test_totals_going_backwards_mean_another_server() -> None:
    before = scrape_of({sm.DIFFUSION_EXEC_S: HistogramDelta(10.0, 4)}, {})
    after = scrape_of({sm.DIFFUSION_EXEC_S: HistogramDelta(1.0, 1)}, {})
    delta = sm.metrics_delta(before, after)
    assert not delta.available and "restarted" in delta.reason
    assert sm.metrics_delta(before, before).available  # a window without requests is fine


def test_an_unavailable_scrape_makes_the_delta_unavailable_with_its_reason() -> None:
    gone = Scrape("http://x/metrics", False, "the server has no /metrics (HTTP 404)", 404)
    delta = sm.metrics_delta(scrape_of({}, {}), gone)
    assert not delta.available and delta.reason == "scrape after the request: the server has no /metrics (HTTP 404)"


finite = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.tuples(finite, st.integers(0, 5)), max_size=6),
       st.dictionaries(st.text(min_size=1, max_size=12), finite, max_size=4), st.booleans())
def test_request_metrics_round_trip(hist: dict, counters: dict, available: bool) -> None:
    original = RequestMetrics(available, "" if available else "why",
                              {k: HistogramDelta(s, float(c)) for k, (s, c) in hist.items()}, counters)
    assert RequestMetrics.from_dict(original.to_dict()) == original


def test_the_simulator_derives_its_values_as_upstream_does() -> None:
    """exec to the end of the VAE decode, forward and vae from profiler keys by upstream's suffixes."""
    durations = {STAGE_PREFIX + "diffuse": 6.0, STAGE_PREFIX + "video_vae.decode_latent": 1.0,
                 STAGE_PREFIX + "decode": 1.2, "Other.diffuse_extra": 5.0}
    values = observations(RequestTiming(entered=10.0, started=10.5, decoded=18.5, post_decoded=18.75,
                                        stage_durations=durations, steps=50))
    assert values == {sm.DIFFUSION_EXEC_S: 8.0, sm.DIFFUSION_EXEC_PER_STEP_S: 8.0 / 50,
                      sm.DIFFUSION_PREPROCESS_S: 0.0, sm.DIFFUSION_POSTPROCESS_S: 0.25, sm.STAGE_GEN_TIME_S: 8.25,
                      sm.E2E_REQUEST_LATENCY_S: 8.75, sm.REQUEST_QUEUE_WAIT_S: 0.5, sm.DIFFUSION_FORWARD_S: 6.0}
    other = observations(RequestTiming(0.0, 0.0, 1.0, 1.0, {"Pipe.vae.decode": 0.5}, 0))
    assert other[sm.VAE_DECODE_S] == 0.5 and sm.DIFFUSION_EXEC_PER_STEP_S not in other


# -- servers that have no /metrics, or a broken one -------------------------------------------


@pytest.fixture
def broken_metrics() -> Iterator[str]:
    """A real HTTP server whose /metrics answers 200 with a body that is not Prometheus text."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"{not: prometheus}\n" if self.path == "/metrics" else b""
            self.send_response(200 if self.path == "/metrics" else 500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_body_that_does_not_parse_is_unavailable(broken_metrics: str) -> None:
    taken = sm.scrape(broken_metrics)
    assert not taken.available and "not Prometheus text format" in taken.reason
    assert taken.text == "{not: prometheus}\n"  # kept for the bundle
    assert not sm.scrape(broken_metrics + "/other").available  # HTTP 500 there


def test_a_refused_connection_is_unavailable() -> None:
    taken = sm.scrape(f"http://127.0.0.1:{find_free_port()}")
    assert not taken.available and taken.reason.startswith("connection refused on /metrics")


# -- the simulator --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("metrics-sim")


@pytest.fixture(scope="module")
def reference(logs: Path) -> Reference:
    return Reference(make_reference(logs), "video/mp4")


@pytest.fixture(scope="module")
def sim(logs: Path) -> Iterator[SimServer]:
    with SimServer(logs, *FAST, "--workers", "1", "--process-seed", "3") as server:
        yield server.wait_ready()


def request(reference: Reference, steps: int = 50) -> GenerationRequest:
    return GenerationRequest(prompt="a red fox crosses the snow", duration_s=4.0, size=SIZE, seed=0,
                             num_inference_steps=steps, references=(reference,))


def test_the_simulator_exports_upstreams_families(sim: SimServer, reference: Reference, tmp_path: Path) -> None:
    """Names, types, labels and buckets as prometheus_client's parser reads them from the raw scrape."""
    with VideoClient(sim.url, model=MODEL) as client:
        client.generate_sync(request(reference, steps=4), tmp_path / "out.mp4")
    with sim.http() as http:
        text = http.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for spec in sm.UPSTREAM_METRICS:
        family = families[spec.name]
        assert family.type == spec.kind, spec.name
        labels = {label for s in family.samples for label in s.labels} - {"le"}
        observed = family.samples or spec.kind == "counter"
        if family.samples:
            assert labels == set(spec.labels), spec.name
        if spec.kind == "histogram" and family.samples:
            les = sorted({float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")})
            expected = spec.buckets or Histogram.DEFAULT_BUCKETS
            assert les == sorted({*map(float, expected), math.inf}), spec.name
        assert observed or spec.name in (sm.VAE_DECODE_S, sm.DENOISE_STEP_LATENCY_S, sm.REQUESTS_FAILED), spec.name
    # H3 observes neither: no profiler key ends with .vae.decode, and the output is video, not image.
    assert not families[sm.VAE_DECODE_S].samples and not families[sm.DENOISE_STEP_LATENCY_S].samples
    assert "process_cpu_seconds" in families  # a real server's default registry has more than vllm_omni's


def test_one_request_adds_one_observation_per_family(sim: SimServer, reference: Reference, tmp_path: Path) -> None:
    before = sm.scrape(sim.url)
    with VideoClient(sim.url, model=MODEL) as client:
        result = client.generate_sync(request(reference), tmp_path / "out.mp4")
    delta = sm.metrics_delta(before, sm.scrape(sim.url))
    assert delta.available, delta.reason
    for name in (sm.DIFFUSION_EXEC_S, sm.DIFFUSION_EXEC_PER_STEP_S, sm.DIFFUSION_PREPROCESS_S,
                 sm.DIFFUSION_POSTPROCESS_S, sm.DIFFUSION_FORWARD_S, sm.NUM_INFERENCE_STEPS, sm.STAGE_GEN_TIME_S,
                 sm.E2E_REQUEST_LATENCY_S, sm.REQUEST_QUEUE_WAIT_S):
        assert delta.observations(name) == 1, name
    assert delta.observations(sm.VAE_DECODE_S) == 0
    assert delta.counters[sm.REQUESTS_SUCCESS] == 1
    # Upstream derives forward_s from the profiler's .diffuse key: the same number.
    assert delta.seconds(sm.DIFFUSION_FORWARD_S) == result.stage_durations[STAGE_PREFIX + "diffuse"]
    assert delta.seconds(sm.NUM_INFERENCE_STEPS) == 50
    assert delta.seconds(sm.DIFFUSION_PREPROCESS_S) == 0.0  # H3 registers no pre_process_func
    exec_s = delta.seconds(sm.DIFFUSION_EXEC_S)
    assert exec_s is not None and delta.seconds(sm.DIFFUSION_EXEC_PER_STEP_S) == pytest.approx(exec_s / 50)
    # The accounts nest: the engine inside the pipeline's latency, that inside the client's E2E.
    served = delta.seconds(sm.E2E_REQUEST_LATENCY_S)
    assert served is not None and exec_s <= served <= result.e2e_s


def test_a_server_without_metrics_is_noted_not_failed(logs: Path, reference: Reference, tmp_path: Path) -> None:
    with SimServer(logs, *FAST, "--workers", "1", "--no-metrics-endpoint") as server:
        server.wait_ready()
        before = sm.scrape(server.url)
        with VideoClient(server.url, model=MODEL) as client:
            result = client.generate_sync(request(reference), tmp_path / "out.mp4")
        delta = sm.metrics_delta(before, sm.scrape(server.url))
    assert result.e2e_s > 0  # the request itself is unaffected
    assert before.record() == {"url": f"{server.url}/metrics", "available": False,
                               "reason": "the server has no /metrics (HTTP 404)", "status_code": 404, "bytes": 0}
    assert not delta.available and "HTTP 404" in delta.reason


def test_scraping_reuses_a_client(sim: SimServer) -> None:
    with httpx.Client(trust_env=False) as http:
        first, second = sm.scrape(sim.url, http=http), sm.scrape(sim.url + "/", http=http)
        assert not http.is_closed
    assert first.available and second.available and second.url == f"{sim.url}/metrics"
