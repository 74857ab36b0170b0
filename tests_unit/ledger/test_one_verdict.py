"""One verdict everywhere (issue 43 §5): every presentation reads the one verdict the run stored.

A candidate whose server dies in the middle of a request (the simulator's ``crash_request``) is stopped after its
first block: FAIL on the screen and in ``verdict.json``, and it was ``inconclusive`` in the ledger and INCONCLUSIVE
in the export, which read only the duration's parts (no pair was complete) and not the stop rule that fired. One
real ``h3bench run`` on the simulator (two blocks: the baseline's, then the candidate's, which fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.ledger.chain import read_ledger
from tests_unit.campaign_project import bundles_in, write_campaign
from tests_unit.pool.test_pool import _env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The bundle of a campaign whose candidate's server dies during its first request, and what the run printed."""
    project = tmp_path_factory.mktemp("crashed")
    spec = write_campaign(project, candidates={"broken": {"crash_request": 1}},
                          protocol={"request_timeout_s": 4.0, "shutdown_budget_s": 3.0})
    run = subprocess.run([sys.executable, "-m", "h3bench.cli", "run", "--runspec", str(spec), "--evidence-dir",
                          str(project / "evidence")], cwd=project, env=_env(project, "host-1", "1.0"), capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    (bundle,) = bundles_in(project / "evidence")
    return bundle, run.stdout


def test_the_screen_verdict_json_the_ledger_and_every_export_say_fail(crashed, tmp_path, capsys):
    bundle, printed = crashed
    stored = json.loads((bundle / "verdict.json").read_text())
    assert stored["candidates"]["broken"]["verdict"] == "FAIL"
    assert "verdict broken: FAIL (stopped: " in printed and "broken 5s vs baseline: FAIL;" in printed, printed

    assert main(["export", str(bundle), "--format", "json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["records"]
    assert record["verdict"] == "FAIL"
    assert main(["export", str(bundle), "--format", "github-benchmark"]) == 0
    assert all("verdict FAIL (broken vs baseline)" in b["extra"] for b in json.loads(capsys.readouterr().out))

    ledger = tmp_path / "ledger.jsonl"
    assert main(["ledger", "add", str(bundle), "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    (entry,) = read_ledger(ledger).entries
    assert entry["verdict"] == "FAIL" and any(r.startswith("stopped: ") for r in entry["reasons"])
    assert "broken 5 s rejected" in out, out


def test_a_crashed_candidate_claims_no_device_time_saved_against_the_fixed_design(crashed):
    """Issue 43: the crashed run said "50% saved against the fixed design's": the fixed design stops at the same
    failure, so the two blocks that ran are compared with nothing."""
    bundle, printed = crashed
    stored = json.loads((bundle / "verdict.json").read_text())

    (line,) = [line for line in printed.splitlines() if line.strip().startswith("fixed design ran to")]
    assert line.rstrip().endswith("device-h") and "against the fixed design" not in printed, line
    assert stored["candidates"]["broken"]["durations"]["5s"]["looks"]["fixed_device_s"] is None
    assert stored["device"]["5s"]["fixed_device_s"] is None and stored["device"]["5s"]["device_s"] > 0
