"""The campaign report: one self-contained ``report.html`` and a short ``summary.md`` from one evidence bundle.

One module per step of the data flow: :mod:`~h3bench.report.contents` reads
what the bundle holds (after :func:`h3bench.evidence.verify`; a bundle that
does not verify is refused), :mod:`~h3bench.report.figures` draws the charts,
:mod:`~h3bench.report.pictures` decodes the worst pair's media for its
pictures, :mod:`~h3bench.report.page` writes the HTML and
:mod:`~h3bench.report.markdown` the summary.

The report never writes into the bundle (bundles are append-only and
sealed): by default it goes to ``<bundle's parent>/reports/<bundle name>/``.
matplotlib and scikit-image are imported only here, so the pytest
plugin and the command line stay light to import.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from h3bench.errors import UsageError
from h3bench.evidence.files import now, replace_atomic
from h3bench.metrics.lpips_weights import DIR_ENV as LPIPS_DIR_ENV
from h3bench.report import figures as charts
from h3bench.report.contents import read_contents
from h3bench.report.markdown import render_summary
from h3bench.report.page import render_page
from h3bench.report.pictures import worst_pair_pictures

__all__ = ["REPORTS_DIR", "ReportFiles", "default_out", "write_report"]

REPORTS_DIR = "reports"
HTML_NAME = "report.html"
SUMMARY_NAME = "summary.md"


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`write_report` wrote, the figures on the page, and how long it took."""

    html: Path
    summary: Path
    figures: tuple[str, ...]  # the ids of the page's figures
    seconds: float


def default_out(bundle: str | os.PathLike[str]) -> Path:
    """``<bundle's parent>/reports/<bundle name>``: beside the bundles, never inside one."""
    path = Path(bundle).absolute()
    return path.parent / REPORTS_DIR / path.name


def _write_text(path: Path, text: str) -> None:
    replace_atomic(path, text.encode("utf-8"))  # a reader (or a browser) never sees half a page


def write_report(
    bundle: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    lpips_dir: str | None = None,
    lpips_device: str = "cpu",
) -> ReportFiles:
    """Verify ``bundle`` and write ``report.html`` and ``summary.md`` into ``out``.

    Parameters
    ----------
    bundle
        An evidence bundle directory.
    out
        Where the two files go (created if needed); default :func:`default_out`.
        A directory inside the bundle is refused.
    lpips_dir, lpips_device
        LPIPS weights for the worst pair's per-frame LPIPS curve (default
        ``$H3BENCH_LPIPS_DIR``, else the h3bench cache: the weights a run
        resolves); without any, that curve is left out, with a note.

    Raises
    ------
    UsageError
        Not a bundle, a bundle that does not verify (the message names the
        files), or an ``out`` inside the bundle.
    """
    started = time.perf_counter()
    out_dir = Path(out) if out is not None else default_out(bundle)
    if out_dir.absolute().resolve().is_relative_to(Path(bundle).absolute().resolve()):
        raise UsageError(f"{out_dir}: the report cannot go inside the bundle {bundle}; bundles are sealed")
    contents = read_contents(bundle)
    spec = contents.spec
    drawn = [charts.e2e_figure(spec, s) for s in contents.series]
    drawn += [charts.stage_figure(spec, s) for s in contents.series]
    drawn += [charts.stage_ratio_figure(spec, s) for s in contents.series]
    drawn += [charts.ratio_figure(spec, contents.series), charts.lifecycle_figure(spec, contents.series)]
    if contents.telemetry is not None:
        drawn.append(charts.telemetry_figure(contents.telemetry))
    notes = {}
    weights = lpips_dir or os.environ.get(LPIPS_DIR_ENV)
    for candidate, worst in contents.worst.items():
        pictures = worst_pair_pictures(spec, worst, lpips_dir=Path(weights) if weights else None,
                                       lpips_device=lpips_device)
        drawn += pictures.figures
        notes[candidate] = pictures.notes
    figures = [f for f in drawn if f is not None]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        html_path, summary_path = out_dir / HTML_NAME, out_dir / SUMMARY_NAME
        _write_text(html_path, render_page(contents, figures, notes, now()))
        _write_text(summary_path, render_summary(contents, html_path.absolute()))
    except OSError as exc:
        raise UsageError(f"{out_dir}: cannot write the report ({exc})") from exc
    return ReportFiles(html_path, summary_path, tuple(f.id for f in figures), time.perf_counter() - started)

