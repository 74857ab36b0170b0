"""``h3bench bisect`` end to end on real simulator servers: verify, probes, skip, confirm, SIGKILL and --resume,
the several-hosts steps, quality bisection, the report.

Small ranges and a large step keep it to a few dozen blocks of 0.4 s requests on a 64x64 canvas; LPIPS
is neither required nor found (every other gate decodes and compares every output at every pair).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3bench.bisect.log import LOG_NAME, BisectionLog
from h3bench.bisect.runner import observe_bundle
from h3bench.cli import main
from h3bench.evidence import verify
from h3bench.ledger.chain import read_ledger

REPO = Path(__file__).resolve().parents[2]
INPUTS = REPO / "fixtures" / "inputs"
SIM = {"time_scale": 0.0005, "jitter_cv": 0.002, "workers": 1, "block_seed": 0}
SLOW = {"step_s": [44.7, 358.0]}  # every DiT forward three times as long
TWICE, FOUR_TIMES = {"step_s": [29.8, 238.66]}, {"step_s": [59.6, 477.32]}
NOISY = {"video_noise": 40.0}  # an output that fails SSIM and PSNR
DOES_NOT_START = {"startup_error": "HCCL init failed"}

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env", "no_lpips_weights")]


@pytest.fixture
def no_lpips_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No LPIPS weights to find, whatever this machine caches: the gates run without LPIPS (not required here)."""
    monkeypatch.setenv("H3BENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("H3BENCH_LPIPS_DIR", raising=False)


def _value(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def write_range(path: Path, commits: list[tuple[str, dict]], bad: dict, *, on: str = "speed") -> Path:
    """A bisect spec: the good engine, ``commits`` (label, sim overrides) between, the bad engine's overrides."""
    pins = {line.split("=")[0].strip(): line for line in (REPO / "fixtures/runspecs/sim.toml").read_text().splitlines()
            if line.startswith("reference_")}
    entries = ",\n".join(f"  {{ commit = {json.dumps(label)}" + (f", sim = {_value(sim)}" if sim else "") + " }"
                         for label, sim in commits)
    argv = '["{python}", "-m", "h3bench.sim", "--host", "{host}", "--port", "{port}"]'
    text = f"""
name = "live-bisect"
[hardware]
kind = "sim"
[model]
path = "MiniMaxAI/MiniMax-H3"
content_identity = "simulator"
[inputs]
prompt = "a test prompt"
{pins["reference_video"].replace("../inputs/", f"{INPUTS}/")}
{pins["reference_audio"].replace("../inputs/", f"{INPUTS}/")}
[workload]
durations = [5]
size = "64x64"
[protocol]
design = "sequential"
requests_per_block = 2
audit_counts = true
request_timeout_s = 30.0
startup_budget_s = 30.0
shutdown_budget_s = 5.0
[gates]
lpips_required = false
[arms.baseline]
description = "good"
argv = {argv}
sim = {_value(SIM)}
[arms.bad]
description = "bad"
argv = {argv}
sim = {_value({**SIM, **bad})}
[bisect]
on = "{on}"
good = {{ commit = "good" }}
bad = {{ commit = "bad" }}
max_pairs = 4
campaign_pairs = 6
commits = [
{entries},
]
[hints]
source = "the simulator"
startup_s = 1.0
shutdown_s = 0.5
e2e_s.baseline = {{ "5" = 0.4 }}
"""
    path.write_text(text)
    return path


def records(directory: Path) -> list[dict]:
    return BisectionLog(directory / LOG_NAME).read()


def bisection_dir(root: Path) -> Path:
    (found,) = root.glob("bisect-*")
    return found


def test_a_killed_bisection_resumes_to_the_group_it_can_name_and_skips_what_does_not_start(tmp_path, capsys):
    """s1 unchanged, s2 does not start, bad three times slower: the culprit is s2 or bad, and no probe can tell."""
    spec = write_range(tmp_path / "range.toml", [("s1", {}), ("s2", DOES_NOT_START)], SLOW)
    evidence = tmp_path / "evidence"
    command = [sys.executable, "-m", "h3bench.cli", "bisect", "--runspec", str(spec), "--evidence-dir", str(evidence)]
    printed = tmp_path / "first.txt"
    with printed.open("wb") as out:
        first = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:  # kill it inside its first probe's campaign
            found = list(evidence.glob("bisect-*/bundles/*probe-01*/samples.jsonl"))
            if found and found[0].read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        assert first.poll() is None, printed.read_text()
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    directory = bisection_dir(evidence)
    before = records(directory)
    assert [r["event"] for r in before] == ["start", "verify", "round"]

    ledger = tmp_path / "ledger.jsonl"
    done = subprocess.run([*command, "--resume", str(directory), "--ledger", str(ledger)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    log = records(directory)
    assert log[: len(before)] == before, "the log is append-only: the killed run's records are kept as they were"
    campaigns = [r for r in log if r["event"] in ("verify", "probe", "confirm")]
    seals = [r["final_sha256"] for r in campaigns]
    assert len(seals) == len(set(seals)), "no campaign is counted twice"
    probes = {r["commit"]: r for r in log if r["event"] == "probe"}
    assert probes["s1"]["status"] == "measured" and probes["s1"]["decision"] == "unchanged"
    # The commit that does not start is skipped, with the server's own reason, and never counted as slow.
    assert probes["s2"]["status"] == "skipped" and "server did not start" in probes["s2"]["reason"]
    assert "HCCL init failed" in probes["s2"]["reason"] and probes["s2"]["log_ratios"] == []
    (stop,) = [r for r in log if r["event"] == "stop"]
    assert stop["named"] == [2, 3] and stop["mass"] > 0.95  # s2 and bad: one group
    (confirm,) = [r for r in log if r["event"] == "confirm"]
    assert confirm["claim"] and confirm["commit"] == "bad"
    assert "s1" in Path(confirm["bundle"]).name or json.loads(
        (directory / confirm["bundle"] / "manifest.json").read_text())["spec"]["arms"]["baseline"][
            "description"].startswith("engine s1")
    assert log[-1]["event"] == "end" and log[-1]["outcome"] == "culprit confirmed"
    # Each campaign a sealed bundle that verifies; the probe SIGKILL interrupted was resumed, not run twice.
    for record in campaigns:
        assert verify(directory / record["bundle"]).ok
    assert len(list((directory / "bundles").glob("*probe-01*"))) == 1
    assert (next((directory / "bundles").glob("*probe-01*")) / "resume-1").is_dir()
    # Only the confirm's verdict enters the ledger, as the claim.
    (entry,) = [line.record for line in read_ledger(ledger).lines]
    assert entry is not None and entry["bundle"]["final_sha256"] == confirm["final_sha256"]
    assert "the culprit is one of s2, bad" in done.stdout and "skipped s2" in done.stdout
    # A second resume does nothing again.
    again = subprocess.run([*command, "--resume", str(directory)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and records(directory) == log
    # The report draws the posterior after the verify and each probe (3 rows of 3 commits), and the device time.
    assert main(["report", str(directory), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count("<rect") == 3 * 3 and "device-h" in page and "culprit confirmed" in page
    assert "| probe 2 | s2 | skipped |" in (tmp_path / "report" / "summary.md").read_text()


def test_a_quality_bisection_over_several_hosts_steps(tmp_path, capsys):
    """--on quality through --next/--run/--take, as the NPU workflow runs it: s1 breaks the output."""
    spec = write_range(tmp_path / "range.toml", [("s1", NOISY)], NOISY, on="quality")
    base = ["bisect", "--runspec", str(spec), "--evidence-dir", str(tmp_path / "evidence")]
    assert main([*base, "--run", "verify"]) == 2  # a step belongs to a bisection: refused without one
    assert "--resume DIR" in capsys.readouterr().err
    assert main([*base, "--next", "2"]) == 0
    out = capsys.readouterr().out
    directory = Path(next(line for line in out.splitlines() if line.startswith("bisection: ")).split(": ", 1)[1])
    assert json.loads(out.splitlines()[-1].removeprefix("steps=")) == ["verify"]
    resume = [*base, "--resume", str(directory)]
    taken = []
    for _ in range(4):  # verify, the one probe, the confirm: each run on "a host", then taken
        assert main([*resume, "--next", "2"]) == 0
        steps = _steps(capsys)
        if not steps:
            break
        for step in steps:
            assert main([*resume, "--run", step]) == 0
            bundle = Path(next(line for line in capsys.readouterr().out.splitlines()
                               if line.startswith("bundle: ")).split(": ", 1)[1])
            assert main([*resume, "--take", str(bundle)]) == 0
            assert main([*resume, "--take", str(bundle)]) == 0  # taken once, by its seal
            assert "already in the log" in capsys.readouterr().out
            taken.append(step)
    assert taken == ["verify", "probe:1", "confirm"]
    assert main(resume) == 0  # nothing left to run: the claim stands
    log = records(directory)
    (verified,) = [r for r in log if r["event"] == "verify"]
    assert verified["reproduced"] and verified["failing"] == verified["matched"] > 0
    (probe,) = [r for r in log if r["event"] == "probe"]
    assert probe["commit"] == "s1" and probe["decision"] == "changed" and probe["log_lr"] > 2
    (confirm,) = [r for r in log if r["event"] == "confirm"]
    assert confirm["claim"] and confirm["commit"] == "s1" and log[-1]["outcome"] == "culprit confirmed"
    # In a speed bisection the same probe is broken, with the gates that failed: never slow.
    _, seen = observe_bundle(directory / probe["bundle"])
    assert seen.status == "broken" and ("ssim" in seen.reason or "psnr" in seen.reason)


def _steps(capsys: pytest.CaptureFixture[str]) -> list[str]:
    line = [text for text in capsys.readouterr().out.splitlines() if text.startswith("steps=")][-1]
    return json.loads(line.removeprefix("steps="))


def test_a_range_with_two_changes_names_both_with_every_gate_at_every_probe(tmp_path):
    """s2 makes the DiT twice as slow, bad twice again: the search confirms one, then the segment it leaves."""
    spec = write_range(tmp_path / "range.toml", [("s1", {}), ("s2", TWICE)], FOUR_TIMES)
    evidence = tmp_path / "evidence"
    done = subprocess.run([sys.executable, "-m", "h3bench.cli", "bisect", "--runspec", str(spec), "--evidence-dir",
                           str(evidence), "--expect", "bad,s2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    log = records(bisection_dir(evidence))
    confirms = [r for r in log if r["event"] == "confirm" and r["claim"]]
    assert sorted(r["commit"] for r in confirms) == ["bad", "s2"] and log[-1]["outcome"] == "2 changes confirmed"
    (searched,) = [g for r in log if r["event"] == "segments" for g in r["segments"] if g["searched"]]
    assert searched["direction"] == 1 and searched["difference"] > math.log(1.5)
    # Every probe ran the gates at every pair it measured: each matched pair judged.
    probes = [r for r in log if r["event"] == "probe" and r["status"] == "measured"]
    assert probes and all(r["matched"] >= r["pairs"] > 0 and r["failing"] == 0 for r in probes)
    assert "looked for 2 change(s)" in done.stdout and "the culprit(s) bad,s2, as expected" in done.stdout
