"""h3bench.server.startup: a server's start-up by phase, read from the lines vLLM-Omni and vLLM log.

The lines below are the engines' own (vllm-omni's ``diffusion/worker/diffusion_worker.py``,
``diffusion_model_runner.py``, ``model_loader/diffusers_loader.py``; vLLM's
``compilation/monitor.py`` and ``gpu_model_runner.py``), with their worker prefixes and colours.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from h3bench.run.records import Lifecycle
from h3bench.server.ports import find_free_port
from h3bench.server.process import ServerProcess
from h3bench.server.startup import CompileWhere, LogWatch, StartupPhases, compile_where, startup_phases

CYAN, RESET = "\x1b[36m", "\x1b[0m"


def worker(rank: int, where: str, message: str) -> str:
    return f"{CYAN}(DiffusionWorker_SP{rank} pid={4000 + rank}){RESET} INFO 08-22 12:00:00 [{where}] {message}"


def npu_start(weights: tuple[float, ...]) -> list[tuple[float, str]]:
    """A four-card 950PR start as vLLM-Omni 0.30.0 logs it, each line with the second it was seen at."""
    lines = [(2.5, "INFO 08-22 12:00:00 [main.py:58] Delegating entrypoint handling to vllm-omni")]
    lines += [(11.0 + rank, worker(rank, "diffusion_worker.py:330",
                                   f"Worker {rank}: Initialized device and distributed environment."))
              for rank in range(len(weights))]
    for rank, seconds in enumerate(weights):
        lines += [
            (20.0 + seconds, worker(rank, "diffusers_loader.py:602", f"Loading weights took {seconds:.2f} seconds")),
            (21.0 + seconds, worker(rank, "diffusion_model_runner.py:331",
                                    f"Model loading took 3.9712 GiB and {seconds + 7.5:.6f} seconds")),
            (21.0 + seconds, worker(rank, "diffusion_model_runner.py:391", "Model runner: Platform npu:0 does not "
                                    "support torch inductor, skipping torch.compile.")),
            (22.0 + seconds, worker(rank, "diffusion_worker.py:288", f"Worker {rank}: Initialization complete.")),
        ]
    return lines


def test_an_npu_start_splits_into_spawn_device_init_weights_and_no_compile() -> None:
    phases = startup_phases(npu_start((1843.2, 1850.0, 1839.9, 1844.1)), ready_s=1900.0)
    assert phases.spawn_s == 2.5
    assert phases.device_init_s == 14.0 - 2.5  # to the last worker's line
    assert phases.weight_load_s == 1850.0  # the slowest worker
    assert phases.model_load_s == pytest.approx(1857.5)
    assert phases.weights_gib == pytest.approx(3.9712)
    assert phases.compile is CompileWhere.NONE and phases.compile_s is None
    assert phases.other_s == pytest.approx(1900.0 - 2.5 - 11.5 - 1857.5)
    assert "compile: none" in phases.describe() and "weights 1850.0" in phases.describe()


def test_a_lazy_regional_compile_is_in_the_first_request_and_a_start_up_compile_is_timed() -> None:
    lazy = worker(0, "diffusion_model_runner.py:238", "Model runner: transformer configured for lazy regional "
                  "torch.compile with dynamic=False; compilation errors may surface on the first request.")
    assert compile_where(lazy) is CompileWhere.FIRST_REQUEST
    # vLLM's own stages compile and capture at start-up: both are start-up phases, summed.
    stage = ["(EngineCore_DP0 pid=212) INFO 10-06 12:00:31 [monitor.py:34] torch.compile takes 42.18 s in total",
             "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] Graph capturing finished "
             "in 8 secs, took 0.31 GiB"]
    phases = startup_phases([(40.0, line) for line in [lazy, *stage]], ready_s=60.0)
    assert phases.compile is CompileWhere.STARTUP and phases.compile_s == pytest.approx(50.18)


def test_a_log_that_names_no_phase_gives_only_what_the_harness_timed() -> None:
    phases = startup_phases([(0.4, "serving on 8000")], ready_s=0.5)
    assert phases == StartupPhases(ready_s=0.5, spawn_s=0.4)
    assert phases.compile is CompileWhere.UNKNOWN and phases.other_s == pytest.approx(0.1)
    assert startup_phases([], ready_s=None).other_s is None


def test_the_watch_stamps_a_line_when_it_is_complete(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    watch = LogWatch(log)
    watch.poll(0.1)  # no log yet
    log.write_bytes(b"first line\nLoading weights to")
    watch.poll(1.0)
    with log.open("ab") as fh:
        fh.write(b"ok 3.00 seconds\n\n")
    watch.poll(4.0)
    assert watch.lines == [(1.0, "first line"), (4.0, "Loading weights took 3.00 seconds")]
    assert watch.phases(5.0).weight_load_s == 3.0


@pytest.mark.parametrize(("compile_mode", "where"), [("none", CompileWhere.NONE), ("startup", CompileWhere.STARTUP),
                                                      ("first_request", CompileWhere.FIRST_REQUEST)])
def test_the_simulator_logs_its_start_as_the_engine_and_the_lifecycle_line_keeps_it(
        tmp_path: Path, compile_mode: str, where: CompileWhere) -> None:
    port = find_free_port()
    # 200 modelled seconds of weights and 100 of compile at time_scale 0.002: 0.4 s and 0.2 s slept per worker.
    argv = [sys.executable, "-m", "h3bench.sim", "--port", str(port), "--workers", "1", "--time-scale", "0.002",
            "--load-s", "200", "--compile-s", "100", "--compile", compile_mode]
    with ServerProcess(argv, port=port, log_path=tmp_path / "sim.log", startup_budget_s=60) as srv:
        pass
    phases = srv.startup_phases
    assert phases is not None and phases.compile is where
    assert phases.weight_load_s == pytest.approx(0.4, abs=0.01)  # as the worker logged it
    assert phases.spawn_s is not None and phases.device_init_s is not None
    assert (phases.compile_s == pytest.approx(0.2, abs=0.01)) if where is CompileWhere.STARTUP \
        else phases.compile_s is None
    assert phases.ready_s == srv.startup_s and phases.ready_s > 0.4 + (0.2 if where is CompileWhere.STARTUP else 0)
    line = Lifecycle("b1", "baseline", 5.0, 0, server=srv.record()).to_record()
    assert line["startup_phases"]["compile"] == str(where)
    assert Lifecycle.from_record(line).startup_phases == phases


def test_a_lifecycle_line_written_before_phases_were_recorded_reads_without_them() -> None:
    line = {"block": "b1", "arm": "baseline", "duration": 5.0, "position": 0, "startup_s": 12.5}
    life = Lifecycle.from_record(line)
    assert life.startup_s == 12.5 and life.startup_phases is None
