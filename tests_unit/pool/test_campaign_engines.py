"""The engines that run a campaign over several hosts: the workflow's sharded jobs and the Kubernetes Jobs.

The Jobs are validated against the Kubernetes API's own models (the
``kubernetes`` client, from the test extras): each document is read into its
typed model (required fields enforced) and written back, and anything the
API does not know, a misspelled field included, is lost on the way and fails
the comparison. The h3bench commands of the workflow and of the Jobs are
the ones tests_unit/pool/test_pool.py runs (:data:`tests_unit.pool.test_pool.SHARD_COMMAND`, ...).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests_unit.pool.test_pool import LOOK_COMMAND, POOL_COMMAND, SHARD_COMMAND

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "examples" / "k8s"
WORKFLOW = REPO / ".github" / "workflows" / "npu-campaign.yml"
# The shard of a later round: the look file of the previous one (run by no simulator test yet; see the report).
ROUND_COMMAND = ("h3bench", "run", "--runspec", "{spec}", "--shard", "{index}/{count}", "--looks", "{looks}",
                 "--evidence-dir", "{evidence}")
TEMPLATES = (SHARD_COMMAND, POOL_COMMAND, LOOK_COMMAND, ROUND_COMMAND)


def _shape(tokens: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A command with every variable part ($VAR in a script, {name} in a template) as ``{}``."""
    return tuple("{}" if ("$" in t or "{" in t) else t for t in tokens)


def h3bench_commands(script: str) -> list[tuple[str, ...]]:
    """Every ``h3bench run`` and ``h3bench pool`` command of a shell script, up to its ``||`` or ``|``."""
    found = []
    for line in script.splitlines():
        line = line.strip()
        if not re.match(r"h3bench (run|pool)\b", line):
            continue
        tokens = shlex.split(line, posix=True)
        cut = next((i for i, t in enumerate(tokens) if t in ("||", "|", "&&", ";")), len(tokens))
        found.append(_shape(tokens[:cut]))
    return found


def _k8s() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _roundtrip(doc: dict[str, Any]) -> dict[str, Any]:
    client = pytest.importorskip("kubernetes.client")
    api = client.ApiClient()
    kind = {"Job": "V1Job", "PersistentVolumeClaim": "V1PersistentVolumeClaim"}[doc["kind"]]
    model = api._ApiClient__deserialize(doc, kind)  # the client's own reader of API objects
    return api.sanitize_for_serialization(model)


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def test_the_jobs_are_kubernetes_api_objects_with_nothing_the_api_does_not_know() -> None:
    docs = _k8s()
    assert {d["kind"] for d in docs} == {"Job", "PersistentVolumeClaim"}
    for doc in docs:
        assert _normal(_roundtrip(doc)) == _normal(doc), doc["metadata"]["name"]
    # The check is real: a misspelled field is lost on the way, and a Job without its template is refused.
    bad = yaml.safe_load((K8S / "shards-job.yaml").read_text())
    bad["spec"]["completionMod"] = bad["spec"].pop("completionMode")
    assert _normal(_roundtrip(bad)) != _normal(bad)
    del bad["spec"]["template"]
    with pytest.raises(ValueError, match="template"):
        _roundtrip(bad)


def test_the_indexed_job_runs_one_shard_per_node_with_the_npus_and_the_shared_volume() -> None:
    (job,) = [d for d in _k8s() if d["metadata"]["name"] == "h3bench-shards"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    script = container["args"][0]
    assert "JOB_COMPLETION_INDEX + 1" in script
    env = {e["name"]: e for e in container["env"]}
    assert env["HOSTS"]["value"] == str(spec["completions"])
    assert env["H3BENCH_HOST_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert any(k.startswith("huawei.com/Ascend") for k in container["resources"]["limits"])
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    claims = {v["persistentVolumeClaim"]["claimName"] for d in _k8s() if d["kind"] == "Job"
              for v in d["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"h3bench-evidence"}


def test_the_jobs_and_the_workflow_run_exactly_the_commands_the_tests_run() -> None:
    templates = {_shape(t) for t in TEMPLATES}
    jobs = [c for d in _k8s() if d["kind"] == "Job" for c in
            h3bench_commands(d["spec"]["template"]["spec"]["containers"][0]["args"][0])]
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = [s for name, job in workflow["jobs"].items() if name != "campaign" for s in job.get("steps", ())]
    flows = [c for s in steps for c in h3bench_commands(s.get("run", ""))]
    assert set(jobs) == set(flows) == templates


def test_the_workflow_shards_over_one_label_and_gates_each_round_on_the_previous_look() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow.get("on", workflow.get(True))["workflow_dispatch"]["inputs"]["hosts"]["type"] == "number"
    jobs = workflow["jobs"]
    assert jobs["campaign"]["if"] == "inputs.hosts <= 1"
    for r in (1, 2, 3):
        job = jobs[f"round-{r}"]
        assert job["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.shards.outputs.indices) }}"
        assert "${{ needs.shards.outputs.runner }}" in job["runs-on"]
        uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
        assert uploads[0]["with"]["name"] == f"shard-r{r}-${{{{ matrix.shard }}}}"
    assert jobs["round-2"]["if"] == "needs.look-1.outputs.continue == 'true'"
    assert jobs["round-3"]["if"] == "needs.look-2.outputs.continue == 'true'"
    fan_in = "\n".join(s.get("run", "") for s in jobs["fan-in"]["steps"])
    assert "h3bench report" in fan_in and '--step-summary "$GITHUB_STEP_SUMMARY"' in fan_in
