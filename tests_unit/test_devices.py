"""npu-smi parsing, interference and cleanup checks (through a fake npu-smi on PATH), and the device lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.devices import (
    DeviceLock,
    NpuDevice,
    NpuProcess,
    NpuSmiCheck,
    foreign_processes,
    parse_npu_smi,
    read_npu_smi,
)
from h3bench.errors import CleanupError, InterferenceError, ServerError, UsageError
from h3bench.ports import find_free_port
from h3bench.server import ServerProcess

FAKES = Path(__file__).parent / "fakes"
SAMPLES = FAKES / "npu-smi-samples"
IDLE = SAMPLES / "910b1-x8-idle.txt"
SERVING = SAMPLES / "910b1-x8-serving.txt"
FOREIGN = SAMPLES / "910b1-x8-foreign-process-on-npu3.txt"
DUAL_DIE = SAMPLES / "dual-die-2npu-foreign-and-warning.txt"


@pytest.fixture
def npu_smi(monkeypatch: pytest.MonkeyPatch):
    """Put the fake npu-smi on PATH; call the result with the sample it should print."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")

    def play(sample: Path) -> None:
        monkeypatch.setenv("FAKE_NPU_SMI_OUTPUT", str(sample))

    return play


@pytest.mark.parametrize(
    ("sample", "first_hbm_used", "pids"),
    [
        (IDLE, 3381, []),
        (SERVING, 24020, list(range(51230, 51238))),
        (FOREIGN, 3381, [8811]),
    ],
    ids=["idle", "serving", "foreign"],
)
def test_910b_samples_parse(sample: Path, first_hbm_used: int, pids: list[int]) -> None:
    report = parse_npu_smi(sample.read_text())
    assert report.version == "24.1.rc2"
    assert report.npu_ids == tuple(range(8))
    assert all(d.name == "910B1" and d.healthy and d.hbm_total_mb == 65536 for d in report.devices)
    assert all(d.chip_id == 0 and d.phy_id is None for d in report.devices)
    assert report.devices[0].hbm_used_mb == first_hbm_used
    assert report.devices[0].bus_id == "0000:C1:00.0"
    assert [p.pid for p in report.processes] == pids


def test_foreign_process_on_npu3_is_found() -> None:
    report = parse_npu_smi(FOREIGN.read_text())
    (foreign,) = foreign_processes(report, allowed_pids=set(), devices=range(8))
    assert foreign == NpuProcess(npu_id=3, chip_id=0, pid=8811, name="python3", memory_mb=9036)
    assert report.devices[3].hbm_used_mb == 12420
    assert foreign_processes(report, allowed_pids={8811}) == ()
    assert foreign_processes(report, allowed_pids=set(), devices=[0, 1, 2, 4]) == ()


def test_serving_workers_are_foreign_unless_allowed() -> None:
    report = parse_npu_smi(SERVING.read_text())
    assert len(foreign_processes(report, allowed_pids=set())) == 8
    assert foreign_processes(report, allowed_pids=set(range(51230, 51238))) == ()


def test_dual_die_layout() -> None:
    report = parse_npu_smi(DUAL_DIE.read_text())
    assert report.version == "24.1.rc3"
    assert [(d.npu_id, d.chip_id, d.phy_id) for d in report.devices] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert [d.hbm_used_mb for d in report.devices] == [41230, 40988, 3419, 15242]  # "15242/ 65536" too
    assert [d.health for d in report.devices] == ["OK", "OK", "OK", "Warning"]
    assert report.processes[0] == NpuProcess(0, 0, 692318, "python3", 37120, pid_in_container=1204)
    assert report.processes[2] == NpuProcess(1, 1, 700511, "VLLMWorker", 11800, pid_in_container=None)
    # The same process may be known by its host PID or by its PID inside the container.
    assert [p.pid for p in foreign_processes(report, {1204})] == [700511]
    assert [p.pid for p in foreign_processes(report, {692318}, devices=[0])] == []


def render(devices: list[NpuDevice], processes: list[NpuProcess], dual: bool) -> str:
    """Write a report in npu-smi's layout (the 910B one, or the dual-die one)."""
    bar = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
    metrics = "| AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |"
    out = ["+" + "-" * 96 + "+", "| npu-smi 24.1.rc2                 Version: 24.1.rc2" + " " * 46 + "|", bar,
           "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
           f"| {'Chip  Phy-ID' if dual else 'Chip':<26}| Bus-Id        {metrics}"]
    for d in devices:
        chip = f"{d.chip_id}     {d.phy_id}" if dual else str(d.chip_id)
        out += [f"| {d.npu_id:<6}{d.name:<20}| {d.health:<14}| 93.4        41                0    / 0             |",
                f"| {chip:<26}| {d.bus_id:<14}| 0           0    / 0          "
                f"{d.hbm_used_mb:<5} / {d.hbm_total_mb:<8}   |",
                bar.replace("-", "=")]
    out += [bar, "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"]
    for p in processes:
        out.append(f"| {p.npu_id:<8}{p.chip_id:<18}| {p.pid:<14}| {p.name:<25}| {p.memory_mb:<24}|")
    return "\n".join(out) + "\n"


