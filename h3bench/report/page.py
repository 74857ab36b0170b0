"""The self-contained HTML page: inline CSS, inline SVG charts, PNG pictures as data URIs; no script, no network.

Sections, in reading order (:data:`SECTIONS`): the verdict with its reasons,
manifest highlights, E2E per request, stage breakdown with which stage
moved (per-part paired ratios, DiT per step, real-time factor,
reconciliation), paired ratio, quality gates with the lossless test, the
worst pair's pictures, lifecycle, device telemetry and profiled requests. A
section without data says why.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from h3bench.course.design import design_text
from h3bench.h3 import STAGE_KEYS, STAGE_PREFIX, profiler_key
from h3bench.outcome import Outcome
from h3bench.report.contents import Contents, Series, describe_lpips_source, gate_rows
from h3bench.report.figures import Figure
from h3bench.report.terminal import part_ratio_text
from h3bench.verdict.stage_effects import DIT_PER_FORWARD
from h3bench.verdict.verdicts import key_marker

__all__ = ["SECTIONS", "overall_outcome", "render_page"]

SECTIONS = {
    "verdict": "Verdict",
    "manifest": "Manifest highlights",
    "e2e": "E2E per request",
    "stages": "Stage breakdown",
    "ratio": "Paired ratio",
    "gates": "Quality gates and the lossless test",
    "worst-pair": "Worst pair",
    "lifecycle": "Lifecycle",
    "telemetry": "Device telemetry",
    "profile": "Profiled requests",
}

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 16px 48px; color: #222; }
h1 { font-size: 22px; margin: 20px 0 4px; } h2 { font-size: 18px; border-bottom: 1px solid #ddd; margin-top: 32px; }
h3 { font-size: 15px; margin: 18px 0 6px; } .meta { color: #666; font-size: 12px; margin: 0; }
.banner { border-radius: 6px; padding: 12px 16px; margin: 14px 0; font-size: 17px; }
.PASS, .EXACT { background: #e3f4e6; border-color: #2e7d32; }
.FAIL { background: #fbe4e4; border-color: #c62828; }
.INCONCLUSIVE, .NOT_EVALUATED { background: #fff4d6; border-color: #b7860b; }
.banner { border-left-width: 6px; border-left-style: solid; }
.badge { display: inline-block; padding: 0 6px; border-radius: 4px; font-weight: 600; font-size: 12px; border: 1px solid; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 12px 0 20px; } figure svg, figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: #555; font-size: 12px; margin-top: 4px; } .note { color: #7a5b00; font-style: italic; }
nav a { margin-right: 10px; font-size: 13px; } code { font-size: 12px; word-break: break-all; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _badge(outcome: Any) -> str:
    name = str(outcome)
    return f'<span class="badge {_e(name)}">{_e(name)}</span>'


def _table(header: Sequence[str] | None, rows: Iterable[Sequence[str]], numeric: Iterable[int] = ()) -> str:
    """Cells are HTML already; ``numeric`` columns are right-aligned; no header row when ``header`` is None."""
    numeric = set(numeric)
    head = "" if header is None else "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead>"
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>" for row in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _note(text: str, skipped: str | None = None) -> str:
    attribute = f' data-skipped="{_e(skipped)}"' if skipped else ""
    return f'<p class="note"{attribute}>{_e(text)}</p>'


def _figure(figure: Figure) -> str:
    if figure.svg is not None:
        body = figure.svg
    else:
        body = f'<img src="{figure.png_data_uri}" alt="{_e(figure.title)}">'
    return (f'<figure id="{_e(figure.id)}" data-figure="{_e(figure.kind)}">{body}'
            f"<figcaption><b>{_e(figure.title)}.</b> {_e(figure.caption)}</figcaption></figure>")


def _section(key: str, body: str) -> str:
    return f'<section id="{key}"><h2>{_e(SECTIONS[key])}</h2>{body}</section>'


# --- verdict ---------------------------------------------------------------------------------------


def overall_outcome(contents: Contents) -> Outcome | None:
    """The verdict.json candidates' verdicts combined; None without a verdict."""
    return contents.document.outcome if contents.document is not None else None


