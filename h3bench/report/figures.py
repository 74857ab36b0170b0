"""The report's charts, drawn with matplotlib (Agg) from what the bundle holds; no media is decoded here.

Each function returns a :class:`Figure` (inline SVG, text kept as text) or,
when there is nothing to draw, None; the page then says why. The pictures of
the worst pair, which decode media, are in :mod:`h3bench.report.pictures`.
"""

from __future__ import annotations

import base64
import functools
import io
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: no display is needed

from matplotlib import rc_context
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter

from h3bench.report.contents import DERIVED_STAGE, Series
from h3bench.runspec import BASELINE, RunSpec
from h3bench.stats.speed import RatioEstimate

__all__ = [
    "BASELINE_COLOR",
    "Figure",
    "arm_color",
    "e2e_figure",
    "lifecycle_figure",
    "new_figure",
    "png_figure",
    "ratio_figure",
    "stage_figure",
    "stage_ratio_figure",
    "styled",
    "svg_figure",
    "telemetry_figure",
]

BASELINE_COLOR = "#4c72b0"
_CANDIDATE_COLORS = ("#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
_STAGE_COLORS = ("#8dd3c7", "#fdb462", "#80b1d3", "#fb8072", "#bebada")
# Text stays text in the SVG (the browser draws it); small type, no box around the plots.
_STYLE: dict[Any, Any] = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                          "axes.spines.right": False}

_F = TypeVar("_F", bound=Callable[..., Any])


def styled(function: _F) -> _F:
    """Draw and save inside the report's style, leaving matplotlib's global settings as they were."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with rc_context(_STYLE):
            return function(*args, **kwargs)

    return cast(_F, wrapper)


@dataclass(frozen=True)
class Figure:
    """One figure of the page: an inline SVG document or a PNG, with its caption."""

    id: str  # unique on the page
    kind: str  # what it shows: "e2e", "stages", "ratio", ...
    title: str
    caption: str
    svg: str | None = None
    png: bytes | None = None

    @property
    def png_data_uri(self) -> str:
        assert self.png is not None
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def new_figure(width: float, height: float) -> MplFigure:
    """A figure with no pyplot state behind it, so nothing is shared between reports."""
    return MplFigure(figsize=(width, height), layout="constrained")


def svg_figure(fig: MplFigure, id: str, kind: str, title: str, caption: str) -> Figure:
    """Inline SVG: the XML prologue is dropped."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return Figure(id, kind, title, caption, svg=text[text.index("<svg"):])


def png_figure(fig: MplFigure, id: str, kind: str, title: str, caption: str, dpi: int = 100) -> Figure:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return Figure(id, kind, title, caption, png=buffer.getvalue())


def arm_color(spec: RunSpec, arm: str) -> str:
    if arm == BASELINE:
        return BASELINE_COLOR
    return _CANDIDATE_COLORS[spec.candidates.index(arm) % len(_CANDIDATE_COLORS)]


# --- E2E per request --------------------------------------------------------------------


