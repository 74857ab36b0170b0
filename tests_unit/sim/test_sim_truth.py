"""The simulator tells the truth about what it rendered, and resolves requests as vLLM-Omni 0.30.0 does.

- H3's worker-side resolution (task, references, fps, frame count, canvas)
  and the job as POST returns it, against the cases read from upstream's
  ``encoder_processing.py``, ``preprocessing.py`` and ``helpers.py``;
- the request shapes of upstream's benchmark client
  (``benchmarks/diffusion/backends.py``), sent the way it sends them (every
  value through ``str()``, then polling, fetching and deleting the job),
  with every field of the last poll checked against the probed MP4;
- a request identical to an earlier one gets exactly the bytes a new render
  writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from h3bench import media
from h3bench.h3 import PIPELINE_TIMING_KEYS, STAGE_KEYS, audio_sample_count
from h3bench.sim.content import ContentSpec, Perturbation, content_key, render
from h3bench.sim.forms import Form, References, SimRequest
from h3bench.sim.jobs import queued_job
from h3bench.sim.profile import SimProfile
from h3bench.sim.shape import Shape, resolve_shape
from h3bench.sim.worker import GenerationError
from tests_unit.sim_server import FAST, SimServer, error_message, form, make_reference

PROMPT = "a red fox crosses the snow"
ONE_VIDEO = References(images=0, videos=1, audios=0, digests=("video:ab",))


def request(extra: dict[str, Any] | None = None, refs: References = ONE_VIDEO, **fields: Any) -> SimRequest:
    return SimRequest(Form(prompt=PROMPT, **fields), extra or {}, refs, seed=0)


# -- H3's resolution, without a server ---------------------------------------------


@pytest.mark.parametrize(
    ("fields", "extra", "shape"),
    [
        pytest.param({}, {}, Shape(1344, 768, 124), id="nothing-given"),
        pytest.param({"seconds": "5"}, {}, Shape(1344, 768, 124), id="seconds-5"),
        pytest.param({}, {"duration": 15.0}, Shape(1344, 768, 362), id="duration-15"),
        pytest.param({"seconds": "5"}, {"duration": 15}, Shape(1344, 768, 362), id="extra-duration-wins"),
        pytest.param({}, {"duration": 4}, Shape(1344, 768, 107), id="duration-4"),
        pytest.param({}, {"duration_seconds": 8, "duration": 15}, Shape(1344, 768, 192), id="duration-seconds-first"),
        pytest.param({}, {"target": {"duration_seconds": 10}}, Shape(1344, 768, 243), id="target-first"),
        pytest.param({"num_frames": 121}, {}, Shape(1344, 768, 124), id="num-frames-snapped-up"),
        pytest.param({"num_frames": 346}, {}, Shape(1344, 768, 362), id="num-frames-346"),
        pytest.param({"num_frames": 345}, {}, Shape(1344, 768, 345), id="num-frames-345-is-17n-plus-5"),
        pytest.param({"num_frames": 121, "seconds": "8"}, {}, Shape(1344, 768, 192), id="duration-over-num-frames"),
        pytest.param({"num_frames": 1}, {}, Shape(1344, 768, 124), id="warmup-one-frame"),
        pytest.param({"fps": 24.5}, {}, Shape(1344, 768, 124), id="fps-int-24"),
        pytest.param({"width": 1350, "height": 770}, {}, Shape(1344, 768, 124), id="floored-to-32"),
        pytest.param({"width": 64}, {}, Shape(1344, 768, 124), id="width-alone-ignored"),
        pytest.param({"size": "256x160", "width": 64, "height": 64}, {}, Shape(256, 160, 124), id="size-wins"),
        pytest.param({"aspect_ratio": "1:1"}, {}, Shape(768, 768, 124), id="square"),
        pytest.param({}, {"aspect_ratio": "9:16"}, Shape(768, 1344, 124), id="portrait"),
        pytest.param({"aspect_ratio": "auto"}, {}, Shape(1344, 768, 124), id="auto"),
        pytest.param({"aspect_ratio": "2:1", "width": 256, "height": 128}, {"aspect_ratio": 1.0}, Shape(256, 128, 124),
                     id="extra-over-form"),
    ],
)
def test_h3_resolves_what_it_renders(fields: dict, extra: dict, shape: Shape) -> None:
    assert resolve_shape(request(extra, **fields)) == shape


@pytest.mark.parametrize(
    ("fields", "extra", "refs", "message"),
    [
        pytest.param({}, {}, References(0, 0, 0, ()), "ref2va requires at least one image or video reference", id="t2v"),
        pytest.param({}, {}, References(0, 0, 1, ()), "ref2va requires at least one image or video reference",
                     id="audio-only"),
        pytest.param({}, {}, References(0, 4, 0, ()), "ref2va accepts at most 3 video references", id="4-videos"),
        pytest.param({}, {}, References(10, 0, 0, ()), "ref2va accepts at most 9 image references", id="10-images"),
        pytest.param({}, {}, References(9, 3, 1, ()), "ref2va accepts at most 12 total references", id="13-refs"),
        pytest.param({}, {"task": "t2va"}, ONE_VIDEO,
                     "checkpoint partition 'ref2va' supports ['ref2va'], got task='t2va'", id="task"),
        pytest.param({"fps": 30}, {}, ONE_VIDEO, "MiniMax H3 output fps is fixed at 24", id="fps-30"),
        pytest.param({"num_frames": 95}, {}, ONE_VIDEO,
                     "MiniMax H3 output duration must be in [4, 15] seconds, got 3.958", id="num-frames-95"),
        pytest.param({"num_frames": 362}, {}, ONE_VIDEO, "in [4, 15] seconds, got 15.083", id="num-frames-362"),
        pytest.param({"seconds": "3"}, {}, ONE_VIDEO, "in [4, 15] seconds, got 3.0", id="seconds-3"),
        pytest.param({}, {"duration": 16}, ONE_VIDEO, "in [4, 15] seconds, got 16.0", id="duration-16"),
        pytest.param({}, {"duration": "five"}, ONE_VIDEO, "in [4, 15] seconds, got 'five'", id="duration-text"),
        pytest.param({}, {"duration": True}, ONE_VIDEO, "in [4, 15] seconds, got True", id="duration-bool"),
        pytest.param({}, {"target": [5]}, ONE_VIDEO, "extra_args['target'] must be an object", id="target"),
        pytest.param({}, {"long_video": True}, ONE_VIDEO, "does not simulate long_video", id="long-video"),
        pytest.param({"aspect_ratio": "2:1"}, {}, ONE_VIDEO,
                     "MiniMax H3 aspect_ratio must be one of 21:9, 16:9, 4:3, 1:1, 3:4, 9:16, got '2:1'", id="ratio"),
        pytest.param({"short_edge": 512}, {}, ONE_VIDEO, "target.short_edge must be 768, got 512", id="short-edge"),
        pytest.param({"width": 4096, "height": 512}, {}, ONE_VIDEO, "canvas aspect ratio must be in [1:4, 4:1]",
                     id="canvas-8-to-1"),
        pytest.param({"width": 20, "height": 64}, {}, ONE_VIDEO, "invalid MiniMax H3 canvas 0x64", id="canvas-0"),
        pytest.param({"size": "8192x4096"}, {}, ONE_VIDEO, "at most 4096 pixels a side", id="sim-side-limit"),
    ],
)
def test_h3_refuses_with_upstreams_message(fields: dict, extra: dict, refs: References, message: str) -> None:
    with pytest.raises(GenerationError) as caught:
        resolve_shape(request(extra, refs, **fields))
    assert message in str(caught.value) and caught.value.status_code == 400


@pytest.mark.parametrize(
    ("fields", "queued"),
    [
        pytest.param({}, {"seconds": "4", "size": None, "fps": 24.0, "num_frames": None, "duration_s": None}, id="none"),
        pytest.param({"seconds": "5"}, {"seconds": "5", "fps": 24.0, "num_frames": 120, "duration_s": 5.0}, id="seconds"),
        pytest.param({"num_frames": 121}, {"seconds": "4", "num_frames": 121, "duration_s": 121 / 24}, id="frames"),
        pytest.param({"seconds": "5", "fps": 24.5}, {"fps": 24.5, "num_frames": 122, "duration_s": 5.0}, id="fps"),
        pytest.param({"size": "1350x770", "width": 8}, {"size": "1350x770"}, id="size-echoed"),
        pytest.param({"width": 256, "height": 160}, {"size": None}, id="no-size-field"),
    ],
)
def test_queued_job_echoes_the_request(fields: dict, queued: dict) -> None:
    job = queued_job("MiniMaxAI/MiniMax-H3", request(**fields)).model_dump()
    assert {name: job[name] for name in queued} == queued
    assert (job["status"], job["progress"], job["stage_durations"], job["peak_memory_mb"]) == ("queued", 0, {}, 0.0)


# -- upstream's benchmark client against a server ------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with SimServer(tmp_path_factory.mktemp("sim-logs"), *FAST, "--process-seed", "11") as sim:
        yield sim.wait_ready()


@pytest.fixture(scope="module")
def http(server: SimServer):
    with server.http() as client:
        yield client


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_reference(tmp_path_factory.mktemp("refs"))


def benchmark_client(http: httpx.Client, fields: dict[str, Any], files: list | None = None) -> tuple[dict, bytes | None]:
    """One request as upstream's ``backends.py`` makes it; returns the last poll's JSON and the MP4 (None if failed).

    Values go out through ``str()``; the job is polled until it completes or
    fails (any non-200 poll ends it, as there), fetched, and always deleted.
    """
    created = http.post("/v1/videos", data={name: str(value) for name, value in fields.items()}, files=files)
    assert created.status_code == 200, created.text
    job = created.json()
    assert {"id", "status"} <= job.keys() and job["progress"] == 0
    try:
        deadline = time.monotonic() + 60
        while True:
            time.sleep(0.02)  # upstream sleeps 2 s before each poll
            poll = http.get(f"/v1/videos/{job['id']}")
            state = poll.json()
            if poll.status_code != 200 or state["status"] in ("completed", "failed"):
                break
            assert state["progress"] == 0 and time.monotonic() < deadline  # 0 until done, as upstream
        if poll.status_code != 200:
            assert http.get(f"/v1/videos/{job['id']}/content").status_code == 422
            return state, None
        content = http.get(f"/v1/videos/{job['id']}/content")
        assert content.status_code == 200
        return state, content.content
    finally:
        assert http.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True


def check_against_the_mp4(state: dict, mp4: bytes, path: Path, width: int, height: int) -> None:
    """Every field of a completed job that describes the output, against the probed file."""
    path.write_bytes(mp4)
    probed = media.probe(path)
    video, audio = probed.video, probed.audio
    assert video is not None and audio is not None
    assert state["status"] == "completed" and state["progress"] == 100 and state["error"] is None
    assert state["num_frames"] == video.frames == video.declared_frames
    assert state["fps"] == float(video.avg_frame_rate) == 24.0
    assert state["duration_s"] == pytest.approx(video.frames / float(video.avg_frame_rate))
    assert (video.width, video.height, video.codec, video.pix_fmt) == (width, height, "h264", "yuv420p")
    assert (audio.codec, audio.sample_rate, audio.channels) == ("aac", 32_000, 2)
    expected = audio_sample_count(video.frames)
    assert audio.duration_s == pytest.approx(expected / 32_000, abs=1e-3)
    assert set(state["stage_durations"]) == {*STAGE_KEYS, *PIPELINE_TIMING_KEYS}  # upstream's API layer adds its own
    assert all(state["stage_durations"][k] > 0 for k in STAGE_KEYS)
    assert state["inference_time_s"] >= sum(state["stage_durations"][k] for k in STAGE_KEYS[:4])
    assert state["peak_memory_mb"] > 1000
    assert state["file_name"] == f"{state['id']}.mp4" and state["completed_at"] >= state["created_at"]


# The benchmark client's fields: width and height only together, num_frames and fps only if truthy.
CLIENT_FIELDS = {"prompt": PROMPT, "width": 256, "height": 160, "num_inference_steps": 50, "seed": 0, "fps": 24}


def data_url(path: Path) -> str:
    return json.dumps([{"video_url": "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode()}])


def test_t2v_without_references_fails_like_a_ref2va_server(http: httpx.Client) -> None:
    state, mp4 = benchmark_client(http, CLIENT_FIELDS)
    assert mp4 is None and state["status"] == "failed"
    assert state["error"] == {"code": 400, "message": "ref2va requires at least one image or video reference"}
    assert (state["progress"], state["stage_durations"], state["peak_memory_mb"]) == (0, {}, 0.0)
    sync = http.post("/v1/videos/sync", data={k: str(v) for k, v in CLIENT_FIELDS.items()})
    assert sync.status_code == 400
    assert error_message(sync) == "ref2va requires at least one image or video reference"


def test_older_client_uploads_input_reference_and_num_frames(http: httpx.Client, reference: Path, tmp_path: Path) -> None:
    upload = [("input_reference", (reference.name, reference.read_bytes(), "video/mp4"))]
    state, mp4 = benchmark_client(http, {**CLIENT_FIELDS, "num_frames": 121}, upload)
    assert mp4 is not None and state["num_frames"] == 124  # 121 frames asked for, snapped up to 17n + 5
    assert (state["seconds"], state["size"]) == ("4", None)  # nothing sent; upstream never updates them
    check_against_the_mp4(state, mp4, tmp_path / "v2v.mp4", 256, 160)


def test_newer_client_sends_video_reference_as_a_data_url(http: httpx.Client, reference: Path, tmp_path: Path) -> None:
    # Sides that are not multiples of 32 are floored, as H3 does.
    state, mp4 = benchmark_client(http, {**CLIENT_FIELDS, "width": 270, "height": 170, "video_reference": data_url(reference)})
    assert mp4 is not None and state["num_frames"] == 124  # Ref2VA's default length
    check_against_the_mp4(state, mp4, tmp_path / "h3.mp4", 256, 160)


def test_extra_params_as_a_json_string_sets_the_duration(http: httpx.Client, reference: Path, tmp_path: Path) -> None:
    fields = {**CLIENT_FIELDS, "video_reference": data_url(reference), "extra_params": json.dumps({"duration": 8.0})}
    state, mp4 = benchmark_client(http, fields)
    assert mp4 is not None and state["num_frames"] == 192
    check_against_the_mp4(state, mp4, tmp_path / "8s.mp4", 256, 160)
    # A dict put in extra_body goes out as its Python repr, which is not JSON.
    refused = http.post("/v1/videos", data={**fields, "extra_params": str({"duration": 8.0})})
    assert refused.status_code == 400 and error_message(refused) == "Invalid JSON in form field."


def test_h3_checks_fail_an_accepted_job_and_the_sync_request_with_400(http: httpx.Client, reference: Path) -> None:
    upload = [("input_reference", (reference.name, reference.read_bytes(), "video/mp4"))]
    state, mp4 = benchmark_client(http, {**CLIENT_FIELDS, "fps": 30}, upload)
    assert mp4 is None and state["error"] == {"code": 400, "message": "MiniMax H3 output fps is fixed at 24"}
    assert state["fps"] == 30.0  # a failed job keeps what was asked for
    sync = http.post("/v1/videos/sync", data={**{k: str(v) for k, v in CLIENT_FIELDS.items()}, "num_frames": "95"},
                     files=upload)
    assert sync.status_code == 400
    assert error_message(sync) == "MiniMax H3 output duration must be in [4, 15] seconds, got 3.958"


def test_sync_headers_describe_the_request(http: httpx.Client, reference: Path, tmp_path: Path) -> None:
    fields = {**CLIENT_FIELDS, "video_reference": data_url(reference)}
    response = http.post("/v1/videos/sync", data={k: str(v) for k, v in fields.items()})
    assert response.status_code == 200, response.text
    stages = json.loads(response.headers["x-stage-durations"])
    assert set(stages) == {*STAGE_KEYS, *PIPELINE_TIMING_KEYS}
    assert float(response.headers["x-inference-time-s"]) >= sum(stages[k] for k in STAGE_KEYS[:4]) - 0.002
    assert response.headers["x-model"] == "MiniMaxAI/MiniMax-H3"
    path = tmp_path / "sync.mp4"
    path.write_bytes(response.content)
    assert media.probe(path).video.frames == 124


def test_an_identical_request_gets_the_bytes_a_new_render_writes(
    server: SimServer, http: httpx.Client, reference: Path, tmp_path: Path
) -> None:
    """Rank 0 copies its earlier render; the copy equals a render of the same content in this process."""
    upload = [("input_references", (reference.name, reference.read_bytes(), "video/mp4"))]
    fields = {**CLIENT_FIELDS, "prompt": "reuse", "extra_params": json.dumps({"duration": 4.0})}
    first, second = (http.post("/v1/videos/sync", data={k: str(v) for k, v in fields.items()}, files=upload)
                     for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    digest = "video:" + hashlib.sha256(reference.read_bytes()).hexdigest()
    key = content_key(seed=0, prompt="reuse", reference_digests=[digest], width=256, height=160, frames=107)
    fresh = render(tmp_path / "fresh.mp4", ContentSpec(256, 160, 107, audio_sample_count(107), key),
                   Perturbation(run_to_run_noise=1.0, process_seed=11))
    assert fresh.path.read_bytes() == second.content
    completed = rf"request {second.headers['x-request-id']}: completed .*copied the render of an identical earlier request"
    assert re.search(completed, server.log)


# -- the latency is the profile -------------------------------------------------------


def sync_request(tmp_path: Path, reference: Path, time_scale: float) -> tuple[httpx.Response, float, str]:
    """One 4 s request to a server without jitter; the response, the plan's total seconds and the server log."""
    planned = SimProfile(time_scale=time_scale, jitter_cv=0.0, compile_s=0.0).plan(107, np.random.default_rng(0)).total_s
    flags = ("--time-scale", str(time_scale), "--jitter-cv", "0", "--compile-s", "0")
    upload = [("input_references", (reference.name, reference.read_bytes(), "video/mp4"))]
    with SimServer(tmp_path, *flags) as sim, sim.wait_ready().http() as client:
        response = client.post("/v1/videos/sync", data=form(4.0), files=upload)
    assert response.status_code == 200, response.text
    return response, planned, sim.log


def test_a_request_never_takes_less_than_its_modelled_time(tmp_path: Path, reference: Path) -> None:
    """The stages sleep to the plan's deadlines: the server's time is the plan, plus only what overran it."""
    response, planned, _ = sync_request(tmp_path, reference, 0.0005)
    assert float(response.headers["x-inference-time-s"]) >= planned - 0.0005  # the header has 3 decimals


def test_a_render_that_overruns_the_plan_is_logged(tmp_path: Path, reference: Path) -> None:
    """With nothing modelled, rendering cannot fit, and the log says by how much it overran."""
    response, planned, log = sync_request(tmp_path, reference, 0.0)
    assert planned == 0.0
    overrun = re.search(r"rendering overran the modelled stages by (\d+\.\d+) s", log)
    assert overrun is not None and float(overrun.group(1)) <= float(response.headers["x-inference-time-s"]) + 0.001