def verdict_section(contents: Contents) -> str:
    document = contents.document
    if document is None:
        return _section("verdict", _note("The bundle holds no verdict.json: the run wrote none.", "verdict"))
    overall = document.outcome
    parts = [f'<div class="banner {_e(overall)}">Overall: <b>{_e(overall)}</b> for {_e(contents.spec.name)} '
             f"({len(document.candidates)} candidate(s) against the baseline)</div>"]
    if document.interrupted:
        parts.append(_note(f"The run was interrupted: {document.interrupted}"))
    for candidate, verdict in document.candidates.items():
        parts.append(f"<h3>{_e(candidate)}: {_badge(verdict.outcome)}</h3>")
        headline = [f"<b>{_e(key)}</b> {_e(d.estimate.headline())}" for key, d in verdict.durations.items()
                    if d.estimate is not None]
        if headline:
            parts.append(f'<p class="headline">{"<br>".join(headline)}</p>')
        skipped = document.not_selected.get(candidate)
        if skipped:
            parts.append(_note(f"Partial run: {', '.join(map(key_marker, skipped))} not selected; the verdict "
                               "covers the durations above, and a partial run accepts nothing."))
        if verdict.stopped:
            parts.append(f"<p><b>Stopped:</b> {_e(verdict.stopped.reason)}</p>")
        rows = []
        for duration, d in verdict.durations.items():
            reasons = "<br>".join(_e(r) for r in d.speed_reasons)
            rows.append([_e(duration), "speed", _badge(d.speed), reasons])
            rows.append([_e(duration), "quality", _badge(d.quality_label),
                         f"{_e(d.quality_pairs)} matched pairs through every gate"])
            if d.lossless_enabled:
                reasons = "; ".join(d.lossless.reasons) if d.lossless else "not evaluated"
                rows.append([_e(duration), "lossless", _badge(d.lossless_label), _e(reasons)])
            if d.looks is not None:
                rows.append([_e(duration), "design", _e(d.looks.design), _e(d.looks.describe())])
        parts.append(_table(["duration", "part", "outcome", "reasons"], rows))
    if contents.quality_version and len(contents.quality_versions) > 1:
        parts.append(_note(f"verdict.json was written by the run; the gate tables below use the newest stored "
                           f"quality result, {contents.quality_version}."))
    return _section("verdict", "".join(parts))


# --- manifest ---------------------------------------------------------------------------------------


def manifest_section(contents: Contents) -> str:
    m, spec = contents.manifest, contents.spec
    source = m.source
    environment = m.environment or {}
    rows = [
        ("spec", f"{_e(spec.name)}: {_e(spec.description or '')}"),
        ("spec id", f"<code>{_e(m.spec_id)}</code>"),
        ("engine commit", _e(source.get("engine_commit", f"none ({source.get('kind', 'no [source]')})"))),
        ("image digest", _e(source.get("image_digest", f"none ({source.get('kind', 'no [source]')})"))),
        ("model", f"{_e(spec.model.path)}; content identity {_e(spec.model.content_identity)}"),
    ]
    for name, entry in m.inputs.items():
        rows.append((f"input {name}", f"{_e(entry.get('path'))}<br><code>sha256 {_e(entry.get('sha256'))}</code>"))
    rows += [
        ("prompt", _e(spec.inputs.prompt)),
        ("workload", _e(f"durations {', '.join(f'{d:g} s' for d in spec.workload.durations)}, {spec.workload.size}, "
                        f"{spec.workload.fps} FPS, seed {spec.workload.seed}")),
        ("design", _e(contents.document.design if contents.document and contents.document.design
                      else design_text(spec))),
        ("blocks run", "<br>".join(_e(line) for line in _orders_run(contents)) or "none"),
        ("LPIPS weight source", _e(f"{describe_lpips_source(contents.lpips_source)}; "
                                   f"{'required' if spec.gates.lpips_required else 'not required'} by the spec")),
        ("validator version", _e(", ".join(contents.quality_versions) or "no quality result stored")),
        ("h3bench", _e(f"{m.h3bench_version}, started {m.started_at}")),
        ("host", _e(f"{environment.get('hostname')}, {environment.get('cpu_model')} x{environment.get('cpu_count')}, "
                    f"Python {(environment.get('python') or {}).get('version')}, {spec.hardware.kind}")),
        ("bundle", f"<code>{_e(contents.path)}</code>: verifies, {contents.verified.files_checked} files checked, "
                   f"run {_e(contents.verified.outcome)}"),
    ]
    return _section("manifest", _table(None, [(f"<b>{_e(key)}</b>", value) for key, value in rows]))


