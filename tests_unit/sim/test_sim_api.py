"""The simulator as a real server process: vLLM-Omni's API, its errors, the profile, failure injection.

The servers come from :mod:`tests_unit.sim_server`. One shared server serves
the API tests; each failure mode gets its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import psutil
import pytest

from h3bench import media
from h3bench.errors import RunSpecError, UsageError
from h3bench.h3 import PIPELINE_TIMING_KEYS, STAGE_KEYS, frame_count
from h3bench.sim import parse_args
from h3bench.sim.profile import SimProfile, load_profile
from tests_unit.sim_server import FAST, SIZE, SimServer, error_message, files, form, make_reference, running, wait_job


@pytest.fixture(scope="module")
def sim_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim-logs")


@pytest.fixture(scope="module")
def sim(sim_logs: Path):
    with SimServer(sim_logs, *FAST, "--process-seed", "7") as server:
        yield server.wait_ready()


@pytest.fixture(scope="module")
def client(sim: SimServer):
    with sim.http() as http:
        yield http


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_reference(tmp_path_factory.mktemp("refs"))

# -- the API on the shared server -------------------------------------------------


def test_health_and_models(client: httpx.Client) -> None:
    health = client.get("/health")
    # Upstream's body (vllm_omni api_server.health), which the conformance suite compares.
    assert health.status_code == 200 and health.json() == {"status": "healthy"}
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [card["id"] for card in models["data"]] == ["MiniMaxAI/MiniMax-H3"]


def test_sync_returns_the_mp4_and_its_headers(client: httpx.Client, reference: Path, tmp_path: Path) -> None:
    response = client.post("/v1/videos/sync", data=form(), files=files(reference))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "video/mp4"
    assert response.headers["x-request-id"].startswith("video_sync-")
    assert response.headers["x-model"] == "MiniMaxAI/MiniMax-H3"
    assert float(response.headers["x-inference-time-s"]) > 0
    assert float(response.headers["x-peak-memory-mb"]) > 1000
    raw_stages = response.headers["x-stage-durations"]
    assert " " not in raw_stages  # compact JSON
    stages = json.loads(raw_stages)
    assert set(stages) == {*STAGE_KEYS, *PIPELINE_TIMING_KEYS}  # request mode: no denoise_step, no post_decode
    # Upstream's API layer's milliseconds: the stage's generation covers the profiler's stages.
    assert stages["stage_0_gen_ms"] / 1000 >= sum(stages[k] for k in STAGE_KEYS[:4]) - 0.002
    assert stages["MiniMaxH3Pipeline.diffuse"] > 0
    decode = stages["MiniMaxH3Pipeline.video_vae.decode_latent"] + stages["MiniMaxH3Pipeline.audio_vae.decode_latent"]
    assert stages["MiniMaxH3Pipeline.decode"] >= decode
    top_level = ("encode_prompt", "_encode_local_media", "diffuse", "decode")
    stages_s = sum(seconds for key, seconds in stages.items() if key.rpartition(".")[2] in top_level)
    assert float(response.headers["x-inference-time-s"]) >= stages_s - 0.002  # the header has 3 decimals
    path = tmp_path / "out.mp4"
    path.write_bytes(response.content)
    probed = media.probe(path)
    assert (probed.video.frames, probed.video.width, probed.video.height) == (107, 256, 160)
    assert (probed.audio.sample_rate, probed.audio.channels) == (32_000, 2)


def test_async_job_lifecycle(client: httpx.Client, reference: Path, tmp_path: Path) -> None:
    created = client.post("/v1/videos", data=form(5.0, quality="high"), files=files(reference))
    assert created.status_code == 200, created.text
    job = created.json()
    assert re.fullmatch(r"video_gen_[0-9a-f]{32}", job["id"])
    assert job["object"] == "video" and job["status"] in ("queued", "in_progress") and job["progress"] == 0
    assert (job["model"], job["size"], job["quality"]) == ("MiniMaxAI/MiniMax-H3", SIZE, "high")
    assert job["prompt"] == form()["prompt"]
    assert job["seconds"] == "4"  # upstream's default when the request has no seconds
    assert job["media_type"] == "video/mp4" and job["completed_at"] is None and job["error"] is None
    # Queued, the job says what the request asked for: the duration went in extra_params, so no frame count.
    assert (job["fps"], job["num_frames"], job["duration_s"]) == (24.0, None, None)

    done = wait_job(client, job["id"]).json()
    assert done["status"] == "completed" and done["progress"] == 100
    assert done["completed_at"] >= done["created_at"]
    assert done["inference_time_s"] > 0 and done["peak_memory_mb"] > 1000
    assert set(done["stage_durations"]) == {*STAGE_KEYS, *PIPELINE_TIMING_KEYS}
    assert (done["num_frames"], done["fps"], done["duration_s"]) == (124, 24, pytest.approx(124 / 24))
    assert (done["size"], done["seconds"]) == (SIZE, "4")  # never updated, as upstream
    assert done["file_name"] == f"{job['id']}.mp4"

    content = client.get(f"/v1/videos/{job['id']}/content")
    assert content.status_code == 200 and content.headers["content-type"] == "video/mp4"
    path = tmp_path / "job.mp4"
    path.write_bytes(content.content)
    assert media.probe(path).video.frames == 124

    assert job["id"] in [item["id"] for item in client.get("/v1/videos").json()["data"]]
    deleted = client.delete(f"/v1/videos/{job['id']}")
    assert deleted.json() == {"id": job["id"], "deleted": True, "object": "video.deleted"}
    for response in (
        client.get(f"/v1/videos/{job['id']}"),
        client.get(f"/v1/videos/{job['id']}/content"),
        client.delete(f"/v1/videos/{job['id']}"),
    ):
        assert response.status_code == 404
        assert error_message(response) == "Video not found"


def test_list_orders_and_pages(client: httpx.Client, reference: Path) -> None:
    ids = [client.post("/v1/videos", data=form(), files=files(reference)).json()["id"] for _ in range(2)]
    for video_id in ids:
        wait_job(client, video_id)
    listed = client.get("/v1/videos", params={"order": "asc"}).json()
    order = [item["id"] for item in listed["data"]]
    assert order.index(ids[0]) < order.index(ids[1])
    assert listed["object"] == "list" and listed["first_id"] == order[0] and listed["last_id"] == order[-1]
    page = client.get("/v1/videos", params={"order": "asc", "limit": 1, "after": ids[0]}).json()
    assert [item["id"] for item in page["data"]] == [order[order.index(ids[0]) + 1]]
    assert client.get("/v1/videos", params={"limit": 101}).status_code == 400


def test_same_request_same_bytes_and_seed_changes_them(client: httpx.Client, reference: Path) -> None:
    first = client.post("/v1/videos/sync", data=form(), files=files(reference)).content
    second = client.post("/v1/videos/sync", data=form(), files=files(reference)).content
    other = client.post("/v1/videos/sync", data=form(seed="1"), files=files(reference)).content
    assert first == second
    assert first != other


def big_upload(name: str, size: int, mime: str) -> list:
    return [("input_references", (name, b"\0" * size, mime))]


@pytest.mark.parametrize(
    ("fields", "uploads", "message"),
    [
        pytest.param({"extra_params": "{not json"}, None, "Invalid JSON in form field.", id="bad-json"),
        pytest.param({"extra_params": str({"duration": 5.0})}, None, "Invalid JSON in form field.", id="python-repr"),
        pytest.param({"extra_params": "[1, 2]"}, None, "Invalid JSON in form field: expected dict, got list.", id="list"),
        pytest.param({"image_reference": "{"}, None, "Invalid JSON in form field.", id="bad-json-ref"),
        pytest.param({"audio_reference": json.dumps({"url": "x"})}, None, "needs one of audio_url", id="ref-keys"),
        pytest.param({"model": "other/model"}, None, "Model mismatch: request specifies 'other/model'", id="model"),
        # FastAPI's layer, in vLLM's validation format (param asserted below).
        pytest.param({"seconds": "5.0"}, None, "'loc': 'body.seconds', 'msg': \"String should match pattern",
                     id="seconds-pattern"),
        pytest.param({"size": "250 x 160"}, None, "'loc': 'body.size', 'msg': \"String should match pattern",
                     id="size-pattern"),
        pytest.param({"fps": "0.5"}, None, "'loc': 'body.fps', 'msg': 'Input should be greater than or equal to 1'",
                     id="fps-below-1"),
        pytest.param({"prompt": None}, None, "{'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'",
                     id="no-prompt"),
        pytest.param({"prompt": ""}, None, "{'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'",
                     id="empty-prompt"),
        # The request model's layer: pydantic's own message.
        pytest.param({"num_inference_steps": "0"}, None, "1 validation error for VideoGenerationRequest\nnum_inference_steps",
                     id="steps"),
        pytest.param({"quality": "ultra"}, None, "quality must be one of ['lossless', 'high'], got 'ultra'",
                     id="quality"),
        pytest.param(None, big_upload("ref.avi", 10, "video/x-msvideo"), "MP4 or MOV file.", id="video-suffix"),
        pytest.param(None, big_upload("ref.ogg", 10, "audio/ogg"), "WAV or MP3 file.", id="audio-suffix"),
        pytest.param(None, big_upload("ref.mp4", 50 * 2**20 + 1, "video/mp4"), "exceeds the 50 MiB", id="video-limit"),
        pytest.param(None, big_upload("ref.wav", 15 * 2**20 + 1, "audio/wav"), "exceeds the 15 MiB", id="audio-limit"),
        pytest.param(None, big_upload("ref.mp4", 10, "video/mp4") * 13, "at most 12 total", id="too-many"),
        pytest.param(
            None,
            [*big_upload("ref.mp4", 10, "video/mp4"), ("input_reference", ("one.mp4", b"0", "video/mp4"))],
            "input_references alone",
            id="both-reference-kinds",
        ),
    ],
)
def test_bad_requests_get_400_with_a_message(
    client: httpx.Client, fields: dict | None, uploads: list | None, message: str
) -> None:
    data = {key: value for key, value in {**form(), **(fields or {})}.items() if value is not None}
    for endpoint in ("/v1/videos", "/v1/videos/sync"):
        response = client.post(endpoint, data=data, files=uploads or big_upload("r.mp4", 1, "video/mp4"))
        assert response.status_code == 400, response.text
        assert message in error_message(response)
        error = response.json()["error"]
        if "'loc': 'body." in message:  # vLLM names the first failing form field
            assert error["param"] == "body." + message.split("'loc': 'body.")[1].split("'")[0]
            assert error["type"] == "Bad Request"
        elif "VideoGenerationRequest" in message or "quality" in message:
            assert error["type"] == "BadRequestError" and error["param"] is None


def test_json_bodies_and_sdk_spread_dicts_are_refused(client: httpx.Client) -> None:
    # A JSON body has no form fields, so no prompt, as upstream answers it (it used to be the simulator's own
    # "takes multipart/form-data"; the conformance suite holds the simulator to upstream's answer).
    as_json = client.post("/v1/videos", json={"prompt": "x"})
    assert as_json.status_code == 400 and as_json.json()["error"]["param"] == "body.prompt"
    assert "Field required" in error_message(as_json)
    spread = client.post("/v1/videos", data={"prompt": "x", "extra_params[task]": "ref2va"})
    assert spread.status_code == 400 and "json.dumps" in error_message(spread)


# The SDK deprecates its videos resource along with OpenAI's hosted Sora; vLLM-Omni clients still use it.
@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
def test_openai_sdk_works_unchanged(sim: SimServer, reference: Path, tmp_path: Path) -> None:
    sdk = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0)
    extra_params = {"task": "ref2va", "duration": 5.0, "audio_flow_shift": 3.0}
    with reference.open("rb") as handle:
        video = sdk.videos.create(
            model="MiniMaxAI/MiniMax-H3",
            prompt="a red fox crosses the snow",
            input_reference=handle,
            size="256x160",  # type: ignore[arg-type]  # the SDK lists Sora's sizes
            extra_body={"extra_params": json.dumps(extra_params), "seed": 0},
        )
    assert video.id.startswith("video_gen_") and video.status in ("queued", "in_progress")
    deadline = time.monotonic() + 30
    while (video := sdk.videos.retrieve(video.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert video.status == "completed" and video.progress == 100
    path = tmp_path / "sdk.mp4"
    sdk.videos.download_content(video.id).write_to_file(path)
    assert media.probe(path).video.frames == 124

    # A dict in extra_body is spread into extra_params[...] fields, which vLLM-Omni would ignore.
    with pytest.raises(openai.BadRequestError, match="json.dumps"):
        sdk.videos.create(prompt="x", extra_body={"extra_params": extra_params})
    with pytest.raises(openai.NotFoundError):
        sdk.videos.retrieve("video_gen_missing")
    sdk.close()


# -- the profile -------------------------------------------------------------------


def test_latency_model_reproduces_the_950pr_table() -> None:
    """With no jitter the modelled stages sum to the recipe's ref2va lossless E2E at 5 s and 15 s.

    Within 0.5 s: the table's per-step column is rounded (49 x 119.33 = 5847.17 against a DiT total of 5847.57).
    """
    profile = SimProfile(time_scale=1.0, jitter_cv=0.0, compile_s=0.0)
    rng = np.random.default_rng(0)
    for duration, e2e in ((5, 745.43), (15, 5887.24)):
        plan = profile.plan(frame_count(duration), rng)
        assert plan.total_s == pytest.approx(e2e, abs=0.5)
    # The lossy row, copied into a candidate's anchors, is about twice as fast.
    lossy = SimProfile(time_scale=1.0, jitter_cv=0.0, step_s=(7.91, 61.24), compile_s=0.0)
    assert sum(lossy.plan(124, rng).step_s) == pytest.approx(387.6, abs=0.5)
    assert profile.plan(124, rng, nth=1).total_s == pytest.approx(745.43, abs=0.1)
    compiled = SimProfile(time_scale=1.0, jitter_cv=0.0, compile="first_request").plan(124, rng, nth=1)
    assert compiled.total_s == pytest.approx(745.43 + 30.0, abs=0.1)  # compile_s in the first request


def test_jitter_has_the_configured_variation() -> None:
    profile = SimProfile(time_scale=1.0, jitter_cv=0.05)
    rng = np.random.default_rng(1)
    diffuse = np.array([sum(profile.plan(124, rng).step_s) for _ in range(4000)])
    assert diffuse.mean() == pytest.approx(49 * 14.9, rel=0.01)
    assert diffuse.std() / diffuse.mean() == pytest.approx(0.05, rel=0.1)
    fixed = SimProfile(steps=10, jitter_cv=0.0).plan(124, rng)
    assert fixed.step_s == SimProfile(jitter_cv=0.0).plan(124, rng, num_inference_steps=11).step_s
    assert len(fixed.step_s) == 10


def test_profile_loads_from_a_runspec_table_and_flags_override(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('[arms.candidate.sim]\nstep_s = [7.91, 61.24]\ntime_scale = 0.01\nfail_request = 3\n')
    profile = load_profile(spec, "arms.candidate.sim")
    assert (profile.step_s, profile.time_scale, profile.fail_request) == ((7.91, 61.24), 0.01, 3)
    table = ["--profile", str(spec), "--profile-table", "arms.candidate.sim"]
    args = parse_args(["--port", "0", *table, "--time-scale", "0.5", "--cache-outputs"])
    assert (args.port, args.profile.time_scale, args.profile.cache_outputs) == (0, 0.5, True)
    assert args.profile.step_s == (7.91, 61.24) and args.profile.fail_request == 3


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("time_scale = -1.0", "time_scale"),
        ("workers = 0", "workers"),
        ("step_s = [1.0]", "step_s"),
        ("cache_outputs = 'yes'", "cache_outputs"),
        ("crash_request = 0", "crash_request"),
        ("no_such_knob = 1", "no_such_knob"),
    ],
)
def test_bad_profiles_name_the_field(tmp_path: Path, toml: str, field: str) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(toml + "\n")
    with pytest.raises(RunSpecError) as caught:
        load_profile(path)
    assert caught.value.field_path.startswith(field) and field in str(caught.value)


def test_bad_profile_paths_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunSpecError, match="no table"):
        (tmp_path / "p.toml").write_text("[arms]\n")
        load_profile(tmp_path / "p.toml", "arms.baseline.sim")
    with pytest.raises(UsageError, match="needs --profile"):
        parse_args(["--profile-table", "arms.x.sim"])
    from h3bench.sim import main

    assert main(["--audio-gain", "0"]) == 2
    assert "audio_gain" in capsys.readouterr().err
    assert main(["--process-seed", "1", "--block-seed", "0"]) == 2
    assert "process_seed (one seed for every process) or block_seed (one per block), not both" in capsys.readouterr().err


def test_block_seed_fixes_one_seed_per_block() -> None:
    seeded = SimProfile(block_seed=0)
    assert seeded.seed_for_block("5s-clean-1A-baseline") == seeded.seed_for_block("5s-clean-1A-baseline")
    seeds = {seeded.seed_for_block(f"5s-clean-{p}") for p in ("1A-baseline", "2B-clean", "3B-clean", "4A-baseline")}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert SimProfile(block_seed=1).seed_for_block("5s-clean-1A-baseline") not in seeds
    assert SimProfile(process_seed=7).seed_for_block("5s-clean-1A-baseline") == 7
    assert SimProfile().seed_for_block("5s-clean-1A-baseline") is None  # drawn at random by the server


# -- processes and failure injection -------------------------------------------------


def test_start_ready_stop_and_every_worker_exits(sim_logs: Path) -> None:
    with SimServer(sim_logs, *FAST, "--workers", "3") as server:
        server.wait_ready()
        workers = server.worker_pids()
        assert len(workers) == 3
        assert set(workers) <= {child.pid for child in psutil.Process(server.proc.pid).children()}
        assert httpx.get(f"{server.url}/health", trust_env=False).status_code == 200
        code, elapsed = server.stop()
    assert code == 0 and elapsed < 5
    assert not any(running(pid) for pid in workers)
    assert "shutdown complete" in server.log
    assert all(f"(pid {pid}) exited" in server.log for pid in workers)


def test_port_in_use_exits_1(sim_logs: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = SimServer(sim_logs, *FAST, port=holder.getsockname()[1])
        assert server.proc.wait(30) == 1
    assert "cannot listen on 127.0.0.1" in server.log and "in use" in server.log


def test_startup_error_exits_1_with_its_message(sim_logs: Path) -> None:
    message = "conflicting offload settings: --enable-distributed-layerwise-offload and --diffusion-offload-config"
    server = SimServer(sim_logs, *FAST, "--startup-error", message)
    assert server.proc.wait(60) == 1
    assert f"startup failed: worker rank 0 failed at startup: {message}" in server.log
    assert not any(running(pid) for pid in server.worker_pids())


def test_sigterm_during_startup_stops_the_workers(sim_logs: Path) -> None:
    server = SimServer(sim_logs, "--time-scale", "1", "--load-s", "60")
    deadline = time.monotonic() + 30
    while len(server.worker_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    code, elapsed = server.stop()
    assert code == 1 and elapsed < 5
    assert "interrupted by SIGTERM during startup" in server.log
    assert not any(running(pid) for pid in server.worker_pids())


def test_fail_request_gives_500_on_the_nth_request(sim_logs: Path, reference: Path) -> None:
    with SimServer(sim_logs, *FAST, "--fail-request", "2") as server, server.wait_ready().http() as http:
        assert http.post("/v1/videos/sync", data=form(), files=files(reference)).status_code == 200
        job = http.post("/v1/videos", data=form(), files=files(reference)).json()
        failed = wait_job(http, job["id"])
        assert failed.status_code == 500  # a failed job comes back with its error's status
        assert failed.json()["status"] == "failed" and failed.json()["error"]["code"] == 500
        assert "injected failure" in failed.json()["error"]["message"]
        content = http.get(f"/v1/videos/{job['id']}/content")
        assert content.status_code == 422
        assert http.post("/v1/videos/sync", data=form(), files=files(reference)).status_code == 200
        assert http.get("/health").status_code == 200
    assert "(profile fail_request)" in server.log


def test_worker_crash_fails_the_request_and_the_engine(sim_logs: Path, reference: Path) -> None:
    with SimServer(sim_logs, *FAST, "--crash-request", "1") as server, server.wait_ready().http() as http:
        crashed_pid = server.worker_pids()[-1]
        response = http.post("/v1/videos/sync", data=form(), files=files(reference))
        assert response.status_code == 500
        assert f"worker rank 1 (pid {crashed_pid}) died (killed by SIGKILL)" in error_message(response)
        assert not psutil.pid_exists(crashed_pid)  # dead and reaped by the API process
        # Upstream's 503 body, {"status": "unhealthy"}, with the simulator's reason beside it.
        health = http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "unhealthy"
        assert "engine is dead" in health.json()["reason"]
        again = http.post("/v1/videos/sync", data=form(), files=files(reference))
        assert again.status_code == 500 and "engine is dead" in error_message(again)
        # An engine failure at the sync endpoint names the request, as vLLM-Omni's engine-error answer does.
        assert again.json()["error"]["request_id"].startswith("video_sync-")
        assert again.json()["error"]["type"] == "InternalServerError"
    assert "crashing in the middle of request" in server.log


def test_hang_never_completes_and_sync_times_out(sim_logs: Path, reference: Path) -> None:
    env = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "1"}
    with SimServer(sim_logs, *FAST, "--hang-request", "1", env=env) as server, server.wait_ready().http() as http:
        job = http.post("/v1/videos", data=form(), files=files(reference)).json()
        time.sleep(1.0)
        assert http.get(f"/v1/videos/{job['id']}").json()["status"] == "in_progress"
        running = http.get(f"/v1/videos/{job['id']}/content")
        assert running.status_code == 404 and error_message(running) == "Generation is still in-progress"
        start = time.monotonic()
        queued = http.post("/v1/videos/sync", data=form(), files=files(reference))
        assert queued.status_code == 504 and "timed out after 1.0s" in error_message(queued)
        assert 0.9 < time.monotonic() - start < 5
        assert http.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True
        code, _ = server.stop()
    assert code == 0
    assert "hanging in the middle of request" in server.log


def test_worker_that_ignores_sigterm_survives_for_the_caller(sim_logs: Path) -> None:
    server = SimServer(sim_logs, *FAST, "--worker-ignores-sigterm").wait_ready()
    survivor = server.worker_pids()[-1]
    try:
        os.killpg(server.proc.pid, signal.SIGTERM)
        assert server.proc.wait(15) == 0
        assert running(survivor)
        assert f"worker rank 1 (pid {survivor}) ignored SIGTERM and is still running" in server.log
    finally:
        server.kill()
    assert not running(survivor)


def test_slow_shutdown_delays_the_exit(sim_logs: Path) -> None:
    server = SimServer(sim_logs, *FAST, "--shutdown-delay-s", "1.5").wait_ready()
    code, elapsed = server.stop()
    assert code == 0 and elapsed >= 1.5
    assert "injected slow shutdown" in server.log


def test_processes_differ_run_to_run_and_the_cache_cheats(
    client: httpx.Client, sim_logs: Path, reference: Path
) -> None:
    """A second process with another seed gives other bytes; with cache_outputs it answers repeats at once."""
    ours = client.post("/v1/videos/sync", data=form(), files=files(reference))
    cheat = ("--process-seed", "8", "--cache-outputs", "--time-scale", "0.002")
    with SimServer(sim_logs, *FAST, *cheat) as server, server.wait_ready().http() as http:
        first = http.post("/v1/videos/sync", data=form(), files=files(reference))
        start = time.monotonic()
        repeat = http.post("/v1/videos/sync", data=form(), files=files(reference))
        repeat_s = time.monotonic() - start
        other = http.post("/v1/videos/sync", data=form(seed="3"), files=files(reference))
    assert first.content != ours.content  # same request, another process
    assert repeat.content == first.content and repeat.headers["x-stage-durations"] == first.headers["x-stage-durations"]
    assert repeat_s < 0.5 * float(first.headers["x-inference-time-s"])
    assert float(other.headers["x-inference-time-s"]) > 2 * repeat_s
    assert "answered from the output cache" in server.log
