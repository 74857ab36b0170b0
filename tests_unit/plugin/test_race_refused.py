"""A race spec (issue 44) is refused when the campaign starts, with a message that says why, before any server starts.

The race loads and ``h3bench plan`` prices it (h3bench.course.racesim,
tests_unit/plan/test_race_plan.py), but the live run, the pool and the report
do not read one yet; a spec naming it must not run as something else. One
child pytest: about 3 CPU s.
"""

from __future__ import annotations

import pytest

from tests_unit.campaign_project import UNUSED_PLUGINS, write_campaign

pytestmark = pytest.mark.usefixtures("campaign_subprocess_env")


def test_a_race_spec_is_refused_before_any_server_starts(pytester):
    spec = write_campaign(pytester.path, protocol={"design": "race"},
                          candidates={"one": {}, "two": {}, "three": {}})
    result = pytester.runpytest_subprocess(f"--runspec={spec}", "-q", *UNUSED_PLUGINS)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "protocol.design" in text and "design 'race' is not run by h3bench yet" in text
    assert "Traceback" not in text
    assert not (pytester.path / "evidence").exists() or not any((pytester.path / "evidence").iterdir())


def test_the_sequential_design_still_loads(pytester):
    """The rule names the race only: the same spec in the sequential design collects its campaign."""
    spec = write_campaign(pytester.path, protocol={"design": "sequential"},
                          candidates={"one": {}, "two": {}, "three": {}})
    result = pytester.runpytest_subprocess(f"--runspec={spec}", "--collect-only", "-q", *UNUSED_PLUGINS)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