def _orders_run(contents: Contents) -> list[str]:
    """Per duration and series, the blocks that ran, in order: what the run did, not what the spec planned."""
    return [f"{s.label}: " + "".join(r.block.letter for r in s.blocks) + f" ({len(s.blocks)} blocks)"
            for s in contents.series if s.blocks]


# --- latency -----------------------------------------------------------------------------------------


def _arm_rows(series: Series) -> list[list[str]]:
    rows = []
    for arm in ("baseline", series.candidate):
        values = [s.e2e_s for s in series.measured(arm) if s.e2e_s is not None]
        if values:
            rows.append([_e(arm), str(len(values)), _num(min(values), 3), _num(statistics.median(values), 3),
                         _num(max(values), 3)])
    return rows


def e2e_section(contents: Contents, figures: dict[str, Figure]) -> str:
    parts = []
    for series in contents.series:
        figure = figures.get(f"fig-e2e-{series.key}")
        parts.append(f"<h3>{_e(series.label)} against baseline</h3>")
        parts.append(_figure(figure) if figure else _note(f"No block of {series.label} ran.", "e2e"))
        rows = _arm_rows(series)
        if rows:
            parts.append(_table(["arm", "n", "min (s)", "median (s)", "max (s)"], rows, numeric=(1, 2, 3, 4)))
    return _section("e2e", "".join(parts))


def _stage_effects(series: Series, figures: dict[str, Figure]) -> str:
    """Which stage moved: the chart of stage ratios, the table, DiT per step beside the recipe's, RTF, findings."""
    d = series.verdict
    if d is None or d.stages is None:
        return _note(f"{series.label}: no AB/BA pair of both arms: no per-stage effect.")
    stages = d.stages
    figure = figures.get(f"fig-stage-ratios-{series.key}")
    parts = [f"<h3>{_e(series.label)}: which stage moved</h3>", f"<p>{_e(stages.statement)}.</p>"]
    if figure is not None:
        parts.append(_figure(figure))
    rows = [[_e(p.part), _e(p.source), _num(p.baseline_median_s, 4), _num(p.candidate_median_s, 4),
             _e(part_ratio_text(p)), _e({True: "excludes 1", False: "includes 1", None: "-"}[p.moved])]
            for p in stages.parts]
    parts.append(_table(["part", "clock", "baseline median (s)", "candidate median (s)", "ratio [interval]",
                         "interval"], rows, numeric=(2, 3)))
    step = next((p for p in stages.parts if p.part == DIT_PER_FORWARD), None)
    recipe = {r.arm: r for r in d.recipe_steps}
    if step is not None or recipe:
        measured = {d.control: step.baseline_median_s if step else None,
                    series.candidate: step.candidate_median_s if step else None}
        steps = [[_e(arm), _num(value, 4), _num(recipe[arm].seconds, 2) if arm in recipe else "-"]
                 for arm, value in measured.items()]
        source = f" Recipe: {d.recipe_steps[0].source}." if d.recipe_steps else ""
        parts.append(f"<p>DiT per step (the profiler's diffuse over the DiT forwards), measured beside the "
                     f"published figure.{_e(source)}</p>")
        parts.append(_table(["arm", "measured (s)", "recipe (s)"], steps, numeric=(1, 2)))
    if stages.rtf:
        names = {"A": d.control, "B": series.candidate}
        parts.append(_table(["arm", "n", "RTF (E2E / s of video)", "RTF (server generation / s of video)"],
                            [[_e(names[r.arm]), str(r.n), _num(r.rtf_e2e, 4), _num(r.rtf_server, 4)]
                             for r in stages.rtf], numeric=(1, 2, 3)))
    findings = [f"{b.id}: {f}" for b in d.blocks for f in b.reconciliation]
    absent = sorted({b.server_metrics for b in d.blocks if b.server_metrics and b.server_metrics != "available"})
    for line in [*(f"/metrics {why} (noted, not failed)" for why in absent), *findings]:
        parts.append(_note(line))
    if not findings:
        parts.append(f"<p>Reconciliation: the profiler, /metrics and the client's E2E agree in every block "
                     f"(tolerance {_e(d.reconciliation_tolerance or '-')}).</p>")
    return "".join(parts)


