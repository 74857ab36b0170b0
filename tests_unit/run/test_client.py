"""VideoClient against a real FastAPI server process (tests_unit/fakes/fake_videos.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import media
from h3bench.errors import RequestError, UsageError
from h3bench.h3 import PIPELINE_TIMING_KEYS, STAGE_KEYS, mux_and_transfer_s
from h3bench.run.client import (
    GenerationRequest,
    Reference,
    VideoClient,
    parse_stage_durations,
)
from h3bench.server.ports import find_free_port
from h3bench.server.process import ServerProcess
from tests_unit import mediagen

FAKE_VIDEOS = Path(__file__).parents[1] / "fakes" / "fake_videos.py"
MODEL = "fake-h3"
SERVICE_S = 0.2  # the fake's modelled generation time: the sum of its top-level stages (fakes/fake_videos.py)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, ffmpeg_exe: str) -> dict[str, Path]:
    """The MP4 that the fake serves, and a reference video (MP4) and audio (MP3)."""
    d = tmp_path_factory.mktemp("client")
    served = media.write_mp4(d / "served.mp4", mediagen.textured_frames(24, 256, 160, seed=3),
                             mediagen.tone(33_600, 440.0))
    video = media.write_mp4(d / "ref_video.mp4", mediagen.textured_frames(12, 128, 96, seed=4), None)
    audio = d / "ref_audio.mp3"
    subprocess.run([ffmpeg_exe, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
                    "sine=frequency=330:duration=0.5", "-ac", "2", "-c:a", "libmp3lame", str(audio)], check=True)
    return {"served": served, "video": video, "audio": audio, "dir": d}


def start_fake(files: dict[str, Path], name: str) -> ServerProcess:
    port = find_free_port()
    return ServerProcess(
        [sys.executable, str(FAKE_VIDEOS), "--port", str(port), "--model", MODEL, "--mp4", str(files["served"])],
        port=port, log_path=files["dir"] / f"{name}.log", startup_budget_s=60,
    ).start()


@pytest.fixture(scope="module")
def server(files: dict[str, Path]):
    srv = start_fake(files, "shared")
    yield srv
    srv.stop()
    srv.verify_exited().check()


@pytest.fixture
def request_with_refs(files: dict[str, Path]) -> GenerationRequest:
    return GenerationRequest(
        "a pink suit and a black lamb",
        references=(Reference.from_path(files["video"]), Reference.from_path(files["audio"])),
    )


def test_sync_generation(server: ServerProcess, files, request_with_refs, tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    with VideoClient(server.base_url, model=MODEL, timeout=30) as client:
        result = client.generate_sync(request_with_refs, out)

    served = files["served"].read_bytes()
    assert out.read_bytes() == served
    assert result.sha256 == hashlib.sha256(served).hexdigest() and result.size_bytes == len(served)
    assert not list(tmp_path.glob("*.part"))
    assert result.mode == "sync" and result.status_code == 200
    assert result.request_id.startswith("video_sync-") and result.model == MODEL
    assert result.peak_memory_mb == 1234.5
    assert len(result.stage_durations) == 8
    assert result.stage_durations["MiniMaxH3Pipeline.diffuse"] == 0.10
    # E2E spans the server's own time; the derived rest is E2E minus the top-level stages only.
    assert result.e2e_s >= result.inference_time_s >= SERVICE_S
    assert result.mux_and_transfer_s == pytest.approx(result.e2e_s - SERVICE_S)
    assert result.mux_and_transfer_s >= 0
    record = json.loads(json.dumps(result.to_dict()))
    assert record["derived"] == {"mux_and_transfer_s": result.mux_and_transfer_s}


def test_the_form_is_upstreams_ref2va_form(server: ServerProcess, files, request_with_refs, tmp_path) -> None:
    """What the server parsed: upstream's Ref2VA accuracy-test fields and two input_references."""
    with VideoClient(server.base_url, model=MODEL, timeout=30) as client:
        client.generate_sync(request_with_refs, tmp_path / "out.mp4")
    seen = httpx.get(f"{server.base_url}/_last_request").json()
    assert {k: seen[k] for k in ("prompt", "model", "width", "height", "fps", "num_inference_steps", "seed")} == {
        "prompt": "a pink suit and a black lamb", "model": MODEL, "width": "1344", "height": "768", "fps": "24",
        "num_inference_steps": "50", "seed": "0",
    }
    assert float(seen["flow_shift"]) == 12.0
    assert json.loads(seen["extra_params"]) == {
        "task": "ref2va", "duration": 5.0, "aspect_ratio": "auto", "audio_flow_shift": 3.0,
    }
    assert seen["references"] == [
        {"filename": "ref_video.mp4", "content_type": "video/mp4",
         "sha256": hashlib.sha256(files["video"].read_bytes()).hexdigest()},
        {"filename": "ref_audio.mp3", "content_type": "audio/mpeg",
         "sha256": hashlib.sha256(files["audio"].read_bytes()).hexdigest()},
    ]


