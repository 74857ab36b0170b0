"""The client's E2E split into upload, server wait and download, and the async job's queueing from its timestamps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from h3bench.run.client import GenerationRequest, Reference, VideoClient
from h3bench.run.phases import QUEUE_RESOLUTION_S, PhaseClock, RequestPhases, job_queue_s
from tests_unit.sim_server import FAST, SIZE, SimServer, make_reference


def test_queue_from_the_jobs_timestamps() -> None:
    job = {"created_at": 1_000, "completed_at": 1_750, "inference_time_s": 745.4}
    queue, resolution = job_queue_s(job)
    assert queue == pytest.approx(4.6) and resolution == QUEUE_RESOLUTION_S == 1.0
    assert job_queue_s({"created_at": 1_000, "completed_at": None, "inference_time_s": 3.0}) == (None, None)
    assert job_queue_s({"created_at": 1_000}) == (None, None)


def test_the_split_adds_up_to_e2e_and_misses_nothing_it_did_not_see() -> None:
    clock = PhaseClock(start=10.0)
    clock.events[("upload", "http11.send_request_body.complete")] = 10.5
    clock.events[("download", "http11.receive_response_headers.complete")] = 19.0
    phases = clock.phases(20.0, queue=(0.25, 1.0))
    assert phases == RequestPhases(0.5, 8.5, 1.0, 0.25, 1.0)
    assert RequestPhases.from_dict(phases.to_dict()) == phases
    assert clock.phases(20.0, download="upload") == RequestPhases(0.5, None, None)  # no headers event on that leg


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimServer, Reference]]:
    logs = tmp_path_factory.mktemp("phases-sim")
    with SimServer(logs, *FAST, "--workers", "1") as server:
        yield server.wait_ready(), Reference(make_reference(logs), "video/mp4")


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_real_request_is_split(sim: tuple[SimServer, Reference], tmp_path: Path, api: str) -> None:
    server, reference = sim
    request = GenerationRequest(prompt="a fox", duration_s=4.0, size=SIZE, references=(reference,))
    with VideoClient(server.url) as client:
        send = client.generate_sync if api == "sync" else client.generate_async
        result = send(request, tmp_path / "out.mp4")
    phases = result.phases
    assert phases is not None and phases.upload_s is not None and phases.download_s is not None
    assert phases.server_wait_s is not None
    assert min(phases.upload_s, phases.server_wait_s, phases.download_s) >= 0
    assert phases.upload_s + phases.server_wait_s + phases.download_s == pytest.approx(result.e2e_s, abs=1e-9)
    # The server's generation happens while the client waits, not while it uploads or downloads.
    assert phases.server_wait_s > phases.upload_s and phases.server_wait_s > phases.download_s
    if api == "sync":
        assert phases.queue_s is None
    else:
        assert phases.queue_s is not None and -1.0 < phases.queue_s < 1.5  # whole-second timestamps, no queue
    assert result.to_dict()["phases"] == phases.to_dict()
