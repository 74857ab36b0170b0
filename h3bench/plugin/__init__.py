"""The h3bench pytest plugin: options, hooks, fixtures and assertion helpers.

It is glue, and it costs nothing until it is used: importing it loads pytest
and a few small modules of h3bench, never numpy, scipy, pydantic, av, torch
or httpx. The campaign (schedule, servers, requests, evidence) is
:mod:`h3bench.session.campaign`, loaded when the command line names campaign
tests or a test asks for the ``campaign`` fixture; the tests in
``tests_perf``, ``tests_lifecycle`` and ``tests_quality`` ask it for blocks,
lifecycle records and matched outputs.

Order of things in a session:

1. ``pytest_configure`` resolves the options once into
   :class:`~h3bench.session.settings.Settings` (:mod:`h3bench.session.options`,
   shared with the command line), registers the markers and, when the command
   line names campaign tests, starts the campaign (a bad spec is a usage
   error, not a traceback).
2. ``pytest_generate_tests`` parametrizes the campaign tests by the spec's
   schedule, so test ids are stable across runs and ``--benchmark-compare``
   lines them up; each perf test carries its duration's benchmark group.
3. ``pytest_collection_modifyitems`` (last) puts perf tests first, then
   lifecycle, then quality, each in schedule order, whatever plugins such as
   pytest-randomly did before: the perf tests produce what the others read.
4. ``pytest_collection_finish`` tells the campaign which blocks the selected
   tests read (``-k``, ``-m``): exactly those run.
5. ``pytest_sessionfinish`` writes ``verdict.json`` and seals the bundle, as
   interrupted if the session did not run to its end; then
   ``pytest_terminal_summary`` prints the summary of that verdict and the
   bundle path, writes the report beside the bundle and ends with its path.

Under xdist the controller runs the selected blocks (serially, under the
device lock) once the workers have collected, before any test starts; the
workers only read the bundle, and quality results come back to the
controller on the test reports (``user_properties``), so the verdict covers
every worker.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from h3bench import interrupts
from h3bench.errors import DiskFullError, H3BenchError, NothingToResume
from h3bench.h3 import expected_shape, workload_marker
from h3bench.plugin.paths import repair_rootdir
from h3bench.run.progress import Progress
from h3bench.session import options
from h3bench.session.settings import Settings

if TYPE_CHECKING:
    from h3bench.session.campaign import Campaign

__all__ = ["Settings", "assert_expected_duration", "assert_quality_gates", "timed_by"]

DEFAULT_RUNSPEC = "fixtures/runspecs/sim.toml"
CAMPAIGN_DIRS = ("tests_perf", "tests_lifecycle", "tests_quality")
CAMPAIGN_FIXTURE = "campaign"  # every campaign test asks for it
CATEGORIES = {
    "perf": "E2E latency per AB/BA block, through pytest-benchmark; never concurrent",
    "lifecycle": "server startup, warmup, shutdown and worker exits per block",
    "quality": "candidate outputs against matched baseline outputs, through every gate",
}
XDIST_NOTE = (
    "h3bench: under xdist the controller runs every block first (those the selected tests read), one at a time "
    "under the device lock; "
    "the workers then only read the evidence bundle. pytest-benchmark disables itself under xdist, so "
    "latency comes from the client's E2E in the bundle; use -n 0 for --benchmark-autosave/--benchmark-compare."
)
_BUNDLE_INPUT = "h3bench_bundle"
_SESSION_INPUT = "h3bench_session"
_RECORD_PROPERTY = "h3bench"
_CAMPAIGN_KEY = pytest.StashKey["Campaign"]()
_SETTINGS_KEY = pytest.StashKey[Settings]()
_RAN_KEY = pytest.StashKey[bool]()
_PROGRESS_KEY = pytest.StashKey[Progress]()


def __getattr__(name: str) -> Any:
    """The assertion helpers load the quality package (numpy, av) only when a test imports them."""
    if name in ("assert_expected_duration", "assert_quality_gates"):
        from h3bench.quality import assertions

        return getattr(assertions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser.getgroup("h3bench", "h3bench campaign").addoption)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    repair_rootdir(early_config, args)  # before pytest reads its rootdir, ini file or test paths


def _register_markers(config: pytest.Config, durations: tuple[float, ...] = (5.0, 15.0)) -> None:
    for seconds in durations:
        shape = expected_shape(seconds)
        config.addinivalue_line(
            "markers", f"{workload_marker(seconds)}: the {seconds:g} s Ref2VA workload ({shape.frames} frames at 24 FPS)"
        )
    for name, text in CATEGORIES.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SETTINGS_KEY] = options.resolve(config.getoption, here=config.invocation_params.dir,
                                                  default_runspec=config.rootpath / DEFAULT_RUNSPEC,
                                                  command=("pytest", *config.invocation_params.args))
    _register_markers(config)
    if _worker_input(config) is None:
        # SIGTERM and SIGHUP end the session as Ctrl-C does; a second one kills the servers at once.
        handling = contextlib.ExitStack()
        handling.enter_context(interrupts.installed())
        config.add_cleanup(handling.close)
        config.stash[_PROGRESS_KEY] = _progress(config)
    config.pluginmanager.register(_RecordCollector(config), "h3bench-records")
    if _names_campaign_tests(config):
        campaign_for(config)  # a bad RunSpec or baseline bundle is a usage error before anything runs


def _worker_input(config: pytest.Config) -> dict[str, Any] | None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    return workerinput


def campaign_for(config: pytest.Config) -> Campaign:
    """The session's campaign, started on first use (so a run of tests that are not the campaign's loads nothing).

    An xdist worker gets a reader of the bundle that the controller writes; it never starts a server.
    """
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is None:
        from h3bench.session.campaign import read_campaign, start_campaign

        settings = config.stash[_SETTINGS_KEY]
        workerinput = _worker_input(config)
        try:
            if workerinput is None:
                campaign = start_campaign(settings, config.stash.get(_PROGRESS_KEY, None))
            elif workerinput.get(_BUNDLE_INPUT) is None or workerinput.get(_SESSION_INPUT) is None:
                raise H3BenchError("the xdist controller could not load the RunSpec, so no campaign runs")
            else:
                campaign = read_campaign(settings, Path(workerinput[_BUNDLE_INPUT]), workerinput[_SESSION_INPUT])
        except NothingToResume as exc:  # not an error: the session ends having done nothing
            pytest.exit(f"h3bench: {exc}", returncode=0)
        except H3BenchError as exc:
            raise pytest.UsageError(f"h3bench: {exc}") from exc
        _register_markers(config, campaign.spec.workload.durations)
        config.stash[_CAMPAIGN_KEY] = campaign
    return campaign


def _progress(config: pytest.Config) -> Progress:
    """The live line on the terminal that pytest writes to (its capture does not hide it), or plain lines."""
    # fd 1 as it is at configure time, before pytest's capture takes it over for collection and tests.
    terminal = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
    config.add_cleanup(terminal.close)
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def pytests_line() -> str:  # give the line back to pytest as it was: what it had written, its own progress
        return getattr(getattr(reporter, "_tw", None), "_current_line", "")

    def line(text: str) -> None:
        terminal.write(f"\n{text}\n")
        terminal.flush()

    return Progress.on(terminal, interval_s=config.stash[_SETTINGS_KEY].progress_interval_s, restore=pytests_line,
                       line=line)


def _names_campaign_tests(config: pytest.Config) -> bool:
    """Whether the command line names campaign tests (no arguments means the testpaths), for early validation."""
    if any(getattr(config.option, name, False) for name in ("help", "version", "markers", "showfixtures")):
        return False
    return any(set(Path(arg.split("::")[0]).parts) & set(CAMPAIGN_DIRS) for arg in config.args)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker where the controller's bundle will be."""
    try:
        campaign = campaign_for(node.config)
    except pytest.UsageError:
        return  # the worker reports the spec's problem if it collects campaign tests
    node.workerinput[_BUNDLE_INPUT] = str(campaign.results.bundle_path)
    node.workerinput[_SESSION_INPUT] = campaign.session


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """The controller runs the blocks that the collected tests read, before any test is scheduled."""
    config = node.config
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is None or config.stash.get(_RAN_KEY, False) or config.option.collectonly:
        return
    config.stash[_RAN_KEY] = True
    cases = campaign.schedule.case_by_id()
    selected = [cases[param] for nodeid in ids if (param := _param_id(nodeid)) in cases]
    if not selected:
        return
    campaign.select(selected)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write: Callable[[str], None] = reporter.write_line if reporter else print
    write(XDIST_NOTE)
    campaign.run_selected(write)


