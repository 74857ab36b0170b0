"""Reading ``npu-smi info``: its table layouts, parsed into chips and the processes on them.

``npu-smi info`` prints a device table and a process table. Three layouts of
the device table are known, told apart by its header:

- **single-die** (910B/A2, drivers 24.x to 26.x): two rows per NPU, ``NPU
  Name | Health | Power(W) Temp(C) Hugepages-Usage(page)`` over ``Chip |
  Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB)``. Driver 26.x prints the
  same cells wider;
- **dual-die** (A3/910C): the second header row reads ``Chip Phy-ID``, and
  each NPU has two chips (0 and 1), each with its two rows and its Phy-ID;
  the second chip prints ``-`` for power;
- **separate-cells** (950PR): ``NPU ID | Name | Health`` in cells of their
  own, the chip rows leave those cells empty, and the process table has no
  Chip column. This layout is known only from a third party's test fixture;
  nobody here has confirmed that a real 950 host prints it.

The process table is ``NPU Chip | Process id | Process name | Process
memory(MB)``; newer drivers add ``| Process id in container`` (``NA``
outside a container), and an idle NPU prints ``No running processes found
in NPU n``. Inside a container, drivers of the 25.x series print the host's
PIDs with empty process names.

Anything the parser does not expect is a :class:`~h3bench.errors.DeviceReportError`
that names the line, what was expected there and the layout it had detected.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from h3bench.errors import DeviceReportError, ServerError, UsageError

__all__ = ["LAYOUTS", "NpuDevice", "NpuProcess", "NpuReport", "board_serial", "parse_npu_smi", "read_npu_smi"]

LAYOUTS = {
    "single-die": "910B/A2 single-die (`NPU Name | Health` over `Chip | Bus-Id`)",
    "dual-die": "A3 dual-die (`NPU Name | Health` over `Chip Phy-ID | Bus-Id`, two chips per NPU)",
    "separate-cells": "950 separate-cells (`NPU ID | Name | Health` cells; a third party's fixture, unconfirmed)",
}

_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")
_NPU_NAME = re.compile(r"(\d+)\s+(\S.*)")
_CHIP = re.compile(r"(\d+)(?:\s+(\d+))?")
_NPU_CHIP = re.compile(r"(\d+)\s+(\d+)")
_IDLE = re.compile(r"No running processes found in NPU (\d+)")
_VERSION = re.compile(r"npu-smi\s+(\S+)")
_NUMBER = re.compile(r"-|\d+(?:\.\d+)?")


@dataclass(frozen=True)
class NpuDevice:
    """One chip as ``npu-smi info`` lists it (a 910B NPU has one, an A3 NPU two)."""

    npu_id: int
    chip_id: int
    phy_id: int | None  # only printed on dual-die hosts
    name: str
    health: str
    bus_id: str
    hbm_used_mb: int
    hbm_total_mb: int
    aicore_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None  # the second chip of an A3 NPU prints "-"

    @property
    def healthy(self) -> bool:
        return self.health == "OK"


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table: a process holding memory on one chip."""

    npu_id: int
    chip_id: int
    pid: int
    name: str  # empty when npu-smi cannot see the process (host PIDs inside a container)
    memory_mb: int
    pid_in_container: int | None = None  # newer drivers print both PIDs

    def describe(self) -> str:
        return f"pid {self.pid} ({self.name or 'no name'}) on NPU {self.npu_id} chip {self.chip_id}, {self.memory_mb} MB"


@dataclass(frozen=True)
class NpuReport:
    """One ``npu-smi info`` output: its version, layout, chips and processes."""

    version: str
    layout: str  # a key of LAYOUTS
    devices: tuple[NpuDevice, ...]
    processes: tuple[NpuProcess, ...]

    @property
    def npu_ids(self) -> tuple[int, ...]:
        return tuple(sorted({d.npu_id for d in self.devices}))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(token: str) -> float | None:
    return None if token == "-" else float(token)


