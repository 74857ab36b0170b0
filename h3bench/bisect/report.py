"""A bisection's report: the posterior after each probe and the device time spent, from its log.

``h3bench report DIR`` on a bisection's directory (it holds ``bisect-log.jsonl``)
checks the log's hash chain and verifies every campaign bundle it names
(a bundle that does not verify is refused, named), then writes
``report.html`` (one self-contained page, inline SVG, nothing fetched) and
``summary.md`` into ``<DIR's parent>/reports/<DIR's name>/`` (or ``--out``):

- the outcome: the claim (or why there is none), the verified step, the
  stop and its reason, the top three with their mass, the commits skipped
  and why;
- the posterior over the range after the verify and after each probe, one
  row each, the probed commit marked, and the device-hours spent by then;
- the device-hours spent after each record, as a line;
- one row per campaign: what it compared, its pairs, ratio, decision,
  likelihood ratio, bundle and seal.

Nothing is recomputed: every figure is the log's, as the search wrote it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.bisect.log import LOG_NAME, BisectionLog
from h3bench.errors import UsageError
from h3bench.evidence import require_verified
from h3bench.evidence.files import replace_atomic
from h3bench.report import default_out
from h3bench.stats import intervals

__all__ = ["BisectReport", "is_bisection", "write_bisect_report"]

CELL_W, CELL_H, LEFT, TOP = 22, 18, 210, 40


def is_bisection(path: Path) -> bool:
    return (path / LOG_NAME).is_file()


@dataclass(frozen=True)
class BisectReport:
    html: Path
    summary: Path


def _campaigns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] in ("verify", "probe", "confirm")]


def _ratio(record: dict[str, Any]) -> str:
    x = record.get("log_ratios") or []
    return f"{intervals.geometric_mean_of_logs(x):.4f}" if x else "-"


def _outcome(records: list[dict[str, Any]]) -> str:
    end = [r for r in records if r["event"] == "end"]
    return str(end[-1]["outcome"]) if end else "unfinished (continue it with h3bench bisect --resume)"


def _posterior_svg(start: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    commits = start["commits"][1:]
    width = LEFT + CELL_W * len(commits) + 110
    height = TOP + CELL_H * len(rows) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="posterior over the culprit after each probe">']
    for i, name in enumerate(commits):
        x = LEFT + CELL_W * i + CELL_W / 2
        parts.append(f'<text x="{x}" y="{TOP - 6}" font-size="9" text-anchor="end" '
                     f'transform="rotate(-60 {x} {TOP - 6})">{html.escape(str(name)[:10])}</text>')
    for row, record in enumerate(rows):
        y = TOP + CELL_H * row
        parts.append(f'<text x="{LEFT - 6}" y="{y + 13}" font-size="11" text-anchor="end">'
                     f'{html.escape(str(record["label"]))}</text>')
        probed = record.get("probed")
        for i, p in enumerate(record["posterior"]):
            x = LEFT + CELL_W * i
            stroke = ' stroke="#d62728" stroke-width="2"' if probed is not None and probed == i + 1 else ""
            parts.append(f'<rect x="{x}" y="{y}" width="{CELL_W - 1}" height="{CELL_H - 1}" fill="#1f4e9c" '
                         f'fill-opacity="{max(float(p), 0.02):.3f}"{stroke}><title>{html.escape(str(commits[i]))}: '
                         f'{float(p):.4f}</title></rect>')
        parts.append(f'<text x="{LEFT + CELL_W * len(commits) + 6}" y="{y + 13}" font-size="11">'
                     f'{float(record["spent_device_s"]) / 3600:.2f} device-h</text>')
    parts.append("</svg>")
    return "".join(parts)


def _device_svg(points: list[tuple[str, float]]) -> str:
    if not points:
        return ""
    width, height, pad = 520, 200, 40
    top = max(h for _, h in points) or 1.0
    step = (width - 2 * pad) / max(len(points) - 1, 1)
    xy = [(pad + step * i, height - pad - (height - 2 * pad) * h / top) for i, (_, h) in enumerate(points)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1f4e9c"><title>{html.escape(label)}: '
                   f'{h:.2f} device-h</title></circle>' for (x, y), (label, h) in zip(xy, points, strict=True))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="device-hours spent after each campaign">'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>'
            f'<text x="{pad}" y="{pad - 8}" font-size="11">{top:.2f} device-h</text>'
            f'<polyline points="{line}" fill="none" stroke="#1f4e9c" stroke-width="2"/>{dots}</svg>')


def _rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verify and each probe, with the posterior after it, labelled with the commit it measured."""
    rows = []
    for r in records:
        if r["event"] == "verify" and r["reproduced"]:
            rows.append({**r, "label": "verify", "probed": None})
        elif r["event"] == "probe":
            label = f"probe {r['number']}: {r['commit']}" + (f" ({r['status']})" if r["status"] != "measured" else "")
            rows.append({**r, "label": label, "probed": r["position"]})
    return rows


