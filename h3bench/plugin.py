"""The h3bench pytest plugin: options, hooks, fixtures and assertion helpers.

It is glue. The campaign (schedule, servers, requests, evidence) lives in
``h3bench.campaign``; the tests in ``tests_perf``, ``tests_lifecycle`` and
``tests_quality`` ask it for blocks, lifecycle records and matched outputs.

Order of things in a session:

1. ``pytest_configure`` resolves the options once into ``Settings`` and loads
   the frozen RunSpec (a bad spec is a usage error, not a traceback).
2. ``pytest_generate_tests`` parametrizes the campaign tests by the spec's
   schedule, so test ids are stable across runs and ``--benchmark-compare``
   lines them up.
3. ``pytest_collection_modifyitems`` runs perf tests first, in schedule order:
   they produce the blocks that lifecycle and quality tests then read.
4. ``pytest_terminal_summary`` prints the per-duration summary and the
   bundle path; ``pytest_sessionfinish`` writes ``verdict.json``.

Under xdist the controller runs the whole schedule in ``pytest_sessionstart``
(serially, under the device lock) and hands the bundle to the workers, which
only read it; quality results come back to the controller on the test
reports (``user_properties``), so the verdict covers every worker.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import pytest

from h3bench.campaign import BlockFailed, Campaign, CandidateStopped, Settings
from h3bench.errors import H3BenchError
from h3bench.quality.assertions import assert_expected_duration, assert_quality_gates

__all__ = ["Settings", "assert_expected_duration", "assert_quality_gates"]

ARMS = ("baseline", "candidate", "all")
DEFAULT_RUNSPEC = "fixtures/runspecs/sim.toml"
CAMPAIGN_DIRS = ("tests_perf", "tests_lifecycle", "tests_quality")
XDIST_NOTE = (
    "h3bench: under xdist the controller runs every block first, one at a time under the device lock; "
    "the workers then only read the evidence bundle. pytest-benchmark disables itself under xdist, so "
    "latency comes from the client's E2E in the bundle; use -n 0 for --benchmark-autosave/--benchmark-compare."
)
_BUNDLE_INPUT = "h3bench_bundle"
_RECORD_PROPERTY = "h3bench"
_CAMPAIGN_KEY = pytest.StashKey[Campaign]()
_SETTINGS_KEY = pytest.StashKey["Settings"]()

HELP_RUNSPEC = f"frozen RunSpec (TOML) of the campaign; default {DEFAULT_RUNSPEC} (env H3BENCH_RUNSPEC)"
HELP_ARM = "which arms to run: baseline, candidate or all (default all)"
HELP_EVIDENCE = "directory that receives the evidence bundle of this run (default h3bench-evidence/)"
HELP_BASELINE = "evidence bundle whose baseline outputs and samples a candidate-only run compares against"
HELP_LOSSLESS = "judge the candidate against the baseline's own run-to-run variability (lossless mode)"
HELP_LPIPS_DIR = "directory holding the LPIPS weights (env H3BENCH_LPIPS_DIR)"
HELP_LPIPS_DEVICE = "device for LPIPS: cpu, cuda or npu (default cpu)"


def _arm(value: str) -> str:
    if value not in ARMS:
        raise argparse.ArgumentTypeError(f"invalid --arm {value!r}: choose one of {', '.join(ARMS)}")
    return value


def _existing_path(value: str) -> Path:
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value!r} does not exist")
    return path


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("h3bench", "h3bench campaign")
    group.addoption("--runspec", dest="h3_runspec", default=None, help=HELP_RUNSPEC)
    group.addoption("--arm", dest="h3_arm", type=_arm, default="all", help=HELP_ARM)
    group.addoption("--evidence-dir", dest="h3_evidence_dir", default="h3bench-evidence", help=HELP_EVIDENCE)
    group.addoption("--baseline-evidence", dest="h3_baseline_evidence", type=_existing_path, default=None, help=HELP_BASELINE)
    group.addoption("--lossless", dest="h3_lossless", action="store_true", default=False, help=HELP_LOSSLESS)
    group.addoption("--lpips-dir", dest="h3_lpips_dir", default=None, help=HELP_LPIPS_DIR)
    group.addoption("--lpips-device", dest="h3_lpips_device", default="cpu", help=HELP_LPIPS_DEVICE)


def _resolve(config: pytest.Config) -> Settings:
    """Options, then environment, then defaults; relative paths are against the rootdir."""
    root = Path(config.rootpath)
    runspec = config.getoption("h3_runspec") or os.environ.get("H3BENCH_RUNSPEC") or DEFAULT_RUNSPEC
    lpips_dir = config.getoption("h3_lpips_dir") or os.environ.get("H3BENCH_LPIPS_DIR")
    return Settings(
        runspec=(root / runspec) if not Path(runspec).is_absolute() else Path(runspec),
        arm=config.getoption("h3_arm"),
        evidence_root=Path(config.getoption("h3_evidence_dir")).absolute(),
        baseline_evidence=config.getoption("h3_baseline_evidence"),
        lossless=config.getoption("h3_lossless"),
        lpips_dir=Path(lpips_dir) if lpips_dir else None,
        lpips_device=config.getoption("h3_lpips_device"),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SETTINGS_KEY] = _resolve(config)
    config.pluginmanager.register(_RecordCollector(config), "h3bench-records")
    if _campaign_requested(config):
        campaign_for(config)  # a bad RunSpec or baseline bundle is a usage error before anything runs


def campaign_for(config: pytest.Config) -> Campaign:
    """The session's campaign, created on first use (so tests_unit never loads a spec).

    An xdist worker reads the bundle that the controller's campaign wrote and never starts a server.
    """
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is None:
        settings = config.stash[_SETTINGS_KEY]
        bundle = getattr(config, "workerinput", {}).get(_BUNDLE_INPUT)
        try:
            campaign = Campaign.from_bundle(bundle, settings) if bundle else Campaign.from_settings(settings)
        except H3BenchError as exc:
            raise pytest.UsageError(f"h3bench: {exc}") from exc
        config.stash[_CAMPAIGN_KEY] = campaign
    return campaign


def _xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _campaign_requested(config: pytest.Config) -> bool:
    """Whether the command line selects campaign tests (no arguments means the testpaths)."""
    if any(getattr(config.option, name, False) for name in ("help", "version", "markers", "showfixtures")):
        return False
    return any(set(Path(arg.split("::")[0]).parts) & set(CAMPAIGN_DIRS) for arg in config.args)


def _selected_durations(config: pytest.Config, campaign: Campaign) -> set[float]:
    """The durations that ``-m`` selects for some campaign test category."""
    expression = config.getoption("markexpr")
    if not expression:
        return set(campaign.spec.workload.durations)
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    return {
        duration
        for duration in campaign.spec.workload.durations
        for category in ("perf", "lifecycle", "quality")
        if compiled.evaluate(lambda name, **_: name in {_WORKLOAD_MARKERS.get(float(duration)), category})
    }


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist the controller runs the whole schedule first, serially; workers then read the bundle."""
    config = session.config
    if not (_xdist_controller(config) and _campaign_requested(config)):
        return
    campaign = campaign_for(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter else print
    write(XDIST_NOTE)
    campaign.run_schedule(_selected_durations(config, campaign), write)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    campaign = node.config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None:
        node.workerinput[_BUNDLE_INPUT] = str(campaign.bundle.path)


_CAMPAIGN_FIXTURES = ("block", "arm_workload", "candidate_workload", "matched_pair", "baseline_output")
_WORKLOAD_MARKERS = {5.0: "ref2va_5s", 15.0: "ref2va_15s"}


def _uses_campaign(metafunc: pytest.Metafunc) -> bool:
    return any(name in metafunc.fixturenames for name in _CAMPAIGN_FIXTURES)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not _uses_campaign(metafunc):
        return
    campaign = campaign_for(metafunc.config)
    for name in _CAMPAIGN_FIXTURES:
        if name in metafunc.fixturenames:
            cases = campaign.cases(name)
            metafunc.parametrize(name, [pytest.param(case, id=case.id, marks=_workload_marks(case)) for case in cases])
            return


def _workload_marks(case) -> list[pytest.MarkDecorator]:
    marker = _WORKLOAD_MARKERS.get(float(case.duration))
    return [getattr(pytest.mark, marker)] if marker else []


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What is needed to repeat the run: options, spec id, server commands and the bundle path."""
    settings = config.stash[_SETTINGS_KEY]
    line = f"h3bench: --runspec {settings.runspec} --arm {settings.arm}" + (" --lossless" if settings.lossless else "")
    if settings.baseline_evidence:
        line += f" --baseline-evidence {settings.baseline_evidence}"
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    return [line, *campaign.report_header()] if campaign is not None else [line]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Perf tests first, in schedule order: they produce what the others read."""
    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("perf") else 1

    items.sort(key=rank)  # stable: schedule order within each group is kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Stopped candidates become skips with the reason; failed blocks say what happened, without a traceback."""
    try:
        return (yield)
    except CandidateStopped as exc:
        skip, message = True, str(exc)
    except BlockFailed as exc:
        skip, message = False, str(exc)
    except H3BenchError as exc:
        skip, message = False, f"{type(exc).__name__}: {exc}"
    finally:
        campaign = item.config.stash.get(_CAMPAIGN_KEY, None)
        if campaign is not None:
            # Quality results travel to the xdist controller (or back to this process) with the report.
            item.user_properties.extend((_RECORD_PROPERTY, record) for record in campaign.drain_records())
    # Outside the except clause, so the report shows the cause alone, not a chained traceback.
    if skip:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def campaign(request: pytest.FixtureRequest) -> Campaign:
    """The session's campaign: its spec, schedule, bundle and block results."""
    return campaign_for(request.config)


class _RecordCollector:
    """Feeds the quality results carried by test reports (from xdist workers too) into the campaign."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = [value for name, value in report.user_properties if name == _RECORD_PROPERTY]
        if records:
            campaign = campaign_for(self.config)
            for record in records:
                campaign.absorb(record)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is None or not campaign.ran_anything:
        return
    terminalreporter.section("h3bench campaign summary")
    for line in campaign.summary_lines():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    campaign = session.config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None:
        campaign.finish()