@styled
def e2e_figure(spec: RunSpec, series: Series) -> Figure | None:
    """Every request's E2E, block by block in schedule order; warmups and audits in their own panel."""
    if not series.blocks:
        return None
    k = spec.protocol.requests_per_block
    fig = new_figure(9, 4.4)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.4))
    seen: set[str] = set()

    def label(text: str) -> str | None:
        """Each legend entry once."""
        if text in seen:
            return None
        seen.add(text)
        return text

    ticks, names = [], []
    for i, result in enumerate(series.blocks):
        x0 = i * (k + 1)
        block = result.block
        color = arm_color(spec, block.arm)
        points = [(x0 + j, s.e2e_s) for j, s in enumerate(result.measured) if s.ok and s.e2e_s is not None]
        if points:
            top.plot([x for x, _ in points], [y for _, y in points], "o", color=color, label=label(block.arm))
            median = statistics.median(y for _, y in points)
            top.hlines(median, x0 - 0.35, x0 + k - 0.65, color=color, linewidth=2, alpha=0.6,
                       label=label("block median"))
        failed = [x0 + j for j, s in enumerate(result.measured) if not s.ok]
        if failed or result.failure:
            top.annotate("failed", (x0 + (k - 1) / 2, 0), xycoords=("data", "axes fraction"), color="#c44e52",
                         ha="center", va="bottom")
        middle = x0 + (k - 1) / 2
        for offset, kind, marker in ((-0.3, "warmup", "^"), (0.3, "audit", "D")):
            values = [s.e2e_s for s in result.samples if s.kind == kind and s.ok and s.e2e_s is not None]
            if values:
                bottom.plot([middle + offset] * len(values), values, marker, color=color, markerfacecolor="none",
                            label=label(kind))
        ticks.append(middle)
        names.append(f"{block.position}{block.letter}")
    top.set_ylabel("measured E2E (s)")
    bottom.set_ylabel("E2E (s)")
    bottom.set_xticks(ticks, names)
    bottom.set_xlabel(f"block (order {spec.protocol.order}: A baseline, B {series.candidate})")
    for axes in (top, bottom):
        if axes.has_data():
            axes.legend(loc="best", fontsize=7, frameon=False)
    bottom.set_title("warmups (▲) and audits (◆), apart from the measured requests", fontsize=8, loc="left")
    caption = (f"{series.label}: each measured request's end-to-end latency (upload start to the last byte of the MP4),"
               f" {k} per block, in schedule order; the line is the block median that the paired ratio uses.")
    return svg_figure(fig, f"fig-e2e-{series.key}", "e2e", f"E2E per request, {series.label} against baseline",
                      caption)


# --- stage breakdown ----------------------------------------------------------------------


@styled
def stage_figure(spec: RunSpec, series: Series) -> Figure | None:
    """Median seconds of each top-level profiler stage per arm, stacked; mux+transfer is derived.

    The medians are those verdict.json holds (each arm's ``ArmStats.stages``), never computed again here.
    """
    arms = [(stats.arm, dict(stats.stages)) for stats in (series.verdict.arms if series.verdict else ())]
    arms = [(arm, medians) for arm, medians in arms if medians]
    if not arms:
        return None
    stages = [name for name in dict.fromkeys(n for _, m in arms for n in m)]
    fig = new_figure(9, 0.9 + 0.6 * len(arms))
    axes = fig.subplots()
    handles = {}
    for row, (_, medians) in enumerate(arms):
        left = 0.0
        for index, stage in enumerate(stages):
            width = medians.get(stage, 0.0)
            derived = stage == DERIVED_STAGE
            handles[stage] = axes.barh(row, width, left=left, height=0.6, edgecolor="#555555", linewidth=0.5,
                                       color="#dddddd" if derived else _STAGE_COLORS[index % len(_STAGE_COLORS)],
                                       hatch="//" if derived else None)
            left += width
        axes.text(left, row, f" {left:.3f} s", va="center", fontsize=8)
    axes.set_yticks(range(len(arms)), [arm for arm, _ in arms])
    axes.invert_yaxis()
    axes.set_xlabel("median seconds per measured request")
    # Labels given explicitly: matplotlib would hide "_encode_local_media" for its leading underscore.
    axes.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3,
                fontsize=7, frameon=False)
    caption = (f"{series.label}: medians of the profiler's top-level stages "
               f"({', '.join(s for s in stages if s != DERIVED_STAGE)}) over the measured requests, stacked; "
               f"{DERIVED_STAGE} is the median of E2E minus their sum, not a profiler key.")
    return svg_figure(fig, f"fig-stages-{series.key}", "stages", f"Stage breakdown, {series.label}", caption)


# --- which stage moved ---------------------------------------------------------------------