@st.composite
def reports(draw):
    dual = draw(st.booleans())
    n = draw(st.integers(1, 8))
    health = st.sampled_from(["OK", "Warning", "Alarm", "Critical"])
    devices = [
        NpuDevice(npu, chip, npu * 2 + chip if dual else None, draw(st.sampled_from(["910B1", "Ascend910"])),
                  draw(health), f"0000:{npu:02X}:0{chip}.0", draw(st.integers(0, 65536)), 65536)
        for npu in range(n) for chip in range(2 if dual else 1)
    ]
    name = st.text("abcdefghijklmnopqrstuvwxyzVLM_-.0123456789", min_size=1, max_size=20)
    processes = draw(st.lists(
        st.builds(NpuProcess, st.sampled_from([d.npu_id for d in devices]), st.integers(0, 1 if dual else 0),
                  st.integers(1, 4_000_000), name, st.integers(0, 65536)),
        max_size=6,
    ))
    return devices, processes, dual


@settings(max_examples=30, deadline=None)
@given(reports())
def test_parse_reads_back_what_was_rendered(case) -> None:
    devices, processes, dual = case
    report = parse_npu_smi(render(devices, processes, dual))
    assert list(report.devices) == devices
    assert list(report.processes) == processes


def test_output_without_a_device_table_is_refused() -> None:
    with pytest.raises(ServerError, match="no device table"):
        parse_npu_smi("dcmi module initialize failed. ret is -8005\n")


def test_npu_smi_check_before_start(npu_smi) -> None:
    npu_smi(IDLE)
    NpuSmiCheck(range(8)).before_start()

    npu_smi(FOREIGN)
    with pytest.raises(InterferenceError, match=r"pid 8811 \(python3\) on NPU 3 chip 0, 9036 MB") as info:
        NpuSmiCheck(range(8)).before_start()
    assert info.value.holder == "pid 8811 (python3)"
    NpuSmiCheck([0, 1, 2]).before_start()  # NPU 3 is not this campaign's

    npu_smi(DUAL_DIE)
    NpuSmiCheck([0], allowed_pids={1204}).before_start()
    with pytest.raises(InterferenceError, match="NPU 1 chip 1 reports health 'Warning'"):
        NpuSmiCheck([1], allowed_pids={700511}).before_start()
    with pytest.raises(UsageError, match=r"NPU \[5\] not on this host"):
        NpuSmiCheck([0, 5]).before_start()


def test_npu_smi_check_after_stop(npu_smi) -> None:
    check = NpuSmiCheck(range(8))
    npu_smi(IDLE)
    assert check.after_stop() == ()
    npu_smi(SERVING)
    leftovers = check.after_stop()
    assert len(leftovers) == 8
    assert leftovers[0] == "pid 51230 (VLLMWorker) on NPU 0 chip 0, 20480 MB still holds the device after the stop"
    assert [when for when, _ in check.reports] == ["after_stop", "after_stop"]


def test_npu_smi_missing_or_failing(npu_smi, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="'no-such-npu-smi' is not on PATH"):
        read_npu_smi("no-such-npu-smi")
    monkeypatch.delenv("FAKE_NPU_SMI_OUTPUT", raising=False)
    with pytest.raises(ServerError, match="failed with exit code 1: dcmi module initialize failed"):
        read_npu_smi()


def test_server_process_with_npu_smi_check(npu_smi, tmp_path: Path) -> None:
    """Interference refuses the start; a device still held after the stop fails the exit check."""
    def server(name: str) -> ServerProcess:
        port = find_free_port()
        return ServerProcess(
            [sys.executable, str(FAKES / "fake_server.py"), "--port", str(port)],
            port=port, log_path=tmp_path / name, device_checks=[NpuSmiCheck(range(8))],
        )

    npu_smi(FOREIGN)
    refused = server("refused.log")
    with pytest.raises(InterferenceError, match="NPU 3"):
        refused.start()
    assert not refused.log_path.exists()

    npu_smi(IDLE)
    with server("ok.log") as srv:
        npu_smi(SERVING)  # as if the workers never released their devices
    report = srv.verify_exited()
    assert len(report.device_leftovers) == 8 and not report.survivors
    with pytest.raises(CleanupError, match="pid 51237 \\(VLLMWorker\\) on NPU 7"):
        report.check()
    npu_smi(IDLE)
    srv.verify_exited().check()


HOLD_LOCK = """
import sys
from h3bench.devices import DeviceLock
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
