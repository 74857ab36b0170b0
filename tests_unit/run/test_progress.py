"""Progress while a campaign waits: a live line on a terminal, a plain line a minute in a log, ETAs.

The unit tests drive :class:`~h3bench.run.progress.Progress` and
:class:`~h3bench.run.pace.Pace` with short steps; the campaign tests run pytest
on a small project under a pseudo-terminal and through a pipe, and read what
reached the screen.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

import pytest

from h3bench.course.schedule import spec_blocks
from h3bench.plan.estimate import cost_of
from h3bench.run.pace import Pace
from h3bench.run.progress import Progress, Step, clock
from h3bench.runspec import load_runspec
from tests_unit.campaign_project import NO_REPORT, UNUSED_PLUGINS, write_campaign


def test_clock_reads_like_a_stopwatch():
    assert (clock(None), clock(3.4), clock(75), clock(3_725)) == ("?", "0:03", "1:15", "1:02:05")


def test_without_a_terminal_a_plain_line_comes_every_interval_and_a_short_step_prints_nothing():
    lines: list[str] = []
    progress = Progress(line=lines.append, interval_s=0.2)

    with progress.step("5s baseline 1A measured 1/3", eta_s=10.0) as step:
        step.server_percent = 40
        time.sleep(0.7)
    with progress.step("quick"):
        time.sleep(0.05)

    assert len(lines) >= 2, lines
    assert all(line.startswith("h3bench 5s baseline 1A measured 1/3 · 0:0") for line in lines)
    assert "server 40%" in lines[-1] and re.search(r"ETA 0:0\d", lines[-1]), lines[-1]
    assert not any("quick" in line for line in lines)


def test_on_a_terminal_the_line_is_redrawn_and_cleared_when_the_step_ends():
    drawn: list[str] = []
    cleared: list[bool] = []
    progress = Progress(live=drawn.append, clear=lambda: cleared.append(True), interval_s=60)

    with progress.step("15s clean 2B server start"):
        time.sleep(1.2)

    assert len(drawn) >= 2 and all("15s clean 2B server start" in text for text in drawn)
    assert cleared == [True]


def test_a_step_that_counts_its_units_shows_the_count_and_takes_its_eta_from_the_measured_rate():
    step = Step("5s quality clean", started=0.0, eta_s=100.0, unit="frames")
    assert "ETA 1:30" in step.line(10.0) and "frames" not in step.line(10.0)  # no count yet: the earlier guess

    step.advance(10, 40)  # 10 of 40 frames in 10 s: 30 s to go, whatever was guessed

    assert "frames 10/40" in step.line(10.0) and "ETA 0:30" in step.line(10.0)
    step.advance(7, None)  # a total not known in advance: the count, and the guess
    assert "frames 7 ·" in step.line(10.0) and "ETA 1:30" in step.line(10.0)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_command_shows_progress_live_on_a_terminal_and_as_plain_lines_in_a_pipe():
    pipe, tty = io.StringIO(), _Tty()

    for stream in (pipe, tty):
        with Progress.on(stream, interval_s=0.2).step("comparing 2 pairs"):
            time.sleep(0.9)

    assert pipe.getvalue().startswith("h3bench comparing 2 pairs") and "\r" not in pipe.getvalue()
    assert tty.getvalue().startswith("\rh3bench comparing 2 pairs") and tty.getvalue().endswith("\r")


def test_eta_comes_from_the_same_steps_earlier_and_the_campaign_eta_adds_what_is_left(tmp_path):
    spec = load_runspec(write_campaign(tmp_path))
    blocks = list(spec_blocks(spec))
    pace = Pace(spec, Progress(), estimate=lambda duration, arm: cost_of(spec, duration, arm))
    pace.expect(blocks)
    first = blocks[0]

    with pace.step(first, "measured", 0):
        time.sleep(0.3)
    with pace.step(first, "measured", 1) as step:
        eta, left = step.eta_s, step.campaign_left_s()

    assert eta == pytest.approx(0.3, abs=0.1)
    # What follows the second measured request of block 1A: one more measured and the audit, then three
    # blocks of a start, a warmup, three measured and an audit (all of them estimated).
    assert left is not None and left > 0


def _run_with_output(pytester, spec, *args: str, tty: bool) -> str:
    command = [sys.executable, "-m", "pytest", "--runspec", str(spec), "--evidence-dir", str(pytester.path / "evidence"),
               *UNUSED_PLUGINS, *NO_REPORT, "tests_perf", "--benchmark-disable", "-q", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    if not tty:
        return subprocess.run(command, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=600).stdout
    primary, secondary = os.openpty()
    proc = subprocess.Popen(command, cwd=pytester.path, env=env, stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=600)
    os.close(primary)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_a_campaign_in_a_log_prints_plain_progress_lines_and_keeps_the_quiet_output(pytester):
    spec = write_campaign(pytester.path, candidates={"slow": {"time_scale": 0.002}}, protocol={"audit": False})

    out = _run_with_output(pytester, spec, "--progress-interval", "0.4", tty=False)

    assert "\r" not in out
    assert re.search(r"^h3bench 5s slow 2B measured [123]/3 · 0:0\d", out, re.M), out
    assert "4 passed" in out and "h3bench campaign summary" in out


@pytest.mark.slow
@pytest.mark.usefixtures("campaign_subprocess_env")
def test_a_campaign_on_a_terminal_shows_one_live_line(pytester):
    spec = write_campaign(pytester.path, candidates={"slow": {"time_scale": 0.002}}, protocol={"audit": False})

    out = _run_with_output(pytester, spec, tty=True)

    assert re.search(r"\rh3bench 5s slow 3B measured [123]/3 · 0:0\d", out), out[-3000:]
    assert "4 passed" in out