@styled
def stage_ratio_figure(spec: RunSpec, series: Series) -> Figure | None:
    """Every part's paired ratio with its interval against 1, as verdict.json holds them (attribution, not a verdict)."""
    stages = series.verdict.stages if series.verdict is not None else None
    rows = [p for p in stages.parts if p.ratio is not None] if stages is not None else []
    if stages is None or not rows:
        return None
    fig = new_figure(9, 1.2 + 0.26 * len(rows))
    axes = fig.subplots()
    for row, part in enumerate(rows):
        color = "#c44e52" if part.moved else BASELINE_COLOR
        if part.ratio_low is not None and part.ratio_high is not None:
            axes.hlines(row, part.ratio_low, part.ratio_high, color=color, linewidth=3)
        axes.plot([float(part.ratio or 0.0)], [row], "s", color="black", markersize=3)
    axes.axvline(1.0, color="#444444", linewidth=1)
    axes.set_xscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 0.7, not 7×10⁻¹
    axes.xaxis.set_major_formatter(plain)
    axes.xaxis.set_minor_formatter(plain)
    axes.tick_params(axis="x", which="minor", labelsize=6)
    axes.set_yticks(range(len(rows)), [p.part for p in rows], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel(f"candidate / baseline, paired over k = {max(p.k for p in rows)} AB/BA pairs (log scale)")
    caption = (f"{series.label}: each part's geometric-mean ratio of block medians (square) and its two-sided "
               f"{1 - 2 * stages.level:.0%} interval; red where the interval excludes 1. {stages.statement}.")
    return svg_figure(fig, f"fig-stage-ratios-{series.key}", "stage-ratios", f"Which stage moved, {series.label}",
                      caption)


# --- paired ratio ----------------------------------------------------------------------------


@styled
def ratio_figure(spec: RunSpec, all_series: Sequence[Series]) -> Figure | None:
    """The geometric-mean paired ratio and its CI per duration and candidate, against 1 and 1 − margin."""
    rows = [s for s in all_series if s.estimate is not None and s.verdict is not None]
    if not rows:
        return None
    margin = spec.gates.speed_margin
    fig = new_figure(9, 1.0 + 0.55 * len(rows))
    axes = fig.subplots()
    for row, series in enumerate(rows):
        assert series.estimate is not None and series.verdict is not None
        estimate, color = series.estimate, arm_color(spec, series.candidate)
        if estimate.ratios:
            axes.plot(estimate.ratios, [row - 0.2] * len(estimate.ratios), "o", color=color, markerfacecolor="none",
                      markersize=4, label="paired ratio (one AB/BA pair)" if row == 0 else None)
        if estimate.ci_low is not None and estimate.ci_high is not None:
            axes.hlines(row, estimate.ci_low, estimate.ci_high, color=color, linewidth=3,
                        label=_bounds_label(estimate) if row == 0 else "_nolegend_")
        if estimate.geomean is not None:
            axes.plot([estimate.geomean], [row], "s", color="black", label="geometric mean" if row == 0 else None)
            axes.annotate(f"speed {series.verdict.speed}", (estimate.ci_high or estimate.geomean, row),
                          xytext=(6, 0), textcoords="offset points", fontsize=7, va="center")
    axes.axvline(1.0, color="#444444", linewidth=1, label="1 (no change)")
    axes.axvline(1 - margin, color="#c44e52", linestyle="--", linewidth=1, label=f"1 − margin = {1 - margin:g}")
    axes.set_yticks(range(len(rows)), [s.label for s in rows])
    axes.invert_yaxis()
    axes.set_ylim(len(rows) - 0.4, -0.6)
    axes.set_xlabel("candidate / baseline median E2E")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=7, frameon=False)
    caption = (f"Faster is PASS when the whole interval lies left of 1 − margin ({1 - margin:g}); FAIL when it lies "
               "right of 1; otherwise INCONCLUSIVE. Each open circle is one AB/BA pair's ratio of block medians.")
    return svg_figure(fig, "fig-ratio", "ratio", "Paired ratio with its bounds", caption)


# --- lifecycle ------------------------------------------------------------------------------------


_LIFECYCLE = (("startup_s", "startup", "startup_budget_s"), ("warmup_s", "warmup", None),
              ("shutdown_s", "shutdown", "shutdown_budget_s"))


