"""The real-engine lane's pieces that need no conformance environment (conformance/realengine.py, realrun.py).

The plugins' ``.dist-info``, the checkpoint's place, the ``vllm serve``
command a RunSpec arm execs, and the agreement between the lane's own
server and the campaign's arms. Running upstream's engine is the lane itself
(``./dev conformance --engine-mode real``).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import realengine
from conformance.envbuild import REPO_ROOT
from conformance.realengine import CPU_FLAGS, LANE_ENV, TINY_MODEL
from conformance.realrun import REAL_INPUTS, REAL_PROBES, REAL_SPEC, _campaign_verdicts, _server_argv
from conformance.run import ConformanceFailure
from h3bench.errors import UsageError
from h3bench.runspec.spec import load_runspec


def _fake_environment(root: Path) -> Path:
    """A directory that passes for a built environment: the interpreter, ``vllm`` and the stamp."""
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "vllm"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    (root / "venv" / ".h3bench-conformance.json").write_text("{}")
    return root


def test_the_plugins_are_found_through_importlib_metadata(tmp_path: Path) -> None:
    """What vLLM-Omni's loader (``importlib.metadata.entry_points(group=...)``) sees on that PYTHONPATH."""
    path = realengine.plugin_dir(root=tmp_path)
    (dist,) = importlib.metadata.distributions(path=[str(path)])
    found = {group: {ep.name: ep.value for ep in dist.entry_points if ep.group == group}
             for group in ("vllm_omni.platform_plugins", "vllm_omni.general_plugins")}
    assert found == {"vllm_omni.platform_plugins": {"h3bench_cpu": "conformance.plugins:cpu_platform"},
                     "vllm_omni.general_plugins": {"h3bench_tiny_h3": "conformance.plugins:tiny_h3"}}
    from conformance import plugins

    assert plugins.cpu_platform() == "conformance.cpu_platform.CpuOmniPlatform"


def test_a_changed_declaration_is_written_again(tmp_path: Path) -> None:
    path = realengine.plugin_dir(root=tmp_path)
    entry_points = next(path.glob("*.dist-info")) / "entry_points.txt"
    entry_points.write_text("[vllm_omni.general_plugins]\nstale = somewhere:else\n")
    realengine.plugin_dir(root=tmp_path)
    assert "stale" not in entry_points.read_text() and "h3bench_tiny_h3" in entry_points.read_text()