def stages_section(contents: Contents, figures: dict[str, Figure]) -> str:
    parts = []
    for series in contents.series:
        figure = figures.get(f"fig-stages-{series.key}")
        parts.append(_figure(figure) if figure else _note(f"{series.label}: no stage durations were reported.",
                                                          "stages"))
        parts.append(_stage_effects(series, figures))
    return _section("stages", "".join(parts))


def ratio_section(contents: Contents, figures: dict[str, Figure]) -> str:
    figure = figures.get("fig-ratio")
    parts = [_figure(figure) if figure else _note("No duration has both arms measured: no paired ratio.", "ratio")]
    rows = []
    for series in contents.series:
        est = series.estimate
        if est is None or series.verdict is None:
            continue
        interval = "no interval" if est.ci_low is None else f"[{_num(est.ci_low)}, {_num(est.ci_high)}]"
        levels = f"one-sided {est.levels.fail_level:.3g} / {est.levels.pass_level:.3g}"
        rows.append([_e(series.label), str(est.k), _num(est.geomean), f"{interval} ({levels})",
                     _num(est.mde_ratio), _num(est.min_permutation_p, 3), _e(est.design),
                     _badge(series.verdict.speed)])
    if rows:
        headers = ["series", "k", "ratio", "bounds (levels low / high)", "min. detectable", "min. perm. p", "design",
                   "speed"]
        parts.append(_table(headers, rows, numeric=(1, 2, 4, 5)))
    return _section("ratio", "".join(parts))


# --- quality -----------------------------------------------------------------------------------------


def gates_section(contents: Contents) -> str:
    if contents.quality_version is None:
        return _section("gates", _note("The bundle holds no quality result.", "gates"))
    parts = [f"<p>From <code>quality/{_e(contents.quality_version)}.json</code>. The worst value is the candidate "
             "value that deviates most from its baseline; beside its lossless deviation stand the median deviation "
             "between two baseline processes and the metric's p in the lossless relabelling test.</p>"]
    for series in contents.series:
        if not series.pairs:
            parts.append(_note(f"{series.label}: no matched pair was compared."))
            continue
        rows = []
        for row in gate_rows(series):
            worst = f'<span title="{_e(row.not_measured)}">not measured</span>' if row.not_measured else _num(row.worst, 6)
            rows.append([_e(row.metric), _e(row.threshold), worst, f"{row.passed}/{row.pairs}",
                         "-" if row.deviation is None else f"{row.deviation:.3g}",
                         "-" if row.control_median is None else f"{row.control_median:.3g}",
                         "-" if row.lossless_p is None else f"{row.lossless_p:.3g}"])
        parts.append(f"<h3>{_e(series.label)}: {len(series.pairs)} matched pairs</h3>")
        parts.append(_table(["gate", "threshold", "worst candidate value", "pairs passing", "its lossless deviation",
                             "baseline-to-baseline (median)", "lossless p"], rows, numeric=(2, 4, 5, 6)))
        failing = sorted({c["name"] for r in series.pairs.values() for c in r.get("checks", ())
                          if c.get("status") == "fail"})
        parts.append(f"<p>Checks failing in any pair: {_e(', '.join(failing) or 'none')}.</p>")
        if series.lossless is not None:
            parts.append(f"<p>Lossless {_badge(series.lossless.get('outcome'))} "
                         f"{_e('; '.join(series.lossless.get('reasons', ())))}</p>")
    return _section("gates", "".join(parts))


