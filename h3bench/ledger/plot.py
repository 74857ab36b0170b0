"""The regression history as a picture: one SVG figure per series, in one self-contained HTML page.

Drawn with matplotlib in the report's look (text kept as text in the SVG,
small type, no top or right spine, the baseline's blue, red for a flagged
regression) so that it can join the report as one more figure.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

from h3bench.evidence.files import now, replace_atomic
from h3bench.ledger.history import History, Series, history_lines
from h3bench.stats.intervals import geometric_mean

__all__ = ["series_svg", "write_history_page"]

BASELINE_COLOR = "#4c72b0"
REGRESSION_COLOR = "#c44e52"
IMPROVEMENT_COLOR = "#55a868"
_STYLE: dict[Any, Any] = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 16px 48px; color: #222; }
h1 { font-size: 22px; margin: 20px 0 4px; } h2 { font-size: 16px; border-bottom: 1px solid #ddd; margin-top: 32px; }
.meta { color: #666; font-size: 12px; margin: 0; }
figure { margin: 12px 0 20px; } figure svg { max-width: 100%; height: auto; display: block; }
pre { font-size: 12px; background: #f7f7f7; padding: 8px; overflow-x: auto; }
"""


def series_svg(series: Series) -> str:
    """The series' campaign medians, the fitted levels, and its steps (flagged ones labelled), as SVG text."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    with matplotlib.rc_context(_STYLE):
        figure, axes = plt.subplots(figsize=(8, 3))
        x = list(range(len(series.campaigns)))
        axes.plot(x, [c.median_s for c in series.campaigns], "o-", color=BASELINE_COLOR, linewidth=1,
                  label="baseline E2E median per campaign")
        for number, (start, end) in enumerate(series.steps.pieces):
            level = geometric_mean(c.median_s for c in series.campaigns[start:end])
            axes.hlines(level, start - 0.4, end - 0.6, color="#444444", linewidth=2, alpha=0.5,
                        label="fitted level (geometric mean)" if number == 0 else "_nolegend_")
        for step in series.steps.steps:
            color = (REGRESSION_COLOR if step.ratio > 1 else IMPROVEMENT_COLOR) if step.flagged else "#999999"
            axes.axvline(step.index - 0.5, color=color, linestyle="--", linewidth=1)
            text = f"{(step.ratio - 1) * 100:+.1f} %" + ("" if step.flagged else " (not flagged)")
            if step.regression:
                text += f", {step.persisted} campaigns" + (" (ongoing)" if step.ongoing else "")
            axes.annotate(text, (step.index - 0.5, 1.0), xycoords=("data", "axes fraction"), color=color,
                          fontsize=7, ha="left", va="top", xytext=(3, 0), textcoords="offset points")
        axes.set_xticks(x, [c.started_at[:10] for c in series.campaigns], rotation=45, ha="right", fontsize=7)
        axes.set_ylabel("E2E median (s)")
        axes.legend(loc="lower right", fontsize=7, frameon=False)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight")
        plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def write_history_page(history: History, path: Path) -> None:
    """Write the history (its figures and its text table) as one HTML file with nothing to fetch."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>h3bench history</title>"
             f"<style>{_CSS}</style></head><body><h1>Regression history</h1>"
             f"<p class='meta'>written {html.escape(now())}; baseline E2E medians per campaign, steps by "
             "penalized L1 fit, flagged only when the Welch interval excludes 1 (h3bench.ledger.changepoint)</p>"]
    for series in history.series:
        parts.append(f"<h2>{html.escape(series.title)}</h2><figure>{series_svg(series)}</figure>")
    parts.append(f"<pre>{html.escape(chr(10).join(history_lines(history)))}</pre></body></html>")
    replace_atomic(path, "".join(parts).encode("utf-8"))  # a full disk leaves no truncated page under the name