def test_the_checkpoint_has_one_place_per_seed_and_version_of_the_tiny_model(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert realengine.checkpoint_dir(root=tmp_path) == realengine.checkpoint_dir(root=tmp_path)
    assert realengine.checkpoint_dir(root=tmp_path, seed=1) != realengine.checkpoint_dir(root=tmp_path)
    # A changed network (tiny_modules.py) is a new checkpoint, as a changed pipeline (tiny_h3.py) is.
    before = realengine.checkpoint_dir(root=tmp_path)
    for source in realengine._TINY_SOURCES:
        changed = tmp_path / source.name
        changed.write_bytes(source.read_bytes() + b"\n# changed\n")
        others = [changed if s == source else s for s in realengine._TINY_SOURCES]
        monkeypatch.setattr(realengine, "_TINY_SOURCES", others)
        assert realengine.checkpoint_dir(root=tmp_path) != before, source.name
        monkeypatch.undo()


def test_the_tiny_model_becomes_the_checkpoint_in_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(realengine.CHECKPOINT_ENV, raising=False)
    root = _fake_environment(tmp_path)
    with pytest.raises(UsageError, match="tiny checkpoint is not written"):
        realengine.serve_command("0.30.0", "serve", TINY_MODEL, "--omni", root=root)
    realengine.checkpoint_dir(root=root).mkdir()
    argv, env = realengine.serve_command("0.30.0", "serve", TINY_MODEL, "--omni", "--port", "1", root=root)
    assert argv == [str(root / "venv" / "bin" / "vllm"), "serve", str(realengine.checkpoint_dir(root=root)),
                    "--omni", "--port", "1"]
    assert env["PYTHONPATH"].split(":") == [str(REPO_ROOT), str(root / "plugins")]
    assert {k: env[k] for k in LANE_ENV} == LANE_ENV
    other, _ = realengine.serve_command("0.30.0", "serve", "/models/other", root=root)
    assert other[2] == "/models/other"  # any other model is passed as it is


def test_the_lanes_checkpoint_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's servers and its campaign serve the checkpoint it wrote, even if tiny_h3.py changed meanwhile."""
    root = _fake_environment(tmp_path)
    (tmp_path / "written-by-the-lane").mkdir()
    monkeypatch.setenv(realengine.CHECKPOINT_ENV, str(tmp_path / "written-by-the-lane"))
    argv, _ = realengine.serve_command("0.30.0", "serve", TINY_MODEL, root=root)
    assert argv[2] == str(tmp_path / "written-by-the-lane")


def test_the_launcher_says_what_is_missing(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "conformance.realengine", "serve", TINY_MODEL],
                            env={"H3BENCH_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
                                 "PYTHONPATH": str(REPO_ROOT)},
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 2
    assert "conformance environment of vLLM-Omni 0.30.0 is not built" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_campaign_arms_differ_in_one_engine_option_only() -> None:
    spec = load_runspec(REAL_SPEC)
    baseline, untiled = spec.arms["baseline"], spec.arms["untiled"]
    assert spec.model.path == TINY_MODEL
    assert [a for a in baseline.argv if a != "--vae-use-tiling"] == list(untiled.argv)
    assert "--vae-use-tiling" in baseline.argv
    assert baseline.launch_env() == untiled.launch_env()
    assert {k: baseline.env[k] for k in LANE_ENV} == LANE_ENV


def test_the_lane_serves_what_the_campaign_serves() -> None:
    """The lane's own server and the untiled arm: the same command but for the profiler's directory."""
    spec = load_runspec(REAL_SPEC)
    lane = _server_argv(Path("/profiles"))
    arm = spec.arms["untiled"].command("127.0.0.1", 0, TINY_MODEL)
    assert lane[:3] == arm[:3] == [sys.executable, "-m", "conformance.realengine"]
    for flag in (*CPU_FLAGS, "--enable-diffusion-pipeline-profiler", "--served-model-name", "--task-type"):
        assert flag in lane and flag in arm
    config = json.loads(lane[lane.index("--profiler-config") + 1])
    assert config == {"profiler": "torch", "torch_profiler_dir": "/profiles"}


def test_the_real_lane_runs_every_probe_it_can() -> None:
    names = [probe.name for probe in REAL_PROBES]
    assert "engine-oom-sync" not in names and "engine-oom-async" not in names  # only the stand-in injects an OOM
    assert "metrics-families" in names and "sync-client-form" in names
    assert REAL_INPUTS.video.name == "ref_video_h3.mp4" and REAL_INPUTS.video.is_file()


def _bundle(tmp_path: Path, quality: str, speed: str) -> Path:
    estimate = {"geomean": 0.6, "ci_low": 0.2, "ci_high": 1.8}
    verdict = {"candidates": {"untiled": {"durations": {"4s": {"quality": quality, "speed": speed,
                                                               "estimate": estimate}}}}}
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    return tmp_path


@pytest.mark.parametrize("speed", ["PASS", "INCONCLUSIVE"])
def test_the_real_campaign_may_be_inconclusive_on_speed(tmp_path: Path, speed: str) -> None:
    found = _campaign_verdicts(_bundle(tmp_path, "PASS", speed))
    assert found["4s"]["speed"] == speed and found["4s"]["bounds"] == [0.2, 1.8]


@pytest.mark.parametrize(("quality", "speed"), [("FAIL", "PASS"), ("PASS", "FAIL"), ("INCONCLUSIVE", "PASS")])
def test_the_real_campaign_must_keep_the_frames_and_never_be_slower(tmp_path: Path, quality: str, speed: str) -> None:
    with pytest.raises(ConformanceFailure, match="must keep the frames"):
        _campaign_verdicts(_bundle(tmp_path, quality, speed))
