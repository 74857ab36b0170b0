"""SIGTERM, SIGHUP and SIGKILL in the middle of a block, or while its server loads (pytester projects, real
simulator servers).

``timeout``, a cancelled CI job, a closed terminal and a batch scheduler end
the harness with SIGTERM or SIGHUP. Each must end the campaign as Ctrl-C
does: the server stopped within the shared budget, no process of its tree
left, the port free, the block recorded as incomplete, the bundle sealed as
interrupted naming the signal, and a non-zero exit. A second signal does not
wait for the graceful stop. A SIGKILLed harness cannot clean up: its server
still dies (parent-death signal) within the shutdown budget.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from h3bench import evidence
from h3bench.server.ports import port_free
from h3bench.server.proctree import CAMPAIGN_ID_ENV, marked_processes
from tests_unit.campaign_project import bundle_of, evidence_lines, start_campaign, wait_until, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env")]

BUDGET_S = 8.0
MARGIN_S = 5.0  # process teardown on a busy machine


def _in_candidate_block(pytester: pytest.Pytester, *args: str, **sim) -> tuple[object, dict]:
    """Start a campaign and return it once the candidate's first block has answered a request."""
    # No audit: the test is about the interruption, not about request latencies on a busy machine.
    spec = write_campaign(pytester.path, candidates={"slow": {"time_scale": 0.003, **sim}},
                          protocol={"shutdown_budget_s": BUDGET_S, "audit": False})
    # The candidate's block alone (-k): the baseline's block before it is not what the signal lands in.
    proc = start_campaign(pytester, spec, "tests_perf", "-k", "2B", "--benchmark-disable", *args,
                          output=pytester.path / "out.txt")
    block = "5s-slow-2B-slow"
    wait_until(lambda: any(s["block_id"] == block for s in evidence_lines(pytester, "samples.jsonl")), proc)
    (server,) = [s for s in evidence_lines(pytester, "servers.jsonl") if s["block"] == block]
    return proc, server


def _session(pytester: pytest.Pytester) -> str:
    (manifest,) = (pytester.path / "evidence").glob("*/manifest.json")
    return str(json.loads(manifest.read_text())["session"])


def _assert_sealed_as_interrupted(pytester: pytest.Pytester, server: dict, signame: str) -> None:
    bundle = bundle_of(pytester)
    assert evidence.verify(bundle).ok, evidence.verify(bundle).problems
    final = json.loads((bundle / "final.json").read_text())
    assert final["outcome"] == "interrupted" and final["interrupted"] == f"interrupted by {signame}"
    (event,) = [e for e in evidence_lines(pytester, "lifecycle.jsonl") if e["block"] == server["block"]]
    assert event["interrupted"] == signame and event["failure_outcome"] == "INCONCLUSIVE"
    assert not event["exit"]["survivors"] and event["exit"]["port_free"]
    assert port_free("127.0.0.1", server["port"])
    assert not marked_processes(CAMPAIGN_ID_ENV, _session(pytester))
    assert f"the bundle is sealed as INTERRUPTED: interrupted by {signame}" in (pytester.path / "out.txt").read_text()


@pytest.mark.parametrize(("signame", "workers"), [("SIGTERM", []), ("SIGHUP", []), ("SIGTERM", ["-n", "2"])],
                         ids=["SIGTERM", "SIGHUP", "SIGTERM-xdist-controller"])
def test_a_signal_ends_the_campaign_as_ctrl_c_does(pytester, signame, workers):
    proc, server = _in_candidate_block(pytester, *workers)

    start = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    code = proc.wait(timeout=BUDGET_S + 60)

    assert code == pytest.ExitCode.INTERRUPTED
    assert time.monotonic() - start < BUDGET_S + MARGIN_S + 30  # the graceful stop, then sealing
    _assert_sealed_as_interrupted(pytester, server, signame)


def test_a_signal_while_the_server_is_still_loading_stops_it_and_seals(pytester):
    # On an NPU host a server loads for minutes, the likeliest moment to give up on a run. Here the candidate's
    # workers load for 60 s (load_s is scaled by time_scale); the signal comes once its launch is recorded.
    spec = write_campaign(pytester.path, candidates={"slow": {"time_scale": 0.003, "load_s": 20_000}},
                          protocol={"shutdown_budget_s": BUDGET_S, "audit": False, "startup_budget_s": 300})
    proc = start_campaign(pytester, spec, "tests_perf", "-k", "2B", "--benchmark-disable", output=pytester.path / "out.txt")
    block = "5s-slow-2B-slow"
    wait_until(lambda: any(s["block"] == block for s in evidence_lines(pytester, "servers.jsonl")), proc)
    (server,) = [s for s in evidence_lines(pytester, "servers.jsonl") if s["block"] == block]

    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=BUDGET_S + 60)

    assert code == pytest.ExitCode.INTERRUPTED, (pytester.path / "out.txt").read_text()[-3000:]
    (event,) = [e for e in evidence_lines(pytester, "lifecycle.jsonl") if e["block"] == block]
    assert event["startup_s"] is None, "the signal should have come before the server was ready"
    _assert_sealed_as_interrupted(pytester, server, "SIGTERM")


def test_a_second_sigterm_kills_the_server_tree_at_once_and_still_seals(pytester):
    # The candidate's server takes 6 s to shut down gracefully; the second signal must not wait for it.
    proc, server = _in_candidate_block(pytester, shutdown_delay_s=6.0)

    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=BUDGET_S + 60)

    assert code == pytest.ExitCode.INTERRUPTED
    event = next(e for e in evidence_lines(pytester, "lifecycle.jsonl") if e["block"] == server["block"])
    assert event["graceful"] is False, "the second SIGTERM should have killed the tree before its graceful stop"
    # Not a wall-clock bound on the whole exit: after the kill the harness still writes the verdict and the report,
    # which on a busy machine takes longer than the 6 s graceful stop would have; "graceful is False" is the proof.
    _assert_sealed_as_interrupted(pytester, server, "SIGTERM")


def test_a_sigkilled_harness_still_takes_its_server_down(pytester):
    proc, server = _in_candidate_block(pytester)
    session = _session(pytester)
    tree = marked_processes(CAMPAIGN_ID_ENV, session)
    assert len(tree) >= 3, "the server and its workers carry the campaign's marker"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    alive = _still_running(tree, timeout=BUDGET_S + MARGIN_S)

    assert not alive, f"outlived the harness: {[p.pid for p in alive]}"
    assert port_free("127.0.0.1", server["port"])


def _still_running(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still running at the deadline. A zombie has exited: only its parent can reap it, and that may be
    this pytest worker, a child subreaper once an earlier test started a server in it, which never waits on orphans."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