class _Rows:
    """The table rows of an output (borders and text skipped), with errors that name the line and layout."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.layout = ""
        self.header_line = 0
        self._rows: Iterator[tuple[int, list[str]]] = (
            (n, _cells(line)) for n, line in enumerate(self.lines, start=1) if line.strip().startswith("|")
        )
        self._pushed: tuple[int, list[str]] | None = None

    def next(self) -> tuple[int, list[str]] | None:
        if self._pushed is not None:
            row, self._pushed = self._pushed, None
            return row
        return next(self._rows, None)

    def push(self, row: tuple[int, list[str]]) -> None:
        self._pushed = row

    def error(self, number: int, expected: str) -> DeviceReportError:
        layout = LAYOUTS.get(self.layout, "no layout yet")
        line = self.lines[number - 1] if 0 < number <= len(self.lines) else "<end of output>"
        return DeviceReportError(
            f"npu-smi info, line {number}: expected {expected}, got {line.strip()!r} "
            f"(layout {layout}, detected from the header on line {self.header_line})",
            line_number=number,
            line=line,
            layout=self.layout,
        )


def _leading(rows: _Rows, number: int, cell: str, count: int, what: str) -> list[float | None]:
    """The first ``count`` numbers of a metrics cell (``-`` reads as None)."""
    tokens = cell.split()[:count]
    if len(tokens) < count or not all(_NUMBER.fullmatch(t) for t in tokens):
        raise rows.error(number, what)
    return [_number(t) for t in tokens]


def _hbm(rows: _Rows, number: int, cell: str) -> tuple[int, int]:
    usage = _USAGE.findall(cell)
    if len(usage) < 2:
        raise rows.error(number, "AICore, Memory-Usage and HBM-Usage ('used / total', twice)")
    used, total = usage[-1]  # Memory-Usage comes first, HBM-Usage last
    return int(used), int(total)


def _device(rows: _Rows, first: tuple[int, list[str]], second: tuple[int, list[str]] | None) -> NpuDevice:
    """One chip from its two rows, in the detected layout."""
    (n1, a) = first
    if second is None:
        raise rows.error(len(rows.lines) + 1, "the chip row that follows an NPU row")
    (n2, b) = second
    if rows.layout == "separate-cells":
        if len(a) < 4 or not a[0].isdigit():
            raise rows.error(n1, "an NPU row `id | name | health | power temp hugepages`")
        npu, name, health, power_cell = int(a[0]), a[1], a[2], a[3]
        if len(b) < 4 or b[0] or not _BUS_ID.fullmatch(b[2]):
            raise rows.error(n2, "a chip row `| | bus-id | util memory hbm` under the NPU row")
        chip, phy, bus, usage_cell = 0, None, b[2], b[3]
    else:
        match = _NPU_NAME.fullmatch(a[0]) if len(a) >= 3 else None
        if match is None:
            raise rows.error(n1, "an NPU row `id name | health | power temp hugepages`")
        npu, name, health, power_cell = int(match.group(1)), match.group(2), a[1], a[2]
        chip_match = _CHIP.fullmatch(b[0]) if len(b) >= 3 else None
        if chip_match is None or not _BUS_ID.fullmatch(b[1]):
            phy_text = " phy-id" if rows.layout == "dual-die" else ""
            raise rows.error(n2, f"a chip row `chip{phy_text} | bus-id | aicore memory hbm` under the NPU row")
        if rows.layout == "dual-die" and chip_match.group(2) is None:
            raise rows.error(n2, "a chip row with its Phy-ID (`chip phy-id | bus-id | ...`)")
        chip, bus, usage_cell = int(chip_match.group(1)), b[1], b[2]
        phy = int(chip_match.group(2)) if chip_match.group(2) else None
    power, temperature = _leading(rows, n1, power_cell, 2, "power and temperature (`93.4  41  0 / 0`)")
    (aicore,) = _leading(rows, n2, usage_cell, 1, "the AICore utilisation first (`97  0 / 0  24020 / 65536`)")
    used, total = _hbm(rows, n2, usage_cell)
    return NpuDevice(npu, chip, phy, name, health, bus, used, total, aicore, temperature, power)


def _process(rows: _Rows, number: int, cells: list[str], has_chip: bool, has_container: bool) -> NpuProcess:
    expected = "a process row `npu" + (" chip" if has_chip else "") + " | pid | name | memory"
    expected += " | pid in container`" if has_container else "`"
    if len(cells) < 4 + has_container:
        raise rows.error(number, expected)
    where = _NPU_CHIP.fullmatch(cells[0]) if has_chip else re.fullmatch(r"(\d+)", cells[0])
    if where is None or not cells[1].isdigit() or not cells[3].isdigit():
        raise rows.error(number, expected)
    in_container = cells[4] if has_container else ""
    if has_container and not (in_container.isdigit() or in_container in ("NA", "-", "")):
        raise rows.error(number, "a PID or NA in the `Process id in container` column")
    return NpuProcess(
        npu_id=int(where.group(1)),
        chip_id=int(where.group(2)) if has_chip else 0,
        pid=int(cells[1]),
        name=cells[2],
        memory_mb=int(cells[3]),
        pid_in_container=int(in_container) if in_container.isdigit() else None,
    )


def _detect(rows: _Rows, text: str) -> None:
    """Find the device table's header and set the layout from it."""
    while (row := rows.next()) is not None:
        number, cells = row
        if len(cells) >= 3 and "Health" in cells[1:3]:
            rows.header_line = number
            if cells[0] == "NPU ID":
                rows.layout = "separate-cells"
            elif re.fullmatch(r"NPU\s+Name", cells[0]):
                second = rows.next()
                if second is None or not second[1][0].startswith("Chip"):
                    raise rows.error(second[0] if second else number + 1, "the header row `Chip [Phy-ID] | Bus-Id | ...`")
                rows.layout = "dual-die" if "Phy-ID" in second[1][0] else "single-die"
                return
            else:
                raise rows.error(number, "a device header `NPU Name | Health | ...` or `NPU ID | Name | Health | ...`")
            second = rows.next()
            if second is None or "Bus-Id" not in second[1]:
                raise rows.error(second[0] if second else number + 1, "the header row `| | Bus-Id | ...`")
            return
    head = "\n".join(text.splitlines()[:8])
    raise DeviceReportError(
        f"npu-smi info printed no device table that h3bench can read (no `Health` header); it began:\n{head}",
        line_number=0, line="", layout="",
    )


