"""An evidence directory that cannot hold the campaign fails the session once, before any server starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from h3bench.errors import UsageError
from h3bench.evidence.files import SPACE_MARGIN, require_writable
from h3bench.plan.estimate import bundle_bytes
from h3bench.runspec import load_runspec
from tests_unit.campaign_project import run_campaign, write_campaign

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_an_evidence_directory_that_cannot_be_written_ends_the_session_with_one_message(pytester):
    # A regular file where the directory should be: unwritable even for root (who ignores permission bits).
    blocker = pytester.path / "not-a-directory"
    blocker.write_text("")
    spec = write_campaign(pytester.path)

    result = run_campaign(pytester, spec, "--evidence-dir", str(blocker / "evidence"))

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    message = f"*h3bench: the evidence directory {blocker / 'evidence'} cannot be written (*); choose another with " \
              "--evidence-dir, nothing was started*"
    result.stderr.fnmatch_lines([message])
    output = result.stdout.str() + result.stderr.str()
    assert output.count("cannot be written") == 1 and "Traceback" not in output
    assert "server" not in result.stdout.str().lower(), "no server was started"


def test_a_writable_directory_with_the_space_the_plan_estimates_is_accepted(tmp_path):
    require_writable(tmp_path / "new" / "evidence", need_bytes=1e6)

    assert not list(tmp_path.iterdir()), "nothing is made before a block runs (the probe file is gone too)"


def test_too_little_space_for_the_plans_estimate_is_refused_with_both_numbers(tmp_path):
    free = shutil.disk_usage(tmp_path).free

    with pytest.raises(UsageError, match=r"MB free, but the plan estimates \d+ MB for this campaign's outputs"):
        require_writable(tmp_path, need_bytes=free / SPACE_MARGIN * 2)


def test_the_default_campaigns_estimate_counts_every_request_of_every_block():
    spec = load_runspec(REPO / "fixtures" / "runspecs" / "sim.toml")
    one = bundle_bytes(spec, "baseline")

    assert 0 < one < bundle_bytes(spec, "all")