@styled
def lifecycle_figure(spec: RunSpec, all_series: Sequence[Series]) -> Figure | None:
    """Startup, warmup and shutdown seconds of every block, per series and arm, with the budgets drawn."""
    groups = [(f"{s.duration:g}s {arm}", arm, [r.lifecycle.server for r in s.blocks if r.block.arm == arm])
              for s in all_series for arm in (BASELINE, s.candidate)]
    groups = [g for g in groups if g[2]]
    if not groups:
        return None
    fig = new_figure(9, 3.2)
    panels = fig.subplots(1, 3)
    budgets = {"startup_budget_s": spec.protocol.startup_budget_s, "shutdown_budget_s": spec.protocol.shutdown_budget_s}
    for axes, (key, name, budget) in zip(panels, _LIFECYCLE, strict=True):
        for x, (_, arm, events) in enumerate(groups):
            values = [v for e in events if (v := getattr(e, key)) is not None]
            axes.plot([x] * len(values), values, "o", color=arm_color(spec, arm), markerfacecolor="none")
        if budget is not None:
            axes.axhline(budgets[budget], color="#c44e52", linestyle="--", linewidth=1, label="budget")
            axes.legend(loc="best", fontsize=7, frameon=False)
        axes.set_title(name)
        axes.set_ylabel("seconds")
        axes.set_xticks(range(len(groups)), [g[0] for g in groups], rotation=45, ha="right", fontsize=7)
    caption = ("Per block (one server process each): ready after start, the warmup request(s), and the stop by SIGTERM;"
               f" the dashed lines are the startup ({spec.protocol.startup_budget_s:g} s) and shutdown "
               f"({spec.protocol.shutdown_budget_s:g} s, shared by every arm) budgets.")
    return svg_figure(fig, "fig-lifecycle", "lifecycle", "Lifecycle per arm", caption)


# --- device telemetry ---------------------------------------------------------------------------------


@styled
def telemetry_figure(records: Sequence[dict[str, Any]]) -> Figure | None:
    """HBM used and AICore % per device over time, with each block's span shaded."""
    points = [r for r in records if isinstance(r.get("t"), (int, float))]
    if not points:
        return None
    start = min(r["t"] for r in points)
    fig = new_figure(9, 4.2)
    hbm, aicore = fig.subplots(2, 1, sharex=True)
    devices = sorted({(str(r.get("npu_id")), str(r.get("chip_id"))) for r in points})
    for device in devices:
        mine = sorted((r for r in points if (str(r.get("npu_id")), str(r.get("chip_id"))) == device),
                      key=lambda r: r["t"])
        label = f"npu {device[0]} chip {device[1]}"
        for axes, key in ((hbm, "hbm_used_mb"), (aicore, "aicore_pct")):
            xy = [(r["t"] - start, r[key]) for r in mine if isinstance(r.get(key), (int, float))]
            axes.plot([x for x, _ in xy], [y for _, y in xy], "-", linewidth=1, label=label)
    for index, block in enumerate(dict.fromkeys(str(r.get("block")) for r in points)):
        times = [r["t"] - start for r in points if str(r.get("block")) == block]
        for axes in (hbm, aicore):
            axes.axvspan(min(times), max(times), color="#000000", alpha=0.04 if index % 2 else 0.09, linewidth=0)
        hbm.annotate(block, (min(times), 1.0), xycoords=("data", "axes fraction"), fontsize=6, rotation=90,
                     va="top")
    totals = [r["hbm_total_mb"] for r in points if isinstance(r.get("hbm_total_mb"), (int, float))]
    if totals:
        hbm.axhline(max(totals), color="#c44e52", linestyle="--", linewidth=1, label="HBM total")
    hbm.set_ylabel("HBM used (MB)")
    aicore.set_ylabel("AICore (%)")
    aicore.set_xlabel("seconds since the first sample")
    hbm.legend(loc="best", fontsize=7, frameon=False)
    caption = (f"{len(points)} telemetry samples of {len(devices)} device(s) from telemetry.jsonl; shaded spans are the"
               " blocks that were running.")
    return svg_figure(fig, "fig-telemetry", "telemetry", "Device telemetry over time", caption)


def _bounds_label(estimate: RatioEstimate) -> str:
    """The interval's one-sided levels: the campaign-wide error control sets each bound's own level."""
    return f"bounds (one-sided {estimate.levels.fail_level:.3g} low, {estimate.levels.pass_level:.3g} high)"
