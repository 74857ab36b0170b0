"""One campaign over several hosts on the simulator: three shards at once, each its own "host", then pooled.

Each shard is ``h3bench run --shard I/3`` in its own process with its own
device lock, host name (``H3BENCH_HOST_NAME``) and simulator host factor
(``H3BENCH_SIM_HOST_FACTOR``): in the first campaign host-3 is 5 % slower
overall, in the second the candidate's effect is absent on host-3. The
commands are the ones the workflow and the Kubernetes Job run
(tests_unit/pool/test_campaign_engines.py checks that they match).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from h3bench.evidence import Bundle, verify
from h3bench.evidence.verify import final_sha256
from h3bench.outcome import Outcome
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.campaign_project import NO_REPORT, bundles_in, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pool")]

# The commands of one shard and of the fan-in, as the workflow and the Job write them.
SHARD_COMMAND = ("h3bench", "run", "--runspec", "{spec}", "--shard", "{index}/{count}", "--evidence-dir", "{evidence}")
POOL_COMMAND = ("h3bench", "pool", "{bundles}", "--out", "{out}")
LOOK_COMMAND = ("h3bench", "pool", "{bundles}", "--out", "{out}", "--look")

BASELINE_SCALE = 0.0006  # 5 s: 0.45 s a request, so a host 5 % slower shows above the fixed overheads


def command(template: tuple[str, ...], **values: str | list[str]) -> list[str]:
    """A template filled in; ``h3bench`` is this interpreter's ``-m h3bench.cli`` (the worktree's code)."""
    out: list[str] = []
    for part in template:
        if part == "{bundles}":
            out += [str(v) for v in values["bundles"]]
        else:
            out.append(part.format(**{k: v for k, v in values.items() if isinstance(v, str)}))
    return [sys.executable, "-m", "h3bench.cli", *out[1:]] if out[0] == "h3bench" else out


def shard_command(template: tuple[str, ...], **values: str) -> list[str]:
    """A shard's command as the workflow runs it, less the report it writes as it ends (``--no-report``): no test
    here reads a shard's own report (the pooled bundle's is made below; tests_unit/report/ tests the report)."""
    return [*command(template, **values), *NO_REPORT]


def _env(project: Path, host: str, factor: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update({"H3BENCH_HOST_NAME": host, "H3BENCH_SIM_HOST_FACTOR": factor,
                "H3BENCH_DEVICE_LOCK": str(project / f"{host}.lock"), "H3BENCH_CACHE_DIR": str(project / "cache"),
                "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    env.pop("H3BENCH_LPIPS_DIR", None)
    return env


def run_shards(project: Path, spec: Path, jobs: list[tuple[int, str, str, str]], *, count: int = 3,
               outputs: dict[str, str] | None = None) -> dict[str, Path]:
    """Start every shard of ``count`` at once (index, host, factor, evidence dir name); their bundles by evidence dir
    name, and what each printed in ``outputs``."""
    procs = []
    for index, host, factor, name in jobs:
        args = shard_command(SHARD_COMMAND, spec=str(spec), index=str(index), count=str(count), evidence=str(project / name))
        procs.append((name, subprocess.Popen(args, cwd=project, env=_env(project, host, factor),
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    found = {}
    for name, proc in procs:
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode in (0, 1, 3), f"{name} exited {proc.returncode}:\n{output[-6000:]}"
        if outputs is not None:
            outputs[name] = output
        (found[name],) = bundles_in(project / name)
    return found


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    project = tmp_path_factory.mktemp("hosts")
    spec = write_campaign(project, baseline={"time_scale": BASELINE_SCALE},
                          candidates={"clean": {"time_scale": BASELINE_SCALE * 0.9}},
                          protocol={"order": "ABBAABBAABBA", "requests_per_block": 2, "audit_counts": True})
    bundles = run_shards(project, spec, [(1, "host-1", "1.0", "a1"), (2, "host-2", "1.0", "a2"),
                                         (3, "host-3", "1.05", "a3"), (2, "host-1", "1.0", "poser")])
    # The second campaign: the same spec, the candidate 80 % slower than the baseline on host-3 (three hosts of two
    # pairs leave the interaction check 3 residual degrees of freedom: at its 0.1 % level it sees large effects only).
    # Its shards 1 and 2 are the first campaign's: hosts 1 and 2 run them alike in both.
    bundles |= run_shards(project, spec, [(3, "host-3", "clean=2.0", "b3")])
    return {**bundles, "b1": bundles["a1"], "b2": bundles["a2"], "project": project}


def pool(project: Path, bundles: list[Path], out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    template = LOOK_COMMAND if "--look" in extra else POOL_COMMAND
    return subprocess.run(command(template, bundles=[str(b) for b in bundles], out=str(project / out)),
                          cwd=project, env=_env(project, "fan-in", "1.0"), capture_output=True, text=True,
                          timeout=600)


def _document(path: Path) -> VerdictDocument:
    found = VerdictDocument.read(Bundle.open(path))
    assert found is not None and found.pool is not None
    return found


def test_three_hosts_pool_into_one_sealed_verdict_with_a_line_per_host(hosts: dict[str, Path]) -> None:
    project = hosts["project"]
    done = pool(project, [hosts["a1"], hosts["a2"], hosts["a3"]], "pooled")
    assert done.returncode == 0, done.stdout + done.stderr  # PASS: a true 10 % speedup over 6 pairs
    (path,) = bundles_in(project / "pooled")
    assert verify(path).ok
    document = _document(path)
    assert document.outcome is Outcome.PASS
    clean = document.candidates["clean"].durations["5s"]
    assert clean.estimate is not None and clean.estimate.k == 6 and 0.85 < clean.estimate.geomean < 0.95
    found = document.pool.series["clean"]["5s"]
    assert [h.host for h in found.hosts] == ["host-1", "host-2", "host-3"] and all(h.pairs == 2 for h in found.hosts)
    assert not found.interaction.disagree  # host-3 is slower in both arms: that cancels within its pairs
    # Two baseline blocks per host on two shared cores: the 5 % host is not always named (tests_unit/course/test_shards.py
    # checks the rule itself); a host that is named must be the slow one.
    assert {o.host for o in document.pool.baseline_outliers["5s"]} <= {"host-3"}
    assert [r.final_sha256 for r in document.pool.shards] == [document_seal(hosts[n]) for n in ("a1", "a2", "a3")]
    for host in ("host-1", "host-2", "host-3"):
        assert f"host {host}: ratio" in done.stdout
    # Every block's evidence came along: the raw /metrics scrapes its samples name, the contract files its server
    # start recorded; the shards ran the same simulator, so no change of contract is named.
    pooled = Bundle.open(path)
    scrapes = [r["scrapes"][side] for r in pooled.samples() for side in ("before", "after")]
    assert scrapes and all(s and (path / s).is_file() and s.startswith("metrics/") for s in scrapes)
    for event in pooled.lifecycle():
        assert (path / event["contract"]["openapi"]["relpath"]).is_file(), event["contract"]
    assert "contract changed between shards" not in done.stdout
    # report, ledger add and history take it like any other bundle.
    env = _env(project, "fan-in", "1.0")
    for args in (["report", str(path)], ["ledger", "add", str(path), "--ledger", str(project / "ledger.jsonl")],
                 ["history", str(project / "pooled")]):
        ran = subprocess.run([sys.executable, "-m", "h3bench.cli", *args], cwd=project, env=env, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, f"{args}: {ran.stdout}{ran.stderr}"
    entry = json.loads((project / "ledger.jsonl").read_text().splitlines()[0])
    assert entry["bundle"]["final_sha256"] == document_seal(path) and entry["verdict"] == "PASS"


def document_seal(path: Path) -> str:
    found = final_sha256(path)
    assert found is not None
    return found


def test_a_fixed_design_look_stops_every_series_and_says_no_round_follows(hosts: dict[str, Path]) -> None:
    project = hosts["project"]
    done = pool(project, [hosts["a1"], hosts["a2"], hosts["a3"]], "look", "--look")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean at 5s: stop (PASS) after 6 pairs" in done.stdout and done.stdout.rstrip().endswith(".json")
    assert "continue: false" in done.stdout
    (look,) = (project / "look").glob("looks-round-2.json")
    assert json.loads(look.read_text())["continue"] is False


def test_an_effect_that_differs_by_host_is_caught_and_the_pooled_interval_says_so(hosts: dict[str, Path]) -> None:
    project = hosts["project"]
    done = pool(project, [hosts["b1"], hosts["b2"], hosts["b3"]], "differs")
    (path,) = bundles_in(project / "differs")
    document = _document(path)
    found = document.pool.series["clean"]["5s"]
    assert found.interaction.disagree, done.stdout
    by_host = {h.host: h.ratio for h in found.hosts}
    assert by_host["host-3"] is not None and by_host["host-3"] > 1.5 and by_host["host-1"] < 0.95
    clean = document.candidates["clean"].durations["5s"]
    assert clean.speed is Outcome.INCONCLUSIVE and "the hosts disagree beyond chance" in clean.speed_reasons[0]
    assert found.hosts_lower is not None and found.hosts_upper is not None
    assert found.hosts_upper - found.hosts_lower > clean.estimate.ci_high - clean.estimate.ci_low  # wider
    assert done.returncode == 3


def test_a_missing_shard_is_named_and_makes_the_verdict_inconclusive(hosts: dict[str, Path]) -> None:
    project = hosts["project"]
    done = pool(project, [hosts["a1"], hosts["a2"]], "missing")
    assert done.returncode == 3, done.stdout + done.stderr
    document = _document(bundles_in(project / "missing")[0])
    assert document.pool.missing == ("shard 3/3 of round 1",)
    assert document.outcome is Outcome.INCONCLUSIVE
    assert "shard 3/3 of round 1" in document.candidates["clean"].durations["5s"].speed_reasons[0]


def test_a_shard_given_twice_or_a_host_posing_as_two_is_refused_with_the_reason(hosts: dict[str, Path]) -> None:
    project = hosts["project"]
    copy = project / "elsewhere" / hosts["a1"].name
    shutil.copytree(hosts["a1"], copy)
    twice = pool(project, [hosts["a1"], copy, hosts["a2"], hosts["a3"]], "out-twice")
    assert twice.returncode == 2 and "are the same shard (shard 1/3 of round 1, final.json SHA-256" in twice.stderr
    poser = pool(project, [hosts["a1"], hosts["poser"], hosts["a3"]], "out-poser")
    assert poser.returncode == 2 and "ran on the same host host-1: one host cannot pose as two shards" in poser.stderr
    other = pool(project, [hosts["a2"], hosts["poser"]], "out-other")  # another run of shard 2, on another host
    assert other.returncode == 2 and "both claim shard 2/3 of round 1" in other.stderr
    for name in ("out-twice", "out-poser", "out-other"):
        assert not (project / name).exists() or not bundles_in(project / name)  # refused before anything is written
