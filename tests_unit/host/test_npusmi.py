"""``npu-smi info`` parsing: every known layout, read back from what a renderer wrote, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.errors import DeviceReportError
from h3bench.host.npusmi import LAYOUTS, NpuDevice, NpuProcess, parse_npu_smi

SAMPLES = Path(__file__).parents[1] / "fakes" / "npu-smi-samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


@pytest.mark.parametrize(
    ("name", "first_hbm_used", "pids"),
    [
        ("910b1-x8-idle.txt", 3381, []),
        ("910b1-x8-serving.txt", 24020, list(range(51230, 51238))),
        ("910b1-x8-foreign-process-on-npu3.txt", 3381, [8811]),
    ],
    ids=["idle", "serving", "foreign"],
)
def test_910b_samples_parse(name: str, first_hbm_used: int, pids: list[int]) -> None:
    report = parse_npu_smi(sample(name))
    assert (report.version, report.layout) == ("24.1.rc2", "single-die")
    assert report.npu_ids == tuple(range(8))
    assert all(d.name == "910B1" and d.healthy and d.hbm_total_mb == 65536 for d in report.devices)
    assert all(d.chip_id == 0 and d.phy_id is None for d in report.devices)
    first = report.devices[0]
    assert (first.hbm_used_mb, first.bus_id, first.power_w, first.temperature_c) == (first_hbm_used, "0000:C1:00.0",
                                                                                     93.4, 41.0)
    assert [p.pid for p in report.processes] == pids


def test_a2_driver_25_with_idle_rows_and_empty_process_names() -> None:
    report = parse_npu_smi(sample("public-910b3-x8-driver25.2.0.txt"))
    assert (report.version, report.layout, len(report.devices)) == ("25.2.0", "single-die", 8)
    assert report.devices[2].hbm_used_mb == 41052  # "41052/ 65536" without a space
    assert report.processes == (NpuProcess(2, 0, 1333928, "", 37709),)
    assert report.processes[0].describe() == "pid 1333928 (no name) on NPU 2 chip 0, 37709 MB"


def test_a3_dual_die_with_phy_ids_and_chip_one_processes() -> None:
    report = parse_npu_smi(sample("public-a3-dual-die-x8-driver25.2.3.txt"))
    assert (report.version, report.layout) == ("25.2.3", "dual-die")
    assert [(d.npu_id, d.chip_id, d.phy_id) for d in report.devices] == [
        (npu, chip, 2 * npu + chip) for npu in range(8) for chip in (0, 1)
    ]
    # The second chip of an NPU prints "-" for power.
    assert [d.power_w for d in report.devices[:2]] == [232.5, None]
    assert [d.aicore_pct for d in report.devices[:2]] == [17.0, 17.0]
    assert len(report.processes) == 14
    assert NpuProcess(0, 1, 3328327, "", 50119) in report.processes
    assert {(p.npu_id, p.chip_id) for p in report.processes} == {(n, c) for n in (0, 1, 6, 7) for c in (0, 1)}


def test_driver_26_wide_layout_with_process_id_in_container() -> None:
    report = parse_npu_smi(sample("thirdparty-910b3-x8-driver26.1.0-wide.txt"))
    assert (report.version, report.layout, len(report.devices)) == ("26.1.0", "single-die", 8)
    assert report.processes == (NpuProcess(0, 0, 485946, "pytest", 5175, pid_in_container=None),)  # "NA"
    dual = parse_npu_smi(sample("dual-die-2npu-foreign-and-warning.txt"))
    assert dual.processes[0] == NpuProcess(0, 0, 692318, "python3", 37120, pid_in_container=1204)


def test_950_separate_cells_layout_from_a_third_party_fixture() -> None:
    report = parse_npu_smi(sample("thirdparty-fixture-950pr-driver25.7.txt"))
    assert (report.version, report.layout) == ("25.7.rc1.7", "separate-cells")
    assert report.devices == (
        NpuDevice(0, 0, None, "Ascend950PR", "OK", "0000:71:00.0", 8824, 131072, 99.0, 69.0, 276.0),
        NpuDevice(1, 0, None, "Ascend950PR", "Alarm", "0000:61:00.0", 10769, 131072, 100.0, 74.0, 279.1),
    )
    # No Chip column: the process is on the NPU's only chip.
    assert report.processes == (NpuProcess(0, 0, 2066378, "pytest", 360),)
    assert "unconfirmed" in LAYOUTS["separate-cells"]


# ---- a renderer for every layout, and the property that the parser reads back what it wrote

BAR = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"


def _metric(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def render(devices: list[NpuDevice], processes: list[NpuProcess], layout: str, container: bool) -> str:
    """Write a report in one of npu-smi's layouts."""
    out = ["| npu-smi 24.1.rc2                 Version: 24.1.rc2 |", BAR]
    if layout == "separate-cells":
        out += ["| NPU ID | Name | Health | Power(W) Temp(C) Huge |", "| | | Bus-Id | NPU Util(%) Mem HBM(MB) |", BAR]
        for d in devices:
            out += [f"| {d.npu_id} | {d.name} | {d.health} | {_metric(d.power_w)}  {_metric(d.temperature_c)}  0 / 0 |",
                    f"|  |  | {d.bus_id} | {_metric(d.aicore_pct)}  0 / 0  {d.hbm_used_mb} / {d.hbm_total_mb} |", BAR]
        out += ["| NPU ID | Process id | Process name | Process memory |", BAR]
        out += [f"| {p.npu_id} | {p.pid} | {p.name} | {p.memory_mb} |" for p in processes]
        return "\n".join(out) + "\n"
    dual = layout == "dual-die"
    out += ["| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
            f"| {'Chip  Phy-ID' if dual else 'Chip':<26}| Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB) |",
            BAR]
    for d in devices:
        chip = f"{d.chip_id}     {d.phy_id}" if dual else str(d.chip_id)
        out += [f"| {d.npu_id:<6}{d.name:<20}| {d.health:<14}| {_metric(d.power_w):<12}{_metric(d.temperature_c):<18}"
                "0    / 0             |",
                f"| {chip:<26}| {d.bus_id:<14}| {_metric(d.aicore_pct):<12}0    / 0          "
                f"{d.hbm_used_mb:<5}/ {d.hbm_total_mb:<8}   |", BAR]
    extra = " | Process id in container" if container else ""
    out += [BAR, f"| NPU     Chip              | Process id    | Process name             | Process memory(MB){extra} |", BAR]
    npus = sorted({d.npu_id for d in devices})
    for npu in npus:
        rows = [p for p in processes if p.npu_id == npu]
        if not rows:
            out.append(f"| No running processes found in NPU {npu}   |")
        for p in rows:
            inside = (" | " + (str(p.pid_in_container) if p.pid_in_container is not None else "NA")) if container else ""
            out.append(f"| {p.npu_id:<8}{p.chip_id:<18}| {p.pid:<14}| {p.name:<25}| {p.memory_mb}{inside} |")
        out.append(BAR)
    return "\n".join(out) + "\n"


