"""A bundle is written by one campaign at a time, and a completed bundle is never resumed (issue 27).

Two ``--resume`` runs of one bundle started 0.3 s apart both ran every block;
the second sealed the first's live ``resume-1`` as "killed", and the bundle
never verified again. ``--resume`` of a completed bundle appended
``resume-2/`` and a new seal, so the anchor the completed run printed failed
``verify --expect``. Here the first resume is a real process that holds the
bundle while the second tries (:func:`h3bench.run.resume.resume_bundle`, the
function ``--resume`` runs); the bundles are written by the project's own
writer (:mod:`tests_unit.bundlesim`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from h3bench import evidence
from h3bench.errors import BundleBusyError, NothingToResume
from h3bench.evidence.verify import final_sha256
from h3bench.run.resume import resume_bundle
from tests_unit.bundlesim import npu_spec, write_bundle
from tests_unit.ledger.test_bundle_identity import latency

REPO = Path(__file__).resolve().parents[2]

# The first campaign: resume the bundle, say so, wait for the word, then run the missing blocks and seal.
FIRST = '''
import sys
from pathlib import Path
from h3bench.run.resume import resume_bundle
from h3bench.course.schedule import Schedule
from tests_unit.bundlesim import _run_blocks, _seal, npu_spec
from tests_unit.ledger.test_bundle_identity import latency
spec = npu_spec(clean={})
resumed = resume_bundle(Path(sys.argv[1]), spec, "first")
print("resuming", flush=True)
sys.stdin.readline()
done = {e["block"] for e in resumed.bundle.lifecycle()}
_run_blocks(resumed.bundle, spec, [b for b in Schedule(spec).blocks if b.id not in done], latency(2))
_seal(resumed.bundle, spec)
print("sealed", flush=True)
'''


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` by its SHA-256: what "writes nothing" is checked against."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_second_resume_is_refused_naming_the_first_which_completes_untouched(tmp_path):
    bundle = write_bundle(tmp_path / "evidence", npu_spec(clean={}), latency(1),
                          started_at="2026-11-20T10:00:00.000Z", stop_after=6)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen([sys.executable, "-c", FIRST, str(bundle)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().strip() == "resuming", first.stderr.read() if first.stderr else ""
        before = _tree(bundle)

        with pytest.raises(BundleBusyError) as refused:
            resume_bundle(bundle, npu_spec(clean={}), "second")

        assert refused.value.pid == first.pid
        assert f"another campaign is writing this bundle (pid {first.pid} " in str(refused.value)
        assert _tree(bundle) == before, "the refused resume wrote something"
        assert not (bundle / "resume-1" / "final.json").exists(), "the first's live segment was sealed as killed"
        first.stdin.write("go\n")
        first.stdin.flush()
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0 and "sealed" in out, err
    report = evidence.verify(bundle)
    assert report.ok, report.problems
    assert [s for s, _ in evidence.Bundle.open(bundle).seals()] == ["", "resume-1/"]


def test_resuming_a_completed_bundle_says_nothing_to_resume_and_writes_nothing(tmp_path):
    bundle = write_bundle(tmp_path / "evidence", npu_spec(clean={}), latency(1),
                          started_at="2026-11-20T10:00:00.000Z")
    anchor = final_sha256(bundle)
    before = _tree(bundle)

    with pytest.raises(NothingToResume) as nothing:
        resume_bundle(bundle, npu_spec(clean={}), "again")

    assert "nothing to resume: its run completed" in str(nothing.value) and anchor in str(nothing.value)
    assert _tree(bundle) == before and not list(bundle.glob("resume-*"))
    assert final_sha256(bundle) == anchor
