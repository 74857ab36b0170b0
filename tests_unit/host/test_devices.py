"""Device identity, who owns a process on a reserved chip, the npu-smi hook around a real server, and the device lock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3bench.errors import CleanupError, InterferenceError, ServerError, UsageError
from h3bench.host.devices import DeviceLock, NpuSmiCheck, logical_devices, processes_on
from h3bench.host.npusmi import parse_npu_smi, read_npu_smi
from h3bench.host.telemetry import TELEMETRY_KEYS
from h3bench.server.ports import find_free_port
from h3bench.server.process import ServerProcess

FAKES = Path(__file__).parents[1] / "fakes"
SAMPLES = FAKES / "npu-smi-samples"
IDLE = SAMPLES / "910b1-x8-idle.txt"
SERVING = SAMPLES / "910b1-x8-serving.txt"  # VLLMWorker pids 51230-51237 on NPUs 0-7
FOREIGN = SAMPLES / "910b1-x8-foreign-process-on-npu3.txt"  # pid 8811 (python3) on NPU 3
DUAL_DIE = SAMPLES / "dual-die-2npu-foreign-and-warning.txt"
A3 = SAMPLES / "public-a3-dual-die-x8-driver25.2.3.txt"


class Pids:
    """An Owner that owns a fixed set of PIDs."""

    def __init__(self, *pids: int) -> None:
        self.pids = set(pids)

    def owns(self, pid: int) -> bool:
        return pid in self.pids


@pytest.fixture
def npu_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Put the fake npu-smi on PATH; call the result with the sample it should print from now on."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    current = tmp_path / "npu-smi-now.txt"
    monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", str(current))

    def play(sample: Path) -> None:
        shutil.copy(sample, current)

    return play


def test_a3_host_numbers_eight_npus_but_the_runtime_sees_sixteen_logical_devices() -> None:
    report = parse_npu_smi(A3.read_text())
    chips = logical_devices(report)
    assert report.npu_ids == tuple(range(8)) and sorted(chips) == list(range(16))
    assert {i: (d.npu_id, d.chip_id) for i, d in chips.items()} == {2 * n + c: (n, c) for n in range(8) for c in (0, 1)}
    assert all(d.phy_id == i for i, d in chips.items()), "on this host the Phy-IDs print the same numbering"
    # On a 910B host logical device n is NPU n; on the 950 fixture too.
    assert {i: d.npu_id for i, d in logical_devices(parse_npu_smi(IDLE.read_text())).items()} == {n: n for n in range(8)}
    assert len(logical_devices(parse_npu_smi((SAMPLES / "thirdparty-fixture-950pr-driver25.7.txt").read_text()))) == 2


def test_processes_on_reserved_chips_by_either_pid() -> None:
    report = parse_npu_smi(DUAL_DIE.read_text())
    everything = {(n, c) for n in (0, 1) for c in (0, 1)}
    assert [p.pid for p in processes_on(report, everything)] == [692318, 692318, 700511]
    assert [p.pid for p in processes_on(report, everything, allowed_pids={1204})] == [700511]  # the container's PID
    assert processes_on(report, {(1, 0)}) == ()  # NPU 1 chip 0 is free, chip 1 is not
    assert [p.chip_id for p in processes_on(report, {(1, 1)})] == [1]


def test_check_before_start_refuses_held_or_unhealthy_chips(npu_smi) -> None:
    npu_smi(IDLE)
    NpuSmiCheck(range(8)).before_start()

    npu_smi(FOREIGN)
    with pytest.raises(InterferenceError, match=r"pid 8811 \(python3\) on NPU 3 chip 0, 9036 MB") as info:
        NpuSmiCheck(range(8)).before_start()
    assert info.value.holder == "pid 8811 (python3)"
    NpuSmiCheck([0, 1, 2]).before_start()  # NPU 3 is not this campaign's
    NpuSmiCheck(range(8), allowed_pids={8811}).before_start()  # the campaign's own process

    npu_smi(DUAL_DIE)  # logical devices 0, 1 = NPU 0 chips 0, 1; 2, 3 = NPU 1 chips 0, 1
    NpuSmiCheck([0, 1], allowed_pids={1204}).before_start()
    NpuSmiCheck([2]).before_start()
    with pytest.raises(InterferenceError, match="NPU 1 chip 1 reports health 'Warning'"):
        NpuSmiCheck([3], allowed_pids={700511}).before_start()
    with pytest.raises(UsageError, match=r"logical device\(s\) \[5\] not on this host; npu-smi lists 0 \(NPU 0 chip 0\)"):
        NpuSmiCheck([0, 5]).before_start()


def test_after_the_stop_only_our_own_processes_are_incomplete_cleanup(npu_smi) -> None:
    npu_smi(IDLE)
    assert NpuSmiCheck(range(8)).after_stop(Pids()) == NpuSmiCheck(range(8)).after_stop(Pids(51230))
    npu_smi(SERVING)
    ours = NpuSmiCheck(range(8)).after_stop(Pids(*range(51230, 51238)))
    assert len(ours.leftovers) == 8 and ours.interference == ()
    assert ours.leftovers[0] == "pid 51230 (VLLMWorker) on NPU 0 chip 0, 20480 MB still holds the device after the stop"
    # The same processes, not ours: they came while the server ran or after, and are interference, not cleanup.
    other = NpuSmiCheck(range(8)).after_stop(Pids())
    assert other.leftovers == () and len(other.interference) == 8
    assert "pid 51237 (VLLMWorker) on NPU 7 chip 0, 20480 MB is on a reserved device after the stop" in other.interference[7]


def test_the_sampler_records_telemetry_and_names_a_process_that_appears_while_the_server_runs(npu_smi) -> None:
    lines: list[dict] = []
    check = NpuSmiCheck(range(8), interval_s=0.02, telemetry=lines.extend, block="5s-x-2B-x")
    npu_smi(IDLE)
    check.before_start()
    npu_smi(SERVING)  # our workers, while the server runs
    check.started(Pids(*range(51230, 51238)))
    while len(lines) < 16:
        time.sleep(0.01)
    npu_smi(FOREIGN)  # ...then a process that is not the server's
    while not any(r["hbm_used_mb"] == 12420 for r in lines):
        time.sleep(0.01)
    check.stopping()
    written = len(lines)
    time.sleep(0.1)
    assert len(lines) == written and written % 8 == 0, "the sampler stopped, and wrote whole samples"
    npu_smi(IDLE)
    found = check.after_stop(Pids(*range(51230, 51238)))
    assert found.leftovers == () and found.notes == ()
    (interference,) = found.interference
    assert interference.startswith("pid 8811 (python3) on NPU 3 chip 0, 9036 MB appeared while the server ran (")
    assert all(tuple(r) == TELEMETRY_KEYS and r["block"] == "5s-x-2B-x" for r in lines)
    assert {(r["npu_id"], r["chip_id"]) for r in lines} == {(n, 0) for n in range(8)}
    serving = [r for r in lines if r["hbm_used_mb"] == 24020]
    assert serving and serving[0] | {"t": 0} == {
        "t": 0, "block": "5s-x-2B-x", "npu_id": 0, "chip_id": 0, "hbm_used_mb": 24020, "hbm_total_mb": 65536,
        "aicore_pct": 97.0, "temperature_c": 41.0, "power_w": 93.4, "health": "OK",
    }
    assert all(abs(r["t"] - time.time()) < 60 for r in lines)


def test_a_failing_npu_smi_during_the_block_is_a_note(npu_smi, monkeypatch: pytest.MonkeyPatch) -> None:
    npu_smi(IDLE)
    check = NpuSmiCheck([0], interval_s=0.02, telemetry=lambda records: None)
    check.before_start()
    working = os.environ["FAKE_NPU_SMI_OUTPUT"]
    monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", "/nonexistent")
    check.started(Pids())
    time.sleep(0.1)
    check.stopping()
    monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", working)
    (note, *_) = check.after_stop(Pids()).notes
    assert note.startswith("a telemetry sample failed:") and "dcmi module initialize failed" in note


def test_npu_smi_missing_or_failing(npu_smi, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="'no-such-npu-smi' is not on PATH"):
        read_npu_smi("no-such-npu-smi")
    monkeypatch.delenv("FAKE_NPU_SMI_OUTPUT", raising=False)
    with pytest.raises(ServerError, match="failed with exit code 1: dcmi module initialize failed"):
        read_npu_smi()


@pytest.fixture
def live_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A live fake host of two NPUs whose processes are the simulator's workers; call it with live.json's extras."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    directory = tmp_path / "npu-host"
    directory.mkdir()
    monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", str(directory))

    def configure(**extras) -> None:
        for name in ("state.json", ".calls"):
            (directory / name).unlink(missing_ok=True)
        (directory / "live.json").write_text(json.dumps({"npus": 2, **extras}))

    return configure


def sim_server(tmp_path: Path, name: str, check: NpuSmiCheck) -> ServerProcess:
    port = find_free_port()
    return ServerProcess(
        [sys.executable, "-m", "h3bench.sim", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        port=port, log_path=tmp_path / name, startup_budget_s=60, device_checks=[check],
    )


@pytest.mark.slow
def test_a_real_server_its_workers_on_the_devices_and_what_they_leave(live_host, tmp_path: Path) -> None:
    live_host()
    lines: list[dict] = []
    check = NpuSmiCheck([0, 1], interval_s=0.05, telemetry=lines.extend, block="b1")
    with sim_server(tmp_path, "clean.log", check) as srv:
        deadline = time.monotonic() + 30
        while not any(r["hbm_used_mb"] > 3381 for r in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
    report = srv.verify_exited()
    assert report.ok and report.device_interference == () and report.device_leftovers == ()
    busy = [r for r in lines if r["hbm_used_mb"] == 3381 + 20480]
    assert {r["npu_id"] for r in busy} == {0, 1}, "each worker held its own NPU, and was known as the server's"

    live_host(linger_server=1)  # the driver still lists the server's workers after they exited
    with sim_server(tmp_path, "linger.log", NpuSmiCheck([0, 1], interval_s=0.05, telemetry=lines.extend)) as srv:
        pass
    report = srv.verify_exited()
    assert len(report.device_leftovers) == 2 and not report.survivors and report.device_interference == ()
    with pytest.raises(CleanupError, match="on NPU 1 chip 0, 20480 MB still holds the device after the stop"):
        report.check()

    live_host(foreign={"pid": os.getpid(), "npu": 1, "from_server": 1})  # a process that is not the server's
    with sim_server(tmp_path, "foreign.log", NpuSmiCheck([0, 1], interval_s=0.05, telemetry=lines.extend)) as srv:
        time.sleep(0.3)
    report = srv.verify_exited()
    assert report.ok, "another process is not our incomplete cleanup"
    appeared = f"pid {os.getpid()} (python3) on NPU 1 chip 0, 20480 MB appeared while the server ran"
    assert appeared in report.device_interference[0]
    assert srv.record().device_interference == report.device_interference


HOLD_LOCK = """
import sys
from h3bench.host.devices import DeviceLock
with DeviceLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_device_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with pytest.raises(InterferenceError, match=f"held by pid {holder.pid} .*within 0.3 s") as info:
            DeviceLock(path, timeout_s=0.3).acquire()
        assert time.monotonic() - t0 >= 0.3
        assert info.value.holder.startswith(f"pid {holder.pid}")

        waiter = DeviceLock(path, timeout_s=20)
        holder.stdin.write("release\n")
        holder.stdin.flush()
        with waiter:  # waits for the release, then holds the lock itself
            assert waiter.locked and waiter.holder().startswith(f"pid {os.getpid()}")
        assert not waiter.locked and path.read_text() == ""
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()


def test_device_lock_within_one_process_and_misuse(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with DeviceLock(path) as first:
        with pytest.raises(InterferenceError, match=f"held by pid {os.getpid()}"):
            DeviceLock(path, timeout_s=0).acquire()
        with pytest.raises(UsageError, match="already held by this object"):
            first.acquire()
    first.release()  # releasing twice is safe
    with DeviceLock(path):
        pass


def test_the_plan_names_a_held_device_lock_for_hardware_and_the_simulator_needs_none(tmp_path: Path) -> None:
    from h3bench.plan.estimate import make_plan
    from h3bench.runspec import load_runspec

    specs = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs"
    path = tmp_path / "devices.lock"
    with DeviceLock(path):
        npu = make_plan(load_runspec(specs / "950pr-x4.toml"), lock_path=path).problems
        sim = make_plan(load_runspec(specs / "sim.toml"), lock_path=path).problems
    free = make_plan(load_runspec(specs / "950pr-x4.toml"), lock_path=path).problems

    held = f"the device lock {path} is held by pid {os.getpid()}"
    assert any(p.startswith(held) for p in npu), npu
    assert not any("device lock" in p for p in (*sim, *free)), (sim, free)