@st.composite
def reports(draw):
    layout = draw(st.sampled_from(sorted(LAYOUTS)))
    container = layout != "separate-cells" and draw(st.booleans())
    chips = 2 if layout == "dual-die" else 1
    n = draw(st.integers(1, 8))
    health = st.sampled_from(["OK", "Warning", "Alarm", "Critical"])
    value = st.one_of(st.integers(0, 400).map(float), st.sampled_from([93.4, 232.5, 0.5]))
    devices = [
        NpuDevice(npu, chip, npu * 2 + chip if chips == 2 else None, draw(st.sampled_from(["910B1", "Ascend910"])),
                  draw(health), f"0000:{npu:02X}:0{chip}.0", draw(st.integers(0, 65536)), 65536,
                  draw(value), draw(value), draw(st.one_of(st.none(), value)))
        for npu in range(n) for chip in range(chips)
    ]
    name = st.text("abcdefghijklmnopqrstuvwxyzVLM_-.0123456789", min_size=0, max_size=20)
    processes = draw(st.lists(
        st.builds(NpuProcess, st.sampled_from(sorted({d.npu_id for d in devices})), st.integers(0, chips - 1),
                  st.integers(1, 4_000_000), name, st.integers(0, 65536),
                  st.one_of(st.none(), st.integers(1, 99_999)) if container else st.none()),
        max_size=6,
    ).map(lambda ps: sorted(ps, key=lambda p: p.npu_id)))
    return devices, processes, layout, container


@settings(max_examples=60, deadline=None)
@given(reports())
def test_parse_reads_back_what_was_rendered(case) -> None:
    devices, processes, layout, container = case
    report = parse_npu_smi(render(devices, processes, layout, container))
    assert report.layout == layout
    assert list(report.devices) == devices
    assert list(report.processes) == processes


def test_output_without_a_device_table_is_refused() -> None:
    with pytest.raises(DeviceReportError, match="no device table") as info:
        parse_npu_smi("dcmi module initialize failed. ret is -8005\n")
    assert info.value.layout == ""


@pytest.mark.parametrize(
    ("name", "line", "replacement", "expected", "layout"),
    [
        ("910b1-x8-idle.txt", 8, "| 0                         | bogus         | 0    |", "a chip row `chip | bus-id",
         "single-die"),
        ("public-a3-dual-die-x8-driver25.2.3.txt", 8, "| 0                         | 0000:9D:00.0  | 17  0 / 0  53444/ 65536 |",
         "with its Phy-ID", "dual-die"),
        ("thirdparty-fixture-950pr-driver25.7.txt", 7, "| 0      | Ascend950PR      | OK            | hot  |",
         "power and temperature", "separate-cells"),
        ("thirdparty-fixture-950pr-driver25.7.txt", 16, "| 0              | 2066378       | pytest              |",
         "a process row `npu | pid | name | memory`", "separate-cells"),
        ("thirdparty-910b3-x8-driver26.1.0-wide.txt", 41, "| 0       0  | 485946  | pytest  | 5175  | maybe |",
         "a PID or NA", "single-die"),
    ],
    ids=["910b-chip-row", "a3-no-phy-id", "950-power", "950-process", "wide-container-pid"],
)
def test_a_parse_error_names_the_line_and_the_layout(name, line, replacement, expected, layout) -> None:
    lines = sample(name).splitlines()
    lines[line - 1] = replacement
    with pytest.raises(DeviceReportError) as info:
        parse_npu_smi("\n".join(lines))
    error = info.value
    assert (error.line_number, error.line, error.layout) == (line, replacement, layout)
    assert f"line {line}:" in str(error) and expected in str(error) and LAYOUTS[layout] in str(error)