def test_async_generation_is_not_quantised_by_polling(server: ServerProcess, files, request_with_refs,
                                                       tmp_path: Path) -> None:
    with VideoClient(server.base_url, model=MODEL, timeout=30) as client:
        result = client.generate_async(request_with_refs, tmp_path / "out.mp4")
    assert result.mode == "async" and result.request_id.startswith("video_gen_")
    assert result.sha256 == hashlib.sha256(files["served"].read_bytes()).hexdigest()
    assert result.stage_durations["MiniMaxH3Pipeline.decode"] == 0.04 and result.peak_memory_mb == 1234.5
    assert result.inference_time_s >= SERVICE_S
    # Polls grow from 5 ms to at most 100 ms: far from upstream's 2 s steps.
    assert SERVICE_S <= result.e2e_s < SERVICE_S + 1.0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("prompt", "model", "status", "detail"),
    [
        ("status:400", MODEL, 400, "injected failure 400"),  # FastAPI's {"detail": ...}
        ("status:500", MODEL, 500, "injected failure 500"),  # vLLM's {"error": {"message": ...}}
        ("fine", "other-model", 400, "model 'other-model' is not served here"),
    ],
    ids=["400", "500", "model-mismatch"],
)
def test_http_errors_carry_status_and_detail(server, mode, prompt, model, status, detail, tmp_path) -> None:
    out = tmp_path / "out.mp4"
    with VideoClient(server.base_url, model=model, timeout=30) as client:
        generate = client.generate_sync if mode == "sync" else client.generate_async
        with pytest.raises(RequestError) as info:
            generate(GenerationRequest(prompt), out)
    assert info.value.status_code == status
    assert info.value.detail.startswith(detail)
    assert f"HTTP {status}: {detail}" in str(info.value)
    assert not out.exists()


def test_failed_async_job(server: ServerProcess, tmp_path: Path) -> None:
    with VideoClient(server.base_url, timeout=30) as client, pytest.raises(RequestError) as info:
        client.generate_async(GenerationRequest("fail-job"), tmp_path / "out.mp4")
    assert info.value.status_code == 500
    assert info.value.detail == "worker raised: injected job failure"


def test_no_response_within_the_timeout(server: ServerProcess, tmp_path: Path) -> None:
    with VideoClient(server.base_url, timeout=0.3) as client, pytest.raises(RequestError) as info:
        client.generate_sync(GenerationRequest("hang"), tmp_path / "out.mp4")
    assert "no response from" in str(info.value) and "within 0.3 s" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.TimeoutException)


def test_connection_refused(tmp_path: Path) -> None:
    with VideoClient(f"http://127.0.0.1:{find_free_port()}", timeout=5) as client:
        with pytest.raises(RequestError, match="cannot connect to .*is the server running"):
            client.generate_sync(GenerationRequest("x"), tmp_path / "out.mp4")


def test_server_dying_mid_request(files, tmp_path: Path) -> None:
    srv = start_fake(files, "crash")
    out = tmp_path / "out.mp4"
    try:
        with VideoClient(srv.base_url, timeout=30) as client, pytest.raises(RequestError) as info:
            client.generate_sync(GenerationRequest("crash"), out)
        deadline = time.monotonic() + 10
        while srv.poll() is None and time.monotonic() < deadline:  # the socket closes just before the exit
            time.sleep(0.01)
    finally:
        srv.stop()
    assert "closed the connection during the request; did it crash?" in str(info.value)
    assert info.value.status_code is None
    assert not out.exists() and not list(tmp_path.glob("*.part"))
    assert srv.exited_before_stop is True and srv.exit_code == -9
    srv.verify_exited().check()


def test_request_validation(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="size must look like '1344x768'"):
        GenerationRequest("x", size="1344*768")
    with pytest.raises(UsageError, match="MIME type"):
        Reference.from_path(tmp_path / "ref.unknownext")
    missing = GenerationRequest("x", references=(Reference(tmp_path / "gone.mp4", "video/mp4"),))
    with VideoClient("http://127.0.0.1:9", timeout=1) as client, pytest.raises(UsageError, match="gone.mp4"):
        client.generate_sync(missing, tmp_path / "out.mp4")
    fields = GenerationRequest("x", duration_s=15, size="640x360", extra_fields=(("guidance_scale", "5.0"),),
                               extra_params=(("frame_indices", [0]),)).form_fields()
    assert "model" not in fields and fields["guidance_scale"] == "5.0"
    assert (fields["width"], fields["height"]) == ("640", "360")
    assert json.loads(fields["extra_params"])["duration"] == 15.0
    assert json.loads(fields["extra_params"])["frame_indices"] == [0]


