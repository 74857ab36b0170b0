"""A disk that fills mid-campaign ends it cleanly, and ``--resume`` completes it once space is freed (issue 27).

The evidence directory is a real 20 MB tmpfs, mounted in a private mount
namespace (:mod:`tests_unit.fsroom`) with the whole scenario inside it: the
campaign runs against real simulator servers; when its first block is on
disk, the file system is filled to the last byte; the campaign must stop at
the first write that fails, naming the file system, start no later block,
print its summary, and leave the bundle resumable (or sealed as
interrupted). Then the ballast goes, and ``--resume`` completes the bundle.
"""

from __future__ import annotations

import json

import pytest

from tests_unit.campaign_project import write_campaign
from tests_unit.fsroom import in_namespace, namespace_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env"),
              pytest.mark.skipif(namespace_unavailable() is not None, reason=str(namespace_unavailable()))]

BLOCKS = ["5s-clean-1A-baseline", "5s-clean-2B-clean", "5s-clean-3B-clean", "5s-clean-4A-baseline"]

SCRIPT = '''
import time
project, evidence = Path(ARGS["project"]), Path(ARGS["evidence"])
mount_tmpfs(evidence, "20m")
pytest_args = [sys.executable, "-m", "pytest", "--runspec", ARGS["spec"], "--evidence-dir", str(evidence),
               "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:randomly",
               "-v", "tests_perf", "--benchmark-disable"]

def lifecycle():
    return [json.loads(line) for p in evidence.rglob("lifecycle.jsonl") for line in p.read_text().splitlines()
            if line.endswith("}")]

with open(project / "first.txt", "wb") as out:
    first = subprocess.Popen(pytest_args, cwd=project, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not lifecycle():  # the first block is on disk
        assert first.poll() is None, "the campaign ended before its first block was written"
        assert time.monotonic() < deadline, "the first block never ended"
        time.sleep(0.05)
    fill(evidence)
    first_code = first.wait(timeout=600)
(bundle,) = [p for p in evidence.iterdir() if (p / "manifest.json").is_file()]
stopped = {"code": first_code, "output": (project / "first.txt").read_text(), "bundle": str(bundle),
           "verify": json.loads(h3bench("verify", bundle, "--json")["out"]),
           "sealed": (bundle / "final.json").is_file(), "blocks": [e["block"] for e in lifecycle()]}
(evidence / "ballast").unlink()
resumed = subprocess.run([*pytest_args, "--resume", str(bundle)], cwd=project, capture_output=True, text=True,
                         timeout=900)
done = {"code": resumed.returncode, "output": resumed.stdout + resumed.stderr,
        "verify": json.loads(h3bench("verify", bundle, "--json")["out"]),
        "lifecycle": lifecycle(), "segments": sorted(p.name for p in bundle.glob("resume-*"))}
print(json.dumps({"stopped": stopped, "resumed": done}))
'''


def test_a_full_disk_stops_the_campaign_cleanly_and_resume_completes_it(pytester):
    """Issue 27: later tests FAILED with no reason, a bare EvidenceError ENOSPC at the end, no summary, no seal."""
    spec = write_campaign(pytester.path, baseline={"time_scale": 0.002}, candidates={"clean": {"time_scale": 0.002}},
                          protocol={"audit": False, "shutdown_budget_s": 3.0})
    evidence = pytester.path / "evidence"

    found = in_namespace(SCRIPT, {"project": str(pytester.path), "evidence": str(evidence), "spec": str(spec)})

    stopped, resumed = found["stopped"], found["resumed"]
    output = stopped["output"]
    print(output[output.find("h3bench campaign summary") - 200:])  # what a user saw, for the record
    assert stopped["code"] == pytest.ExitCode.INTERRUPTED, output  # pytest stopped at the failed write
    assert "Traceback" not in output, output
    # The first write that failed stopped the campaign, naming the file system.
    failed = [line for line in output.splitlines() if " FAILED" in line and "test_block_latency" in line]
    assert len(failed) == 1, output
    assert f"DiskFullError: no space left on {evidence} (writing {evidence}/" in output
    assert f"Interrupted: h3bench: no space left on {evidence}" in output
    # No later block started: no perf test after the failed one ran.
    ran = [line for line in output.splitlines() if line.startswith("tests_perf/") and "test_block_latency[" in line]
    assert ran[-1] == failed[0] and len(ran) < len(BLOCKS), output
    # The summary is printed; the bundle is left resumable (or sealed as interrupted), and says which.
    assert "h3bench campaign summary" in output and "verdict clean: " in output, output
    if stopped["sealed"]:
        assert "the bundle is sealed as INTERRUPTED: " in output and stopped["verify"]["outcome"] == "interrupted"
    else:
        assert "the bundle is NOT sealed: the bundle could not be sealed (no space left on" in output
        assert f"free some space, then: pytest --resume {stopped['bundle']}" in output
        assert [p for p in stopped["verify"]["problems"] if not p.startswith("incomplete")] == []
    # After space was freed, --resume completed it: every block once, the bundle verifies, sealed as completed.
    assert resumed["code"] == pytest.ExitCode.OK, resumed["output"]
    assert resumed["verify"]["ok"] and resumed["verify"]["outcome"] == "completed", resumed["verify"]
    assert resumed["segments"] == ["resume-1"]
    finished = [e["block"] for e in resumed["lifecycle"] if not e.get("interrupted")]
    assert sorted(finished) == sorted(BLOCKS) and len(finished) == len(BLOCKS), json.dumps(resumed["lifecycle"])
