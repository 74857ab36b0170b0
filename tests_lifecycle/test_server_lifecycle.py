"""Server lifecycle of every block.

Every block's server must become ready within its startup budget, take its
warmup apart from the measured requests, stop within the shutdown budget that
all arms share (and that is disclosed), leave no worker, zombie or port behind,
and leave its log in the evidence bundle. One test per block, so a failing
block hides no other.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lifecycle


def test_server_ready_within_startup_budget(campaign, block):
    budget = campaign.spec.protocol.startup_budget_s
    startup = campaign.lifecycle(block).lifecycle.startup_s
    assert startup is not None and startup <= budget, f"{block.id}: ready after {startup} s, budget {budget} s"


def test_warmup_succeeded_and_recorded_apart(campaign, block):
    warmups = campaign.spec.protocol.warmups_per_block
    result = campaign.lifecycle(block)
    assert len(result.warmups) == warmups, f"{block.id}: {len(result.warmups)} warmups, expected {warmups}"
    assert all(s.ok for s in result.warmups), f"{block.id}: a warmup request failed"
    assert not {s.request_id for s in result.warmups} & {s.request_id for s in result.measured}
    # Every arm's warmup runs the spec's steps (a cheap warmup's, else the workload's); None: a line from before.
    steps = campaign.spec.protocol.warmup_steps or campaign.spec.workload.steps
    ran = result.lifecycle.server.warmup_steps
    assert ran in (steps, None), f"{block.id}: its warmup ran {ran} inference steps, the spec says {steps}"


def test_shutdown_within_shared_budget(campaign, block):
    budget = campaign.spec.protocol.shutdown_budget_s
    lifecycle = campaign.lifecycle(block).lifecycle
    assert lifecycle.shutdown_budget_s == budget, "every arm must be stopped with the same disclosed budget"
    assert lifecycle.graceful, f"{block.id}: not stopped by SIGTERM within {budget:g} s; it was killed"


def test_every_worker_exited(campaign, block):
    exit_check = campaign.lifecycle(block).lifecycle.exit
    assert len(exit_check.pids_seen) >= 2, f"{block.id}: no worker process was ever seen"
    assert not exit_check.survivors, f"{block.id}: survivors {exit_check.survivors}"
    assert exit_check.port_free, f"{block.id}: port still taken by {exit_check.port_holder}"


def test_server_logs_kept(campaign, block):
    result = campaign.lifecycle(block)
    log = campaign.bundle.path / result.log_relpath
    assert log.is_file() and log.stat().st_size > 0, f"{block.id}: log missing at {log}"