def test_stage_duration_parsing() -> None:
    assert parse_stage_durations('{"A.diffuse":1.5,"A.decode":2}') == {"A.diffuse": 1.5, "A.decode": 2.0}
    assert parse_stage_durations({"A.diffuse": "1.5"}) == {"A.diffuse": 1.5}
    assert parse_stage_durations(None) == {} and parse_stage_durations("") == {}
    for bad in ("{not json", '["A.diffuse"]', '{"A.diffuse": "slow"}'):
        with pytest.raises(RequestError, match="not a JSON object of numbers"):
            parse_stage_durations(bad)
    assert mux_and_transfer_s(3.0, {}) is None
    assert mux_and_transfer_s(3.0, {"A.denoise_step": 1.0}) is None


TOP = ["encode_prompt", "_encode_local_media", "diffuse", "decode"]
NESTED = ["denoise_step", "video_vae.decode_latent", "audio_vae.decode_latent"]
seconds = st.floats(0, 1000, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(e2e=seconds, top=st.dictionaries(st.sampled_from(TOP), seconds, min_size=1),
       nested=st.dictionaries(st.sampled_from(NESTED), seconds),
       wrappers=st.dictionaries(st.sampled_from(["prepare_encode", "post_decode"]), seconds))
def test_derived_time_sums_only_top_level_stages(e2e: float, top: dict, nested: dict, wrappers: dict) -> None:
    """Request mode's four stages; under step execution, prepare_encode and post_decode in place of what they run."""
    stages = {f"MiniMaxH3Pipeline.{k}": v for k, v in {**top, **nested, **wrappers}.items()}
    inside = {"prepare_encode": ("encode_prompt", "_encode_local_media"), "post_decode": ("decode",)}
    counted = {k: v for k, v in top.items() if not any(k in inside[w] for w in wrappers)} | wrappers
    assert mux_and_transfer_s(e2e, stages) == pytest.approx(e2e - sum(counted.values()))


def test_async_generation_against_the_simulator(files, request_with_refs, tmp_path: Path) -> None:
    """The real simulator (FastAPI, spawned workers, real MP4s): upstream's stage keys and a decodable output."""
    port = find_free_port()
    argv = [sys.executable, "-m", "h3bench.sim", "--port", str(port), "--time-scale", "0", "--workers", "1",
            "--model", MODEL]
    request = GenerationRequest(request_with_refs.prompt, duration_s=4, size="256x160",
                                references=request_with_refs.references)
    with ServerProcess(argv, port=port, log_path=tmp_path / "sim.log", startup_budget_s=60) as srv:
        with VideoClient(srv.base_url, model=MODEL, timeout=60) as client:
            result = client.generate_async(request, tmp_path / "out.mp4")
    srv.verify_exited().check()
    assert result.model == MODEL and result.request_id.startswith("video_gen_")
    assert set(result.stage_durations) == {*STAGE_KEYS, *PIPELINE_TIMING_KEYS}  # request mode: no post_decode
    assert result.mux_and_transfer_s is not None and result.e2e_s >= result.inference_time_s
    info = media.probe(result.output_path)
    assert (info.video.frames, info.video.width, info.video.height) == (107, 256, 160)  # 4 s → 17n+5 frames
    assert hashlib.sha256(result.output_path.read_bytes()).hexdigest() == result.sha256


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_request_longer_than_every_client_side_default_is_not_cut_short(tmp_path: Path, mode: str,
                                                                           files: dict[str, Path]) -> None:
    """httpx gives up after 5 s by default; the spec's request timeout must be the only limit."""
    port = find_free_port()
    # A 5 s request modelled at about 7.5 s (the simulator sleeps its stage times).
    argv = [sys.executable, "-m", "h3bench.sim", "--port", str(port), "--time-scale", "0.01", "--jitter-cv", "0",
            "--compile-s", "0", "--workers", "1"]
    server = ServerProcess(argv, port=port, log_path=tmp_path / "sim.log", startup_budget_s=60).start()
    try:
        request = GenerationRequest("a long request", duration_s=5.0, size="64x64",
                                    references=(Reference.from_path(files["video"]), Reference.from_path(files["audio"])))
        with VideoClient(server.base_url, timeout=120) as client:
            generate = client.generate_sync if mode == "sync" else client.generate_async
            result = generate(request, tmp_path / "out.mp4")
    finally:
        server.stop()
    assert result.e2e_s > 6.0, "the request was not longer than httpx's default timeout"
    assert result.size_bytes > 0