def _param_id(nodeid: str) -> str | None:
    """``tests_perf/x.py::test_y[5s-clean-1A-baseline]`` → ``5s-clean-1A-baseline``."""
    return nodeid[nodeid.index("[") + 1 : -1] if nodeid.endswith("]") and "[" in nodeid else None


def _case_fixtures() -> tuple[str, ...]:
    from h3bench.course.cases import CASE_FIXTURES

    return CASE_FIXTURES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CAMPAIGN_FIXTURE not in metafunc.fixturenames:
        return
    name = next((n for n in _case_fixtures() if n in metafunc.fixturenames), None)
    if name is None:
        return
    try:
        campaign = campaign_for(metafunc.config)
    except pytest.UsageError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    params = []
    for case in campaign.schedule.cases(name):
        marks = [getattr(pytest.mark, workload_marker(case.duration))]
        if "benchmark" in metafunc.fixturenames:
            marks.append(pytest.mark.benchmark(group=workload_marker(case.duration)))
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize(name, params)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What is needed to repeat the run: options, spec id, server commands and the bundle path."""
    settings = config.stash[_SETTINGS_KEY]
    line = f"h3bench: --runspec {settings.runspec} --arm {settings.arm}" + (" --lossless" if settings.lossless else "")
    if settings.baseline_evidence:
        line += f" --baseline-evidence {settings.baseline_evidence}"
    if settings.resume:
        line += f" --resume {settings.resume}"
    if settings.allow_unpinned:
        line += " --allow-unpinned"
    if settings.allow_underpowered:
        line += " --allow-underpowered"
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    return [line] if campaign is None else [line, *campaign.header()]


def _case_of(item: pytest.Item) -> Any:
    """The item's schedule case; None outside the campaign, or for a fixture with no case in this run (``--arm``)."""
    callspec = getattr(item, "callspec", None)
    found = next((callspec.params[n] for n in _case_fixtures() if callspec and n in callspec.params), None)
    return found if hasattr(found, "id") else None  # an empty parametrization is pytest's NOTSET


