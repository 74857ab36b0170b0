"""The faults found when pools and shards are pushed (issue 43 §5), each tried as a new user would, on the simulator.

One campaign over two simulated hosts, as tests_unit/pool/test_pool.py runs them (real simulator servers, a 64x64
canvas, two requests and an audit a block, one AB/BA unit per host): shard 2/2 runs to its end on host-2 while
shard 1/2 is stopped by SIGTERM (ended as Ctrl-C ends it) on host-1 after its first block, then resumed with the command
docs/running.md gives (``h3bench run --runspec S --resume BUNDLE``) and pooled with shard 2. Before the resume, a
copy of the interrupted shard is kept (its earlier state, as a user's backup would be), and the resume is tried with
another shard (``h3bench run`` and ``pytest``), which must be refused and change nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.evidence import BundleReader, verify
from h3bench.ledger.chain import read_ledger
from h3bench.ledger.history import read_history
from h3bench.ledger.verify import verify_ledger
from h3bench.pool import pool_bundles
from h3bench.report import write_report
from h3bench.runspec.shards import ShardHost, ShardRun
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.bundlesim import npu_spec, write_bundle
from tests_unit.campaign_project import NO_REPORT, UNUSED_PLUGINS, bundles_in, write_campaign
from tests_unit.pool.test_pool import SHARD_COMMAND, _env, command

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pool-faults")]  # its module fixture runs once

SCALE = 0.0002  # the simulator's fast profile: a 5 s request in about 0.15 s
REFUSED = "--shard 2/2: {bundle} is shard 1/2 of a campaign over several hosts"


def _files(bundle: Path) -> dict[str, int]:
    return {str(p.relative_to(bundle)): p.stat().st_size for p in sorted(bundle.rglob("*")) if p.is_file()}


def _h3bench(project: Path, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h3bench.cli", *args], cwd=project, env=_env(project, host, "1.0"),
                          capture_output=True, text=True, timeout=600)


def _interrupted_shard(project: Path, spec: Path) -> Path:
    """Shard 1/2 on host-1, stopped by SIGTERM once its first block has finished; shard 2/2 on host-2 runs whole."""
    second = subprocess.Popen(command(SHARD_COMMAND, spec=str(spec), index="2", count="2",
                                      evidence=str(project / "s2")),
                              cwd=project, env=_env(project, "host-2", "1.0"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    first = subprocess.Popen(command(SHARD_COMMAND, spec=str(spec), index="1", count="2",
                                     evidence=str(project / "s1")),
                             cwd=project, env=_env(project, "host-1", "1.0"), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not any(p.stat().st_size for p in (project / "s1").glob("*/lifecycle.jsonl")):
        assert first.poll() is None and time.monotonic() < deadline, "shard 1 ended before its first block did"
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)  # as a pod or a job runner ends it (a shell started in the background ignores SIGINT)
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 130, output[-4000:]
    output, _ = second.communicate(timeout=600)
    assert second.returncode in (0, 1, 3), output[-4000:]
    (bundle,) = bundles_in(project / "s1")
    return bundle


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    project = tmp_path_factory.mktemp("faults")
    spec = write_campaign(project, baseline={"time_scale": SCALE}, candidates={"clean": {"time_scale": SCALE * 0.9}},
                          protocol={"order": "ABBAABBA", "requests_per_block": 2, "audit_counts": True})
    s1 = _interrupted_shard(project, spec)
    early = Path(shutil.copytree(s1, project / "early" / s1.name))
    before = _files(s1)
    refused = {
        "run": _h3bench(project, "host-1", "run", "--runspec", str(spec), "--resume", str(s1), "--shard", "2/2"),
        "pytest": subprocess.run(
            [sys.executable, "-m", "pytest", "--runspec", str(spec), "--resume", str(s1), "--shard", "2/2",
             *UNUSED_PLUGINS, *NO_REPORT, "tests_perf"],
            cwd=project, env=_env(project, "host-1", "1.0"), capture_output=True, text=True, timeout=600),
        "looks": _h3bench(project, "host-1", "run", "--runspec", str(spec), "--resume", str(s1), "--looks",
                          str(spec)),
    }
    untouched = _files(s1) == before
    resumed = _h3bench(project, "host-1", "run", "--runspec", str(spec), "--resume", str(s1))
    (s2,) = bundles_in(project / "s2")
    pooled = pool_bundles([s1, s2], project / "pool").path
    return {"project": project, "spec": spec, "s1": s1, "s2": s2, "early": early, "refused": refused,
            "untouched": untouched, "resumed": resumed, "pool": pooled}


# -- a resumed shard stays that shard ------------------------------------------------------------------------------


def test_a_resume_with_another_shard_is_refused_in_one_line_and_changes_nothing(campaign):
    """Issue 43: ``--resume <shard 1/2> --shard 2/2`` was accepted and wrote shard 2's blocks into shard 1's bundle."""
    expected = REFUSED.format(bundle=campaign["s1"])
    run = campaign["refused"]["run"]
    assert run.returncode == 2 and expected in run.stderr and "Traceback" not in run.stderr, run.stderr
    pytest_run = campaign["refused"]["pytest"]
    assert pytest_run.returncode != 0 and expected in pytest_run.stdout + pytest_run.stderr, pytest_run.stdout[-3000:]
    looks = campaign["refused"]["looks"]
    assert looks.returncode == 2 and "is round 1 and ran no look file" in looks.stderr, looks.stderr
    assert campaign["untouched"]


def test_a_resumed_shard_runs_its_own_blocks_only_and_is_still_one_host_s_share(campaign):
    """Issue 43: the resume planned and ran the whole campaign on one host and said ``verdict clean: PASS``."""
    resumed = campaign["resumed"]
    assert resumed.returncode in (0, 1, 3), resumed.stdout[-4000:] + resumed.stderr[-2000:]
    reader = BundleReader.open(campaign["s1"])
    record = ShardRun.of(reader.manifest)
    assert record is not None and (record.index, record.count, record.host.name) == (1, 2, "host-1")
    ran = {e["block"] for e in reader.lifecycle() if not e.get("interrupted")}
    assert ran == set(record.blocks) and len(ran) == 4, ran
    assert "verdict clean: not judged alone: shard 1 of 2" in resumed.stdout, resumed.stdout[-3000:]
    document = VerdictDocument.read(reader)
    assert document is not None and any(n.startswith("shard 1/2, round 1, on host host-1") for n in document.run_notes)
    assert verify(campaign["s1"]).ok


def test_the_resumed_shard_pools_with_the_other_into_the_whole_campaign(campaign):
    document = VerdictDocument.read(BundleReader.open(campaign["pool"]))

    assert document is not None and document.pool is not None
    assert document.pool.missing == () and [(s.index, s.host) for s in document.pool.shards] == [(1, "host-1"),
                                                                                                  (2, "host-2")]
    assert sum(s.blocks for s in document.pool.shards) == 8


# -- a pool that fails leaves nothing sealed -----------------------------------------------------------------------


def test_a_pool_that_fails_writes_nothing_the_ledger_or_the_history_could_take(tmp_path, capsys):
    """Issue 43: a failed ``h3bench pool`` left a sealed bundle with no verdict; ``ledger add`` took it as
    "inconclusive", the real pool was then refused ("two accounts of one campaign") and ``history`` dropped it.

    Two bundles that both claim every block of the campaign (each a whole run, marked as shard 1/2 and 2/2 on two
    hosts) pass the pool's checks of their records, and fail as their blocks are copied: shards never share a block.
    """
    spec = npu_spec(clean={})
    both = [write_bundle(tmp_path / f"h{i}", spec, lambda block, index: 1.0, started_at="2026-11-20T10:00:00.000Z",
                         manifest_extra={"shard": ShardRun(i, 2, ShardHost(f"host-{i}")).to_dict()}) for i in (1, 2)]
    out = tmp_path / "pool"

    code = main(["pool", *map(str, both), "--out", str(out)])

    captured = capsys.readouterr()
    assert code == 2 and "shards never share a block" in captured.err, captured.err
    assert "h3bench pool: failed; nothing was written" in captured.out
    assert not out.exists() or bundles_in(out) == []
    history = read_history([tmp_path])
    assert history.series == () and {Path(p).parent.name for p, _ in history.skipped} == {"h1", "h2"}


# -- the ledger and the history count campaigns ----------------------------------------------------------------------


def test_an_earlier_state_of_a_pooled_shard_is_the_pool_s_campaign_in_the_ledger(campaign, tmp_path, capsys):
    """Issue 43: the interrupted state of shard 1, entered after the pool of its resumed state, stood as a second
    live account (the pool named each shard by its last seal only). Entered before the pool, the pool supersedes it;
    after it, it is refused as every shard of a pooled campaign is."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    for name in ("early", "pool"):
        assert main(["ledger", "add", str(campaign[name]), "--ledger", str(first)]) == 0
    assert main(["ledger", "add", str(campaign["pool"]), "--ledger", str(second)]) == 0
    capsys.readouterr()

    code = main(["ledger", "add", str(campaign["early"]), "--ledger", str(second)])

    assert code == 2 and "shard 1/2 of a campaign whose pool is in the ledger" in capsys.readouterr().err
    found = read_ledger(first)
    assert found.superseded_by == {0: 1} and not found.problems
    assert main(["ledger", "show", "--json", "--ledger", str(first)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(e["show"]["superseded_by"], e["show"]["superseded_as"]) for e in shown] == [
        (1, "the pool of its shards"), (None, None)]
    assert [e["show"]["unverified"] for e in shown] == [None, None] and verify_ledger(first).ok


def test_ledger_show_json_marks_an_entry_whose_bundle_is_gone(campaign, tmp_path, capsys):
    moved = Path(shutil.copytree(campaign["pool"], tmp_path / "moved" / campaign["pool"].name))
    ledger = tmp_path / "ledger.jsonl"
    assert main(["ledger", "add", str(moved), "--ledger", str(ledger)]) == 0
    shutil.rmtree(moved)
    capsys.readouterr()

    code = main(["ledger", "show", "--json", "--ledger", str(ledger)])

    (entry,) = json.loads(capsys.readouterr().out)
    assert code == 0 and entry["show"]["unverified"] and entry["show"]["line"] == 1
    assert entry["show"]["superseded_by"] is None and entry["show"]["broken"] == []
    assert {k: v for k, v in entry.items() if k != "show"} == read_ledger(ledger).entries[0]


def test_the_history_counts_the_pool_once_whatever_states_of_its_shards_are_beside_it(campaign):
    dirs = [campaign["early"].parent, campaign["s1"].parent, campaign["s2"].parent, campaign["pool"].parent]

    (series,) = read_history(dirs).series

    (point,) = series.campaigns
    assert point.bundle == str(campaign["pool"]) and len(point.folded) == 2


# -- one shard alone says so, and prices itself against its own share ------------------------------------------------


def test_a_lone_shard_s_summary_says_it_is_a_shard_and_not_the_campaign_s_verdict(campaign, tmp_path):
    """Issue 43: one shard's summary.md read "h3bench: PASS for ..." like a whole campaign's."""
    written = write_report(campaign["s2"], tmp_path)

    summary = Path(written.summary).read_text().splitlines()
    assert summary[0].startswith("## h3bench: shard 2/2, not judged alone for `plugin-test`"), summary[:3]
    assert summary[2].startswith("> **SHARD 2/2** of a campaign over 2 hosts, run on host `host-2`: this host's pairs")
    assert any(line.startswith("- **clean: not judged alone: shard 2 of 2; pool the shards with h3bench pool** "
                               "(this host's pairs alone: ") for line in summary), summary


def test_a_shard_s_device_time_is_compared_with_its_own_share_of_the_fixed_design(campaign):
    """Issue 43: a shard that ran every block of its share said "50% saved against the fixed design" (the whole
    campaign's): the resumed shard 1, like shard 2, ran all of its share of the fixed design, so nothing was saved."""
    printed = campaign["resumed"].stdout
    assert re.search(r"fixed design ran to .*; [\d.]+ device-h, 0% (saved|more) against the fixed design's", printed), \
        printed[-3000:]
    for name in ("s1", "s2"):
        document = VerdictDocument.read(BundleReader.open(campaign[name]))
        assert document is not None
        (device,) = document.device.values()
        assert device.fixed_device_s == pytest.approx(device.device_s, rel=0.02)
