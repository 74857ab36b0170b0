"""Path options behave the same written ``--opt PATH`` or ``--opt=PATH``, inside the project or outside it.

pytest picks its rootdir before it knows the plugin's options, so a path
written after a space used to become the rootdir: the project's pytest.ini
was ignored, the harness's own tests were collected with the campaign, and
relative paths went wrong. Each case collects the campaign in a subprocess
(``--collect-only``) and compares what was collected, and from which rootdir.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from h3bench.runspec import load_runspec
from tests_unit.bundlesim import write_bundle
from tests_unit.campaign_project import UNUSED_PLUGINS, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("campaign_subprocess_env"),
              pytest.mark.xdist_group("option-paths")]


@pytest.fixture(scope="module")
def baseline_bundle(tmp_path_factory) -> Path:
    """A sealed bundle of the project's spec, once for the module: each test copies it into its project.

    Written without servers (:mod:`tests_unit.bundlesim`): these tests only collect, and what
    ``--baseline-evidence`` and ``--resume`` read at collection is a complete bundle of the same spec.
    """
    root = tmp_path_factory.mktemp("baseline")
    spec = write_campaign(root, protocol={"audit": False})
    (root / "evidence").mkdir()
    return write_bundle(root / "evidence", load_runspec(spec), lambda block, index: block.duration,
                        started_at="2026-12-01T00:00:00Z")


@pytest.fixture
def project(pytester, baseline_bundle) -> dict[str, Path]:
    """The campaign project, a stray harness test in it, and copies of its spec and a baseline bundle outside."""
    spec = write_campaign(pytester.path, protocol={"audit": False})  # the same spec, so the same spec id
    pytester.makepyfile(**{"tests_unit/test_stray": "def test_stray():\n    pass\n"})
    bundle = Path(shutil.copytree(baseline_bundle, pytester.path / "evidence" / baseline_bundle.name))
    outside = pytester.path.parent / f"{pytester.path.name}-outside"
    shutil.copytree(pytester.path / "inputs", outside / "inputs")
    shutil.copy(spec, outside / "spec.toml")
    shutil.copytree(bundle, outside / "evidence" / bundle.name)
    (outside / "weights").mkdir()
    return {"root": pytester.path, "outside": outside, "spec": spec, "bundle": bundle}


def _cases(project: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """Per option: the option and its value, inside and outside the project."""
    inside, outside = project["root"], project["outside"]
    bundle = project["bundle"]
    return {
        "--runspec": {"inside": ["spec.toml"], "outside": [str(outside / "spec.toml")]},  # relative: to where pytest runs
        "--evidence-dir": {"inside": [str(inside / "ev")], "outside": [str(outside / "ev")]},
        "--lpips-dir": {"inside": [str(inside / "inputs")], "outside": [str(outside / "weights")]},
        "--baseline-evidence": {"inside": [str(bundle)], "outside": [str(outside / "evidence" / bundle.name)]},
        "--resume": {"inside": [str(bundle)], "outside": [str(outside / "evidence" / bundle.name)]},
    }


def _collect(pytester: pytest.Pytester, project: dict[str, Path], option: str, where: str, form: str) -> list[str]:
    value = _cases(project)[option][where][0]
    arg = [f"{option}={value}"] if form == "equals" else [option, value]
    extra = ["--arm", "candidate"] if option == "--baseline-evidence" else []
    # Every path of an "outside" case is outside, so that no argument points pytest at the project.
    spec = project["spec"] if where == "inside" else project["outside"] / "spec.toml"
    runspec = [] if option == "--runspec" else [f"--runspec={spec}"]
    result = pytester.runpytest_subprocess(*runspec, *arg, *extra, "--collect-only", "-q", *UNUSED_PLUGINS)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    if option == "--resume":  # the baseline bundle is complete: the plugin read the path and says so, collecting nothing
        return [line.replace(value, "BUNDLE") for line in result.stdout.lines + result.stderr.lines
                if "nothing to resume" in line][:1]
    return [line for line in result.stdout.lines if "::" in line]


@pytest.mark.parametrize("option", ["--runspec", "--evidence-dir", "--lpips-dir", "--baseline-evidence", "--resume"])
def test_both_forms_inside_and_outside_collect_the_same_campaign(pytester, project, option):
    collected = {
        (where, form): _collect(pytester, project, option, where, form)
        for where in ("inside", "outside") for form in ("equals", "space")
    }

    reference = collected[("inside", "equals")]
    campaign = ("Exit: h3bench: BUNDLE: nothing to resume",) if option == "--resume" else \
        ("tests_perf", "tests_lifecycle", "tests_quality")
    assert reference and all(line.startswith(campaign) for line in reference), reference
    for key, items in collected.items():
        assert items == reference, f"{option} {key}: {len(items)} items, the reference {len(reference)}"