def write_bisect_report(directory: Path, out: str | Path | None = None) -> BisectReport:
    """Check the log and every bundle it names, then write ``report.html`` and ``summary.md``."""
    records = BisectionLog(directory / LOG_NAME).read()
    if not records or records[0]["event"] != "start":
        raise UsageError(f"{directory}: the bisection log has no start record")
    for record in _campaigns(records):
        require_verified(directory / record["bundle"], "the bisection's report is not written")
    start = records[0]
    target = Path(out) if out is not None else default_out(directory)
    target.mkdir(parents=True, exist_ok=True)
    stop = [r for r in records if r["event"] == "stop"]
    verify = [r for r in records if r["event"] == "verify"]
    device = [(f"{r['event']} {r.get('number', '')}".strip(), float(r["spent_device_s"]) / 3600) for r in records
              if r["event"] in ("verify", "probe")]
    lines = [f"# Bisection of {start['spec_name']}: {_outcome(records)}", "",
             f"{len(start['commits']) - 1} commits after {start['commits'][0]}, on {start['on']}; "
             f"spec id {start['spec_id'][:12]}; stop at posterior {start['posterior']}; {start['test']}", ""]
    if verify:
        v = verify[-1]
        step = v.get("step") or {}
        lines.append(f"- verify ({v['commit']} against {start['commits'][0]}): {v['why']}"
                     + (f"; step {step['ratio']:.4f} [{step['low']:.4f}, {step['high']:.4f}]" if step else ""))
    for s in stop:
        top = ", ".join(f"{t['commit']} {t['mass']:.3f}" for t in s["top"])
        lines.append(f"- stopped ({s['reason']}) after {s['spent_device_s'] / 3600:.2f} device-h; top three: {top}")
        for position, why in s["skipped"].items():
            lines.append(f"- skipped {start['commits'][int(position)]}: {why} (never counted as slow)")
    lines += ["", "| campaign | commit | status | pairs | ratio | decision | log LR | device-h | bundle |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in _campaigns(records):
        name = f"probe {r['number']}" if r["event"] == "probe" else r["event"]
        decision = r.get("decision") or ("claim" if r.get("claim") else r.get("speed", ""))
        log_lr = f"{r['log_lr']:+.2f}" if "log_lr" in r and r["event"] == "probe" else "-"
        lines.append(f"| {name} | {r['commit']} | {r['status']} | {r['pairs']} | {_ratio(r)} | {decision} | "
                     f"{log_lr} | {r['device_s'] / 3600:.3f} | {Path(r['bundle']).name} |")
    summary = target / "summary.md"
    replace_atomic(summary, ("\n".join(lines) + "\n").encode("utf-8"))  # a reader never sees half a page
    page = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>bisection of "
            f"{html.escape(start['spec_name'])}</title><style>body{{font-family:sans-serif;margin:2em}}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
            f"</head><body><h1>Bisection of {html.escape(start['spec_name'])}: {html.escape(_outcome(records))}</h1>",
            "<h2>Posterior over the culprit after each probe</h2>",
            _posterior_svg(start, _rows(records)),
            "<h2>Device time spent</h2>", _device_svg(device),
            "<h2>Summary</h2><pre>" + html.escape("\n".join(lines)) + "</pre></body></html>"]
    page_path = target / "report.html"
    replace_atomic(page_path, "".join(page).encode("utf-8"))
    return BisectReport(page_path, summary)
