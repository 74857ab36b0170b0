"""The NPU bisection workflow: good and bad in, rounds of probes over a matrix of hosts, the steps the CLI offers.

actionlint checks every workflow (tests_unit/test_ci_workflow.py); here, that the rounds chain, that each
round's matrix is the step list its plan printed, and that the jobs run the commands
tests_unit/bisect/test_live.py runs on the simulator.
"""

from __future__ import annotations

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "npu-bisect.yml"


def test_the_workflow_takes_good_and_bad_and_runs_rounds_of_hosts():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    inputs = workflow[True]["workflow_dispatch"]["inputs"]  # YAML reads the key "on" as True
    assert {"good", "bad", "hosts", "regression", "host_kind", "image"} <= set(inputs)
    jobs = workflow["jobs"]
    rounds = sorted(int(name.split("-")[1]) for name in jobs if name.startswith("round-"))
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) >= 5
    for k in rounds:
        plan, run, take = jobs[f"plan-{k}"], jobs[f"round-{k}"], jobs[f"take-{k}"]
        assert run["strategy"]["matrix"]["step"] == f"${{{{ fromJSON(needs.plan-{k}.outputs.steps) }}}}"
        assert f"plan-{k}" in run["needs"] and f"round-{k}" in take["needs"]
        assert run["if"] == f"needs.plan-{k}.outputs.steps != '[]'"
        if k > 1:
            assert f"take-{k - 1}" in plan["needs"]
        assert "self-hosted" in run["runs-on"] and "ascend" in run["runs-on"]
    scripts = "\n".join(step.get("run", "") for job in jobs.values() for step in job.get("steps", []))
    for command in ("--range range.txt", "--write bisect.toml", "--next 1", "--run verify", '--next "$HOSTS"',
                    '--run "$STEP"', "--take", "--ledger", "h3bench report"):
        assert command in scripts, command
    assert "git -C engine rev-list --first-parent --reverse" in scripts
    assert set(jobs["finish"]["needs"]) >= {f"take-{k}" for k in rounds}