def _is_campaign_test(item: pytest.Item) -> bool:
    return CAMPAIGN_FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Campaign tests first, perf before lifecycle before quality, each in schedule order (last, after shuffles)."""
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    order: dict[str, int] = {}
    if campaign is not None:
        for fixture in _case_fixtures():
            order.update({case.id: i for i, case in enumerate(campaign.schedule.cases(fixture))})
    categories = list(CATEGORIES)

    def rank(item: pytest.Item) -> tuple[int, str, int, int]:
        if not _is_campaign_test(item):
            return (len(categories), "", 0, 0)
        category = next((i for i, name in enumerate(categories) if item.get_closest_marker(name)), len(categories))
        case = _case_of(item) if campaign is not None else None
        line = item.reportinfo()[1] or 0
        return (category, str(item.path), line, order.get(case.id, -1) if case is not None else -1)

    items.sort(key=rank)  # stable: items outside the campaign keep their order


def pytest_collection_finish(session: pytest.Session) -> None:
    """Exactly the blocks that the selected tests read will run."""
    campaign = session.config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None:
        campaign.select(case for item in session.items if (case := _case_of(item)) is not None)


class _BenchmarkMeasure:
    """pytest-benchmark times each measured request (pedantic, one request per round)."""

    def __init__(self, benchmark: Any) -> None:
        self.benchmark = benchmark

    def time(self, request: Callable[[], None], after: Callable[[], None], rounds: int) -> None:
        if getattr(self.benchmark, "disabled", False):
            for _ in range(rounds):  # the client's own E2E is the measurement
                request()
                after()
            return
        # Only the request is timed; storing its evidence happens in teardown.
        self.benchmark.pedantic(request, teardown=after, rounds=rounds, iterations=1, warmup_rounds=0)

    def annotate(self, info: Mapping[str, Any]) -> None:
        self.benchmark.extra_info.update(info)


def timed_by(benchmark: Any) -> _BenchmarkMeasure:
    """A block's measured requests timed by pytest-benchmark's fixture; the block's details go to ``extra_info``."""
    return _BenchmarkMeasure(benchmark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """In campaign tests, stopped candidates are skips with the reason; failed blocks say what happened."""
    if not _is_campaign_test(item):
        return (yield)
    from h3bench.run.records import BlockFailed, CandidateStopped

    try:
        return (yield)
    except CandidateStopped as exc:
        skip, message = True, str(exc)
    except BlockFailed as exc:
        skip, message = False, str(exc)
    except DiskFullError as exc:  # no evidence can be kept: no later test runs
        item.session.shouldstop = f"h3bench: {exc}"
        skip, message = False, f"{type(exc).__name__}: {exc}"
    except H3BenchError as exc:
        skip, message = False, f"{type(exc).__name__}: {exc}"
    finally:
        campaign = item.config.stash.get(_CAMPAIGN_KEY, None)
        if campaign is not None:
            # Quality results travel to the xdist controller (or back to this process) with the report.
            item.user_properties.extend((_RECORD_PROPERTY, record) for record in campaign.judge.drain_records())
    # Outside the except clause, so the report shows the cause alone, not a chained traceback.
    if skip:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def campaign(request: pytest.FixtureRequest) -> Campaign:
    """The session's campaign: its spec, schedule, bundle, block results and the judge of its outputs."""
    return campaign_for(request.config)


class _RecordCollector:
    """Feeds the quality results carried by test reports (from xdist workers too) into the campaign."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = [value for name, value in report.user_properties if name == _RECORD_PROPERTY]
        if records and _worker_input(self.config) is None:
            campaign = campaign_for(self.config)
            for record in records:
                assert isinstance(record, dict)
                campaign.judge.absorb(record)


def _interruption(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> str | None:
    """Why the session did not run its campaign to the end, or None when it did."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        signame = interrupts.received()
        return f"interrupted by {signame}" if signame and signame != "SIGINT" else "interrupted (KeyboardInterrupt)"
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
        return "pytest internal error"
    if exitstatus == pytest.ExitCode.USAGE_ERROR:
        return "pytest usage error"
    campaign = session.config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None and campaign.unfinished:
        left = ", ".join(b.id for b in campaign.unfinished)
        stopped = session.shouldstop or session.shouldfail
        why = f"stopped early ({stopped})" if stopped else "the session ended"
        return f"{why} before {len(campaign.unfinished)} selected block(s) ran: {left}"
    return None


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables, so that the summary ends with the report
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is None or not campaign.wrote_anything:
        return
    terminalreporter.section("h3bench campaign summary")
    for line in [*campaign.summary(verbose=config.get_verbosity() > 0), *campaign.ending()]:
        terminalreporter.write_line(line)
    anchor = campaign.anchor()
    if anchor is not None:
        terminalreporter.write_line(f"final.json SHA-256 {anchor} (h3bench verify BUNDLE --expect {anchor})")
    terminalreporter.write_line(_report_line(campaign))


def _report_line(campaign: Campaign) -> str:
    """Write the report beside the bundle, which pytest_sessionfinish has sealed; a failure never fails the session."""
    if not campaign.settings.report:
        return f"report: not written (--no-report); h3bench report {campaign.bundle.path} writes it"
    try:
        with warnings.catch_warnings():
            # pytest applies the tests' filterwarnings (error) here too; a plotting library's warning is no error.
            warnings.simplefilter("default")
            from h3bench.report import write_report

            lpips = campaign.settings.lpips_dir
            written = write_report(campaign.bundle.path, lpips_dir=str(lpips) if lpips else None,
                                   lpips_device=campaign.settings.lpips_device)
    except Exception as exc:  # the campaign's outcome stands whatever happens to its report
        return f"report: not written ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0]})"
    return f"report: {written.html}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # before pytest-benchmark saves: machine_info gets the anchor
def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> Generator[None, None, None]:
    campaign = session.config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None:
        campaign.finish(_interruption(session, exitstatus))
    yield


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """The sealed bundle and its final.json SHA-256: an anchor outside the bundle that a rewrite cannot forge."""
    campaign = config.stash.get(_CAMPAIGN_KEY, None)
    if campaign is not None and (anchor := campaign.anchor()) is not None:
        machine_info["h3bench"] = {"bundle": str(campaign.bundle.path), "final_json_sha256": anchor}
