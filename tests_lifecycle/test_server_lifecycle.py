"""Server lifecycle per arm and workload (REFERENCE §6 and §8).

Every block's server must become ready within its startup budget, take its
warmup apart from the measured requests, stop within the shutdown budget that
all arms share (and that is disclosed), leave no worker, zombie or port behind,
and leave its log in the evidence bundle.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lifecycle


def test_server_ready_within_startup_budget(campaign, arm_workload):
    budget = campaign.spec.protocol.startup_budget_s
    for block in campaign.results_for(arm_workload):
        startup = block.lifecycle["startup_s"]
        assert startup is not None and startup <= budget, f"{block.block.id}: ready after {startup} s, budget {budget} s"


def test_warmup_succeeded_and_recorded_apart(campaign, arm_workload):
    warmups = campaign.spec.protocol.warmups_per_block
    for block in campaign.results_for(arm_workload):
        assert len(block.warmups) == warmups, f"{block.block.id}: {len(block.warmups)} warmups, expected {warmups}"
        assert all(s.ok for s in block.warmups), f"{block.block.id}: a warmup request failed"
        assert not set(s.request_id for s in block.warmups) & set(s.request_id for s in block.measured)


def test_shutdown_within_shared_budget(campaign, arm_workload):
    budget = campaign.spec.protocol.shutdown_budget_s
    for block in campaign.results_for(arm_workload):
        lc = block.lifecycle
        assert lc["shutdown_budget_s"] == budget, "every arm must be stopped with the same disclosed budget"
        assert lc["graceful"], f"{block.block.id}: not stopped by SIGTERM within {budget:g} s; it was killed"


def test_every_worker_exited(campaign, arm_workload):
    for block in campaign.results_for(arm_workload):
        exit_report = block.lifecycle["exit"]
        assert len(exit_report["pids_seen"]) >= 2, f"{block.block.id}: no worker process was ever seen"
        assert not exit_report["survivors"], f"{block.block.id}: survivors {exit_report['survivors']}"
        assert exit_report["port_free"], f"{block.block.id}: port still taken by {exit_report['port_holder']}"


def test_server_logs_kept(campaign, arm_workload):
    for block in campaign.results_for(arm_workload):
        log = campaign.bundle.path / block.log_relpath
        assert log.is_file() and log.stat().st_size > 0, f"{block.block.id}: log missing at {log}"
