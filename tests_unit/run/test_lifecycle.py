"""One typed lifecycle record: what run_block writes to lifecycle.jsonl is read back as the same Lifecycle."""

from __future__ import annotations

from h3bench.outcome import Outcome
from h3bench.run.records import FailureKind, Lifecycle
from h3bench.server.proctree import ProcessInfo
from h3bench.server.record import ExitCheck, ExitReport, ServerRecord


def _report() -> ExitReport:
    worker = ProcessInfo(12, 11, 1.5, "python", ("python", "-m", "worker"), "tree")
    return ExitReport(port=8000, pids_seen=(worker,), escaped=(worker,), survivors=(), port_free=True,
                      port_holder=None, device_leftovers=(), device_notes=("npu 0 released",))


def test_a_line_keeps_the_servers_fields_at_its_top_level_and_reads_back_the_same():
    server = ServerRecord(argv=("sim", "--port", "8000"), env={"A": "1"}, pid=11, host="127.0.0.1", port=8000,
                          startup_s=1.0, graceful=True, exit_code=0, pids_seen=_report().pids_seen)
    life = Lifecycle("5s-x-1A-baseline", "baseline", 5.0, 1, server=server, shutdown_budget_s=30.0,
                     exit=ExitCheck.of(_report()), failure="request failed: boom",
                     failure_kind=FailureKind.REQUEST, failure_outcome=Outcome.INCONCLUSIVE)
    record = life.to_record()
    assert record["pid"] == 11 and record["argv"] == ["sim", "--port", "8000"] and "server" not in record
    assert record["pids_seen"][0]["cmdline"] == ["python", "-m", "worker"]
    assert record["exit"]["pids_seen"] == [12] and record["exit"]["escaped"] == ["pid 12 (python: python -m worker)"]
    assert record["exit"]["verified"] is True and record["failure_kind"] == "request failed"
    assert Lifecycle.from_record(record) == life
    assert life.server.startup_s == 1.0 and life.server.graceful is True and life.server.exit_code == 0
    assert life.recorded_failure is not None and life.recorded_failure.outcome is Outcome.INCONCLUSIVE


def test_a_line_written_before_the_typed_record_still_reads():
    """The unverified exit had five keys, older lines no failure kind or outcome, a test's line almost nothing."""
    old = {"block": "b", "arm": "baseline", "duration": 5.0, "position": 1, "startup_s": 2.0,
           "exit": {"pids_seen": [], "survivors": [], "port_free": None, "port_holder": None, "verified": False},
           "failure": "server did not start: no /health", "interrupted": None}
    life = Lifecycle.from_record(old)
    assert life.exit == ExitCheck() and life.server.startup_s == 2.0
    failure = life.recorded_failure
    assert failure is not None and failure.kind is FailureKind.START and failure.outcome is Outcome.FAIL
    assert Lifecycle.from_record({"block": "b", "arm": "a", "duration": 5, "position": 2}).recorded_failure is None
