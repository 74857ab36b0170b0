"""Build a small campaign project inside a pytester directory.

It holds copies of the real campaign tests (tests_perf, tests_lifecycle,
tests_quality), the project's pytest.ini, the pinned sim inputs and a RunSpec
written from the arguments, so plugin tests run the product as a user would,
against real simulator processes (directly, or behind the fake ``vllm`` for an
NPU-like spec), only smaller and faster; ``run_campaign`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN_DIRS = ("tests_perf", "tests_lifecycle", "tests_quality")
FAST_SIM = {"time_scale": 0.0002, "jitter_cv": 0.01, "workers": 1}  # one spawned worker: each costs a fresh interpreter
# Plugins of this test environment that a campaign never uses: loading them costs each child pytest a
# second of CPU, and the suite runs about a hundred of them.
UNUSED_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio")
# The report each campaign writes as it ends costs more CPU than a small campaign's quality step; the tests of the
# report (tests_unit/report/) ask for it.
NO_REPORT = ("--no-report",)


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _table(name: str, values: dict[str, Any]) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in values.items())


def write_campaign(
    root: Path,
    *,
    candidates: dict[str, dict[str, Any]] | None = None,
    baseline: dict[str, Any] | None = None,
    durations: tuple[int, ...] = (5,),
    size: str = "64x64",
    protocol: dict[str, Any] | None = None,
    gates: dict[str, Any] | None = None,
    hardware: dict[str, Any] | None = None,
    argv: list[str] | None = None,
    source: dict[str, Any] | None = None,
    arm_tables: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Write the project and its RunSpec; ``candidates`` maps arm names to sim profile overrides.

    An NPU-like spec has no simulator profiles: ``arm_tables`` then gives every
    arm's table whole (``description``, ``argv``, ``env``), baseline included,
    in place of ``baseline``, ``candidates`` and ``argv``, and ``source`` is
    its ``[source]`` table.
    """
    for name in CAMPAIGN_DIRS:
        shutil.copytree(REPO / name, root / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    inputs = root / "inputs"
    inputs.mkdir(exist_ok=True)
    for name in ("ref_video.mp4", "ref_audio.wav"):
        shutil.copy(REPO / "fixtures" / "inputs" / name, inputs / name)
    sim_spec = (REPO / "fixtures" / "runspecs" / "sim.toml").read_text()
    pins = {line.split("=")[0].strip(): line for line in sim_spec.splitlines() if line.startswith("reference_")}
    argv = argv or ["{python}", "-m", "h3bench.sim", "--host", "{host}", "--port", "{port}"]
    parts = [
        'name = "plugin-test"\n',
        _table("hardware", hardware or {"kind": "sim"}),
        _table("model", {"path": "MiniMaxAI/MiniMax-H3", "content_identity": "simulator"}),
        "[inputs]\nprompt = \"a test prompt\"\n"
        + pins["reference_video"].replace("../inputs/", "inputs/") + "\n"
        + pins["reference_audio"].replace("../inputs/", "inputs/") + "\n",
        _table("workload", {"durations": list(durations), "size": size}),
        _table("protocol", {
            "order": "ABBA", "request_timeout_s": 20.0, "startup_budget_s": 30.0, "shutdown_budget_s": 5.0,
            **(protocol or {}),
        }),
        _table("gates", {"lpips_required": False, **(gates or {})}),
    ]
    if source is not None:
        parts.append(_table("source", source))
    if arm_tables is not None:
        # A formal NPU spec attributes every candidate (h3bench.runspec.search).
        attribution = {"hypothesis": "the test's candidate is faster",
                       "source": {"kind": "configuration", "ref": "a test flag"}}
        parts += [_table(f"arms.{name}", table if name == "baseline" else {**attribution, **table})
                  for name, table in arm_tables.items()]
    else:
        arms = {"baseline": baseline or {}, **(candidates if candidates is not None else {"clean": {}})}
        for name, overrides in arms.items():
            parts.append(_table(f"arms.{name}", {"description": f"arm {name}", "argv": argv}))
            parts.append(_table(f"arms.{name}.sim", {**FAST_SIM, **overrides}))
    spec = root / "spec.toml"
    spec.write_text("\n".join(parts))
    return spec


def run_campaign(pytester: pytest.Pytester, spec: Path, *args: str, report: bool = False) -> pytest.RunResult:
    """Run pytest on the project in a subprocess (servers and signals are involved), evidence under the project."""
    return pytester.runpytest_subprocess(
        "--runspec", str(spec), "--evidence-dir", str(pytester.path / "evidence"), *UNUSED_PLUGINS,
        *(() if report else NO_REPORT), *args, timeout=600,
    )


def child_campaign(project: Path, spec: Path, *args: str, report: bool = False,
                   verbose: bool = False) -> tuple[int, str, Path | None]:
    """Run the project's campaign in a child pytest: its exit code, what it printed, and its one bundle.

    For module fixtures, which cannot use pytester: the child is not an xdist
    worker and has a device lock of its own (as the campaign_subprocess_env
    fixture arranges), and no LPIPS weights, whatever this machine has cached. ``verbose``: the summary
    with every reason (-v), not one screen.
    """
    evidence = project / "evidence"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["H3BENCH_DEVICE_LOCK"] = str(project / "devices.lock")
    env["H3BENCH_CACHE_DIR"] = str(project / "cache")
    env.pop("H3BENCH_LPIPS_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--runspec", str(spec), "--evidence-dir", str(evidence),
         *UNUSED_PLUGINS, *(() if report else NO_REPORT), "-v" if verbose else "-q", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=900,
    )
    found = bundles_in(evidence) if evidence.is_dir() else []
    return proc.returncode, proc.stdout + proc.stderr, found[0] if len(found) == 1 else None


def noisy_campaign(project: Path, candidate: str, *, report: bool = False) -> tuple[Path, str]:
    """Run a campaign whose candidate adds video noise in a child pytest: its one bundle and what pytest printed.

    The noisy candidate fails its quality tests (exit 1); any other exit means
    the campaign did not run, and the test fails.
    """
    spec = write_campaign(project, candidates={candidate: {"video_noise": 12.0}})
    code, output, path = child_campaign(project, spec, f"--benchmark-json={project / 'benchmark.json'}", report=report)
    if code != pytest.ExitCode.TESTS_FAILED or path is None:
        pytest.fail(f"campaign exited {code}:\n{output[-8000:]}")
    return path, output


def bundles_in(root: Path) -> list[Path]:
    """The evidence bundles under ``root`` (beside them, ``reports/`` holds their reports)."""
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())


def bundle_of(pytester: pytest.Pytester) -> Path:
    """The one evidence bundle that the run wrote."""
    (path,) = bundles_in(pytester.path / "evidence")
    return path


def start_campaign(pytester: pytest.Pytester, spec: Path, *args: str, output: Path) -> subprocess.Popen[bytes]:
    """Start pytest on the project in the background (to be signalled), its output going to ``output``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    with output.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "--runspec", str(spec), "--evidence-dir", str(pytester.path / "evidence"),
             *UNUSED_PLUGINS, *NO_REPORT, *args],
            cwd=pytester.path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )


def evidence_lines(pytester: pytest.Pytester, name: str) -> list[dict[str, Any]]:
    """The records of one JSONL file of the project's bundle, every segment; [] before the bundle exists."""
    lines = []
    for path in sorted((pytester.path / "evidence").glob(f"*/{name}")) + sorted(
            (pytester.path / "evidence").glob(f"*/resume-*/{name}")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return lines


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    """Wait until ``condition()`` holds while ``proc`` runs (a block started, a request was answered)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the campaign ended before the moment the test waits for"
        assert time.monotonic() < deadline, "the campaign never reached the moment the test waits for"
        time.sleep(0.05)