def worst_pair_section(contents: Contents, figures: dict[str, Figure], notes: Mapping[str, Sequence[str]]) -> str:
    if not contents.worst:
        return _section("worst-pair", _note("No matched pair has a stored SSIM or LPIPS.", "worst-pair"))
    parts = []
    for candidate, worst in contents.worst.items():
        parts.append(f"<h3>{_e(candidate)}: {_e(worst.pair.id)}, {_e(worst.metric)} {worst.value:.6g}</h3>")
        if worst.paths is not None:
            parts.append(f"<p>Baseline <code>{_e(worst.paths[0].name)}</code>, candidate "
                         f"<code>{_e(worst.paths[1].name)}</code>.</p>")
        for kind in ("curves", "frame", "spectrogram"):
            figure = figures.get(f"fig-{kind}-{candidate}")
            if figure is not None:
                parts.append(_figure(figure))
        parts += [_note(n) for n in notes.get(candidate, ())]
    return _section("worst-pair", "".join(parts))


# --- lifecycle, telemetry, profiles -------------------------------------------------------------------


def lifecycle_section(figures: dict[str, Figure]) -> str:
    figure = figures.get("fig-lifecycle")
    return _section("lifecycle", _figure(figure) if figure else _note("No lifecycle record.", "lifecycle"))


def telemetry_section(contents: Contents, figures: dict[str, Figure]) -> str:
    figure = figures.get("fig-telemetry")
    if contents.telemetry is None:
        body = _note("Skipped: the bundle has no telemetry.jsonl (device telemetry is recorded on NPU hosts).",
                     "telemetry")
    elif figure is None:
        body = _note("Skipped: telemetry.jsonl holds no timed sample.", "telemetry")
    else:
        body = _figure(figure)
    return _section("telemetry", body)


def profile_section(contents: Contents) -> str:
    if not contents.profiles:
        return _section("profile", _note("Skipped: the bundle holds no profiled request (samples of kind "
                                         "\"profile\").", "profile"))
    # Upstream's stage keys first, then whatever else the profiler reported (denoise_step, for one); the API
    # layer's own timings (queue_wait_ms, stage_0_gen_ms) are milliseconds and no profiler stage.
    reported = {k for s in contents.profiles for k in s.stage_durations if profiler_key(k)}
    keys = [k for k in STAGE_KEYS if k in reported] + sorted(reported - set(STAGE_KEYS))
    rows = [[_e(s.block_id), str(s.index), _num(s.e2e_s, 3), *(_num(s.stage_durations.get(k), 4) for k in keys),
             _e(traces)] for s, traces in zip(contents.profiles, contents.profile_traces, strict=True)]
    header = ["block", "request", "E2E (s)", *(k.removeprefix(STAGE_PREFIX) for k in keys), "traces"]
    return _section("profile", "<p>Seconds per profiler stage; nested stages (denoise_step, *.decode_latent) are "
                               "inside their parents.</p>" + _table(header, rows, numeric=range(1, len(header) - 1)))


def render_page(contents: Contents, figures: Sequence[Figure], notes: Mapping[str, Sequence[str]], generated: str) -> str:
    """The whole page as one HTML document."""
    by_id = {f.id: f for f in figures}
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title in SECTIONS.items())
    body = "".join([
        verdict_section(contents),
        f"<nav>{nav}</nav>",
        manifest_section(contents),
        e2e_section(contents, by_id),
        stages_section(contents, by_id),
        ratio_section(contents, by_id),
        gates_section(contents),
        worst_pair_section(contents, by_id, notes),
        lifecycle_section(by_id),
        telemetry_section(contents, by_id),
        profile_section(contents),
    ])
    title = f"h3bench report: {contents.spec.name}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
            f"<body><h1>{_e(title)}</h1><p class=\"meta\">bundle <code>{_e(contents.path)}</code> · spec id "
            f"<code>{_e(contents.spec.spec_id[:16])}</code> · written {_e(generated)}</p>{body}</body></html>\n")