def parse_npu_smi(text: str) -> NpuReport:
    """Parse the output of ``npu-smi info`` in any of the :data:`LAYOUTS`.

    Raises
    ------
    DeviceReportError
        A row that the detected layout does not allow, naming the line, what was
        expected there and the layout; or output with no device table at all.
    """
    version = next((m.group(1) for line in text.splitlines() if (m := _VERSION.search(line))), "")
    rows = _Rows(text)
    _detect(rows, text)
    devices: list[NpuDevice] = []
    header: list[str] | None = None
    while (row := rows.next()) is not None:
        number, cells = row
        if len(cells) > 1 and cells[1].startswith("Process id"):
            header = cells
            break
        devices.append(_device(rows, row, rows.next()))
    processes: list[NpuProcess] = []
    if header is not None:
        has_chip = "Chip" in header[0]
        has_container = len(header) > 4 and "container" in header[4]
        while (row := rows.next()) is not None:
            number, cells = row
            if len(cells) == 1 and _IDLE.fullmatch(cells[0]):
                continue
            processes.append(_process(rows, number, cells, has_chip, has_container))
    if not devices:
        raise rows.error(rows.header_line + 2, "at least one NPU row under the device header")
    return NpuReport(version=version, layout=rows.layout, devices=tuple(devices), processes=tuple(processes))


def read_npu_smi(executable: str = "npu-smi", *, timeout_s: float = 60.0) -> NpuReport:
    """Run ``npu-smi info`` and parse it."""
    path = shutil.which(executable)
    if path is None:
        raise UsageError(
            f"{executable!r} is not on PATH; device checks need the Ascend driver tools "
            "(on a host without NPUs, run against the simulator with no device checks)"
        )
    try:
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"{path} info gave no answer within {timeout_s:g} s") from exc
    if proc.returncode != 0:
        raise ServerError(f"{path} info failed with exit code {proc.returncode}: {proc.stderr.strip()[:500]}")
    return parse_npu_smi(proc.stdout)


_SERIAL = re.compile(r"^\s*Serial\s*Number\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


def board_serial(npu_id: int, executable: str = "npu-smi", *, timeout_s: float = 30.0) -> str | None:
    """The board's serial number from ``npu-smi info -t board -i ID`` (its ``Serial Number`` line), or None.

    What tells two hosts apart when their names do not (a pod's name, a
    renamed runner): the pool refuses two shards on the same boards. None
    where the tool, the line or the answer is missing.
    """
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        proc = subprocess.run([path, "info", "-t", "board", "-i", str(npu_id)], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _SERIAL.search(proc.stdout) if proc.returncode == 0 else None
    return found.group(1) if found else None
