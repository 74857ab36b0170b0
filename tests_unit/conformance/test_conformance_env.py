"""The conformance environment's recipe, stamp, failures and launcher (conformance/envbuild.py, serve.py).

Nothing here installs anything: a build that would reach PyPI is made to
fail at its first step, and a reused environment is a stamped directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conformance import envbuild
from conformance.envbuild import (
    EnvironmentBuildError,
    ensure_environment,
    load_recipe,
    parse_download_bytes,
    server_command,
)
from conformance.serve import main as serve_main
from h3bench.errors import UsageError

PYTHON = getattr(sys, "_base_executable", sys.executable)


def test_0_30_0_pins_the_torch_family_that_imports_on_a_cpu() -> None:
    recipe = load_recipe("0.30.0")
    assert recipe.requirements == ("vllm==0.30.0", "vllm-omni==0.30.0", "torch==2.13.0", "torchvision==0.28.0",
                                   "torchaudio==2.11.0", "torchcodec==0.17.0")
    assert not recipe.derived


def test_another_release_is_derived_with_the_torch_family_left_to_pip() -> None:
    recipe = load_recipe("0.32.0")
    assert recipe.derived
    assert recipe.requirements == ("vllm==0.32.0", "vllm-omni==0.32.0", "torchvision", "torchaudio", "torchcodec")


@pytest.mark.parametrize("engine", ["latest", "0.30.0; rm -rf /", "../0.30.0", ""])
def test_an_engine_must_be_a_release_number(engine: str) -> None:
    with pytest.raises(UsageError, match="--engine takes a vLLM-Omni release"):
        load_recipe(engine)


def test_a_row_without_every_package_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "engines.toml"
    table.write_text('[engines."1.0.0"]\nvllm = "1.0.0"\nvllm-omni = "1.0.0"\ntorch = "3"\ntorchvision = "1"\n'
                     'torchaudio = "1"\ncuda = "x"\n')
    with pytest.raises(UsageError, match=r"missing \['torchcodec'\], unknown \['cuda'\]"):
        load_recipe("1.0.0", table)


def test_the_stamp_changes_with_the_recipe_and_the_interpreter() -> None:
    recipe = load_recipe("0.30.0")
    assert recipe.digest("3.11.7") == recipe.digest("3.11.7")
    assert recipe.digest("3.11.7") != recipe.digest("3.12.1")
    assert recipe.digest("3.11.7") != load_recipe("0.32.0").digest("3.11.7")


def test_download_size_is_read_from_pips_output() -> None:
    log = """Collecting vllm==0.30.0
  Downloading vllm-0.30.0-cp38-abi3-manylinux_2_28_x86_64.whl (314.9 MB)
  Downloading pycountry-26.2.16-py3-none-any.whl (8.0 MB)
  Downloading opentelemetry_exporter_otlp-1.45.2-py3-none-any.whl (6.7 kB)
  Downloading tiny-1.0.tar.gz (512 bytes)
Requirement already satisfied: pip"""
    assert parse_download_bytes(log) == 314_900_000 + 8_000_000 + 6_700 + 512
    assert parse_download_bytes("") == 0


def fake_python(tmp_path: Path, exit_code: int) -> Path:
    """An interpreter that prints a version and fails (or succeeds) at everything else."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\ncase "$*" in *sys.version*) echo 3.11.7 ;; *) echo "no venv here" >&2; '
                      f"exit {exit_code} ;; esac\n")
    script.chmod(0o755)
    return script


def test_a_failed_build_says_which_step_and_why(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentBuildError) as failed:
        ensure_environment("0.30.0", root=tmp_path / "env", python=str(fake_python(tmp_path, 3)), echo=False)
    error = failed.value
    assert error.step == "creating the virtualenv" and error.exit_code == 3
    assert "no venv here" in error.log_tail and "no venv here" in str(error)
    assert Path(error.log_path or "").read_text().count("no venv here") == 1
    assert not (tmp_path / "env" / "venv" / ".h3bench-conformance.json").exists()  # never stamped: built again


def stamped(root: Path, python: str) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    digest = load_recipe("0.30.0").digest("3.11.7")
    (venv / ".h3bench-conformance.json").write_text(json.dumps(
        {"digest": digest, "download_bytes": 4_284_928_800, "install_s": 420.0, "versions": "2.13.0 0.30.0"}))
    return venv


def test_a_stamped_environment_is_reused_with_its_build_figures(tmp_path: Path) -> None:
    python = str(fake_python(tmp_path, 1))  # would fail any build step
    stamped(tmp_path / "env", python)
    report = ensure_environment("0.30.0", root=tmp_path / "env", python=python, echo=False)
    assert report.reused and report.download_bytes == 4_284_928_800 and report.install_s == 420.0
    assert "reused (built earlier: 4.28 GB downloaded, installed in 420 s)" in report.describe()


def test_a_stale_stamp_rebuilds(tmp_path: Path) -> None:
    python = str(fake_python(tmp_path, 1))
    venv = stamped(tmp_path / "env", python)
    (venv / ".h3bench-conformance.json").write_text(json.dumps({"digest": "another recipe"}))
    with pytest.raises(EnvironmentBuildError, match="creating the virtualenv"):
        ensure_environment("0.30.0", root=tmp_path / "env", python=python, echo=False)
    assert not venv.exists() or not (venv / ".h3bench-conformance.json").exists()


def test_the_server_command_needs_a_built_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path))
    with pytest.raises(UsageError, match=r"not built .*run ./dev conformance --engine 0.30.0 first"):
        server_command("0.30.0")
    assert serve_main(["--port", "1"]) == 2
    assert "run ./dev conformance" in capsys.readouterr().err
    venv = stamped(tmp_path / "conformance" / "0.30.0", PYTHON)
    argv, env = server_command("0.30.0", "--port", "8000")
    assert argv == [str(venv / "bin" / "python"), "-m", "conformance.upstream_app", "--port", "8000"]
    assert env["PYTHONPATH"] == str(envbuild.REPO_ROOT)  # h3bench is imported from the checkout, not installed
    assert not any(name.startswith("PIP_") for name in env)
